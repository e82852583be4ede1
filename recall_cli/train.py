"""The fine-tuning loop: one function that reads top to bottom, the same path on CPU and CUDA.

Order of one optimizer step (as in nanoGPT): set lr -> micro-steps (forward, scaled backward) ->
divergence check -> unscale + clip -> step -> zero_grad -> log -> eval (+ best/) -> save last/.
"""

from __future__ import annotations

import math
import platform
import random
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import __version__, checkpoint, data
from .evaluate import score
from .model import build_model, load_checkpoint_model, load_tokenizer, parameter_groups
from .optim import RecAdam, distance_to_anchor
from .recipe import Recipe, dump_recipe, schedule_warnings
from .schedule import linear_warmup_decay


class TrainingDiverged(RuntimeError):
    def __init__(self, step: int, loss: float):
        self.step, self.loss = step, loss
        super().__init__(
            f"training diverged: the loss became {loss} at step {step} (lower optimizer.lr, "
            "use train.precision=fp32 or bf16, or check the data)"
        )


class Reporter:
    """What the loop tells the user; the CLI supplies a rich or plain implementation."""

    def start(self, total_steps: int, start_step: int, info: dict[str, Any]) -> None: ...
    def warn(self, message: str) -> None: ...
    def train(self, record: dict[str, Any]) -> None: ...
    def eval(self, record: dict[str, Any]) -> None: ...
    def step(self, step: int) -> None: ...
    def finish(self, summary: dict[str, Any]) -> None: ...
    def close(self) -> None: ...


# ---- set-up --------------------------------------------------------------------------------------


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device=cuda but no CUDA device is visible (check CUDA_VISIBLE_DEVICES, or use train.device=cpu)")
    return torch.device(name)


def resolve_precision(name: str, device: torch.device) -> str:
    if name == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return "fp32"
    if name == "fp16" and device.type != "cuda":
        raise RuntimeError("train.precision=fp16 needs a CUDA device (on CPU use fp32 or bf16)")
    return name


def autocast_for(precision: str, device: torch.device):
    if precision == "fp32":
        return nullcontext()
    dtype = torch.float16 if precision == "fp16" else torch.bfloat16
    return torch.autocast(device.type, dtype=dtype)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class TaskData:
    spec: data.TaskSpec
    train: data.Features
    dev: dict[str, data.Features]


def load_task_data(recipe: Recipe, tokenizer) -> TaskData:
    cfg = recipe.task
    spec = data.task_spec(cfg)

    def features(split: str, limit: int | None) -> data.Features:
        examples = data.load_split(cfg, split)
        if limit is not None:
            examples = data.Examples(examples.texts[:limit], examples.labels[:limit], examples.source)
        return data.tokenize(examples, tokenizer, cfg.max_seq_length)

    train = features("train", cfg.max_train_examples)
    dev = {split: features(split, cfg.max_eval_examples) for split in spec.dev_splits}
    return TaskData(spec, train, dev)


def plan_total_steps(recipe: Recipe, n_train: int) -> int:
    tc = recipe.train
    if tc.max_steps is not None:
        return tc.max_steps
    batches_per_epoch = math.ceil(n_train / tc.batch_size)
    return max(1, math.ceil(tc.epochs * batches_per_epoch / tc.grad_accum))


class BatchOrder:
    """Micro-batch i of the run, reproducible from (seed, i) alone: that index is the data position."""

    def __init__(self, n: int, batch_size: int, seed: int):
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.per_epoch = math.ceil(n / batch_size)
        self._epoch, self._perm = -1, torch.empty(0, dtype=torch.long)

    def batch(self, i: int) -> list[int]:
        epoch, j = divmod(i, self.per_epoch)
        if epoch != self._epoch:
            generator = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
            self._epoch, self._perm = epoch, torch.randperm(self.n, generator=generator)
        return self._perm[j * self.batch_size : (j + 1) * self.batch_size].tolist()


WINDOW_KEYS = ("loss", "grad_norm", "steps", "samples", "seconds")


@dataclass
class TrainerState:
    step: int = 0
    micro_step: int = 0
    best_main: float | None = None
    best_step: int | None = None
    train_seconds: float = 0.0
    samples: int = 0
    # Running sums since the last train record: saved so that a resumed run logs the same averages.
    window: dict[str, float] = field(default_factory=lambda: dict.fromkeys(WINDOW_KEYS, 0.0))


