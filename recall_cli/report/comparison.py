"""Grouping runs by the settings that differ and aggregating over seeds: the numbers of the paper's tables.

The paper reports, per task, the median and the maximum over 5 seeds of the dev metric, and averages
over all tasks and over the tasks with fewer / more than 10k training examples (Tables 1 and 2). This
module computes those numbers from runs read by runs.py; tables.py renders them as a rich table,
markdown, CSV or JSON. Runs that should not be averaged silently are flagged: a NaN metric, constant
predictions (MCC 0 on CoLA, accuracy equal to one class's share of the dev set), a run that did not finish.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ReportError
from ..names import RECADAM_ONLY_KEYS, TASKS, is_vanilla
from .labels import _sort_key, group_label
from .runs import Run, _finite, _key, differing_keys, resolve_key

PRESETS = ("init", "k", "main")
AT = ("final", "best")

# GLUE training-set sizes; the paper averages over tasks below and above 10k examples.
GLUE_TRAIN_SIZES = {name: t.train_size for name, t in TASKS.items()}
SMALL_TASK_LIMIT = 10_000
TASK_TITLES = {name: t.title for name, t in TASKS.items()}  # in the paper's column order
# Run measures beside an eval record (Run.eval_at): ||theta - theta*|| at that step, and the run's training time.
RUN_MEASURES = ("distance", "train_seconds")
STATS = ("median", "min", "max", "mean")


@dataclass
class Cell:
    """One (group, task): the metric over the group's seeds."""

    task: str
    values: list[float]
    runs: list[str]
    flagged: list[dict[str, str]] = field(default_factory=list)
    seeds: list[Any] = field(default_factory=list)  # train.seed of each value's run
    # --table main: the setting chosen on dev for this (group, task), out of `candidates` settings.
    selected: dict[str, Any] | None = None
    candidates: int = 0

    @property
    def n(self) -> int:
        return len(self.values)

    def stat(self, name: str) -> float | None:
        import numpy as np

        if not self.values:
            return None
        v = np.asarray(self.values, dtype=np.float64)
        if name == "median":
            return float(np.median(v))
        if name == "max":
            return float(v.max())
        if name == "min":
            return float(v.min())
        if name == "mean":
            return float(v.mean())
        if name == "std":
            return float(v.std(ddof=1)) if len(v) > 1 else None
        raise KeyError(name)


@dataclass
class Group:
    label: str  # the grouping keys spelled out: "vanilla fine-tuning, merge=linear, ..., weights=0.25,0.75"
    settings: dict[str, Any]  # the grouping keys and their values
    cells: dict[str, Cell]  # task -> cell
    # What the figures and tables call the setting (families.describe): "WiSE-FT α=0.75"
    name: str = ""
    # A member run's recipe (dotted), with the setting keys its members do not share left out (None)
    example: dict[str, Any] = field(default_factory=dict)


@dataclass
class Against:
    """compare --against: each setting's paired difference from the reference setting, per task."""

    reference: Group
    level: float
    metrics: list[str]  # the table's metric, then the kept skill (KEPT_MEASURES) where the runs record it
    intervals: dict[tuple[str, str, str], Any]  # (group label, task, metric) -> intervals.Interval
    notes: list[str] = field(default_factory=list)  # what has no interval, and why


@dataclass
class Comparison:
    metric: str
    at: str
    keys: list[str]
    tasks: list[str]
    groups: list[Group]
    stats: list[str]  # rows per group in the wide table
    averages: list[tuple[str, list[str]]]  # (column title, tasks averaged)
    preset: str | None = None
    against: Against | None = None
    remarks: list[str] = field(default_factory=list)  # notes on the whole table

    def average(self, group: Group, stat: str, tasks: list[str]) -> float | None:
        values = [group.cells[t].stat(stat) if t in group.cells else None for t in tasks]
        if not values or any(v is None for v in values):
            return None
        return sum(values) / len(values)


