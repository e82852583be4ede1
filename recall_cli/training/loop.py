"""The fine-tuning loop: set-up (setup.py), one step, and the loop around it; the same path on
CPU and CUDA.

Order of one optimizer step (as in nanoGPT): set lr -> micro-steps (forward, scaled backward) ->
divergence check -> unscale + clip -> step -> zero_grad -> log -> eval (+ best/) -> probe -> save last/.

The same loop runs in one process or in N under torchrun (DistributedDataParallel): each global
micro-batch of BatchOrder is split across the ranks, so N processes with train.batch_size=B take the
same steps as one process with batch_size=N*B. Rank 0 alone writes the run directory.
"""

from __future__ import annotations

import math
import platform
import time
from pathlib import Path
from typing import Any

import torch

from .. import card, rundir, trackers
from ..distributed import Distributed, SigtermFlag, shard
from ..errors import CompileError, Preempted, TrackerError, TrainingDiverged
from ..plugins import methods as registry
from ..names import OPTIMIZERS, VERSION
from ..optim import distance_to_theta_star, recall_state
from ..probes.runner import record_at
from ..recipe import Recipe
from ..runtime import autocast_for, device_name
from ..scoring.evaluate import score
from . import checkpoint, compiled, fsdp
from .weights import computed_in, precision_facts
from .loss import loss_step
from .pending import Pending
from .progress import Reporter, add_step, add_sums, empty_window, probe_cost, probe_due, train_record
from .schedule import set_lr
from .setup import Start, Training, prepare, set_up


# (inputs on the device, the loss weight of this rank's share, the examples' indices in the training split,
# its position in the run's order of micro-batches)
MicroBatch = tuple[dict[str, torch.Tensor], float, torch.Tensor | None, int]


def finetune(recipe: Recipe, *, resume: bool = False, overwrite: bool = False, reporter: Reporter | None = None) -> dict[str, Any]:
    """Train as the recipe says into its output_dir; returns the summary (rank 0) and writes it."""
    reporter = reporter or Reporter()
    ctx = Distributed.from_env()
    # One writer per run directory (rank 0 writes it): a second finetune into a run still training is
    # refused before it reads or moves anything.
    new_dir = rundir.NewRunDir(Path(recipe.output_dir))
    try:
        if ctx.is_main:
            new_dir.claim(reporter.warn)
        prepared = prepare(recipe, ctx, Start.of(resume=resume, overwrite=overwrite), reporter)
        ctx.init(prepared.device)
        try:  # a failure between creating the run directory and the first step puts it back as it was
            summary = run(set_up(prepared, reporter, new_dir), reporter, new_dir)
            ctx.barrier()  # gloo's waits for queued work: a group torn down under it once aborted a done run (CI)
            return summary
        except BaseException:
            new_dir.rollback()  # nothing once the first step has committed it
            raise
        finally:
            ctx.close()
    finally:
        new_dir.release()


# ---- one step ------------------------------------------------------------------------------------


def micro_batches(t: Training) -> tuple[list[MicroBatch], int]:
    """This step's grad_accum micro-batches (this rank's part of each) and the global examples they hold."""
    ctx, out, samples = t.ctx, [], 0
    for _ in range(t.recipe.train.grad_accum):
        position = t.state.micro_step
        indices = t.order.batch(position)
        t.state.micro_step += 1
        mine = shard(indices, ctx.rank, ctx.world_size)
        # DDP averages gradients over ranks. Weighting each rank's mean loss by its share of the global
        # micro-batch (x world_size) makes that average the global batch's mean even when an epoch's
        # last batch splits unevenly; a rank with no example runs one at weight 0 so that every rank
        # takes part in the all-reduce.
        share = len(mine) * ctx.world_size / len(indices)
        task = t.recipe.task
        rows = mine or indices[:1]
        batch = t.task.kind.collate(t.task.train, rows, t.pad_id, task.pad_to_multiple_of, task.max_seq_length)
        # The examples' indices only where a term looks rows up by them (the anchor's cache): without
        # methods the step moves nothing more to the device than before.
        indices_of = torch.tensor(rows, dtype=torch.long, device=t.device) if t.methods.terms else None
        out.append(({k: v.to(t.device, non_blocking=True) for k, v in batch.items()}, share, indices_of, position))
        samples += len(indices)
    return out, samples