def build_optimizer(model, anchors, recipe: Recipe, total_steps: int) -> torch.optim.Optimizer:
    oc = recipe.optimizer
    groups = parameter_groups(model, anchors, oc)
    anchor_dtype = torch.bfloat16 if recipe.model.anchor_dtype == "bfloat16" else None
    # adamw is RecAdam without anchors: the same Adam arithmetic (and eps convention) as the
    # released vanilla baseline, so PI/RI/vanilla differ only in the recall terms.
    return RecAdam(
        groups,
        lr=oc.lr,
        betas=tuple(oc.betas),
        eps=oc.eps,
        weight_decay=oc.weight_decay,
        anneal_fun=oc.anneal_fun,
        anneal_k=oc.anneal_k,
        anneal_t0=recipe.anneal_t0_steps(total_steps),
        anneal_w=oc.anneal_w,
        pretrain_cof=oc.pretrain_cof,
        mode="coupled" if oc.name == "adam_coupled" else "decoupled",
        anchor_dtype=anchor_dtype,
    )


# ---- the run -------------------------------------------------------------------------------------


def finetune(recipe: Recipe, *, resume: bool = False, overwrite: bool = False, reporter: Reporter | None = None) -> dict[str, Any]:
    reporter = reporter or Reporter()
    tc = recipe.train
    run_dir = Path(recipe.output_dir)
    device = resolve_device(tc.device)
    precision = resolve_precision(tc.precision, device)
    seed_everything(tc.seed)

    # Everything that can fail on user input (data, model) happens before the run directory is touched.
    last = checkpoint.find_checkpoint(run_dir, "last") if resume else None
    tokenizer = load_tokenizer(str(last) if last else recipe.model.name_or_path, recipe.model.trust_remote_code)
    task = load_task_data(recipe, tokenizer)
    total_steps = plan_total_steps(recipe, len(task.train))
    for message in schedule_warnings(recipe, total_steps):
        reporter.warn(message)

    if last is not None:
        model = load_checkpoint_model(last, recipe.model.trust_remote_code)
        anchors = checkpoint.load_anchors(run_dir)
    else:
        built = build_model(recipe.model, task.spec.num_labels, tc.seed, task.spec.label_names)
        model, anchors = built.model, built.anchors
    model.to(device)
    model.train()
    optimizer = build_optimizer(model, anchors, recipe, total_steps)
    if any(True for _ in optimizer.anchored()):
        pairs = list(optimizer.anchored())  # theta* lives in the optimizer's state
    else:  # adamw: keep theta* only to measure forgetting
        anchor_dtype = torch.bfloat16 if recipe.model.anchor_dtype == "bfloat16" else torch.float32
        pairs = [(p, anchors[n].to(device, anchor_dtype)) for n, p in model.named_parameters() if n in anchors]
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    autocast = autocast_for(precision, device)
    params = [p for p in model.parameters() if p.requires_grad]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    eval_batch = tc.eval_batch_size or 2 * tc.batch_size

    state = TrainerState()
    if resume and run_dir.exists():
        checkpoint.remove_stale_staging(run_dir)
    if last is not None:
        trainer_state, optim_state, rng_state = checkpoint.load_training_state(last)
        state = TrainerState(**trainer_state)
        optimizer.load_state_dict(optim_state["optimizer"])
        if optim_state["scaler"]:
            scaler.load_state_dict(optim_state["scaler"])
        checkpoint.restore_rng(rng_state)
        checkpoint.truncate_metrics(run_dir, state.step)
    else:
        if resume:
            # Interrupted before the first checkpoint: start over in the same directory.
            checkpoint.prepare_new_run_dir(run_dir, overwrite=True)
        else:
            checkpoint.prepare_new_run_dir(run_dir, overwrite)
        dump_recipe(recipe, run_dir / checkpoint.CONFIG_FILE)
        checkpoint.save_anchors(run_dir, anchors)
        (run_dir / checkpoint.METRICS_FILE).touch()
    del anchors  # RecAdam (or `pairs`) holds the copy it needs

    info = {"device": str(device), "precision": precision, "train_examples": len(task.train),
            "anneal_t0": recipe.anneal_t0_steps(total_steps), "run_dir": str(run_dir)}
    reporter.start(total_steps, state.step, info)
    writer = checkpoint.MetricsWriter(run_dir)
    order = BatchOrder(len(task.train), tc.batch_size, tc.seed)
    window = state.window

    try:
        while state.step < total_steps:
            step = state.step + 1
            t_start = time.perf_counter()
            lr = recipe.optimizer.lr * linear_warmup_decay(step, tc.warmup_steps, total_steps)
            for group in optimizer.param_groups:
                group["lr"] = lr

            loss_sum = torch.zeros((), device=device)
            samples = 0
            for _ in range(tc.grad_accum):
                indices = order.batch(state.micro_step)
                state.micro_step += 1
                batch = {k: v.to(device, non_blocking=True) for k, v in data.collate(task.train, indices, pad_id).items()}
                with autocast:
                    loss = model(**batch).loss / tc.grad_accum
                scaler.scale(loss).backward()
                loss_sum += loss.detach().float()
                samples += len(indices)

            loss_value = loss_sum.item()  # one sync per step: the price of stopping at the exact step
            if not math.isfinite(loss_value):
                raise TrainingDiverged(step, loss_value)
            scaler.unscale_(optimizer)
            grad_norm = torch.nn.utils.clip_grad_norm_(params, tc.max_grad_norm or math.inf)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            state.step = step
            state.samples += samples

            elapsed = time.perf_counter() - t_start
            state.train_seconds += elapsed
            window["loss"] += loss_value
            window["grad_norm"] += float(grad_norm)
            window["steps"] += 1
            window["samples"] += samples
            window["seconds"] += elapsed

            if step % tc.log_every == 0 or step == total_steps:
                lam = optimizer.current_lambda
                record = {
                    "step": step,
                    "split": "train",
                    "epoch": round(state.micro_step / order.per_epoch, 4),
                    "loss": window["loss"] / window["steps"],
                    "lr": lr,
                    "lambda": 1.0 if lam is None else lam,
                    "distance": distance_to_anchor(*zip(*pairs)) if pairs else 0.0,
                    "grad_norm": window["grad_norm"] / window["steps"],
                    "samples_per_s": window["samples"] / max(window["seconds"], 1e-9),
                }
                writer.write(record)
                reporter.train(record)
                window.update(dict.fromkeys(WINDOW_KEYS, 0.0))

            evaluate_now = (tc.eval_every and step % tc.eval_every == 0) or step == total_steps
            if evaluate_now:
                metrics = score(model, task.spec, task.dev, eval_batch, device, pad_id, autocast_for(precision, device))
                record = {"step": step, "split": "eval", **metrics}
                writer.write(record)
                reporter.eval(record)
                main = metrics["main"]
                if math.isfinite(main) and (state.best_main is None or main > state.best_main):
                    state.best_main, state.best_step = main, step
                    checkpoint.save_checkpoint(run_dir, "best", model, tokenizer)

            save_now = (tc.save_every and step % tc.save_every == 0) or (not tc.save_every and evaluate_now)
            if save_now or step == total_steps:
                folder = checkpoint.save_checkpoint(
                    run_dir, "last", model, tokenizer, state.__dict__, optimizer, scaler
                )
                checkpoint.rotate_step_checkpoints(run_dir, step, tc.keep_last, folder)
            reporter.step(step)
    finally:
        writer.close()

    summary = build_summary(recipe, run_dir, state, total_steps, pairs, device, precision)
    checkpoint.write_json_atomic(run_dir / checkpoint.SUMMARY_FILE, summary)
    reporter.finish(summary)
    return summary


