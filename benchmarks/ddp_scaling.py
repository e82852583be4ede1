"""Train samples/s of `recall finetune` in 1 process against 2 processes under torchrun (gloo, CPU).

    python benchmarks/ddp_scaling.py [--steps 40] [--hidden 256] [--layers 4] [--batch 16]

Same model, data, global batch (1 process x batch vs 2 processes x batch/2), steps and seed, in one
run; the machine's cores are split evenly (1 process: all threads; 2 processes: half each), so the
ratio measures what DDP's gradient all-reduce and the per-step agreement cost against the gain of
two processes. Scaling efficiency = (2-process samples/s) / (2 x 1-process samples/s at half the
cores) is the number docs/scaling.md reasons about for GPUs; on a shared CPU it is only indicative.
A 1-process torchrun runs the plain loop (no DDP wrapper, no collectives), so its overhead is zero by
construction; on a GPU compare `recall finetune` with `torchrun --nproc_per_node 1 -m recall_cli finetune`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def build_model(folder: Path, hidden: int, layers: int) -> None:
    from recall_cli.testing import tiny_bert_dir

    tiny_bert_dir(folder, hidden_size=hidden, num_layers=layers, num_heads=max(1, hidden // 64),
                  intermediate_size=4 * hidden, max_positions=512, seed=0)


def recipe(model: Path, out: Path, batch: int, steps: int) -> dict:
    return {
        "model": {"name_or_path": str(model), "init": "pretrained"},
        "task": {"name": "mrpc", "data_dir": str(REPO / "data" / "glue" / "MRPC"), "max_seq_length": 128,
                 "max_eval_examples": 16},
        "optimizer": {"name": "recadam", "lr": 2e-5, "anneal_t0": 10, "anneal_k": 0.5},
        "train": {"batch_size": batch, "max_steps": steps, "log_every": steps, "eval_every": 0, "seed": 1,
                  "device": "cpu", "precision": "fp32"},
        "output_dir": str(out),
    }


def run(args: list[str], threads: int) -> None:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(args)}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16, help="global batch")
    opts = parser.parse_args()
    cores = os.cpu_count() or 2

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        build_model(tmp / "model", opts.hidden, opts.layers)
        results = {}
        setups = (("1 process, all cores", 1, cores), ("1 process, half", 1, max(1, cores // 2)),
                  ("2 processes (gloo)", 2, max(1, cores // 2)))
        for name, nproc, threads in setups:
            out = tmp / f"run{len(results)}"
            path = tmp / f"r{len(results)}.yaml"
            path.write_text(yaml.safe_dump(recipe(tmp / "model", out, opts.batch // nproc, opts.steps)))
            if nproc == 1:
                run(["-m", "recall_cli", "finetune", str(path), "--plain"], threads=threads)
            else:
                run(["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                     "-m", "recall_cli", "finetune", str(path), "--plain"], threads=threads)
            results[name] = json.loads((out / "summary.json").read_text())

    one, half, two = (results[name] for name, _, _ in setups)
    print(f"BERT-shaped encoder: {opts.layers} layers, hidden {opts.hidden}; global batch {opts.batch}, "
          f"{opts.steps} steps, seq <= 128, {cores} cores")
    print(f"{'setup':<24}{'threads':>8}{'samples/s':>12}{'final distance':>16}")
    for name, _, threads in setups:
        s = results[name]
        print(f"{name:<24}{threads:>8}{s['samples_per_s']:>12.1f}{s['final_distance']:>16.6f}")
    print(f"ratio 2 processes / 1 process on all cores: {two['samples_per_s'] / one['samples_per_s']:.2f}x")
    print(f"scaling efficiency, 2 processes / (2 x 1 process on half the cores): "
          f"{two['samples_per_s'] / (2 * half['samples_per_s']):.2f}")
    print("(dropout draws differ per rank, so the distances agree only roughly; with dropout 0 they match)")


if __name__ == "__main__":
    main()