def train_step(t: Training, batches: list[MicroBatch], step: int = 0) -> torch.Tensor:
    """Forward (compiled or eager: ``t.compute.forward``) and scaled backward over the micro-batches; returns
    their summed loss as a tensor on the device, never read on the host here (the loop reads it at
    its next log, eval or save: :class:`Pending`). The methods' loss parts (loss_task, loss_keep),
    weighted alike, are summed into ``t.compute.part_sums``."""
    accum = len(batches)
    loss_sum = torch.zeros((), device=t.device)
    for micro, (batch, share, indices, position) in enumerate(batches):
        for run in t.methods.runs:  # a term that draws inputs of its own (the anchor's texts) draws them here
            run.before_micro_batch(position)
        compiled.mark_step(t.device)
        with t.ctx.no_sync(t.compute.ddp_model, skip=micro < accum - 1):
            with t.compute.autocast:
                loss, parts = loss_step(t.compute.forward, batch, t.methods.terms, step, indices, check_labels=False)
                if share != 1.0:
                    loss = loss * share
                loss = loss / accum
            t.compute.scaler.scale(loss).backward()
        if micro == 0 and accum > 1 and t.compute.graph_grads and t.compute.forward is not t.compute.ddp_model:
            compiled.own_gradients(t.compute.params)
        loss_sum += loss.detach().float()
        for name, value in parts.items():
            t.compute.part_sums[name] = t.compute.part_sums.get(name, 0.0) + value.float() * (share / accum)
    return loss_sum


def optimizer_step(t: Training) -> torch.Tensor:
    """Unscale, clip, step, zero the gradients; returns the (global, under DDP) gradient norm tensor."""
    t.compute.scaler.unscale_(t.optimizer)
    # After DDP's all-reduce every rank holds the global gradient: this norm is the global one.
    grad_norm = fsdp.plain(torch.nn.utils.clip_grad_norm_(t.compute.params, t.recipe.train.max_grad_norm or math.inf))
    t.compute.scaler.step(t.optimizer)
    t.compute.scaler.update()
    t.optimizer.zero_grad(set_to_none=True)
    return grad_norm


def current_distance(t: Training) -> float:
    """||theta - theta*|| now: over RecAdam's (or adamw's) pairs, or the adapter's merged update."""
    if t.adapter is not None:
        return t.adapter.update_norm()
    return (fsdp.distance(t.pairs, t.ctx) if t.ctx.shards else distance_to_theta_star(*zip(*t.pairs))) if t.pairs else 0.0


def save_weights(t: Training, name: str, *state, card: str) -> Path:
    """best/, last/ or lp/: plain `from_pretrained` weights (an adapter's merged in, its own files beside them).
    Weights that hold NaN/inf are never written: the folder keeps what it held (NonFiniteWeights, exit 3)."""
    model = t.model if t.adapter is None else t.adapter.merged_copy()
    model, state = fsdp.for_saving(model, state) if t.ctx.shards else (model, state)  # (every rank: t.ctx.saves)
    if model is None:
        return t.run_dir / name
    checkpoint.refuse_non_finite(model, t.run_dir, name, t.state.step)
    return checkpoint.save_checkpoint(t.run_dir, name, model, t.tokenizer, *state, card=card, adapter=t.adapter)


# ---- the loop ------------------------------------------------------------------------------------


