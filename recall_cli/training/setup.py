"""Everything the training loop needs before its first step, built once into a typed :class:`Training`.

Two stages, in the order a distributed run needs them:

- :func:`prepare` loads and checks what can fail on user input (the run directory, a checkpoint to
  resume, the data, preflight, the probe files, the model). Under torchrun every rank does this
  before the process group exists, so every rank fails alike and none waits in a collective.
- :func:`set_up` turns that into the run: the model on its device, RecAdam with theta*, the scaler
  and autocast, the prober, the trainer state (restored on resume), and a run directory that holds
  config.yaml, metrics.jsonl and theta* before the first step.
"""

from __future__ import annotations

import dataclasses
import math
import os
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import torch

from .. import rundir, trackers
from ..distributed import Distributed
from ..errors import CompileError, PreflightError, RunDirError
from ..plugins import methods as registry
from ..plugins.adapter import Adapted
from ..model import (BuiltModel, build_model, load_checkpoint_model, load_config, load_tokenizer, model_location,
                     parameter_groups)
from ..names import OPTIMIZERS, Task
from ..optim import RecAdam
from ..probes.runner import Prober, input_names, load_inputs as probe_inputs, prober_for_run
from ..recipe import Recipe, dump_recipe
from ..recipe.advice import runnable, schedule_warnings, unused_keys
from ..runtime import autocast_for, choose_precision, precision_of_saved_run, resolve_device, seed_everything
from ..tasks import Examples, Features, TaskType, load_split, task_spec, task_type_for
from ..tasks.batches import BatchOrder, padded_length, subset
from ..tasks.holdout import holdout_cost, holdout_sample, holdout_split
from . import checkpoint, compiled, fsdp, preflight
from .weights import enable_gradient_checkpointing, weight_dtype
from .checkpoint import TrainerState
from .methods import MethodParts, RunView, start_methods
from .plan import RunPlan, StepPlan, plan_run
from .progress import Reporter


@dataclass
class TaskData:
    spec: Task
    kind: TaskType  # the task's type: how its batches are made (the loop's collate)
    train: Features
    dev: dict[str, Features]
    holdout: Features | None = None  # task.holdout's rows, taken out of train (those scored: max_holdout_examples)
    held_out: int = 0  # how many rows task.holdout took out of train (the scored ones may be fewer)
    sentences: list[str] = field(default_factory=list)  # every training sentence (the prober's overlap check)

    def holdout_info(self, total_steps: int, eval_every: int) -> dict[str, str]:
        """The start line's holdout: its size and cost (tasks/holdout.py), none without one."""
        if self.holdout is None:
            return {}
        return {"holdout": holdout_cost(len(self.holdout), self.held_out, total_steps, eval_every)}

    @property
    def chooses_on(self) -> dict[str, Features]:
        """What evaluations during training score, and best/ is chosen by: the holdout, else dev."""
        return {"holdout": self.holdout} if self.holdout is not None else self.dev


def load_task_data(recipe: Recipe, tokenizer) -> TaskData:
    cfg = recipe.task
    spec = task_spec(cfg)
    kind = task_type_for(spec)

    def features(examples: Examples) -> Features:
        return kind.tokenize(examples, tokenizer, cfg.max_seq_length)

    examples = load_split(cfg, "train", cfg.max_train_examples)
    train, sentences = features(examples), [text for row in examples.texts for text in row]
    dev = {split: features(load_split(cfg, split, cfg.max_eval_examples)) for split in spec.dev_splits}
    if cfg.holdout <= 0:
        return TaskData(spec, kind, train, dev, sentences=sentences)
    kept, held = holdout_split(kind, train.labels, cfg.holdout)
    scored = holdout_sample(kind, train.labels, held, cfg.max_holdout_examples)
    return TaskData(spec, kind, subset(train, kept), dev, holdout=subset(train, scored), sentences=sentences,
                    held_out=len(held))


