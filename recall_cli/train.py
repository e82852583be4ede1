"""The fine-tuning loop: one function that reads top to bottom, the same path on CPU and CUDA.

Order of one optimizer step (as in nanoGPT): set lr -> micro-steps (forward, scaled backward) ->
divergence check -> unscale + clip -> step -> zero_grad -> log -> eval (+ best/) -> save last/.

The same loop runs in one process or in N under torchrun (DistributedDataParallel): each global
micro-batch of BatchOrder is split across the ranks, so N processes with train.batch_size=B take the
same steps as one process with batch_size=N*B. Rank 0 alone writes the run directory.
"""

from __future__ import annotations

import math
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import __version__, checkpoint, data, preflight
from .errors import Preempted, TrainingDiverged
from .distributed import Distributed, SigtermFlag, shard
from .evaluate import score
from .model import BuiltModel, build_model, load_checkpoint_model, load_tokenizer, parameter_groups
from .optim import RecAdam, distance_to_anchor
from .probes.runner import load_inputs as probe_inputs, prober_for_run, record_at
from .recipe import Recipe, dump_recipe, schedule_warnings
from .runtime import DeviceError, autocast_for, choose_precision, precision_of_saved_run, resolve_device, resolve_precision, seed_everything  # noqa: F401 - re-exported
from .schedule import linear_warmup_decay


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


@dataclass
class TaskData:
    spec: data.TaskSpec
    train: data.Features
    dev: dict[str, data.Features]


def load_task_data(recipe: Recipe, tokenizer) -> TaskData:
    cfg = recipe.task
    spec = data.task_spec(cfg)

    def features(split: str, limit: int | None) -> data.Features:
        return data.tokenize(data.load_split(cfg, split, limit), tokenizer, cfg.max_seq_length)

    train = features("train", cfg.max_train_examples)
    dev = {split: features(split, cfg.max_eval_examples) for split in spec.dev_splits}
    return TaskData(spec, train, dev)


def plan_total_steps(recipe: Recipe, n_train: int, world_size: int = 1) -> int:
    tc = recipe.train
    if tc.max_steps is not None:
        return tc.max_steps
    batches_per_epoch = math.ceil(n_train / (tc.batch_size * world_size))
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


WINDOW_KEYS = ("loss", "grad_norm", "steps", "samples", "seconds", "stepped", "skipped")


def add_to_window(window: dict[str, float], loss: float, grad_norm: float, samples: int, seconds: float,
                  skipped: bool) -> None:
    """Adds one optimizer step to the running sums of the next train record.

    A step that fp16's GradScaler skipped (its gradients overflowed) has an inf/nan norm that says
    nothing about training: it is counted in "skipped" and left out of the grad_norm average."""
    window["loss"] += loss
    window["steps"] += 1
    window["samples"] += samples
    window["seconds"] += seconds
    if skipped:
        window["skipped"] += 1
    else:
        window["grad_norm"] += grad_norm
        window["stepped"] += 1


def window_fields(window: dict[str, float], scaler_enabled: bool) -> dict[str, float | int | None]:
    """The averaged fields of a train record: grad_norm is null when every step in it was skipped."""
    fields: dict[str, float | int | None] = {
        "loss": window["loss"] / window["steps"],
        "grad_norm": window["grad_norm"] / window["stepped"] if window["stepped"] else None,
        "samples_per_s": window["samples"] / max(window["seconds"], 1e-9),
    }
    if scaler_enabled:
        fields["skipped_steps"] = int(window["skipped"])
    return fields