class _Loop:
    """The loop's side of a run: what it writes and tells, step by step."""

    def __init__(self, t: Training, reporter: Reporter, new_dir: rundir.NewRunDir):
        self.t, self.reporter, self.new_dir = t, reporter, new_dir
        self.writer = rundir.MetricsWriter(t.run_dir, enabled=t.ctx.is_main)
        self.trackers = self.open_trackers()
        self.pending = Pending(t.device, t.compute.scaler.is_enabled())
        self.shapes = compiled.ShapeLog(t.compute.compile_record)
        self.replicas_differ = False
        # The latest eval and probe records, for the checkpoints' model cards (a resumed run's from
        # metrics.jsonl, already cut back to the resumed step).
        earlier = rundir.read_metrics(t.run_dir) if t.resumed and t.ctx.is_main else []
        self.last_eval = next((r for r in reversed(earlier) if r["split"] == "eval"), None)
        self.last_probe = next((r for r in reversed(earlier) if r["split"] == "probe"), None)
        self.last_test = None

    def open_trackers(self) -> trackers.Trackers:
        """Rank 0 alone reports to trackers, as it alone writes metrics.jsonl. A tracker that cannot
        start stops every rank (one agreement), instead of leaving the others in their first all-reduce."""
        t = self.t
        if not t.ctx.enabled:
            return trackers.open_run(t.recipe, t.run_dir, resumed=t.resumed, start_step=t.state.step, warn=self.reporter.warn)
        opened, failure = trackers.Trackers(), None
        if t.ctx.is_main:
            try:
                opened = trackers.open_run(t.recipe, t.run_dir, resumed=t.resumed, start_step=t.state.step,
                                           warn=self.reporter.warn)
            except Exception as exc:  # noqa: BLE001 - re-raised below, after the other ranks know
                failure = exc
        if t.ctx.any_rank(failure is not None):
            if failure is not None:
                raise failure
            raise TrackerError("rank 0 could not start the run's trackers (its error says why)")
        return opened

    def run(self) -> None:
        t, state = self.t, self.t.state
        if t.prober is not None and not t.resumed:
            self.probe(0)  # before the first update: the curves' starting point (under RI, the random model)
        with SigtermFlag() as sigterm:
            while state.step < t.total_steps:
                step = state.step + 1
                started = time.perf_counter()
                lr = set_lr(t.optimizer, step, peak=t.recipe.optimizer.lr, warmup_steps=t.recipe.train.warmup_steps,
                            total_steps=t.total_steps, runs=t.methods.runs)
                batches, samples = micro_batches(t)
                loss_sum = self.forward_backward(batches, step)
                # Every rank stops at the same step: under DDP one small collective per step (1 process: none).
                stop = t.ctx.any_rank(sigterm.requested)
                grad_norm = optimizer_step(t)
                self.pending.add(step, loss_sum, grad_norm, t.compute.part_sums)
                t.compute.part_sums = {}
                state.step, state.samples = step, state.samples + samples
                if step == 1:  # a first step that diverged must not replace a run --overwrite set aside (every rank
                    self.read_pending()  # reads: the read is collective; a resumed run never has a step 1)
                self.new_dir.commit()  # the new run exists for good: an old one it replaces is deleted now
                elapsed = time.perf_counter() - started
                state.train_seconds += elapsed
                self.after_step(step, lr, samples, elapsed, stop)
                if stop and step < t.total_steps:
                    raise Preempted(step, t.run_dir)

    def forward_backward(self, batches: list[MicroBatch], step: int = 0) -> torch.Tensor:
        """train_step, through the compiled forward where there is one: a new padded length compiles
        first (shown, timed); a compile that fails falls back to the eager step under `auto`."""
        t = self.t
        lengths = [batch["input_ids"].shape[1] for batch, *_ in batches]
        new = self.shapes.new(lengths)
        if t.compute.forward is t.compute.ddp_model or not new:
            if new:
                self.shapes.add(lengths, 0.0)  # eager: the lengths alone, for the record
            return train_step(t, batches, step)
        buckets = t.compute.bucket_lengths
        of = f"{len(buckets)}: {', '.join(map(str, buckets))}" if len(buckets) <= 8 else f"{len(buckets)} lengths"
        self.reporter.note(f"compiling the step for length {', '.join(map(str, new))} (of up to {of})…")
        started = time.perf_counter()
        try:
            problem = self.check_first_compiled_step(batches[0][0]) if t.compute.check_compiled else None
            if problem is None:
                loss_sum = train_step(t, batches, step)
                float(loss_sum)  # waits for the compile and the step: its time is the compile's
        except Exception as exc:  # noqa: BLE001 - any failure to compile falls back (or stops, under `on`)
            problem = compiled.one_line(exc)
        if problem is not None:
            if t.recipe.train.compile == "on":
                raise CompileError(f"train.compile=on, but the compiled step failed: {problem} (set train.compile=off)")
            if t.ctx.enabled:  # DDP's reducer may be half way through this backward: an eager retry would corrupt it
                raise CompileError(f"the compiled step failed under DDP, where it cannot be retried eagerly: {problem} "
                                   "(set train.compile=off)")
            self.fall_back(problem)
            return train_step(t, batches, step)
        self.shapes.add(lengths, time.perf_counter() - started)
        return loss_sum

    def check_first_compiled_step(self, batch: dict[str, torch.Tensor]) -> str | None:
        t = self.t
        t.compute.check_compiled = False
        return compiled.loss_matches_eager(t.model, t.compute.forward, batch, t.compute.autocast, t.precision)

    def fall_back(self, problem: str) -> None:
        t = self.t
        t.optimizer.zero_grad(set_to_none=True)  # whatever a failed backward left
        t.compute.part_sums = {}
        t.compute.forward = t.compute.ddp_model
        t.compute.compile_record.mode, t.compute.compile_record.fallback = None, problem
        self.reporter.warn(f"train.compile: running the step eagerly: {problem}")

    def after_step(self, step: int, lr: float, samples: int, elapsed: float, stop: bool) -> None:
        t, tc = self.t, self.t.recipe.train
        add_step(t.state.window, samples, elapsed)
        last = step == t.total_steps
        log_now = step % tc.log_every == 0 or last
        evaluate_now = bool(tc.eval_every and step % tc.eval_every == 0) or last
        # Known alike on every rank (rank 0 alone probes, but every rank reads the pending sums with it).
        probe_now = t.recipe.probe.enabled and probe_due(step, t.total_steps, tc.eval_every, t.recipe.probe.every)
        save_now = bool(tc.save_every and step % tc.save_every == 0) or (not tc.save_every and evaluate_now) or stop or last
        if log_now or evaluate_now or probe_now or save_now:
            self.read_pending()  # raises TrainingDiverged before anything after a bad step is saved
        if log_now:
            self.log_train(step, lr)
        improved = self.evaluate(step) if evaluate_now else False
        if last and t.task.holdout is not None:
            self.test(step)
        if t.prober is not None and probe_now:
            self.probe(step)
        if improved and t.ctx.saves:  # after this step's probe, which its model card reports
            save_weights(t, rundir.BEST_DIR, card=self.card(rundir.BEST_DIR, step))
        for run in t.methods.runs:  # phase ends (LP-FT's lp/), after this step's best/
            run.after_step(self, step)
        if save_now:
            self.save_last(step)
        self.reporter.step(step)

    # ---- what a method's after_step may ask of the loop (plugins/methods.py's MethodRun) ----------

    def save(self, folder: str, step: int) -> None:
        """A checkpoint folder of the run's weights now, with its card (rank 0 writes it), after the
        pending divergence check: a step whose loss went bad is named before anything is saved."""
        self.read_pending()
        if self.t.ctx.saves:
            save_weights(self.t, folder, card=self.card(folder, step))

    def rewrap(self) -> None:
        """DDP's reducer and a compiled forward are built for the parameters that train: after a method
        changes which do (LP-FT's unfreezing), both are made again."""
        t = self.t
        t.compute.ddp_model = t.ctx.wrap(t.model, t.device)
        mode = t.compute.compile_record.mode  # None: eager from the start, or fallen back
        t.compute.forward = compiled.compile_model(t.compute.ddp_model, t.device, mode, lengths=len(t.compute.bucket_lengths)) if mode else t.compute.ddp_model

    def note(self, text: str) -> None:
        self.reporter.note(text)

    def read_pending(self) -> None:
        """Adds the device's sums to the window (waiting for the queued steps: training time)."""
        t = self.t
        started = time.perf_counter()
        sums, bad = self.pending.read(t.ctx)
        waited = time.perf_counter() - started
        t.state.window["seconds"] += waited
        t.state.train_seconds += waited
        if bad is not None:
            raise TrainingDiverged(*bad)
        add_sums(t.state.window, sums)

    def log_train(self, step: int, lr: float) -> None:
        t = self.t
        # Each rank steps a full replica with its own theta*, so its distance is the global one.
        distance = current_distance(t)
        if t.ctx.enabled and len(set(t.ctx.all_gather_object(distance))) > 1 and not self.replicas_differ:
            self.replicas_differ = True
            self.reporter.warn(f"step {step}: the replicas' distances to theta* differ across ranks "
                               "(a non-deterministic kernel?); logging rank 0's")
        epoch = round(t.state.micro_step / t.order.per_epoch, 4)
        floored = t.recipe.optimizer.recall_floor > 0
        method_fields = {f"{term.name}_weight": term.weight(step) for term in t.methods.terms}
        lam, penalty = recall_state(t.optimizer)
        record = train_record(step, epoch, lr, lam, distance, t.state.window, t.compute.scaler.is_enabled(),
                              penalty if floored else None, method_fields)
        self.write(record)
        self.reporter.train(record)
        t.state.window.clear()
        t.state.window.update(empty_window())

    def evaluate(self, step: int) -> bool:
        """Scores the dev set (the holdout, under task.holdout); True when it is the best score yet
        (the caller saves best/)."""
        t = self.t
        metrics = score(t.model, t.task.spec, t.task.chooses_on, t.eval_batch, t.device, t.pad_id,
                        autocast_for(t.precision, t.device), t.ctx.scoring)
        record = {"step": step, "split": "eval", **({"data": "holdout"} if t.task.holdout is not None else {}), **metrics}
        self.warn_undefined(step, metrics)
        self.write(record)
        self.reporter.eval(record)
        self.last_eval = record
        main = metrics["main"]
        if math.isfinite(main) and (t.state.best_main is None or main > t.state.best_main):
            t.state.best_main, t.state.best_step = main, step
            return True
        return False

    def test(self, step: int) -> None:
        """task.holdout: the dev split, scored once, on the final weights: the number a report gives."""
        t = self.t
        metrics = score(t.model, t.task.spec, t.task.dev, t.eval_batch, t.device, t.pad_id,
                        autocast_for(t.precision, t.device), t.ctx.scoring)
        record = {"step": step, "split": "test", "data": "dev", **metrics}
        self.warn_undefined(step, metrics)
        self.write(record)
        self.reporter.eval(record)
        self.last_test = record

    def warn_undefined(self, step: int, metrics: dict[str, float]) -> None:
        undefined = [k for k, v in metrics.items() if isinstance(v, float) and not math.isfinite(v)]
        if undefined:
            self.reporter.warn(f"step {step}: {', '.join(undefined)} undefined on this split (constant labels or "
                               "predictions: a correlation of a constant has none); written as null")

    def probe(self, step: int) -> None:
        record = record_at(self.t.prober, self.t.model, step)
        self.write(record)
        self.last_probe = record
        self.reporter.eval({k: v for k, v in record.items() if not isinstance(v, list)})

    def write(self, record: dict[str, Any]) -> None:
        """One record to metrics.jsonl and to the trackers train.report_to names."""
        self.writer.write(record)
        self.trackers.log(record)

    def card(self, name: str, step: int) -> str:
        """The README.md of best/ or last/ at ``step`` (card.py): recipe, dev metrics, what it kept."""
        t = self.t
        distance = current_distance(t) if (t.pairs or t.adapter is not None) and not t.ctx.shards else None
        # Under task.holdout the final weights are scored once on dev (the test record): their card says that.
        dev = self.last_test if self.last_test is not None and self.last_test["step"] == step else None
        return card.model_card(t.recipe, checkpoint=name, step=step, total_steps=t.total_steps, anneal_t0=t.plan.anneal_t0,
                               methods=t.plan.methods, evaluation=dev or self.last_eval, probe=self.last_probe, distance=distance,
                               version=VERSION)

    def save_last(self, step: int) -> None:
        t = self.t
        record = t.compute.compile_record
        t.state.compile_shapes, t.state.compile_seconds = record.shapes, record.seconds
        t.state.compile_mode, t.state.compile_reason = record.mode or "eager", record.reason
        t.state.compile_fallback = record.fallback
        rng_states = t.ctx.gather_object(checkpoint.capture_rng(t.device))  # each rank's dropout stream
        if t.ctx.saves:
            folder = save_weights(t, rundir.LAST_DIR, t.state.__dict__, t.optimizer, t.compute.scaler, rng_states,
                                  card=self.card(rundir.LAST_DIR, step))
        if t.ctx.is_main:
            checkpoint.rotate_step_checkpoints(t.run_dir, step, t.recipe.train.keep_last, folder)
        t.ctx.barrier()  # no rank runs ahead of, or exits before, a complete last/


