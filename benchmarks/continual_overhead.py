"""What a stage of `recall continual` adds to its own `recall finetune` (probes off), in one run.

Runs a two-stage sequence and times its second stage from the moment it starts to the moment its row of
the matrix is written (recipe, training, the matrix's scoring of both tasks); then runs the same stage
alone, `recall finetune` with the same recipe from stage 1's weights into another folder, and prints

    overhead = stage 2 in the sequence / the same fine-tune alone - 1      (issue 49's goal: <= 15 %)

with the seconds of each part (continual.json's `seconds`: the matrix's scoring, training).

    python benchmarks/continual_overhead.py                          # the study's SST-2 -> MRPC, 100 steps a stage
    python benchmarks/continual_overhead.py train.max_steps=200
    python benchmarks/continual_overhead.py --tiny                   # a 2-layer BERT: seconds, for a quick look
    python benchmarks/continual_overhead.py --tiny --rescored --repeat 3

--rescored also runs the sequence with its diagonal scored again instead of read from each stage's own final
evaluation (what the matrix did before), for the saving beside the overhead, in the same run; --repeat N runs
each part N times, interleaved, and keeps each one's fastest (a loaded machine's noise is one-sided).
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
    parser.add_argument("--rescored", action="store_true", help="also time the sequence scoring its diagonal again")
    parser.add_argument("--repeat", type=int, default=1, help="each part's fastest of N interleaved runs")
    args = parser.parse_args()
    from recall_cli.recipe import load_recipe
    from recall_cli.sequence.runner import run_continual
    from recall_cli.training.loop import finetune
    from recall_cli.training.progress import Reporter

    from recall_cli.sequence.scoring import Scorer

    def sequence(into: Path, rescored: bool) -> tuple[float, dict]:
        marks: dict[str, float] = {}
        reuse = Scorer.finetune_score
        if rescored:  # the matrix as it was: every cell scored, the diagonal too
            Scorer.finetune_score = lambda *_: None
        try:
            run_continual(files, overrides, into, note=lambda text: marks.setdefault(text.split(":")[0], time.perf_counter()))
        finally:
            Scorer.finetune_score = reuse
        return time.perf_counter() - marks["stage 2/2"], json.loads((into / "continual.json").read_text())

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = tiny_stages(root) if args.tiny else [REPO / "docs/study/continual/sst2.yaml", REPO / "docs/study/continual/mrpc.yaml"]
        overrides = (["train.max_steps=100"] if not args.tiny else []) + ["probe.enabled=false", "continual.probe=false"]
        overrides += args.overrides
        stage_overrides = [o for o in overrides if not o.startswith("continual.")]
        times: dict[str, list[float]] = {"seq": [], "alone": [], "rescored": []}
        for n in range(args.repeat):
            stage2, record = sequence(root / f"seq{n}", rescored=False)
            times["seq"].append(stage2)
            recipe = load_recipe(files[1], stage_overrides + [f"model.name_or_path={root / 'seq0/stages/01-sst2/last'}",
                                                              f"output_dir={root / f'alone{n}'}"])
            started = time.perf_counter()
            finetune(recipe, reporter=Reporter())
            times["alone"].append(time.perf_counter() - started)
            if args.rescored:
                stage2_again, again = sequence(root / f"rescored{n}", rescored=True)
                times["rescored"].append(stage2_again)
                assert again["matrix"] == record["matrix"], "the reused diagonal differs from a fresh score"
    seconds = record["stages"][1]["seconds"]
    stage2, alone = min(times["seq"]), min(times["alone"])
    result = {"stage_in_sequence_s": round(stage2, 2), "finetune_alone_s": round(alone, 2),
              "overhead": round(stage2 / alone - 1, 4), "score_s": round(seconds["score"], 2),
              "train_s": round(seconds["train"], 2), "tiny": args.tiny, "repeat": args.repeat, "overrides": overrides}
    if args.rescored:
        rescored = min(times["rescored"])
        result.update(rescored_stage_s=round(rescored, 2), rescored_overhead=round(rescored / alone - 1, 4),
                      rescored_score_s=round(again["stages"][1]["seconds"]["score"], 2))
    print(json.dumps(result, indent=1))

if __name__ == "__main__":
    sys.exit(main())