def plan_total_steps(recipe: Recipe, n_train: int, world_size: int = 1) -> int:
    tc = recipe.train
    if tc.max_steps is not None:
        return tc.max_steps
    batches_per_epoch = math.ceil(n_train / (tc.batch_size * world_size))
    return max(1, math.ceil(tc.epochs * batches_per_epoch / tc.grad_accum))


def anchor_dtype(recipe: Recipe) -> torch.dtype:
    return torch.bfloat16 if recipe.model.anchor_dtype == "bfloat16" else torch.float32


def build_optimizer(model, theta_star, recipe: Recipe, plan: RunPlan) -> torch.optim.Optimizer:
    oc = recipe.optimizer
    groups = parameter_groups(model, theta_star, oc)
    # adamw is RecAdam without anchors: the same Adam arithmetic (and eps convention) as the
    # released vanilla baseline, so PI/RI/vanilla differ only in the recall terms.
    return RecAdam(
        groups,
        lr=oc.lr,
        betas=tuple(oc.betas),
        eps=oc.eps,
        weight_decay=oc.weight_decay,
        **dataclasses.asdict(plan.recall),  # the recall terms as the plan has them (t0 in steps)
        mode=OPTIMIZERS[oc.name].mode,
        anchor_dtype=torch.bfloat16 if recipe.model.anchor_dtype == "bfloat16" else None,
    )


# ---- stage 1: everything that can fail on user input ---------------------------------------------


@dataclass
class Prepared:
    recipe: Recipe
    ctx: Distributed
    device: torch.device
    plan: RunPlan  # the schedule, the step's compile and precision, the methods: decided once, here
    saved: checkpoint.Saved | None  # last/'s state, on --resume
    tokenizer: Any
    task: TaskData
    built: BuiltModel | None  # None: a dry run whose checks failed stops before the model
    adapter: Adapted | None = None  # the recipe's adapter (LoRA) around built.model, which holds it
    checks: preflight.Preflight | None = None  # every check made, in the order --dry-run lists them
    start: Start | None = None
    unused: list[str] = field(default_factory=list)  # keys the recipe sets that this run does not read

    # The plan's parts under the names the set-up has always read.
    total_steps = property(lambda self: self.plan.total_steps)
    precision = property(lambda self: self.plan.step.precision)
    precision_reason = property(lambda self: self.plan.step.precision_reason)  # "set in the recipe", or why
    compile_mode = property(lambda self: self.plan.step.mode)  # torch.compile's mode, None: eager
    compile_reason = property(lambda self: self.plan.step.reason)


def _plan_step(recipe: Recipe, device, lengths: list[int], total_steps: int, config, saved, world_size: int,
               report: preflight.Preflight, dry_run: bool) -> StepPlan:
    """How the step runs, as the run's first check: compiled or not (training.compiled), then the
    precision for this device, which on CUDA depends on that (`auto`: bf16 only for a compiled step). A
    compile that cannot work raises (the run) or is that check's failure (the dry run, which goes on
    with the eager plan)."""
    tc = recipe.train
    recorded = precision_of_saved_run(saved.state.precision, device) if saved is not None else None
    failed = None
    try:
        plan = compiled.plan_step(
            recipe, device, lengths=lengths, total_steps=total_steps,
            done_steps=saved.state.step if saved is not None else 0, config=config, world_size=world_size,
            recorded_mode=(saved.state.compile_mode, saved.state.compile_reason) if saved else None)
    except CompileError as exc:
        if not dry_run:
            raise
        failed, plan = exc, compiled.CompilePlan(None, str(exc))
    step = StepPlan(plan.mode, plan.reason, *choose_precision(tc.precision, device, recorded, compiled=plan.mode is not None))
    if failed is not None:
        report.add("step", "fail", str(failed), failed)
        return step
    how = "eager" if step.mode is None else f"compiled ({step.mode})"
    report.add("step", "ok", f"{how} ({step.reason}); {step.precision} ({step.precision_reason})")
    return step


