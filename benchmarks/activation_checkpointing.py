"""train.gradient_checkpointing at a long sequence: activation memory and step time, with and without.

A BERT built from a config (random weights: memory and time need no real ones; hidden 256, 4 layers, 4 heads,
feed-forward 1024, 1,024 positions by default) takes training steps (forward, backward, RecAdam) on batches of
--batch rows of --seq-len tokens, dropout on, as recall's loop does. Each variant runs in a fresh process of
its own: after --warmup steps it resets its peak resident size (Linux /proc/self/clear_refs 5) and reads the
peak (VmHWM) over the next step above the resident size before it; that difference is what the step's
activations (and the backward's temporaries) took. Step time is the median of --steps steps. The two
variants run one after the other in this one invocation, and the ratios compare them.

    python benchmarks/activation_checkpointing.py                       # seq 1024, batch 2
    python benchmarks/activation_checkpointing.py --seq-len 512 --steps 3

Checkpointing keeps one tensor per layer (its input) and recomputes the layer's forward in the backward
pass: the memory should fall by about the layer count, the step take about one forward longer (~1.3x).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, sys, time
import torch
from recall_cli.testing import tiny_bert
from recall_cli.training.weights import enable_gradient_checkpointing
from recall_cli.optim import RecAdam

a = json.loads(sys.argv[1])
torch.manual_seed(0)
model = tiny_bert(head="classifier", hidden_size=a["hidden"], num_layers=a["layers"], num_heads=a["heads"],
                  intermediate_size=4 * a["hidden"], max_positions=a["seq_len"], vocab_size=1000, seed=0)
if a["checkpointing"]:
    enable_gradient_checkpointing(model)
model.train()
params = list(model.parameters())
opt = RecAdam([{"params": params, "anchors": [p.detach().clone() for p in params]}], lr=1e-5)
x = torch.randint(0, 1000, (a["batch"], a["seq_len"]))
y = torch.randint(0, 2, (a["batch"],))

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])

def step():
    loss = model(input_ids=x, labels=y).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)

for _ in range(a["warmup"]):
    step()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status("VmRSS:")
step()
peak = status("VmHWM:") - before
times = []
for _ in range(a["steps"]):
    started = time.perf_counter()
    step()
    times.append(time.perf_counter() - started)
print(json.dumps({"peak_above_kb": peak, "times": times,
                  "parameters": sum(p.numel() for p in params)}))
"""


def measure(args: argparse.Namespace, checkpointing: bool) -> dict:
    spec = {"hidden": args.hidden, "layers": args.layers, "heads": args.heads, "seq_len": args.seq_len,
            "batch": args.batch, "warmup": args.warmup, "steps": args.steps, "checkpointing": checkpointing}
    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(spec)], check=True, capture_output=True,
                         text=True, cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
                                                   "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    plain, checkpointed = measure(args, False), measure(args, True)
    print(f"BERT hidden {args.hidden}, {args.layers} layers, {plain['parameters'] / 1e6:.1f} M parameters; batch "
          f"{args.batch} x {args.seq_len} tokens; torch {torch.__version__}, {args.threads} threads")
    print("| | peak above the step's start (MiB) | median step (s) |")
    print("|---|---|---|")
    for name, r in (("without", plain), ("gradient_checkpointing", checkpointed)):
        print(f"| {name} | {r['peak_above_kb'] / 1024:.0f} | {statistics.median(r['times']):.2f} |")
    mem = checkpointed["peak_above_kb"] / plain["peak_above_kb"]
    time_ratio = statistics.median(checkpointed["times"]) / statistics.median(plain["times"])
    print(f"checkpointing / without: memory {mem:.2f}x, step time {time_ratio:.2f}x")


if __name__ == "__main__":
    main()