def compare(runs: list[Run], by: list[str] | None = None, metric: str = "main", preset: str | None = None,
            at: str = "final", stats: list[str] | None = None) -> Comparison:
    if preset is not None and preset not in PRESETS:
        raise ReportError(f"unknown --table {preset!r}: choose init (Table 2), k (the k ablation) or main (Table 1)")
    if at not in AT:
        raise ReportError(f"unknown --at {at!r}: choose final or best")
    by = [k.strip() for item in (by or []) for k in item.split(",") if k.strip()]
    if by and preset:
        raise ReportError("give either --by or --table, not both")
    names = sorted({k for run in runs for r in run.evals + run.probes for k, v in r.items()
                    if k not in ("step", "split", "data") and not isinstance(v, list)}
                   | {k for run in runs for k in RUN_MEASURES if k in (run.eval_at("final") or {})})
    bad = [s for s in (stats or []) if s not in STATS]
    if bad:
        raise ReportError(f"unknown --stats {bad[0]!r}: choose from {', '.join(STATS)} (e.g. --stats median,min,max)")
    if metric not in names:
        raise ReportError(f"unknown --metric {metric!r}: these runs record {', '.join(names) or 'no eval metrics'}")

    differing = differing_keys(runs)
    if by:
        keys = [resolve_key(k) for k in by]
        if "task.name" in keys:
            raise ReportError("tasks are the columns of the table: --by task.name is not needed")
    elif preset == "init":
        keys = ["optimizer.name", "model.init"]
    elif preset == "k":
        keys = ["optimizer.name", "optimizer.anneal_k"]
    elif preset == "main":
        keys = ["optimizer.name"] + [k for k in ("model.init",) if k in differing]
    else:
        keys = list(differing)
    # Table 1 (--table main) selects, per method and task, the setting with the best median on dev,
    # as the paper selects t0 and k; the other presets never pool different settings silently:
    # whatever else differs splits the rows too.
    select = [k for k in differing if k not in keys] if preset == "main" else []
    if preset and not select:
        keys += [k for k in differing if k not in keys]

    groups: dict[str, Group] = {}
    members: dict[str, list[Run]] = {}
    candidates: dict[tuple[str, str], dict[str, Cell]] = {}
    for run in runs:
        settings = {k: run.settings.get(k) for k in keys}
        gid = _key(settings)
        if gid not in groups:
            groups[gid] = Group(group_label(settings, preset), settings, {})
        members.setdefault(gid, []).append(run)
        if select:
            vanilla = is_vanilla(run.settings.get("optimizer.name"))
            chosen = {k: run.settings.get(k) for k in select if not (vanilla and k in RECADAM_ONLY_KEYS)}
            per_setting = candidates.setdefault((gid, run.task), {})
            cell = per_setting.setdefault(_key(chosen), Cell(run.task, [], [], selected=chosen))
        else:
            cell = groups[gid].cells.setdefault(run.task, Cell(run.task, [], []))
        _add_run(cell, run, metric, at)
    for (gid, task), per_setting in candidates.items():
        scored = [(cell.stat("median"), cell) for cell in per_setting.values()]
        usable = [item for item in scored if item[0] is not None]
        best = max(usable, key=lambda item: item[0])[1] if usable else scored[0][1]
        best.candidates = len(per_setting)
        groups[gid].cells[task] = best
    ordered = sorted(groups.values(), key=lambda g: [_sort_key(k, g.settings.get(k)) for k in keys])
    for gid, group in groups.items():
        group.example = shared_settings(members[gid])
    name_groups(ordered)

    order = list(TASK_TITLES)  # the paper's column order: CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE
    tasks = sorted({run.task for run in runs}, key=lambda t: (order.index(t) if t in order else len(order), t))
    averages = task_averages(tasks)
    if not stats:
        stats = ["median", "max"] if preset else ["median", "max", "mean"]
    remarks = []
    held = sum(1 for run in runs if run.holdout_final() is not None)
    if at == "best" and held:
        remarks.append(f"--at best: {held} of the runs held out part of train (task.holdout): their evaluations scored "
                       "the holdout, so their best eval is the holdout's (dev was scored once, at the end: --at final)")
    return Comparison(metric, at, keys, tasks, ordered, list(stats), averages, preset, remarks=remarks)


def task_averages(tasks: list[str]) -> list[tuple[str, list[str]]]:
    """The paper's average columns: over every task, and over those below and above 10k training rows."""
    if len(tasks) < 2:
        return []
    small = [t for t in tasks if GLUE_TRAIN_SIZES.get(t, math.inf) < SMALL_TASK_LIMIT]
    large = [t for t in tasks if SMALL_TASK_LIMIT < GLUE_TRAIN_SIZES.get(t, -1)]
    return [("Avg", tasks)] + ([("Avg <10k", small), ("Avg >10k", large)] if small and large else [])


