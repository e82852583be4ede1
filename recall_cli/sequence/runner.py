"""The sequence: stage after stage through `recall finetune`'s own loop and run directory, a row of the
matrix after each, continual.json rewritten after each row (so --resume picks up at the first stage or
row that is not done: a finished stage is never trained again, an unfinished one resumes from its last/).

The runner names no method. A method that needs the stages before it (EWC's Fisher, replay's rows) has a
``continual_overrides(earlier)`` hook: the recipe keys it adds to a stage, given the earlier stages' run
directories (none for stage 1, where such a method turns itself off); they are written into that stage's
config.yaml like any key.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Callable

from ..errors import RunDirError
from ..rundir import CONTINUAL_FILE, read_continual
from .matrix import summarize
from .merging import merge_stage, original_model
from .plan import Plan, Stage, build_plan

FORMAT = 1


def plan_for(files: list[Path], overrides: list[str], out: Path, *, seed: int | None, resume: bool) -> Plan:
    """The plan of a new sequence, or --resume's: the command continual.json recorded."""
    if not resume:
        return build_plan(files, overrides, out, seed)
    record = read_continual(out)
    if record is None:
        raise RunDirError(f"{out} holds no {CONTINUAL_FILE}: nothing to resume (start it without --resume)")
    if files or overrides or seed is not None:
        raise RunDirError("--resume continues the command recorded in continual.json: give --out alone")
    command = record["command"]
    def text(v: Any) -> str:
        return 'null' if v is None else str(v).lower() if isinstance(v, bool) else str(v)

    own = dict(command["continual"])
    given = [f"continual.merge.{k}={text(v)}" for k, v in (own.pop("merge_options", None) or {}).items()]
    given += [f"continual.{k}={text(v)}" for k, v in own.items()]
    return build_plan([Path(f) for f in command["stages"]], list(command["overrides"]) + given, out, command["seed"])


def stage_recipe(plan: Plan, stage: Stage, chosen: list[Path]) -> Any:
    """Stage i's recipe: its file with the sequence's overrides, started from stage i-1's chosen weights,
    plus what each method on adds from the earlier stages (their run directories)."""
    from ..plugins import methods as registry
    from ..recipe import load_recipe

    extra = [f"output_dir={stage.run_dir}"] + ([f"train.seed={plan.seed}"] if plan.seed is not None else [])
    if chosen:
        extra.append(f"model.name_or_path={chosen[-1]}")
        if plan.settings.theta_star == "original":  # theta* of RecAdam, the anchor and EWC: stage 1's model
            extra.append(f"model.theta_star={original_model(plan.stages[0].recipe)}")
    earlier = [s.run_dir for s in plan.stages[: stage.index - 1]]
    for method in registry.active(stage.recipe):
        hook = getattr(method, "continual_overrides", None)
        if hook is not None:  # stage 1 too: a method with no past to keep turns itself off there
            extra += hook(earlier)
    return load_recipe(stage.file, plan.overrides + extra)


def chosen_weights(stage: Stage, weights: str) -> Path:
    from ..rundir import BEST_DIR, LAST_DIR, find_checkpoint

    folder = find_checkpoint(stage.run_dir, BEST_DIR if weights == "best" else LAST_DIR)
    if folder is None:
        raise RunDirError(f"{stage.run_dir} has no {weights}/ checkpoint after its stage (set continual.weights=last)")
    return folder


def train_stage(recipe: Any, stage: Stage, reporter: Any) -> None:
    """One stage through finetune: skipped when its summary says it finished, resumed where it has begun."""
    from ..rundir import CONFIG_FILE, read_summary
    from ..training.loop import finetune

    summary = read_summary(stage.run_dir) if stage.run_dir.is_dir() else None
    if summary is not None and summary.finished:
        return
    begun = (stage.run_dir / CONFIG_FILE).is_file()
    finetune(recipe, resume=begun, overwrite=False, reporter=reporter)


def method_seconds(run_dir: Path) -> dict[str, float]:
    """The seconds a stage's methods report in summary.json's method block (``*_seconds``: EWC's Fisher)."""
    from ..rundir import read_summary

    summary = read_summary(run_dir)
    block = (summary.method if summary is not None else None) or {}
    out = {}
    for key, value in block.items():
        if key.endswith("_seconds"):
            try:
                out[key[: -len("_seconds")]] = float(value)
            except (TypeError, ValueError):
                pass
    return out


def method_counts(run_dir: Path) -> dict[str, int]:
    """The counts a stage's methods report (``*_rows``: replay's rows seen)."""
    from ..rundir import read_summary

    summary = read_summary(run_dir)
    block = (summary.method if summary is not None else None) or {}
    return {k: int(v) for k, v in block.items() if k.endswith("_rows") and str(v).isdigit()}


def merged_weights(plan: Plan, stage: Stage, chosen: list[Path], done: bool,
                   note: Callable[[str], None]) -> tuple[Path | None, float | None]:
    """Under continual.merge, from stage 2: (stage i's merged model, the merge's seconds, None where it had
    finished before); else (None, None). A done stage's merge is found, not redone."""
    if plan.settings.merge == "none" or not chosen:  # stage 1 has no earlier model to merge with
        return None, None
    if not done:
        note(f"stage {stage.index}/{len(plan.stages)}: {plan.settings.merge} merge with {chosen[-1]}")
    started = time.perf_counter()
    first = plan.stages[0].recipe
    merged, now = merge_stage(plan.settings.merge, plan.settings.merge_options, stage.run_dir, chosen[-1],
                              chosen_weights(stage, plan.settings.weights), original_model(first), first.train.device)
    return merged, time.perf_counter() - started if now else None