def run(t: Training, reporter: Reporter, new_dir: rundir.NewRunDir) -> dict[str, Any]:
    """The loop from the set-up state to the last step, then summary.json (rank 0)."""
    reporter.start(t.total_steps, t.state.step, start_info(t))
    loop = _Loop(t, reporter, new_dir)
    try:
        loop.run()
    except BaseException:
        loop.writer.close()
        loop.trackers.close()
        raise
    loop.writer.close()

    final_distance = current_distance(t)
    distances = t.ctx.all_gather_object(final_distance)
    if not t.ctx.is_main:
        return {"steps": t.state.step, "final_distance": final_distance, "rank": t.ctx.rank}
    summary = build_summary(t, final_distance, distances)
    rundir.write_summary(t.run_dir, summary)
    if t.recipe.train.save == "final" and summary.finished:
        freed = rundir.keep_final(t.run_dir)
        reporter.note(f"train.save=final: removed what only --resume reads ({freed / 2**20:.0f} MiB): the run "
                      "cannot be resumed or extended")
    try:
        loop.trackers.finish(summary.to_dict(), t.run_dir)
    finally:
        loop.trackers.close()
    reporter.finish(summary.to_dict())
    return summary.to_dict()


def start_info(t: Training) -> dict[str, Any]:
    """The start line's facts. Says why when recall chose the precision: bf16 on one CPU and fp32 on
    another is otherwise a surprise."""
    tc = t.recipe.train
    floor = t.recipe.optimizer.recall_floor  # the schedule's other half: the penalty never fades below it
    anchored = OPTIMIZERS[t.recipe.optimizer.name].anchored  # adamw has no schedule to show
    record = t.compute.compile_record
    step_mode = "eager" if record.mode is None else f"compiled ({record.mode})"
    info = {"device": str(t.device), **precision_facts(t.model, t.precision, t.precision_reason),
            "step": step_mode if record.reason in ("off in the recipe", "on in the recipe") else f"{step_mode} ({record.reason})",
            "train_examples": len(t.task.train), **t.task.holdout_info(t.plan.total_steps, tc.eval_every),
            **({"probe": cost} if t.prober and (cost := probe_cost(t.prober, t.model, t.state.step, t.total_steps, tc.eval_every,
                                                               t.recipe.probe.every, t.resumed)) else {}),
            **({"anneal_t0": t.plan.anneal_t0} if anchored else {}),
            **({"recall_floor": floor} if anchored and floor > 0 else {}),
            **({"methods": "; ".join(registry.labels(t.recipe, t.plan.methods))} if t.plan.methods else {}),
            **t.methods.info,
            **({"unused": ", ".join(t.unused) + f" (only RecAdam reads them; this run is {t.recipe.optimizer.name})"}
               if t.unused else {}),
            "run_dir": str(t.run_dir)}
    if t.ctx.enabled:
        info.update(processes=t.ctx.world_size, global_batch=tc.batch_size * t.ctx.world_size * tc.grad_accum)
    return info