def shared_settings(runs: list[Run]) -> dict[str, Any]:
    """The first run's recipe, with every setting key on which ``runs`` disagree left out (None): a row
    of --table main or --by pools several settings, and its name must not be one member's."""
    from .runs import is_setting_key

    first = dict(runs[0].settings)
    for key in list(first):
        if is_setting_key(key) and any(_key(run.settings.get(key)) != _key(first[key]) for run in runs[1:]):
            first[key] = None
    return first


def name_groups(groups: list[Group]) -> None:
    """Each group's name as the figures call the setting (families.describe); its label where the
    name would say nothing (a setting of no named key: a run's folder, "all runs")."""
    from .families import describe

    for group, described in zip(groups, describe([(g.settings, g.example) for g in groups])):
        group.name = described.name or group.label


def find_reference(groups: list[Group], text: str) -> Group:
    """--against SETTING: the group whose name (then label) is SETTING, case and spaces aside; else the one
    whose name (then label) starts with it; else the one whose name (then label) contains it. The first of
    these that matches one group decides; several at once: ReportError naming them, as none."""
    def norm(value: str) -> str:
        return " ".join(value.lower().replace("α=", "α ").replace("τ=", "τ ").split())

    wanted = norm(text)
    if not wanted:
        raise ReportError("--against: give a setting's name, e.g. --against vanilla")
    tests = (lambda v: v == wanted, lambda v: v.startswith(wanted), lambda v: wanted in v)
    for test, field_ in ((t, f) for t in tests for f in ("name", "label")):
        found = [g for g in groups if test(norm(getattr(g, field_)))]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            names = "; ".join(g.name for g in found[:6]) + ("; ..." if len(found) > 6 else "")
            raise ReportError(f"--against {text!r} names {len(found)} settings ({names}): give more of one's name")
    names = "; ".join(g.name for g in groups[:8]) + ("; ..." if len(groups) > 8 else "")
    raise ReportError(f"--against {text!r}: no setting is called that; the settings are: {names}")


# The kept skill an --against table adds an interval for: the encoder's STS probe, else a causal LM's lm probe
# (general prose's loss under theta* over theta's), else its kl probe; the first one the runs record.
KEPT_MEASURES = ("sts_retained", "lm_kept", "kl_kept", "choice_kept")


def add_against(result: Comparison, runs: list[Run], setting: str, level: float = 0.95,
                kept: str | None = None) -> Comparison:
    """Each (setting, task)'s paired bootstrap interval of its difference from the reference setting
    (intervals.py), for the table's metric and for the kept skill (``kept``, else the first of KEPT_MEASURES
    the runs record, read from the same runs at the same eval), where the runs record it."""
    from .intervals import by_seed, check_level, paired_interval, seeds_text

    check_level(level)
    reference = find_reference(result.groups, setting)
    by_path = {str(run.path): run for run in runs}
    metrics = [result.metric]
    notes: list[str] = []
    def recorded(measure: str) -> bool:
        return any(_finite((run.eval_at(result.at) or {}).get(measure)) for run in runs if run.finished)

    candidates = (kept,) if kept is not None else KEPT_MEASURES
    kept = next((m for m in candidates if recorded(m)), None)
    if kept is None:
        notes.append(f"no run records {' or '.join(candidates)} at its {result.at} eval (probes off, or other "
                     "probes): no interval for the kept skill")
    elif kept != result.metric:
        metrics.append(kept)

    def per_seed(cell: Cell, metric: str) -> dict[Any, float]:
        if metric == result.metric:
            return by_seed(cell.seeds, cell.values)
        seeds, values = [], []
        for path, seed in zip(cell.runs, cell.seeds):
            value = (by_path[path].eval_at(result.at) or {}).get(metric) if path in by_path else None
            if _finite(value):
                seeds.append(seed)
                values.append(value)
        return by_seed(seeds, values)

    intervals: dict[tuple[str, str, str], Any] = {}
    missing: list[str] = []
    for group in result.groups:
        if group is reference:
            continue
        for task, cell in group.cells.items():
            ref_cell = reference.cells.get(task)
            if ref_cell is None:
                missing.append(f"{group.name} / {TASK_TITLES.get(task, task)}: {reference.name} has no runs on this task: n/a")
                continue
            for metric in metrics:
                intervals[(group.label, task, metric)] = paired_interval(per_seed(cell, metric), per_seed(ref_cell, metric), level)
    # The seeds each interval is paired over: one line for the seeds most cells share, one per other set
    # naming its settings (with the task where a setting's tasks differ).
    name_of = {g.label: g.name for g in result.groups}
    shared: dict[tuple, dict[str, list[str]]] = {}
    for (label, task, metric), interval in intervals.items():
        if interval.low is not None and metric == result.metric:
            shared.setdefault(interval.seeds, {}).setdefault(label, []).append(task)
    ordered = sorted(shared.items(), key=lambda item: -sum(len(t) for t in item[1].values()))
    tasks_of = {g.label: len(g.cells) for g in result.groups}
    for seeds, cells in ordered[1:]:
        where = ", ".join(name_of[label] if len(tasks) == tasks_of[label]
                          else ", ".join(f"{name_of[label]} / {TASK_TITLES.get(t, t)}" for t in tasks)
                          for label, tasks in cells.items())
        notes.append(f"{where}: paired over seeds {seeds_text(seeds)} (n={len(seeds)})")
    if ordered:
        where = "every interval" if len(ordered) == 1 else "the other intervals"
        notes.append(f"{where}: paired over seeds {seeds_text(ordered[0][0])} (n={len(ordered[0][0])})")
    notes += missing
    for (label, task, metric), interval in intervals.items():
        if interval.low is None:
            notes.append(f"{name_of[label]} / {TASK_TITLES.get(task, task)} ({metric}): n/a: {interval.note}")
    result.against = Against(reference, level, metrics, intervals, notes)
    return result