def build_summary(recipe, run_dir, state, total_steps, pairs, device, precision) -> dict[str, Any]:
    import transformers

    evals = [r for r in checkpoint.read_metrics(run_dir) if r["split"] == "eval"]
    metric_names = lambda r: {k: v for k, v in r.items() if k != "split"}  # noqa: E731
    best = next((r for r in evals if r["step"] == state.best_step), None)
    return {
        "task": recipe.task.name,
        "optimizer": recipe.optimizer.name,
        "init": recipe.model.init,
        "model": recipe.model.name_or_path,
        "seed": recipe.train.seed,
        "anneal_fun": recipe.optimizer.anneal_fun,
        "anneal_k": recipe.optimizer.anneal_k,
        "anneal_t0": recipe.anneal_t0_steps(total_steps),
        "pretrain_cof": recipe.optimizer.pretrain_cof,
        "lr": recipe.optimizer.lr,
        "steps": state.step,
        "finished": state.step >= total_steps,
        "best": metric_names(best) if best else None,
        "final": metric_names(evals[-1]) if evals else None,
        "final_distance": distance_to_anchor(*zip(*pairs)) if pairs else 0.0,
        "train_seconds": state.train_seconds,
        "samples_per_s": state.samples / max(state.train_seconds, 1e-9),
        "device": str(device),
        "precision": precision,
        "versions": {
            "recall": __version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
        },
    }
