"""Training throughput of `recall finetune` (RecAdam and AdamW) against Hugging Face `Trainer`.

All loops train the same model (built from a config, random weights: speed needs no real weights)
on the same real GLUE rows, with the same batch size, sequence length, precision and number of
steps. Two kinds of data:

- `--data full` (default), equal work: MRPC sentences joined so that every example fills
  max_seq_length. Every batch has the same shape in every loop, so the ratios measure the loops
  themselves (their overhead), nothing else.
- `--data glue`, the rows of a bundled GLUE task as they are (`--task`). recall pads each batch to
  its longest row; Trainer runs twice: with DataCollatorWithPadding (the same dynamic padding) and
  with every row padded to max_seq_length, as Hugging Face's run_glue.py example does by default
  (`pad_to_max_length`) and as the released RecAdam script does. Masked padding changes no result,
  only the work done.

Each configuration runs in its own process (so that peak memory is its own), in rounds that
alternate the configurations, so that drift of the machine hits all of them alike.

Throughput is steady-state samples/s: the wall time between the ends of consecutive optimizer steps
after --warmup steps (logging included, model loading and the final eval/save excluded), the same
measure for both loops. Peak memory is the process's peak RSS on CPU, and the peak of
torch.cuda.max_memory_allocated on CUDA.

    python benchmarks/throughput.py                              # CPU: a MiniLM-shaped BERT
    python benchmarks/throughput.py --shape bert-base --device cuda --precision bf16
    # this version's loop against another checkout's (e.g. `git worktree add /tmp/base main`), in one run:
    python benchmarks/throughput.py --configs recall-recadam,recall-adamw --baseline /tmp/base

Needs `accelerate` for `Trainer` (pip install accelerate); recall itself does not.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
SHAPES = {
    # hidden, layers, heads, intermediate
    "minilm": (384, 6, 12, 1536),
    "bert-base": (768, 12, 12, 3072),
}
CONFIGS = ("trainer", "recall-adamw", "recall-recadam", "bare-loop")
# The floor of a compiled step (issue 40): the bare loop's step (forward, backward, clip, optimizer step) compiled
# whole with AdamW, with CUDA graphs on a GPU (mode "reduce-overhead"), nothing around it; and with RecAdam's own
# optimizer (recall_cli.optim.RecAdam, theta* held as recall holds it), its forward and backward compiled and
# its fused kernel run eagerly after them (its λ(t) changes every step, which a graph would recompile for). Named in --configs only, beside
# recall-recadam-compiled / recall-adamw-compiled: every GPU report gives recall's ratio to its floor.
BARE_COMPILED = ("bare-compiled", "bare-compiled-recadam")
# Compiled loops: named in --configs only (on a CPU their first compile takes minutes). Trainer's
# torch_compile=True; recall's train.compile=on with length buckets of 32 (CUDA graphs on a GPU).
COMPILED_CONFIGS = ("trainer-compiled", "recall-recadam-compiled", "recall-adamw-compiled", *BARE_COMPILED)
# The methods (README "Methods"), each on AdamW, against recall-adamw at the same shape: named in --configs.
# keep: the embedding anchor at weight 1 on the task's rows (theta*'s embeddings cached by a pre-pass, timed
# apart); keep-pool: the same on recall's general pool (keep.texts=pool, a batch of the pool per micro-batch:
# the student's second forward); lora: LoRA r = 8 on every linear layer of the encoder; lora-*: its variants
# at the same rank (pissa and corda start from a decomposition made before step 1, outside the timed steps);
# osf: OSF, 8 singular directions training per layer (methods/osf/).
LORA8 = {"r": 8, "alpha": 16}
METHOD_CONFIGS = {"recall-adamw-keep": {"keep": {"embeddings": 1.0}},
                  "recall-adamw-keep-pool": {"keep": {"embeddings": 1.0, "texts": "pool"}},
                  "recall-adamw-lora": {"model": {"lora": LORA8}},
                  "recall-adamw-lora-pissa": {"model": {"lora": {**LORA8, "init": "pissa"}}},
                  "recall-adamw-lora-corda": {"model": {"lora": {**LORA8, "init": "corda"}}},
                  "recall-adamw-lora-dora": {"model": {"lora": {**LORA8, "use_dora": True}}},
                  "recall-adamw-lora-rslora": {"model": {"lora": {**LORA8, "use_rslora": True}}},
                  "recall-adamw-osf": {"model": {"osf": {"rank": 8}}}}
GLUE_CONFIGS = ("trainer-padded", *CONFIGS, *COMPILED_CONFIGS, *METHOD_CONFIGS)
WORKER_ARGS = ("shape", "batch_size", "seq_len", "steps", "warmup", "log_every", "precision", "device", "threads",
               "data", "task")


def build_model_dir(shape: str, folder: Path) -> Path:
    """A randomly initialised BERT encoder saved like a pretrained checkpoint, with a real tokenizer."""
    from transformers.utils import logging as hf_logging

    from recall_cli.testing import tiny_bert_dir

    hf_logging.disable_progress_bar()
    hidden, layers, heads, intermediate = SHAPES[shape]
    return tiny_bert_dir(folder, hidden_size=hidden, num_layers=layers, num_heads=heads,
                         intermediate_size=intermediate, max_positions=512, seed=0)


def build_data_file(args, path: Path) -> Path:
    """Real MRPC sentences, several joined per example so that every example fills max_seq_length:
    every batch then has the same shape in both loops, whatever order their samplers draw."""
    from recall_cli import tasks
    from recall_cli.recipe import TaskConfig

    rows = tasks.load_split(TaskConfig(name="mrpc", data_dir=str(REPO / "data" / "glue" / "MRPC")), "train")
    sentences = [s for pair in rows.texts for s in pair]
    with path.open("w", encoding="utf-8") as f:
        for i in range(args.examples):
            text = " ".join(sentences[(i * 8 + j) % len(sentences)] for j in range(8))
            f.write(json.dumps({"text": text, "label": rows.labels[i % len(rows.labels)]}) + "\n")
    return path


def bundled_glue_tasks() -> dict[str, Path]:
    """The GLUE tasks whose files the project ships, with their folders."""
    from recall_cli.names import TASKS

    folders = {task: REPO / "data" / "glue" / t.folder for task, t in TASKS.items()}
    return {task: folder for task, folder in folders.items() if folder.is_dir()}


def task_dict(args) -> dict:
    if args.data == "glue":
        return {"name": args.task, "data_dir": str(bundled_glue_tasks()[args.task]),
                "max_seq_length": args.seq_len, "max_eval_examples": 32}
    return {"name": "custom", "train_file": args.data_file, "dev_file": args.data_file, "text_fields": ["text"],
            "label_field": "label", "num_labels": 2, "label_names": ["0", "1"],
            "max_seq_length": args.seq_len, "max_eval_examples": 32}


def recipe_dict(args, model_dir: Path, optimizer: str, output_dir: Path, compiled: bool = False,
                method: dict | None = None) -> dict:
    recipe = {
        "model": {"name_or_path": str(model_dir), "init": "pretrained"},
        "task": task_dict(args),
        "optimizer": {"name": optimizer, "lr": 2e-5, "anneal_k": 0.1, "anneal_t0": 10, "pretrain_cof": 5000.0},
        "train": {"batch_size": args.batch_size, "max_steps": args.steps, "log_every": args.log_every,
                  "eval_every": 0, "precision": args.precision, "device": args.device, "seed": 1},
        "output_dir": str(output_dir),
    }
    if compiled:  # only then: a --baseline checkout older than train.compile reads the rest
        recipe["train"]["compile"] = "on"
        recipe["task"]["pad_to_multiple_of"] = min(32, args.seq_len)
    for section, values in (method or {}).items():
        for key, value in values.items():
            recipe.setdefault(section, {})[key] = value
    return recipe


class StepClock:
    """Records the wall time at the end of every optimizer step."""

    def __init__(self):
        self.times: list[float] = []

    def tick(self) -> None:
        self.times.append(time.perf_counter())

    def samples_per_s(self, warmup: int, batch_size: int) -> float:
        # Step ends warmup..n-2: the last step also runs the final eval and save in recall's loop.
        ends = self.times[warmup:-1]
        if len(ends) < 2:
            raise SystemExit(f"error: {len(self.times)} steps with --warmup {warmup} leave {max(len(ends) - 1, 0)} "
                             f"timed steps: give --steps at least --warmup + 3")
        return batch_size * (len(ends) - 1) / (ends[-1] - ends[0])


def peak_memory_mb(device: str) -> float:
    import torch

    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def run_recall(args, model_dir: Path, optimizer: str, compiled: bool = False, method: dict | None = None) -> dict:
    from recall_cli.recipe import recipe_from_dict

    try:
        from recall_cli.training.loop import finetune
        from recall_cli.training.progress import Reporter
    except ImportError:  # a --baseline checkout from before recall_cli/training/ (0.1.0 at e84de2e)
        from recall_cli.train import Reporter, finetune

    clock = StepClock()

    class Timing(Reporter):
        def step(self, step: int) -> None:
            clock.tick()

    with tempfile.TemporaryDirectory() as tmp:
        recipe = recipe_from_dict(recipe_dict(args, model_dir, optimizer, Path(tmp) / "run", compiled, method),
                                  "benchmark")
        summary = finetune(recipe, reporter=Timing())
    record = summary.get("compile") or {}
    return {"samples_per_s": clock.samples_per_s(args.warmup, args.batch_size), "optimizer": optimizer,
            "compile_s": record.get("seconds", 0.0), "compile_mode": record.get("mode"),
            "compile_fallback": record.get("fallback"), "method": (summary.get("method") or {}).get("anchor")}


def run_trainer(args, model_dir: Path, pad_to_max_length: bool = False, compiled: bool = False) -> dict:
    import torch
    from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding,
                              Trainer, TrainerCallback, TrainingArguments)
    from transformers.utils import logging as hf_logging

    from recall_cli import tasks
    from recall_cli.recipe import recipe_from_dict

    hf_logging.set_verbosity_error()
    recipe = recipe_from_dict(recipe_dict(args, model_dir, "adamw", Path("unused")), "benchmark")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    task = tasks.task_for(recipe.task)
    features = task.tokenize(tasks.load_split(recipe.task, "train"), tokenizer, args.seq_len)
    if args.data == "full":
        assert all(len(ids) == args.seq_len for ids in features.input_ids), "every example fills max_seq_length"
    rows = []
    for ids, types, label in zip(features.input_ids, features.token_type_ids, features.labels):
        pad = args.seq_len - len(ids) if pad_to_max_length else 0
        rows.append({"input_ids": ids + [tokenizer.pad_token_id] * pad, "token_type_ids": types + [0] * pad,
                     "attention_mask": [1] * len(ids) + [0] * pad, "labels": label})

    clock = StepClock()

    class Timing(TrainerCallback):
        def on_step_end(self, *_, **__):
            clock.tick()

    torch.manual_seed(1)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=task.num_labels)
    with tempfile.TemporaryDirectory() as tmp:
        training_args = TrainingArguments(
            output_dir=tmp, per_device_train_batch_size=args.batch_size, max_steps=args.steps, learning_rate=2e-5,
            logging_steps=args.log_every, save_strategy="no", eval_strategy="no", report_to=[],
            disable_tqdm=True, dataloader_num_workers=0, seed=1, use_cpu=args.device == "cpu",
            bf16=args.precision == "bf16", fp16=args.precision == "fp16", torch_compile=compiled,
        )
        trainer = Trainer(model=model, args=training_args, train_dataset=rows,
                          data_collator=DataCollatorWithPadding(tokenizer), callbacks=[Timing()])
        trainer.train()
        optim = str(training_args.optim)
    # Trainer's last step has no eval/save here; drop it anyway so both use the same step range.
    return {"samples_per_s": clock.samples_per_s(args.warmup, args.batch_size), "optimizer": optim}


def run_bare_loop(args, model_dir: Path, compiled: bool = False, optimizer_name: str = "adamw") -> dict:
    """The floor: forward, backward, clip, the optimizer's step, nothing else (no logging, no checks).
    Neither loop can be much faster than this; it shows how much of a step is the loop's own. ``compiled``:
    the whole step under torch.compile (CUDA graphs on a GPU), fixed shapes (--data full) so it compiles once."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from recall_cli import tasks
    from recall_cli.recipe import recipe_from_dict

    recipe = recipe_from_dict(recipe_dict(args, model_dir, "adamw", Path("unused")), "benchmark")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    task = tasks.task_for(recipe.task)
    features = task.tokenize(tasks.load_split(recipe.task, "train"), tokenizer, args.seq_len)
    torch.manual_seed(1)
    device = torch.device(args.device)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=task.num_labels).to(device).train()
    optimizer = bare_optimizer(model, optimizer_name, compiled, device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    if compiled and args.precision == "fp16":
        sys.exit("bare-compiled: fp16's GradScaler does not go inside a compiled step; use --precision bf16 or fp32")
    scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16")

    def step(batch):
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = model(**batch).loss
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def forward_backward(batch):
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = model(**batch).loss
        loss.backward()
        return loss.detach()

    def step_around(batch):  # RecAdam: its λ(t) is a number of the step, which a graph would recompile for
        loss = compiled_forward_backward(batch)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()  # the fused kernel, one launch: eager costs it nothing
        optimizer.zero_grad(set_to_none=True)
        return loss

    run = step
    if compiled:
        mode = "reduce-overhead" if device.type == "cuda" else None
        if optimizer_name == "adamw":
            run = torch.compile(step, mode=mode)
        else:
            compiled_forward_backward = torch.compile(forward_backward, mode=mode)
            run = step_around
    clock = StepClock()
    # A seeded shuffle, like the other loops' samplers: with real rows, batch widths depend on the draw.
    order = torch.randperm(len(features), generator=torch.Generator().manual_seed(1)).tolist()
    compile_start = time.perf_counter()
    compile_s = None
    for index in range(args.steps):
        start = index * args.batch_size % len(order)
        indices = order[start : start + args.batch_size]
        if len(indices) < args.batch_size:  # a short last batch would be a new shape (a new graph)
            indices = order[: args.batch_size]
        batch = {k: v.to(device, non_blocking=True) for k, v in task.collate(features, indices, tokenizer.pad_token_id).items()}
        run(batch)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if compile_s is None:
            compile_s = time.perf_counter() - compile_start
        clock.tick()
    return {"samples_per_s": clock.samples_per_s(args.warmup, args.batch_size), "compile_s": compile_s,
            "optimizer": f"{optimizer_name} ({type(optimizer).__name__}{', compiled step' if compiled else ', fused' if optimizer_name == 'adamw' else ''})"}


def bare_optimizer(model, name: str, compiled: bool, device):
    """AdamW (fused when eager; capturable foreach when compiled, the form torch.compile captures), or recall's
    RecAdam with theta* = the starting weights, as `recall finetune` builds it (its defaults otherwise)."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    if name == "adamw":
        if compiled:
            return torch.optim.AdamW(params, lr=2e-5, foreach=True, capturable=device.type == "cuda")
        return torch.optim.AdamW(params, lr=2e-5, fused=True)
    from recall_cli.optim import RecAdam

    anchors = [p.detach().clone() for p in params]
    # Its default kernel (fused where torch has one), run eagerly after the compiled forward and backward.
    return RecAdam([{"params": params, "anchors": anchors}], lr=2e-5, anneal_t0=250, anneal_k=0.5, pretrain_cof=5000.0)


def worker(args) -> None:
    import torch

    torch.set_num_threads(args.threads or torch.get_num_threads())
    model_dir = Path(args.model_dir)
    if args.worker in ("trainer", "trainer-compiled"):
        result = run_trainer(args, model_dir, compiled=args.worker == "trainer-compiled")
    elif args.worker == "trainer-padded":
        result = run_trainer(args, model_dir, pad_to_max_length=True)
    elif args.worker == "bare-loop":
        result = run_bare_loop(args, model_dir)
    elif args.worker in BARE_COMPILED:
        result = run_bare_loop(args, model_dir, compiled=True,
                               optimizer_name="recadam" if args.worker.endswith("recadam") else "adamw")
    elif args.worker in METHOD_CONFIGS:
        result = run_recall(args, model_dir, "adamw", method=METHOD_CONFIGS[args.worker])
    else:
        name = args.worker.removeprefix("recall-")
        result = run_recall(args, model_dir, name.removesuffix("-compiled"), compiled=name.endswith("-compiled"))
    result["peak_mb"] = peak_memory_mb(args.device)
    print("RESULT " + json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="minilm")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5, help="step ends not timed at the start")
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="each configuration runs once per round")
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--data", choices=("full", "glue"), default="full",
                        help="full: every example fills --seq-len (equal work); glue: a bundled task's rows as they are")
    parser.add_argument("--task", choices=sorted(bundled_glue_tasks()), default="mrpc", help="the GLUE task for --data glue")
    parser.add_argument("--configs", help=f"comma-separated, of {', '.join(GLUE_CONFIGS)} (default: all but the compiled ones)")
    parser.add_argument("--baseline", help="another checkout of recall: its recall-* loops run beside this one's "
                                           "(as baseline-*, with PYTHONPATH=DIR), so a change is measured in one run")
    parser.add_argument("--worker", choices=GLUE_CONFIGS, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--data-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.examples = args.batch_size * args.steps  # one pass over distinct rows
    if args.worker:
        worker(args)
        return

    configs = ("trainer-padded", *CONFIGS) if args.data == "glue" else CONFIGS
    if args.configs:
        wanted = [c.strip() for c in args.configs.split(",") if c.strip()]
        unknown = [c for c in wanted if c not in GLUE_CONFIGS]  # (the compiled ones are in it)
        if unknown:
            sys.exit(f"--configs: unknown {', '.join(unknown)}; choose from {', '.join(GLUE_CONFIGS)}")
        configs = tuple(wanted)
    if args.baseline:
        configs += tuple(c.replace("recall-", "baseline-") for c in configs if c in CONFIGS and c.startswith("recall-"))
    results: dict[str, list[dict]] = {name: [] for name in configs}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model_dir(args.shape, Path(tmp) / "model")
        data_file = build_data_file(args, Path(tmp) / "train.jsonl") if args.data == "full" else Path("unused")
        passthrough = [f"--{key.replace('_', '-')}={getattr(args, key)}" for key in WORKER_ARGS]
        for round_ in range(args.rounds):
            # Rotate the order each round so that no configuration always runs first.
            shift = round_ % len(configs)
            order = configs[shift:] + configs[:shift]
            for name in order:
                env = dict(os.environ)
                if name.startswith("baseline-"):  # the same worker code, the other checkout's recall_cli
                    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(args.baseline).resolve()), env.get("PYTHONPATH")]))
                worker_name = name.replace("baseline-", "recall-")
                cmd = [sys.executable, __file__, *passthrough, "--worker", worker_name, "--model-dir", str(model_dir), "--data-file", str(data_file)]
                done = subprocess.run(cmd, capture_output=True, text=True, env=env)
                lines = [l for l in done.stdout.splitlines() if l.startswith("RESULT ")]
                if done.returncode != 0 or not lines:
                    sys.exit(f"{name} failed:\n{done.stderr[-3000:]}")
                results[name].append(json.loads(lines[-1][len("RESULT "):]))
                print(f"round {round_ + 1} {name}: {results[name][-1]['samples_per_s']:.2f} samples/s", flush=True)

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    reference = "trainer" if "trainer" in configs else configs[0]
    base = med(reference, "samples_per_s")
    rows = "MRPC sentences filling every sequence" if args.data == "full" else f"{args.task} train rows as they are"
    print(f"\n{args.shape}-shaped BERT, {rows}, batch {args.batch_size}, max_seq_length {args.seq_len}, "
          f"{args.precision}, {args.device}, {args.steps} steps (first {args.warmup} untimed), "
          f"median of {args.rounds} rounds; {reference} optimizer: {results[reference][0]['optimizer']}")
    memory = "peak CUDA memory (MiB)" if args.device == "cuda" else "peak RSS (MiB)"
    print(f"| loop | samples/s | ratio to {reference} | {memory} |")
    print("|---|---:|---:|---:|")
    for name in configs:
        sps = med(name, "samples_per_s")
        compiled_note = ""
        if name in ("recall-recadam-compiled", "recall-adamw-compiled"):
            r = results[name][0]
            compiled_note = f" (compile {med(name, 'compile_s'):.0f} s, {r['compile_mode'] or 'eager: ' + str(r['compile_fallback'])})"
        elif name in BARE_COMPILED:
            compiled_note = f" (first step with its compile {med(name, 'compile_s'):.0f} s)"
        print(f"| {name}{compiled_note} | {sps:.2f} | {sps / base:.2f} | {med(name, 'peak_mb'):.0f} |")
    for mine, floor in (("recall-adamw-compiled", "bare-compiled"), ("recall-recadam-compiled", "bare-compiled-recadam")):
        if {mine, floor} <= set(configs):  # issue 40's target: >= 0.9 on a GPU, the same card, this one run
            per_round = ", ".join(f"{a['samples_per_s'] / b['samples_per_s']:.3f}" for a, b in zip(results[mine], results[floor]))
            print(f"{mine} / {floor} (its floor): {med(mine, 'samples_per_s') / med(floor, 'samples_per_s'):.3f} "
                  f"(per round: {per_round})")
    if {"recall-recadam", "recall-adamw"} <= set(configs):
        recadam, adamw = med("recall-recadam", "samples_per_s"), med("recall-adamw", "samples_per_s")
        print(f"\nrecall RecAdam / recall AdamW throughput: {recadam / adamw:.3f}; "
              f"peak memory RecAdam / AdamW: {med('recall-recadam', 'peak_mb') / med('recall-adamw', 'peak_mb'):.3f}")
    for name in (c for c in configs if c in METHOD_CONFIGS and "recall-adamw" in configs):
        adamw = med("recall-adamw", "samples_per_s")
        per_round = ", ".join(f"{b['samples_per_s'] / a['samples_per_s']:.3f}"
                              for a, b in zip(results[name], results["recall-adamw"]))
        print(f"{name} step time / recall-adamw's: {adamw / med(name, 'samples_per_s'):.3f} (per round: {per_round}); "
              f"peak memory ratio: {med(name, 'peak_mb') / med('recall-adamw', 'peak_mb'):.3f}"
              + (f"; {results[name][0]['method']}" if results[name][0].get("method") else ""))
    for name in (c for c in configs if c in METHOD_CONFIGS and c != "recall-adamw-lora" and "recall-adamw-lora" in configs
                 and "model" in METHOD_CONFIGS[c]):
        lora = med("recall-adamw-lora", "samples_per_s")
        per_round = ", ".join(f"{b['samples_per_s'] / a['samples_per_s']:.3f}"
                              for a, b in zip(results[name], results["recall-adamw-lora"]))
        print(f"{name} step time / recall-adamw-lora's (LoRA r=8, default): {lora / med(name, 'samples_per_s'):.3f} "
              f"(per round: {per_round})")
    for name in (c for c in configs if c.startswith("baseline-")):
        mine = name.replace("baseline-", "recall-")
        per_round = ", ".join(f"{a['samples_per_s'] / b['samples_per_s']:.3f}" for a, b in zip(results[mine], results[name]))
        print(f"{mine} this checkout / {args.baseline}: {med(mine, 'samples_per_s') / med(name, 'samples_per_s'):.3f} "
              f"(per round: {per_round})")
    if args.data == "glue" and {"trainer-padded", "recall-recadam", "recall-adamw"} <= set(configs):
        recadam, adamw = med("recall-recadam", "samples_per_s"), med("recall-adamw", "samples_per_s")
        padded = med("trainer-padded", "samples_per_s")
        print(f"recall RecAdam / Trainer padding every row to {args.seq_len} tokens (run_glue.py's default): "
              f"{recadam / padded:.2f}; recall AdamW / the same: {adamw / padded:.2f}")


if __name__ == "__main__":
    main()
