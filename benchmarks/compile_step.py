"""Compiled against eager training steps on this machine, with what compiling costs up front.

One training step as recall takes it (forward and loss, backward, clipping, RecAdam with the pull toward
θ*) on the quick start's model (all-MiniLM-L6-v2, real weights) or a BERT-base-shaped model built from
a config, batch --batch-size × --seq-len tokens. Four variants: eager and compiled (recall's own
compiled step, recall_cli/training/compiled.py), each in fp32 and bf16 autocast. The compiled variants first pay
their compile (timed: the first step of each, compute included); then every variant's steps alternate
in one process, so that drift of the machine hits all alike; the table gives medians and ratios
measured in this one run, and what a run of --run-steps steps would take with the compile included.

    python benchmarks/compile_step.py                        # MiniLM, 32 x 64, on CPU
    python benchmarks/compile_step.py --model bert-base --seq-len 128 --device cuda

`train.compile: auto` reads its CPU decision from this measurement (README "Speed").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


def measure(args) -> dict:
    import torch

    from bf16_cpu import build_model, cpu_bf16_report
    from recall_cli.training.compiled import compile_model, mark_step
    from recall_cli.optim import RecAdam
    from recall_cli.runtime import autocast_for

    device = torch.device(args.device)
    print(cpu_bf16_report() if device.type == "cpu" else torch.cuda.get_device_name(device), flush=True)
    model = build_model(args.model).to(device).train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = RecAdam([{"params": params, "anchors": [p.detach().clone() for p in params]}], lr=2e-5,
                        anneal_k=0.1, anneal_t0=10, pretrain_cof=5000.0)
    generator = torch.Generator().manual_seed(0)
    batch = {"input_ids": torch.randint(1000, model.config.vocab_size, (args.batch_size, args.seq_len), generator=generator),
             "attention_mask": torch.ones(args.batch_size, args.seq_len, dtype=torch.long),
             "labels": torch.randint(0, 2, (args.batch_size,), generator=generator)}
    batch = {k: v.to(device) for k, v in batch.items()}
    compiled = compile_model(model, device)
    variants = {f"{mode} {precision}": (compiled if mode == "compiled" else model, precision)
                for mode in ("eager", "compiled") for precision in args.precisions.split(",")}

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def step(forward, precision: str) -> float:
        sync()
        start = time.perf_counter()
        mark_step(device)
        with autocast_for(precision, device):
            loss = forward(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        return time.perf_counter() - start

    first: dict[str, float] = {}
    for name, (forward, precision) in variants.items():  # the compile (or eager warm-up) of each
        first[name] = step(forward, precision)
        print(f"  {name}: first step {first[name]:.1f} s", flush=True)
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for i in range(args.warmup + args.steps):
        for name in names if i % 2 == 0 else reversed(names):
            elapsed = step(*variants[name])
            if i >= args.warmup:
                times[name].append(elapsed)
        print(f"  round {i + 1}: " + ", ".join(f"{n} {1000 * times[n][-1]:.0f} ms" for n in names if times[n]), flush=True)
    result = {"model": args.model, "device": args.device, "batch": args.batch_size, "seq_len": args.seq_len,
              "torch": torch.__version__, "run_steps": args.run_steps, "variants": {}}
    base = statistics.median(times[names[0]])
    for name in names:
        median = statistics.median(times[name])
        compile_s = max(first[name] - median, 0.0) if name.startswith("compiled") else 0.0
        run_s = compile_s + args.run_steps * median
        result["variants"][name] = {"step_ms": 1000 * median, "samples_per_s": args.batch_size / median,
                                    "compile_s": compile_s, "speedup_per_step": base / median,
                                    "run_s": run_s, "speedup_run": args.run_steps * base / run_s}
    return result


def table(result: dict) -> str:
    lines = [f"{result['model']} on {result['device']}, batch {result['batch']} × {result['seq_len']} tokens, "
             f"torch {result['torch']}; ratios against the first row, measured in one run; "
             f"a run of {result['run_steps']} steps includes the compile",
             "| step | ms/step | samples/s | × per step | compile s | × over the run |", "|---|---:|---:|---:|---:|---:|"]
    for name, v in result["variants"].items():
        lines.append(f"| {name} | {v['step_ms']:.0f} | {v['samples_per_s']:.1f} | {v['speedup_per_step']:.2f} | "
                     f"{v['compile_s']:.0f} | {v['speedup_run']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm", help="minilm or bert-base")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--steps", type=int, default=4, help="timed steps of each variant")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps of each variant after its first")
    parser.add_argument("--run-steps", type=int, default=2000, help="the run length the last column projects to")
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args()
    result = measure(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))


if __name__ == "__main__":
    main()