def stage_entry(out: Path, plan: Plan, stage: Stage, merged: Path | None,
                seconds: dict[str, float | None]) -> tuple[dict[str, Any], dict[str, Any]]:
    """continual.json's entry of a stage (without its probe) and its seconds: the model its row was read on,
    what its methods counted and timed."""
    from ..rundir import read_summary

    entry: dict[str, Any] = {"stage": stage.index, "task": stage.task, "run_dir": str(stage.run_dir.relative_to(out)),
                             "weights": plan.settings.weights,
                             # the model the row was read on (and the next stage starts from)
                             "scored_on": "merged" if merged else "trained"}
    if merged:
        entry["merged"] = str(merged.relative_to(out))
    seconds = {k: v for k, v in seconds.items() if v is not None}
    seconds.update(method_seconds(stage.run_dir))
    summary = read_summary(stage.run_dir)
    seconds["train"] = summary.train_seconds if summary is not None else None
    counts = method_counts(stage.run_dir)
    if counts:
        entry["counts"] = counts
    return entry, seconds


def run_continual(files: list[Path], overrides: list[str], out: Path, *, resume: bool = False, overwrite: bool = False,
                  seed: int | None = None, reporter_for: Callable[[Stage], Any] | None = None,
                  note: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run (or finish, with ``resume``) the sequence into ``out``; returns continual.json's content."""
    from ..rundir import output_lock, write_json_atomic
    from ..runtime import resolve_device

    out = Path(out)
    plan = plan_for(list(files), list(overrides), out, seed=seed, resume=resume)
    if not resume and out.exists() and any(out.iterdir()) and not overwrite:
        raise RunDirError(f"{out} already holds a sequence: continue it with --resume, or replace it with --overwrite")
    with output_lock(out, "another recall continual", "--out"):
        if overwrite and not resume and out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True, exist_ok=True)
        record = read_continual(out) if resume else None
        if record is None:
            record = {"format": FORMAT, "command": plan.command(), "tasks": [s.task for s in plan.stages],
                      "stages": [], "matrix": [None], "finished": False}
        device = resolve_device(plan.stages[0].recipe.train.device)
        from .scoring import KeptSkill, Scorer, timed

        scorer = Scorer(plan, device)
        probe_on = plan.settings.probe if plan.settings.probe is not None else plan.stages[0].recipe.probe.enabled
        if len(record["stages"]) == 0 and record["matrix"] == [None]:
            row0, seconds = timed(scorer.row_zero)
            record["matrix"] = [row0]
            record["row0_seconds"] = seconds
            write_json_atomic(out / CONTINUAL_FILE, record)
        kept = None
        chosen: list[Path] = []
        for stage in plan.stages:
            recipe = stage_recipe(plan, stage, chosen)
            done = len(record["stages"]) >= stage.index
            if not done:
                note(f"stage {stage.index}/{len(plan.stages)}: {stage.task} -> {stage.run_dir}")
                reporter = reporter_for(stage) if reporter_for else None
                try:
                    train_stage(recipe, stage, reporter)
                finally:
                    if reporter is not None:
                        reporter.close()
            merged, merge_seconds = merged_weights(plan, stage, chosen, done, note)
            chosen.append(merged or chosen_weights(stage, plan.settings.weights))
            if done:
                continue
            # R[i][i] is the stage's own final evaluation where that scored these very weights and rows (not a
            # merged model): scoring it again would repeat it bit for bit (issue 49's overhead over finetune)
            diagonal = scorer.finetune_score(stage, recipe, chosen[-1]) if merged is None else None
            row, score_seconds = timed(scorer.row, stage.index, chosen, diagonal)
            entry, seconds = stage_entry(out, plan, stage, merged, {"score": score_seconds, "merge": merge_seconds})
            if probe_on:
                if kept is None:
                    kept = KeptSkill(plan, device)
                entry["probe"], seconds["probe"] = timed(kept.measure, chosen[-1], stage)
            entry["seconds"] = seconds
            record["stages"].append(entry)
            record["matrix"].append(row)
            record.update(summarize(record["matrix"]))
            record["finished"] = len(record["stages"]) == len(plan.stages)
            write_json_atomic(out / CONTINUAL_FILE, record)
        if not record.get("finished"):
            record.update(summarize(record["matrix"]), finished=True)
            write_json_atomic(out / CONTINUAL_FILE, record)
        from .show import heatmap

        heatmap(record, out)
    return record


def matrix_of(record: dict[str, Any]) -> list[Any]:
    return record["matrix"]


def continual(stages: list[str | Path], overrides: list[str] | tuple[str, ...] = (), out: str | Path = "runs/continual",
              *, resume: bool = False, overwrite: bool = False, seed: int | None = None) -> list[Any]:
    """The library's `recall continual`: run the stage recipes in order into ``out`` and return the matrix
    (row 0, then one row per stage; each row a score per task, None where none exists). continual.json
    holds the rest (ACC, BWT, FWT, forgetting, the kept skill, seconds)."""
    return matrix_of(run_continual([Path(s) for s in stages], list(overrides), Path(out), resume=resume,
                                   overwrite=overwrite, seed=seed))
