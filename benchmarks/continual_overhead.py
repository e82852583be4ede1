"""What a stage of `recall continual` adds to its own `recall finetune` (probes off), in one run.

Runs a two-stage sequence and times its second stage from the moment it starts to the moment its row of
the matrix is written (recipe, training, the matrix's scoring of both tasks); then runs the same stage
alone, `recall finetune` with the same recipe from stage 1's weights into another folder, and prints

    overhead = stage 2 in the sequence / the same fine-tune alone - 1      (issue 49's goal: <= 15 %)

with the seconds of each part (continual.json's `seconds`: the matrix's scoring, training).

    python benchmarks/continual_overhead.py                          # the study's SST-2 -> MRPC, 100 steps a stage
    python benchmarks/continual_overhead.py train.max_steps=200
    python benchmarks/continual_overhead.py --tiny                   # a 2-layer BERT: seconds, for a quick look
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def tiny_stages(root: Path) -> list[Path]:
    from recall_cli.testing import tiny_bert_dir

    model = tiny_bert_dir(root / "tiny", seed=1234)
    files = []
    for name, folder in (("sst2", "SST-2"), ("mrpc", "MRPC")):
        recipe = {"model": {"name_or_path": str(model)},
                  "task": {"name": name, "data_dir": str(REPO / "data/glue" / folder), "max_seq_length": 64,
                           "max_train_examples": 2000, "max_eval_examples": 200},
                  "optimizer": {"name": "adamw", "lr": 1e-3},
                  "train": {"batch_size": 16, "max_steps": 100, "eval_every": 0, "log_every": 50, "device": "cpu",
                            "precision": "fp32", "seed": 1},
                  "probe": {"enabled": False}}
        files.append(root / f"{name}.yaml")
        files[-1].write_text(yaml.safe_dump(recipe), encoding="utf-8")
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()
    from recall_cli.recipe import load_recipe
    from recall_cli.sequence.runner import run_continual
    from recall_cli.training.loop import finetune
    from recall_cli.training.progress import Reporter

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = tiny_stages(root) if args.tiny else [REPO / "docs/study/continual/sst2.yaml", REPO / "docs/study/continual/mrpc.yaml"]
        overrides = (["train.max_steps=100"] if not args.tiny else []) + ["probe.enabled=false", "continual.probe=false"]
        overrides += args.overrides
        marks: dict[str, float] = {}
        run_continual(files, overrides, root / "seq", note=lambda text: marks.setdefault(text.split(":")[0], time.perf_counter()))
        stage2 = time.perf_counter() - marks["stage 2/2"]
        record = json.loads((root / "seq/continual.json").read_text())
        stage_overrides = [o for o in overrides if not o.startswith("continual.")]
        recipe = load_recipe(files[1], stage_overrides + [f"model.name_or_path={root / 'seq/stages/01-sst2/last'}",
                                                          f"output_dir={root / 'alone'}"])
        started = time.perf_counter()
        finetune(recipe, reporter=Reporter())
        alone = time.perf_counter() - started
    seconds = record["stages"][1]["seconds"]
    print(json.dumps({"stage_in_sequence_s": round(stage2, 2), "finetune_alone_s": round(alone, 2),
                      "overhead": round(stage2 / alone - 1, 4), "score_s": round(seconds["score"], 2),
                      "train_s": round(seconds["train"], 2), "tiny": args.tiny, "overrides": overrides}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