@dataclass
class TrainerState:
    step: int = 0
    micro_step: int = 0
    best_main: float | None = None
    best_step: int | None = None
    train_seconds: float = 0.0
    samples: int = 0
    world_size: int = 1  # a run resumes only with the number of processes it was trained with
    precision: str | None = None  # what `auto` chose: a resumed run keeps it (None: a 0.1 checkpoint)
    # Running sums since the last train record: saved so that a resumed run logs the same averages.
    window: dict[str, float] = field(default_factory=lambda: dict.fromkeys(WINDOW_KEYS, 0.0))

    def __post_init__(self) -> None:
        # A checkpoint saved by version 0.1 lacks the skip counters: every step in its window had its norm added.
        self.window.setdefault("stepped", self.window.get("steps", 0.0))
        self.window.setdefault("skipped", 0.0)


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
    ctx = Distributed.from_env()
    # No process here forks tokenizers, but a user's DataLoader might: keep the Rust pool quiet.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    device = resolve_device(tc.device, ctx.local_rank if ctx.enabled else None)
    seed_everything(tc.seed)

    # Everything that can fail on user input (run directory, data, model) happens before the run
    # directory is touched and, under torchrun, before the process group exists: every rank checks
    # the same files and fails the same way, so no rank is left waiting in a collective.
    last = checkpoint.find_checkpoint(run_dir, "last") if resume else None
    saved = checkpoint.load_training_state(last, ctx.rank, ctx.world_size) if last is not None else None
    recorded = precision_of_saved_run(saved[0].get("precision"), device) if saved is not None else None
    precision, why = choose_precision(tc.precision, device, recorded)
    if not resume:
        checkpoint.check_new_run_dir(run_dir, overwrite)
    tokenizer = load_tokenizer(str(last) if last else recipe.model.name_or_path, recipe.model.trust_remote_code)
    task = load_task_data(recipe, tokenizer)
    checks = preflight.run_checks(recipe, tokenizer, num_labels=task.spec.num_labels, device=device,
                                  precision=precision, world_size=ctx.world_size, resume=last is not None,
                                  lengths=[len(ids) for ids in task.train.input_ids],
                                  model_source=str(last) if last else None)
    checks.raise_on_failure()
    for check in checks.checks:
        if check.status == "warn":
            reporter.warn(f"preflight: {check.name}: {check.message}")
    if recipe.probe.enabled:  # every rank checks the probe files, before any process group exists
        probe_inputs(list(recipe.probe.probes), recipe.probe.texts_file, recipe.probe.pairs_file, 4, 4)
    total_steps = plan_total_steps(recipe, len(task.train), ctx.world_size)
    for message in schedule_warnings(recipe, total_steps):
        reporter.warn(message)

    if last is not None:
        built = BuiltModel(load_checkpoint_model(last, recipe.model.trust_remote_code), checkpoint.load_anchors(run_dir))
    else:
        built = build_model(recipe.model, task.spec.num_labels, tc.seed, task.spec.label_names)
    if ctx.rank > 0:
        seed_everything(tc.seed + 10_007 * ctx.rank)  # the same weights everywhere, another dropout stream per rank
    ctx.init(device)
    # A failure between creating the run directory and the first optimizer step puts it back as it was.
    new_dir = checkpoint.NewRunDir(run_dir)
    try:
        return _train(recipe, ctx, resume, overwrite, reporter, device, precision, why, saved, tokenizer, task,
                      total_steps, built, new_dir)
    except BaseException:
        new_dir.rollback()  # nothing once the first step has committed it
        raise
    finally:
        ctx.close()