def build_summary(t: Training, final_distance: float, distances: list[float]) -> rundir.Summary:
    import transformers

    recipe, state = t.recipe, t.state
    # From metrics.jsonl, not the loop's memory: a resumed run's evaluations before the restart exist only
    # there, and the summary must agree with the record every report reads.
    records = rundir.read_metrics(t.run_dir)
    evals = [r for r in records if r["split"] == "eval"]
    probes = [r for r in records if r["split"] == "probe"]
    without_split = lambda r: {k: v for k, v in r.items() if k != "split"}  # noqa: E731
    best = next((r for r in evals if r["step"] == state.best_step), None)
    final = without_split(evals[-1]) if evals else None
    tests = [r for r in records if r["split"] == "test"]
    if tests and final is not None:
        # task.holdout: the report's number is the dev split's (scored once, at the end); the holdout's,
        # which chose best/, stays beside it.
        metrics = lambda r: {k: v for k, v in r.items() if k not in ("split", "step", "data")}  # noqa: E731
        final = {"step": tests[-1]["step"], **metrics(tests[-1]), "holdout": metrics(final), "dev": metrics(tests[-1])}
    tc, oc = recipe.train, recipe.optimizer
    return rundir.Summary(
        task=recipe.task.name, optimizer=oc.name, init=recipe.model.init, model=recipe.model.name_or_path,
        seed=tc.seed, anneal_fun=oc.anneal_fun, anneal_k=oc.anneal_k, anneal_t0=t.plan.anneal_t0,
        pretrain_cof=oc.pretrain_cof, recall_floor=oc.recall_floor, lr=oc.lr, steps=state.step, finished=state.step >= t.total_steps,
        best=without_split(best) if best else None, final=final,
        final_distance=final_distance, probe=without_split(probes[-1]) if probes else None,
        train_seconds=state.train_seconds, samples_per_s=state.samples / max(state.train_seconds, 1e-9),
        device=str(t.device), device_name=device_name(t.device), **computed_in(t.model, t.precision),
        compile=t.compute.compile_record.to_dict(),
        versions={"recall": VERSION, "torch": torch.__version__, "transformers": transformers.__version__,
                  "python": platform.python_version()},
        world_size=t.ctx.world_size, global_batch_size=tc.batch_size * t.ctx.world_size * tc.grad_accum,
        final_distance_by_rank=distances if t.ctx.enabled else None,
        method=registry.summary_block(recipe, t.plan.methods, **t.methods.info),
    )