def _add_run(cell: Cell, run: Run, metric: str, at: str) -> None:
    """Add one run's value to the cell, or flag why it is left out (or kept but suspicious)."""

    def flag(reason: str) -> None:
        cell.flagged.append({"run": str(run.path), "reason": reason})

    record = run.eval_at(at)
    if not run.finished:
        if run.summary_problem is not None:
            flag(f"summary.json cannot be read ({run.summary_problem}): left out")
            return
        steps = (run.summary.steps if run.summary else None) or max((r["step"] for r in run.records), default=0)
        flag(f"did not finish (stopped at step {steps}): left out")
        return
    if record is None:
        flag("no eval record: left out")
        return
    if metric not in record:
        return  # this task has no such metric (f1 on RTE): not a problem of the run
    value = record[metric]
    if not _finite(value):
        regression = run.task in TASKS and TASKS[run.task].task_type == "regression"
        why = " (constant predictions)" if regression or metric in ("pearson", "spearman") else ""
        flag(f"{metric} is {value}{why}: left out")
        return
    constant = constant_prediction(run, record)
    if constant:
        flag(constant + ": kept")
    cell.values.append(float(value))
    cell.runs.append(str(run.path))
    cell.seeds.append(run.seed)


_DEV_SHARES: dict[str, dict[Any, float] | None] = {}


def dev_label_shares(settings: dict[str, Any]) -> dict[Any, float] | None:
    """Each class's share of the dev examples the run scored, from a local copy of the data only."""
    task = {k.split(".", 1)[1]: v for k, v in settings.items() if k.startswith("task.")}
    cache = _key(task)
    if cache in _DEV_SHARES:
        return _DEV_SHARES[cache]
    shares = None
    local = task.get("data_dir") or task.get("dev_file")
    if local and Path(local).exists():
        try:
            from ..tasks import load_split
            from ..recipe import TaskConfig

            labels = list(load_split(TaskConfig(**task), "dev", task.get("max_eval_examples")).labels)
            if labels and all(isinstance(x, int) for x in labels):
                shares = {label: count / len(labels) for label, count in Counter(labels).items()}
        except Exception:  # noqa: BLE001 - the check is a hint; unreadable data just skips it
            shares = None
    _DEV_SHARES[cache] = shares
    return shares


def constant_prediction(run: Run, record: dict[str, Any]) -> str | None:
    """Why ``record`` looks like a model that predicts one class for everything, or None."""
    if record.get("mcc") == 0.0:  # CoLA's main metric
        return "MCC 0 (constant predictions?)"
    accuracy = record.get("accuracy")
    if not _finite(accuracy):
        return None
    shares = dev_label_shares(run.settings)
    for label, share in (shares or {}).items():
        if abs(accuracy - share) < 1e-9:
            return f"accuracy {accuracy:.4f} = share of class {label} in dev (constant predictions?)"
    return None