def _train(recipe, ctx, resume, overwrite, reporter, device, precision, why, saved, tokenizer, task, total_steps,
           built, new_dir) -> dict[str, Any]:
    tc = recipe.train
    run_dir = Path(recipe.output_dir)
    # Take theta* out of `built` so that only RecAdam (or `pairs`) keeps a copy once set-up is done.
    model, anchors, built.anchors = built.model, built.anchors, None
    model.to(device)
    model.train()
    optimizer = build_optimizer(model, anchors, recipe, total_steps)
    pairs = list(optimizer.anchored())  # theta* lives in the optimizer's state (a full copy per rank)
    if not pairs:  # adamw: keep theta* only to measure forgetting
        anchor_dtype = torch.bfloat16 if recipe.model.anchor_dtype == "bfloat16" else torch.float32
        pairs = [(p, anchors[n].to(device, anchor_dtype)) for n, p in model.named_parameters() if n in anchors]
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    autocast = autocast_for(precision, device)
    params = [p for p in model.parameters() if p.requires_grad]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    eval_batch = tc.eval_batch_size or 2 * tc.batch_size  # per process, like batch_size

    # Rank 0 alone probes (on `model`, outside DDP: no collective); the others wait at the next one.
    # Built before the run directory is touched: a probe file it cannot read leaves nothing behind.
    prober = prober_for_run(recipe, model, anchors, tokenizer, device) if recipe.probe.enabled and ctx.is_main else None
    for note in prober.notes if prober else ():
        reporter.warn(note)

    state = TrainerState(world_size=ctx.world_size, precision=precision)
    if ctx.is_main and resume and run_dir.exists():
        checkpoint.remove_stale_staging(run_dir)
    if saved is not None:
        trainer_state, optim_state, rng_state = saved
        state = TrainerState(**trainer_state)
        state.precision = precision  # a 0.1 checkpoint records it from now on
        optimizer.load_state_dict(optim_state["optimizer"])
        if optim_state["scaler"]:
            scaler.load_state_dict(optim_state["scaler"])
        checkpoint.restore_rng(rng_state, device)
        if ctx.is_main:
            checkpoint.truncate_metrics(run_dir, state.step)
    elif ctx.is_main:
        # --resume of a run interrupted before its first checkpoint: start over in the same directory.
        new_dir.begin(overwrite=overwrite or resume)
        # config.yaml and metrics.jsonl first (they make it a run directory), theta* (hundreds of MB)
        # after: a kill in between leaves a run that --resume simply starts over.
        dump_recipe(recipe, run_dir / checkpoint.CONFIG_FILE)
        (run_dir / checkpoint.METRICS_FILE).touch()
        checkpoint.save_anchors(run_dir, anchors)
    del anchors  # RecAdam (or `pairs`) holds the copy it needs
    ddp_model = ctx.wrap(model, device)  # the same parameters; forward through it, save and eval `model`
    ctx.barrier()  # the run directory is ready before anyone goes on

    # Say why when recall chose: bf16 on one CPU and fp32 on another is otherwise a surprise.
    shown = precision if why == "set in the recipe" else f"{precision} ({why})"
    info = {"device": str(device), "precision": shown, "train_examples": len(task.train),
            "anneal_t0": recipe.anneal_t0_steps(total_steps), "run_dir": str(run_dir)}
    if ctx.enabled:
        info.update(processes=ctx.world_size, global_batch=tc.batch_size * ctx.world_size * tc.grad_accum)
    reporter.start(total_steps, state.step, info)
    writer = checkpoint.MetricsWriter(run_dir, enabled=ctx.is_main)
    order = BatchOrder(len(task.train), tc.batch_size * ctx.world_size, tc.seed)
    window = state.window
    replicas_differ = False

    def probe(step: int) -> None:
        record = record_at(prober, model, step)
        writer.write(record)
        reporter.eval({k: v for k, v in record.items() if not isinstance(v, list)})

    if prober is not None and saved is None:
        probe(0)  # before the first update: the curves' starting point (under RI, the random model)

    try:
        with SigtermFlag() as sigterm:
            while state.step < total_steps:
                step = state.step + 1
                t_start = time.perf_counter()
                lr = recipe.optimizer.lr * linear_warmup_decay(step, tc.warmup_steps, total_steps)
                for group in optimizer.param_groups:
                    group["lr"] = lr

                loss_sum = torch.zeros((), device=device)
                samples = 0
                for micro in range(tc.grad_accum):
                    indices = order.batch(state.micro_step)
                    state.micro_step += 1
                    mine = shard(indices, ctx.rank, ctx.world_size)
                    # DDP averages gradients over ranks. Weighting each rank's mean loss by its share of
                    # the global micro-batch (x world_size) makes that average the global batch's mean
                    # even when an epoch's last batch splits unevenly; a rank with no example runs one
                    # at weight 0 so that every rank takes part in the all-reduce.
                    share = len(mine) * ctx.world_size / len(indices)
                    batch = data.collate(task.train, mine or indices[:1], pad_id)
                    batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
                    with ctx.no_sync(ddp_model, skip=micro < tc.grad_accum - 1):
                        with autocast:
                            loss = ddp_model(**batch).loss
                            if share != 1.0:
                                loss = loss * share
                            loss = loss / tc.grad_accum
                        scaler.scale(loss).backward()
                    loss_sum += loss.detach().float()
                    samples += len(indices)

                # One sync per step (the price of stopping at the exact step), which also makes every
                # rank agree on the global loss and on whether a SIGTERM arrived anywhere.
                loss_value, stop = ctx.step_consensus(loss_sum, sigterm.requested)
                if not math.isfinite(loss_value):
                    raise TrainingDiverged(step, loss_value)
                scaler.unscale_(optimizer)
                # After DDP's all-reduce every rank holds the global gradient: this norm is the global one.
                grad_norm = torch.nn.utils.clip_grad_norm_(params, tc.max_grad_norm or math.inf)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                state.step = step
                state.samples += samples
                new_dir.commit()  # the new run exists for good: an old one it replaces is deleted now

                elapsed = time.perf_counter() - t_start
                state.train_seconds += elapsed
                norm = float(grad_norm)
                # With the scaler on, a non-finite norm means scaler.step skipped this update.
                skipped = scaler.is_enabled() and not math.isfinite(norm)
                add_to_window(window, loss_value, norm, samples, elapsed, skipped)

                if step % tc.log_every == 0 or step == total_steps:
                    lam = optimizer.current_lambda
                    # Each rank steps a full replica with its own theta*, so its distance is the global one.
                    distance = distance_to_anchor(*zip(*pairs)) if pairs else 0.0
                    if ctx.enabled and len(set(ctx.all_gather_object(distance))) > 1 and not replicas_differ:
                        replicas_differ = True
                        reporter.warn(f"step {step}: the replicas' distances to theta* differ across ranks "
                                      "(a non-deterministic kernel?); logging rank 0's")
                    averages = window_fields(window, scaler.is_enabled())
                    record = {
                        "step": step,
                        "split": "train",
                        "epoch": round(state.micro_step / order.per_epoch, 4),
                        "loss": averages.pop("loss"),
                        "lr": lr,
                        "lambda": 1.0 if lam is None else lam,
                        "distance": distance,
                        **averages,
                    }
                    writer.write(record)
                    reporter.train(record)
                    window.update(dict.fromkeys(WINDOW_KEYS, 0.0))

                evaluate_now = (tc.eval_every and step % tc.eval_every == 0) or step == total_steps
                if evaluate_now:
                    metrics = score(model, task.spec, task.dev, eval_batch, device, pad_id,
                                    autocast_for(precision, device), ctx)
                    record = {"step": step, "split": "eval", **metrics}
                    writer.write(record)
                    reporter.eval(record)
                    main = metrics["main"]
                    if math.isfinite(main) and (state.best_main is None or main > state.best_main):
                        state.best_main, state.best_step = main, step
                        if ctx.is_main:
                            checkpoint.save_checkpoint(run_dir, "best", model, tokenizer)

                every = recipe.probe.every
                if prober is not None and ((evaluate_now and not every) or (every and step % every == 0) or step == total_steps):
                    probe(step)

                save_now = (tc.save_every and step % tc.save_every == 0) or (not tc.save_every and evaluate_now)
                if save_now or stop or step == total_steps:
                    rng_states = ctx.gather_object(checkpoint.capture_rng(device))  # each rank's dropout stream
                    if ctx.is_main:
                        folder = checkpoint.save_checkpoint(
                            run_dir, "last", model, tokenizer, state.__dict__, optimizer, scaler, rng_states
                        )
                        checkpoint.rotate_step_checkpoints(run_dir, step, tc.keep_last, folder)
                    ctx.barrier()  # no rank runs ahead of, or exits before, a complete last/
                reporter.step(step)
                if stop and step < total_steps:
                    raise Preempted(step, run_dir)
    finally:
        writer.close()

    final_distance = distance_to_anchor(*zip(*pairs)) if pairs else 0.0
    distances = ctx.all_gather_object(final_distance)
    if not ctx.is_main:
        return {"steps": state.step, "final_distance": final_distance, "rank": ctx.rank}
    summary = build_summary(recipe, run_dir, state, total_steps, final_distance, device, precision)
    summary["world_size"] = ctx.world_size
    summary["global_batch_size"] = tc.batch_size * ctx.world_size * tc.grad_accum
    if ctx.enabled:
        summary["final_distance_by_rank"] = distances
    checkpoint.write_json_atomic(run_dir / checkpoint.SUMMARY_FILE, summary)
    reporter.finish(summary)
    return summary


def build_summary(recipe, run_dir, state, total_steps, final_distance, device, precision) -> dict[str, Any]:
    import transformers

    evals = [r for r in checkpoint.read_metrics(run_dir) if r["split"] == "eval"]
    metric_names = lambda r: {k: v for k, v in r.items() if k != "split"}  # noqa: E731
    best = next((r for r in evals if r["step"] == state.best_step), None)
    probes = [r for r in checkpoint.read_metrics(run_dir) if r["split"] == "probe"]
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
        "final_distance": final_distance,
        "probe": {k: v for k, v in probes[-1].items() if k != "split"} if probes else None,
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