def _resumable(run_dir: Path) -> Path | None:
    """The last/ that --resume continues, or None for a run that never completed a save (it starts over).
    A run that saved but cannot be continued exactly is one RunDirError: starting it over would replace
    a trained run (its best/, metrics and summary)."""
    last = rundir.find_checkpoint(run_dir, rundir.LAST_DIR)
    if last is not None and not (last / rundir.OPTIMIZER_FILE).is_file() and rundir.read_summary(run_dir) is not None:
        raise RunDirError(f"{run_dir} has finished, and its optimizer state was removed (train.save=final): there is "
                          f"nothing to resume; to train on, start a new run from {last} (model.name_or_path={last})")
    if last is None and rundir.saved_before(run_dir) is not None:
        raise RunDirError(f"{run_dir / 'last' / rundir.TRAINER_STATE_FILE} is missing, but {run_dir} has saved before "
                          f"({rundir.saved_before(run_dir)}): it cannot be resumed exactly; keep it, or start it again "
                          "with --overwrite")
    return last


def _check_same_head(last: Path, task: TaskType, recipe: Recipe) -> None:
    """A resumed run's task must be the one its last/ was trained for: a config.yaml edited since (another
    task, another label count) would load last/ under a head of another shape (transformers' error, exit 1)."""
    import json

    try:
        saved = json.loads((last / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # the loading names what is wrong with it
    kind = task.auto_class.removeprefix("AutoModel")  # "ForCausalLM", "ForSequenceClassification"
    built = next((a for a in saved.get("architectures") or () if isinstance(a, str)), None)
    if built is not None and not built.endswith(kind):
        # A causal LM's last/ under a classifier's task (or the other way): the optimizer state of one model
        # would meet the other's parameter groups (torch's error, exit 1).
        raise RunDirError(f"{recipe.output_dir}: the run's recipe no longer matches its checkpoint: config.yaml names task "
                          f"{recipe.task.name} (a {task.name.replace('_', ' ')} model, *{kind}), but last/ holds a "
                          f"{built}: config.yaml changed since the run began; put its task back, or start a new run")
    wanted = task.head_config()
    if not wanted:  # no head of its own (a causal LM): nothing to disagree with
        return
    labels = len(saved.get("id2label") or {}) or saved.get("num_labels")
    problem = saved.get("problem_type")
    if (labels and labels != wanted["num_labels"]) or (problem and problem != wanted["problem_type"]):
        raise RunDirError(f"{recipe.output_dir}: its config.yaml names task {recipe.task.name} ({wanted['num_labels']} "
                          f"output{'s' if wanted['num_labels'] != 1 else ''}, {wanted['problem_type']}), but last/ was trained "
                          f"with {labels} ({problem or 'no problem type'}): config.yaml changed since the run began; put "
                          "its task back, or start a new run")


def _load_model(recipe: Recipe, task: TaskType, last: Path | None, adapter: Any) -> tuple[BuiltModel, Adapted | None]:
    """(the model with theta*, the recipe's adapter around it or None). A resumed run's weights come
    from last/; an adapter's last/ holds merged weights, so it starts from theta* again and loads its
    adapter's own files from last/."""
    if last is not None and adapter is None:
        theta_star = checkpoint.load_theta_star(Path(recipe.output_dir))
        return BuiltModel(load_checkpoint_model(last, task, recipe.model.trust_remote_code,
                                                weight_dtype(recipe.model)), theta_star), None
    built = build_model(recipe.model, task, recipe.train.seed, weight_dtype(recipe.model))
    if adapter is None:
        return built, None
    adapted = adapter.wrap(built.model, recipe, task)
    if last is not None:
        adapted.load(last)
    return BuiltModel(adapted.base_model, built.theta_star), adapted


def _method_problems(messages: list[str], report: preflight.Preflight, dry_run: bool) -> None:
    """The methods' own refusals (each one line starting with its key): the run stops at the first (exit
    2), the dry run lists each as a failed check named by the key's last part."""
    for message in messages:
        problem = PreflightError(message)
        if not dry_run:
            raise problem
        report.add(message.split(":", 1)[0].rsplit(".", 1)[-1], "fail", message, problem)


class Start(Enum):
    """How a run begins: in a new directory, replacing one (--overwrite), or from its last/ (--resume)."""

    NEW = "new"
    OVERWRITE = "overwrite"
    RESUME = "resume"

    @classmethod
    def of(cls, *, resume: bool, overwrite: bool) -> Start:
        return cls.RESUME if resume else cls.OVERWRITE if overwrite else cls.NEW


def prepare(recipe: Recipe, ctx: Distributed, start: Start, reporter: Reporter, *, dry_run: bool = False) -> Prepared:
    """Load and check, touching nothing on disk; every rank of a distributed run does the same.

    ``dry_run``: `recall finetune --dry-run` is this function too. It goes on past a failed check to
    report every check (Prepared.checks) and stops before the model loads when one failed; the run
    stops at the first failed check with that check's own error (its line and exit code)."""
    on = tuple(registry.active(recipe))  # once: the plan hands them to everyone after
    unused = unused_keys(recipe, on)  # on the recipe as written: what the run sets aside
    recipe = runnable(recipe)
    tc = recipe.train
    run_dir = Path(recipe.output_dir)
    # No process here forks tokenizers, but a user's DataLoader might: keep the Rust pool quiet.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    device = resolve_device(tc.device, ctx.local_rank if ctx.enabled else None)
    ctx.shards = ctx.enabled and tc.distributed == "fsdp"  # FSDP2 instead of DDP (training/fsdp.py)
    seed_everything(tc.seed)
    report = preflight.Preflight()

    def check(name: str, fn, ok: str, later: bool = False) -> None:  # the run's own code; the dry run records its failure
        if dry_run:
            report.as_the_run(name, fn, ok, later=later)
        else:
            fn()
            report.add(name, "ok", ok, later=later)

    trackers.check_available(tc.report_to)  # a missing tracker package: refused before anything is written
    resume = start is Start.RESUME
    last = _resumable(run_dir) if resume else None
    saved = checkpoint.load_training_state(last, ctx.rank, ctx.world_size) if last is not None else None
    if not resume:  # listed after the model's checks, as the dry run always did
        check("output_dir", lambda: rundir.check_new_run_dir(run_dir, start is Start.OVERWRITE),
              f"{run_dir} can be written" + (" (replaced: --overwrite)" if start is Start.OVERWRITE else ""), later=True)
    source = str(last) if last else model_location(recipe.model.name_or_path, recipe.model.gguf_file)
    with reporter.phase(f"set-up: tokenizing {recipe.task.name}'s data" + (" and its holdout" * (recipe.task.holdout > 0))):
        tokenizer = load_tokenizer(source, recipe.model.trust_remote_code)
        task = load_task_data(recipe, tokenizer)
    if last is not None:
        _check_same_head(last, task.kind, recipe)
    total_steps = plan_total_steps(recipe, len(task.train), ctx.world_size)
    adapter = next((m for m in on if m.is_adapter), None)
    # under train.epochs the recipe alone cannot know the run's steps
    _method_problems([p for m in on for p in registry.asked(m, "check_steps", recipe, total_steps)], report, dry_run)
    lengths = [len(ids) for ids in task.train.input_ids]
    config = load_config(source, recipe.model.trust_remote_code)  # once: the step plan and preflight read it
    _method_problems([p for m in on for p in registry.asked(m, "check_inputs", recipe, config)], report, dry_run)  # files, the model's layers
    step = _plan_step(recipe, device, lengths, total_steps, config, saved, ctx.world_size, report, dry_run)
    preflight.run_checks(recipe, tokenizer, config, report, task=task.kind, device=device,
                         precision=step.precision, world_size=ctx.world_size, resume=last is not None, lengths=lengths,
                         on=on, total_steps=total_steps)
    if not dry_run:
        report.raise_on_failure()
    report.list_later()
    if recipe.probe.enabled:  # every rank checks the probe files, before any process group exists
        p = recipe.probe
        check("probe files", lambda: probe_inputs(list(p.probes), p.texts_file, p.pairs_file, 4, 4, p.choices_file),
              f"{input_names(list(p.probes), p.texts_file, p.pairs_file, p.choices_file)} read")
    if not dry_run:
        for message in [f"preflight: {c.name}: {c.message}" for c in report.checks if c.status == "warn"]:
            reporter.warn(message)
        for message in schedule_warnings(recipe, total_steps):
            reporter.warn(message)
    prepared = Prepared(recipe, ctx, device, plan_run(recipe, total_steps, step, on, report.memory), saved, tokenizer, task, None,
                        checks=report, start=start, unused=unused)
    if dry_run and report.failures:
        return prepared  # the model would only add noise to a run that cannot start

    with reporter.phase(f"set-up: loading the model {last or source}"):
        prepared.built, prepared.adapter = _load_model(recipe, task.kind, last, adapter)
    if tc.gradient_checkpointing:  # refused here, before the run directory is touched
        enable_gradient_checkpointing(prepared.built.model)
    if ctx.rank > 0:
        seed_everything(tc.seed + 10_007 * ctx.rank)  # the same weights everywhere, another dropout stream per rank
    return prepared


# ---- stage 2: the run ----------------------------------------------------------------------------


@dataclass
class Compute:
    """How the step computes: the forward it runs through, compiled or not, in which precision's autocast,
    and what the optimizer step clips and scales."""

    ddp_model: torch.nn.Module  # what the step runs forward through (the model itself in one process)
    forward: Any  # ddp_model, or ddp_model under torch.compile (train.compile)
    compile_record: compiled.CompileRecord  # summary.json's "compile"
    check_compiled: bool  # check the first compiled step against the eager loss (auto on CUDA)
    graph_grads: bool  # CUDA graphs: a step's first micro-batch's .grad is copied out of the graphs' memory
    bucket_lengths: list[int]  # the padded lengths the training rows can make (what may compile)
    scaler: torch.amp.GradScaler
    autocast: AbstractContextManager
    params: list[torch.nn.Parameter]  # what the gradient norm is clipped over
    part_sums: dict[str, torch.Tensor] = field(default_factory=dict)  # this step's loss parts (train_step)


@dataclass
class Training:
    """The set-up run: what the step, the loop and the summary read, by concern: the run (recipe, plan,
    place, data), the model, how the step computes, the optimizer and theta*, the methods, the loop's state."""

    recipe: Recipe
    ctx: Distributed
    run_dir: Path
    device: torch.device
    precision: str
    precision_reason: str
    tokenizer: Any
    task: TaskData
    total_steps: int
    plan: RunPlan
    model: torch.nn.Module  # saved, evaluated and probed
    compute: Compute
    optimizer: RecAdam
    pairs: list[tuple[torch.Tensor, torch.Tensor]]  # (parameter, theta*) for ||theta - theta*||
    prober: Prober | None  # rank 0 only
    state: TrainerState
    order: BatchOrder
    pad_id: int
    eval_batch: int  # per process, like batch_size
    resumed: bool  # continues from last/ (no step-0 probe)
    methods: MethodParts = field(default_factory=MethodParts)
    adapter: Adapted | None = None  # the recipe's adapter around `model`: merged into and saved beside checkpoints
    unused: list[str] = field(default_factory=list)  # keys the recipe sets that this run does not read


def set_up(p: Prepared, reporter: Reporter, new_dir: rundir.NewRunDir) -> Training:
    recipe, ctx, device = p.recipe, p.ctx, p.device
    tc = recipe.train
    run_dir = Path(recipe.output_dir)
    # Take theta* out of `built` so that only RecAdam (or `pairs`) keeps a copy once set-up is done.
    model, theta_star, p.built.theta_star = p.built.model, p.built.theta_star, None
    model.to(device)
    model.train()
    if ctx.shards:  # FSDP2 (training/fsdp.py): sharded before the optimizer, which is built on the shards
        fsdp.shard_model(model, device, p.precision)
    optimizer = build_optimizer(model, theta_star, recipe, p.plan)
    if ctx.shards:
        fsdp.shard_anchors(optimizer)  # each rank keeps its rows of theta*, like its parameters' (no full copy)
    pairs = list(optimizer.anchored())  # theta* lives in the optimizer's state (a full copy per rank under DDP)
    if p.adapter is not None:  # theta* by the adapted layers' names; the distance is the adapter's update
        functional, pairs = p.adapter.theta_star_names(theta_star), []
    else:
        functional = theta_star  # what makes `model` compute theta*'s function (for the probes and the anchor)
        if not pairs:  # adamw: keep theta* only to measure forgetting
            pairs = [(q, fsdp.like(q, theta_star[n].to(device, anchor_dtype(recipe))))
                     for n, q in model.named_parameters() if n in theta_star]
    scaler = torch.amp.GradScaler(device.type, enabled=p.precision == "fp16")
    pad_id = p.tokenizer.pad_token_id if p.tokenizer.pad_token_id is not None else 0

    # Rank 0 alone probes (on `model`, outside DDP: no collective); the others wait at the next one.
    # Built before the run directory is touched: a probe file it cannot read leaves nothing behind.
    prober = None
    if recipe.probe.enabled and ctx.is_main:  # θ*'s side is kept in recall's cache for the next run of this setting
        with reporter.phase("set-up: θ*'s side of the probes (cached for the next run)") as progress:
            prober = prober_for_run(recipe, model, functional, p.tokenizer, device, p.task.sentences, progress=progress)
    for note in prober.notes if prober else ():
        reporter.warn(note)
    # The methods' terms and hooks, before the run directory is written (the anchor's pre-pass is the
    # slow part: a stop during it leaves nothing behind).
    start = _start_of_run(p, model, functional, reporter)
    with reporter.phase(f"set-up: starting {', '.join(m.name for m in p.plan.methods) or 'the run'}"):
        runs = start_methods(RunView(recipe, model, {**functional, **start}, p.task.train, p.plan, device,
                                     autocast_for(p.precision, device), pad_id, tc.eval_batch_size or 2 * tc.batch_size,
                                     p.saved is None, reporter, p.tokenizer, ctx.rank, ctx.world_size))
    params = [q for q in model.parameters() if q.requires_grad]

    state = _restore_or_start(p, optimizer, scaler, theta_star, start, new_dir)
    del theta_star  # RecAdam (or `pairs`) holds the copy it needs
    for run in runs:  # LP-FT freezes the encoder here, before DDP and torch.compile see the model
        run.before_wrap(model, state.step)
    ddp_model = ctx.wrap(model, device)  # the same parameters; forward through it, save and eval `model`
    task_cfg = recipe.task
    buckets = sorted({padded_length(len(ids), task_cfg.pad_to_multiple_of, task_cfg.max_seq_length)
                      for ids in p.task.train.input_ids})
    forward = (compiled.compile_model(ddp_model, device, p.compile_mode, lengths=len(buckets)) if p.compile_mode
               else ddp_model)
    ctx.barrier()  # the run directory is ready before anyone goes on
    return Training(
        recipe=recipe, ctx=ctx, run_dir=run_dir, device=device, precision=p.precision,
        precision_reason=p.precision_reason, tokenizer=p.tokenizer, task=p.task, total_steps=p.total_steps, plan=p.plan,
        model=model,
        compute=Compute(
            ddp_model=ddp_model, forward=forward,
            compile_record=compiled.CompileRecord(mode=p.compile_mode, reason=p.compile_reason, seconds=state.compile_seconds,
                                                  shapes=list(state.compile_shapes), fallback=state.compile_fallback),
            check_compiled=p.compile_mode is not None and recipe.train.compile == "auto" and device.type == "cuda"
            and p.saved is None, graph_grads=compiled.uses_cuda_graphs(p.compile_mode), bucket_lengths=buckets,
            scaler=scaler, autocast=autocast_for(p.precision, device), params=params),
        optimizer=optimizer, pairs=pairs, prober=prober, state=state,
        order=BatchOrder(len(p.task.train), tc.batch_size * ctx.world_size, tc.seed),
        pad_id=pad_id, eval_batch=tc.eval_batch_size or 2 * tc.batch_size, resumed=p.saved is not None,
        methods=MethodParts.of(runs),
        adapter=p.adapter, unused=p.unused,
    )


def _start_of_run(p: Prepared, model: torch.nn.Module, functional: dict[str, torch.Tensor],
                  reporter: Reporter) -> dict[str, torch.Tensor]:
    """The parameters theta* leaves out (a new head; an adapter's own start), as the run began: with
    theta*, what a method's teacher is made of (methods/teacher.py). A new run takes them from the model
    before step 1 and saves them; a resumed one, whose model holds last/'s, reads them back, so the
    teacher is the same bit for bit."""
    if p.saved is None:
        # under FSDP each rank gathers the whole of each (a collective, in the same order everywhere) to save it
        return {name: q.detach().full_tensor() if fsdp.is_sharded(q) else q.detach().clone()
                for name, q in model.named_parameters() if name not in functional}
    kept = checkpoint.load_start(Path(p.recipe.output_dir))
    if kept is None and p.plan.methods and any(name not in functional for name, _ in model.named_parameters()):
        reporter.warn(f"{p.recipe.output_dir} was started before recall kept the new head's start "
                      f"({rundir.START_FILE}): a teacher made from theta* takes last/'s head")
    return kept or {}


def _restore_or_start(p: Prepared, optimizer, scaler, theta_star, start, new_dir: rundir.NewRunDir) -> TrainerState:
    """The trainer state of last/ with the optimizer, scaler and RNG streams it saved; or a fresh state
    and a new run directory holding config.yaml, metrics.jsonl and theta*."""
    ctx, run_dir = p.ctx, Path(p.recipe.output_dir)
    resume = p.start is Start.RESUME
    if ctx.is_main and resume and run_dir.exists():
        rundir.remove_stale_staging(run_dir)
    if p.saved is None:
        if ctx.is_main:
            # --resume of a run interrupted before its first checkpoint: start over in the same directory.
            new_dir.begin(overwrite=p.start is not Start.NEW)
            # config.yaml and metrics.jsonl first (they make it a run directory), theta* (hundreds of MB)
            # after: a kill in between leaves a run that --resume simply starts over.
            dump_recipe(p.recipe, run_dir / rundir.CONFIG_FILE)
            (run_dir / rundir.METRICS_FILE).touch()
            checkpoint.save_theta_star(run_dir, theta_star)
            checkpoint.save_start(run_dir, start)
        return TrainerState(world_size=ctx.world_size, precision=p.precision)
    state = p.saved.state
    state.precision = p.precision  # a 0.1 checkpoint records it from now on
    if ctx.shards:  # last/ holds the consolidated state (by parameter name): each rank keeps its shards
        fsdp.load_optimizer(p.built.model, optimizer, p.saved.optimizer["optimizer"])
    else:
        optimizer.load_state_dict(p.saved.optimizer["optimizer"])
    if p.saved.optimizer.get("scaler"):
        scaler.load_state_dict(p.saved.optimizer["scaler"])
    checkpoint.restore_rng(p.saved.rng, p.device)
    if ctx.is_main:
        rundir.truncate_metrics(run_dir, state.step)
    return state
