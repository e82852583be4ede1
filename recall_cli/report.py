"""Reading run directories back: find them, group them by the settings that differ, aggregate over seeds.

The paper reports, per task, the median and the maximum over 5 seeds of the dev metric, and averages
over all tasks and over the tasks with fewer / more than 10k training examples (Tables 1 and 2). This
module computes those numbers from run directories (config.yaml, metrics.jsonl, summary.json) and
renders them as a rich table, markdown, CSV or JSON. Runs that should not be averaged silently are
flagged: a NaN metric, constant predictions (MCC 0 on CoLA, accuracy equal to one class's share of
the dev set), a run that did not finish.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from .records import RECORD_PATH_KEYS
from .errors import ReportError  # noqa: F401 - raised here, importable from here

FORMATS = ("table", "markdown", "csv", "json")
PRESETS = ("init", "k", "main")
AT = ("final", "best")

# GLUE training-set sizes; the paper averages over tasks below and above 10k examples.
GLUE_TRAIN_SIZES = {"cola": 8551, "sst2": 67349, "mrpc": 3668, "stsb": 5749, "qqp": 363846,
                    "mnli": 392702, "qnli": 104743, "rte": 2490, "wnli": 635}
SMALL_TASK_LIMIT = 10_000
TASK_TITLES = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "qqp": "QQP",
               "mnli": "MNLI", "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI"}

# Keys that only mean something for RecAdam: blank for adamw runs, so vanilla runs form one group.
RECADAM_ONLY_KEYS = ("optimizer.anneal_fun", "optimizer.anneal_k", "optimizer.anneal_t0",
                     "optimizer.anneal_w", "optimizer.pretrain_cof")
# Keys that do not change what is learned (or are the aggregation axes): never grouping keys.
# probe.* (what is measured, not learned) is left out too; older runs have none of those keys.
NOT_SETTINGS = {"output_dir", "train.seed", "train.device", "train.log_every", "train.save_every",
                "train.keep_last", "train.eval_every", "train.eval_batch_size", "model.trust_remote_code",
                *RECORD_PATH_KEYS}  # a scored record's file names: they differ per seed
# Scalar fields of metrics.jsonl's probe records (recall_cli/probes/runner.py), usable as --metric.
PROBE_MEASURES = ("cka", "cka_debiased", "drift", "sts", "sts_ref", "sts_retained", "mlm_loss", "mlm_loss_ref",
                  "mlm_ratio")
# Run measures beside an eval record (Run.eval_at): ||theta - theta*|| at that step, and the run's training time.
RUN_MEASURES = ("distance", "train_seconds")
# Shown as they are, not x100 like scores and ratios; and where smaller is better ("best" in a column).
RAW_MEASURES = ("distance", "train_seconds", "mlm_loss", "mlm_loss_ref")
LOWER_IS_BETTER = ("distance", "train_seconds", "drift", "mlm_loss", "mlm_ratio")
STATS = ("median", "min", "max", "mean")
SHORT_KEYS = {"k": "optimizer.anneal_k", "t0": "optimizer.anneal_t0", "w": "optimizer.anneal_w",
              "lr": "optimizer.lr", "cof": "optimizer.pretrain_cof", "init": "model.init",
              "optimizer": "optimizer.name", "seed": "train.seed", "steps": "train.max_steps",
              "model": "model.name_or_path", "anneal_fun": "optimizer.anneal_fun",
              "merge": "record.merge", "weights": "record.weights", "with": "record.with",
              "tau": "record.temperature", "gamma": "record.gamma_rule"}
LABEL_NAMES = {v: k for k, v in SHORT_KEYS.items()}
METHOD_NAMES = {"adamw": "vanilla fine-tuning", "recadam": "RecAdam", "adam_coupled": "Adam coupled"}
INIT_NAMES = {"pretrained": "PI", "random": "RI"}



# ---- runs ----------------------------------------------------------------------------------------


@dataclass
class Run:
    path: Path
    name: str  # path relative to the folder searched
    settings: dict[str, Any]  # the recipe as dotted keys; RecAdam-only keys None for adamw
    summary: dict[str, Any] | None
    records: list[dict[str, Any]]

    @property
    def task(self) -> str:
        return str(self.settings.get("task.name"))

    @property
    def finished(self) -> bool:
        return bool(self.summary and self.summary.get("finished"))

    @property
    def train(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("split") == "train"]

    @property
    def evals(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("split") == "eval"]

    @property
    def probes(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("split") == "probe"]

    def eval_at(self, at: str) -> dict[str, Any] | None:
        """The final or best eval record, with the scalar probe measures taken at the same step, the
        distance to theta* logged at that step (a record's eval carries its own) and the run's training time."""
        evals = self.evals
        if not evals:
            return None
        if at == "best":
            finite = [r for r in evals if _finite(r.get("main"))]
            record = max(finite, key=lambda r: r["main"]) if finite else evals[-1]
        else:
            record = evals[-1]
        extra: dict[str, Any] = {}
        logged = [r for r in self.train if r["step"] <= record["step"] and _finite(r.get("distance"))]
        if logged:
            extra["distance"] = logged[-1]["distance"]
        if self.summary and _finite(self.summary.get("final_distance")) and record is evals[-1] and self.finished:
            extra["distance"] = self.summary["final_distance"]
        if self.summary and _finite(self.summary.get("train_seconds")):
            extra["train_seconds"] = self.summary["train_seconds"]
        probe = next((p for p in self.probes if p["step"] == record["step"]), None)
        if probe is not None:
            extra.update({k: v for k, v in probe.items() if not isinstance(v, list)})
        return {**extra, **record}


def read_run(path: Path, name: str) -> Run:
    from .checkpoint import CONFIG_FILE, SUMMARY_FILE, read_metrics
    from .recipe import flatten

    config = yaml.safe_load((path / CONFIG_FILE).read_text(encoding="utf-8"))
    if not isinstance(config, dict):
        raise ValueError("config.yaml is not a mapping")
    settings = flatten(config)
    if settings.get("optimizer.name") == "adamw":
        settings.update(dict.fromkeys(RECADAM_ONLY_KEYS))
    summary = None
    if (path / SUMMARY_FILE).is_file():
        try:
            summary = json.loads((path / SUMMARY_FILE).read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            summary = None
    return Run(path, name, settings, summary, read_metrics(path))


def load_runs(root: Path, warn: Callable[[str], None] = lambda message: None) -> list[Run]:
    """Every run directory at or under ``root``; other folders are named in a warning and skipped."""
    from .checkpoint import is_run_dir

    root = Path(root)
    if not root.is_dir():
        raise ReportError(f"{root} is not a folder: give a run directory or a folder of run directories")
    found: list[Path] = []

    def walk(folder: Path) -> bool:
        any_run = False
        for child in sorted(p for p in folder.iterdir() if p.is_dir()):
            if child.name.startswith("."):
                continue  # staging folders, hidden tool folders
            if is_run_dir(child):
                found.append(child)
                any_run = True
            elif walk(child):
                any_run = True
            elif not (child.name == "logs" and (folder / "sweep.json").is_file()):
                warn(f"{child} is not a recall run directory (no config.yaml and metrics.jsonl): skipped")
        return any_run

    if is_run_dir(root):
        found.append(root)
    else:
        walk(root)
    runs = []
    for path in found:
        name = path.name if path == root else str(path.relative_to(root))
        try:
            runs.append(read_run(path, name))
        except (OSError, ValueError, yaml.YAMLError) as exc:
            warn(f"{path}: cannot read the run ({exc}): skipped")
    if not runs:
        raise ReportError(f"no recall run directories under {root} (a run directory holds config.yaml and "
                          "metrics.jsonl, as recall finetune writes them)")
    return runs


def resolve_key(key: str) -> str:
    """'k' -> 'optimizer.anneal_k'; a dotted recipe key stays; anything else is an error with a hint."""
    from .recipe import all_keys

    key = SHORT_KEYS.get(key, key)
    valid = all_keys()
    if key not in valid and not key.startswith("record."):  # a scored record's settings (records.py)
        close = difflib.get_close_matches(key, valid + list(SHORT_KEYS), n=1, cutoff=0.6)
        hint = f" (did you mean '{close[0]}'?)" if close else " (a dotted recipe key such as optimizer.anneal_k, or k, t0, init, optimizer, lr)"
        raise ReportError(f"unknown key '{key}'{hint}")
    return key


def filter_runs(runs: list[Run], where: list[str]) -> list[Run]:
    from .recipe import parse_override

    for text in where:
        try:
            key, value = parse_override(text)
        except ValueError:
            raise ReportError(f"--where {text!r} is not KEY=VALUE (e.g. --where model.init=pretrained)") from None
        key = resolve_key(key)
        runs = [r for r in runs if _same(r.settings.get(key), value)]
        if not runs:
            raise ReportError(f"no runs with {key}={value}")
    return runs


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
    return a == b


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def differing_keys(runs: list[Run]) -> list[str]:
    """Settings that take two or more values among the runs of one task (the task's own data paths
    and per-task hyperparameters are not settings to compare), in recipe order."""
    by_task: dict[str, list[Run]] = {}
    for run in runs:
        by_task.setdefault(run.task, []).append(run)
    keys: list[str] = []
    for run in runs:
        for key in run.settings:
            if key in keys or key in NOT_SETTINGS or key == "task.name" or key.startswith("probe."):
                continue
            if any(len(_values(group, key)) > 1 for group in by_task.values()):
                keys.append(key)
    return keys


def _values(runs: list[Run], key: str) -> set[str]:
    # adamw's blank RecAdam-only keys are not a second value: vanilla runs do not split a k sweep.
    return {_key(r.settings.get(key)) for r in runs
            if not (key in RECADAM_ONLY_KEYS and r.settings.get("optimizer.name") == "adamw")}


# ---- aggregation ---------------------------------------------------------------------------------


@dataclass
class Cell:
    """One (group, task): the metric over the group's seeds."""

    task: str
    values: list[float]
    runs: list[str]
    flagged: list[dict[str, str]] = field(default_factory=list)
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
    label: str
    settings: dict[str, Any]  # the grouping keys and their values
    cells: dict[str, Cell]  # task -> cell


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
                    if k not in ("step", "split") and not isinstance(v, list)}
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
    candidates: dict[tuple[str, str], dict[str, Cell]] = {}
    for run in runs:
        settings = {k: run.settings.get(k) for k in keys}
        gid = _key(settings)
        if gid not in groups:
            groups[gid] = Group(group_label(settings, preset), settings, {})
        if select:
            vanilla = run.settings.get("optimizer.name") == "adamw"
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

    order = list(TASK_TITLES)  # the paper's column order: CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE
    tasks = sorted({run.task for run in runs}, key=lambda t: (order.index(t) if t in order else len(order), t))
    averages: list[tuple[str, list[str]]] = []
    if len(tasks) > 1:
        averages.append(("Avg", tasks))
        small = [t for t in tasks if GLUE_TRAIN_SIZES.get(t, math.inf) < SMALL_TASK_LIMIT]
        large = [t for t in tasks if SMALL_TASK_LIMIT < GLUE_TRAIN_SIZES.get(t, -1)]
        if small and large:
            averages += [("Avg <10k", small), ("Avg >10k", large)]
    if not stats:
        stats = ["median", "max"] if preset else ["median", "max", "mean"]
    return Comparison(metric, at, keys, tasks, ordered, list(stats), averages, preset)


def _sort_key(key: str, value: Any) -> tuple:
    order = {"optimizer.name": ["adamw", "recadam", "adam_coupled"], "model.init": ["pretrained", "random"]}
    if key in order and value in order[key]:
        return (0, order[key].index(value), "")
    if value is None:
        return (-1, 0, "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (1, value, "")
    return (2, 0, str(value))


def group_label(settings: dict[str, Any], preset: str | None = None) -> str:
    """'vanilla fine-tuning', 'RecAdam + RI, k=0.1', 'k=0.05, t0=250' — what a reader of the paper calls them."""
    parts: list[str] = []
    name = settings.get("optimizer.name")
    if "optimizer.name" in settings or "model.init" in settings:
        if name == "adamw":
            parts.append(METHOD_NAMES["adamw"])
        else:
            method = METHOD_NAMES.get(name, str(name)) if "optimizer.name" in settings else "RecAdam"
            if preset == "init" or "model.init" in settings:
                method += f" + {INIT_NAMES.get(settings.get('model.init'), settings.get('model.init'))}"
            parts.append(method)
    for key, value in settings.items():
        if key in ("optimizer.name", "model.init") or (value is None and (name == "adamw" or key.startswith("record."))):
            continue
        parts.append(f"{LABEL_NAMES.get(key, key)}={_fmt_setting(value)}")
    return ", ".join(parts) or "all runs"


def _fmt_setting(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):  # merge weights: 0.333333 reads as 0.333
        return ",".join(f"{v:.3g}" if isinstance(v, float) else _fmt_setting(v) for v in value)
    if isinstance(value, str) and "/" in value:
        return value.rstrip("/").rsplit("/", 1)[-1]
    return str(value)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _add_run(cell: Cell, run: Run, metric: str, at: str) -> None:
    """Add one run's value to the cell, or flag why it is left out (or kept but suspicious)."""

    def flag(reason: str) -> None:
        cell.flagged.append({"run": str(run.path), "reason": reason})

    record = run.eval_at(at)
    if not run.finished:
        steps = (run.summary or {}).get("steps") or max((r["step"] for r in run.records), default=0)
        flag(f"did not finish (stopped at step {steps}): left out")
        return
    if record is None:
        flag("no eval record: left out")
        return
    if metric not in record:
        return  # this task has no such metric (f1 on RTE): not a problem of the run
    value = record[metric]
    if not _finite(value):
        why = " (constant predictions)" if run.task == "stsb" or metric in ("pearson", "spearman") else ""
        flag(f"{metric} is {value}{why}: left out")
        return
    constant = constant_prediction(run, record)
    if constant:
        flag(constant + ": kept")
    cell.values.append(float(value))
    cell.runs.append(str(run.path))


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
            from . import data
            from .recipe import TaskConfig

            labels = list(data.load_split(TaskConfig(**task), "dev", task.get("max_eval_examples")).labels)
            if labels and all(isinstance(x, int) for x in labels):
                shares = {label: count / len(labels) for label, count in Counter(labels).items()}
        except Exception:  # noqa: BLE001 - the check is a hint; unreadable data just skips it
            shares = None
    _DEV_SHARES[cache] = shares
    return shares


def constant_prediction(run: Run, record: dict[str, Any]) -> str | None:
    """Why ``record`` looks like a model that predicts one class for everything, or None."""
    if run.task == "cola" and record.get("mcc") == 0.0:
        return "MCC 0 (constant predictions?)"
    accuracy = record.get("accuracy")
    if not _finite(accuracy):
        return None
    shares = dev_label_shares(run.settings)
    for label, share in (shares or {}).items():
        if abs(accuracy - share) < 1e-9:
            return f"accuracy {accuracy:.4f} = share of class {label} in dev (constant predictions?)"
    return None


# ---- rendering -----------------------------------------------------------------------------------


def to_records(result: Comparison) -> list[dict[str, Any]]:
    """One object per (group, task): what --format json prints and scripts rely on."""
    out = []
    for group in result.groups:
        for task in result.tasks:
            cell = group.cells.get(task)
            if cell is None:
                continue
            out.append({
                **group.settings,
                "group": group.label,
                "task": task,
                "metric": result.metric,
                "at": result.at,
                "n": cell.n,
                "median": cell.stat("median"),
                "max": cell.stat("max"),
                "mean": cell.stat("mean"),
                "std": cell.stat("std"),
                "min": cell.stat("min"),
                "runs": cell.runs,
                "flagged": cell.flagged,
                **({"selected": cell.selected, "candidates": cell.candidates} if cell.selected is not None else {}),
            })
    return out


def _pct(value: float | None, metric: str = "main") -> str:
    if value is None:
        return "–"
    if metric in RAW_MEASURES:
        return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{100 * value:.1f}"


def _cell_text(result: Comparison, group: Group, stat: str, column: tuple[str, list[str]] | str) -> tuple[str, float | None]:
    """(text, value used for "best in column") for one table cell."""
    if isinstance(column, str):
        cell = group.cells.get(column)
        if cell is None:
            return "", None
        if stat == "n":
            return str(cell.n), None
        value = cell.stat(stat)
        text = _pct(value, result.metric)
        if stat == "mean" and value is not None:
            std = cell.stat("std")
            text += f" ± {_pct(std, result.metric)}" if std is not None else ""
        if cell.flagged and stat == result.stats[0]:
            text += "*"
        return text, value
    if stat == "n":
        return "", None
    value = result.average(group, stat, column[1])
    return _pct(value, result.metric), value


def _columns(result: Comparison) -> list[tuple[str, Any]]:
    cols: list[tuple[str, Any]] = [(TASK_TITLES.get(t, t), t) for t in result.tasks]
    cols += [(title, (title, tasks)) for title, tasks in result.averages]
    return cols


def _rows(result: Comparison) -> tuple[list[str], list[list[tuple[str, bool]]]]:
    """Header and rows of the wide table; each cell is (text, is the best of its column for that stat)."""
    columns = _columns(result)
    stats = list(result.stats)
    ns = {cell.n for g in result.groups for cell in g.cells.values()}
    if len(ns) > 1:
        stats.append("n")
    best: dict[tuple[str, int], float] = {}
    for stat in stats:
        for i, (_, column) in enumerate(columns):
            values = [v for g in result.groups if (v := _cell_text(result, g, stat, column)[1]) is not None]
            if len(values) > 1:  # a lone value is not "the best" of anything
                best[(stat, i)] = min(values) if result.metric in LOWER_IS_BETTER else max(values)
    header = ["", "" if len(stats) == 1 else "stat"] + [title for title, _ in columns]
    rows = []
    for group in result.groups:
        for j, stat in enumerate(stats):
            row = [(group.label if j == 0 else "", False), (stat if stat != "mean" else "mean ± std", False)]
            for i, (_, column) in enumerate(columns):
                text, value = _cell_text(result, group, stat, column)
                row.append((text, value is not None and best.get((stat, i)) == value))
            rows.append(row)
    return header, rows


def title(result: Comparison) -> str:
    ns = sorted({cell.n for g in result.groups for cell in g.cells.values()})
    seeds = f"n={ns[0]} runs per cell" if len(ns) == 1 else "n runs per cell in the n rows"
    kind = "probe" if result.metric in PROBE_MEASURES else "run" if result.metric in RUN_MEASURES else "dev"
    scale = "" if result.metric in RAW_MEASURES else " x100"
    lower = ", lower is better" if result.metric in LOWER_IS_BETTER else ""
    return f"{kind} {result.metric}{scale} ({result.at} eval{lower}), over seeds: {seeds}"


def notes(result: Comparison) -> list[str]:
    lines = []
    for group in result.groups:
        for cell in group.cells.values():
            if cell.selected and cell.candidates > 1:
                chosen = ", ".join(f"{k}={_fmt_setting(v)}" for k, v in cell.selected.items())
                lines.append(f"{group.label} / {TASK_TITLES.get(cell.task, cell.task)}: {chosen} "
                             f"(best median on dev of {cell.candidates} settings)")
            for item in cell.flagged:
                lines.append(f"* {group.label} / {cell.task}: {item['run']}: {item['reason']}")
    for title_, tasks in result.averages:
        lines.append(f"{title_}: mean over {', '.join(TASK_TITLES.get(t, t) for t in tasks)}")
    return lines


def rich_table(result: Comparison):
    from rich.markup import escape
    from rich.table import Table

    header, rows = _rows(result)
    table = Table(title=title(result))
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i < 2 else "right")
    for row in rows:
        table.add_row(*(f"[bold green]{escape(text)}[/]" if best else escape(text) for text, best in row))
    return table


def markdown(result: Comparison) -> str:
    header, rows = _rows(result)
    lines = [f"| {' | '.join(header)} |", "|" + "|".join(["---", "---"] + ["---:"] * (len(header) - 2)) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(f"**{t}**" if best and t else t for t, best in row) + " |")
    lines.append("")
    lines.append(f"{title(result)}; best per column in bold.")
    lines += [f"{line}  " if not line.startswith("*") else f"\\{line}  " for line in notes(result)]
    return "\n".join(lines) + "\n"


def to_csv(result: Comparison) -> str:
    buffer = io.StringIO()
    records = to_records(result)
    keys = result.keys + ["group", "task", "metric", "at", "n", "median", "max", "mean", "std", "min", "runs", "flagged"]
    writer = csv.DictWriter(buffer, fieldnames=keys, lineterminator="\n")
    writer.writeheader()
    for record in records:
        row = dict(record)
        row["runs"] = ";".join(record["runs"])
        row["flagged"] = ";".join(f"{f['run']}: {f['reason']}" for f in record["flagged"])
        writer.writerow(row)
    return buffer.getvalue()


def render(result: Comparison, fmt: str) -> str:
    """markdown, csv or json as text (the rich table is printed by the CLI)."""
    if fmt == "json":
        return json.dumps(to_records(result), indent=2) + "\n"
    if fmt == "csv":
        return to_csv(result)
    if fmt == "markdown":
        return markdown(result)
    raise ReportError(f"unknown --format {fmt!r}: choose {', '.join(FORMATS)}")


# ---- forgetting curves ---------------------------------------------------------------------------


@dataclass
class CurveGroup:
    label: str
    settings: dict[str, Any]
    runs: list[Run]

    @property
    def is_adamw(self) -> bool:
        return all(r.settings.get("optimizer.name") == "adamw" for r in self.runs)

    def curves(self, field_name: str, split: str = "train"):
        """(steps, median, min, max) over the group's runs at the steps every run logged; ``split`` names the
        records, "train" or "probe"."""
        import numpy as np

        records = (lambda run: run.train) if split == "train" else (lambda run: run.probes)
        series = [{r["step"]: r[field_name] for r in records(run) if _finite(r.get(field_name))} for run in self.runs]
        steps = sorted(set.intersection(*(set(s) for s in series))) if series else []
        if not steps:
            return np.array([]), np.array([]), np.array([]), np.array([])
        values = np.array([[s[t] for t in steps] for s in series], dtype=np.float64)
        return np.array(steps), np.median(values, axis=0), values.min(axis=0), values.max(axis=0)


def forgetting_groups(runs: list[Run], label: str | None = None) -> list[CurveGroup]:
    """Runs that differ only by seed form one group; the label names the chosen (or differing) setting."""
    differing = differing_keys(runs)
    tasks = sorted({r.task for r in runs})
    if label is not None:
        label_keys = [resolve_key(label)]
    elif "optimizer.anneal_k" in differing:
        label_keys = ["optimizer.anneal_k"]
    else:
        label_keys = list(differing)
    grouped: dict[str, list[Run]] = {}
    for run in runs:
        grouped.setdefault(_key([run.task] + [run.settings.get(k) for k in differing]), []).append(run)
    groups = []
    for members in grouped.values():
        first = members[0]
        shown = {k: first.settings.get(k) for k in label_keys}
        if "optimizer.name" in differing and "optimizer.name" not in shown:
            shown = {"optimizer.name": first.settings.get("optimizer.name"), **shown}
        text = group_label(shown) if shown else (first.name if len(members) == 1 else "all runs")
        if len(tasks) > 1:
            text = f"{TASK_TITLES.get(first.task, first.task)}: {text}"
        groups.append(CurveGroup(text, {k: first.settings.get(k) for k in differing}, members))
    # Two groups with one label (the label key alone does not tell them apart): name every setting
    # that differs, on every curve, so that the legend reads one way.
    if len({g.label for g in groups}) < len(groups):
        for g in groups:
            prefix = f"{TASK_TITLES.get(g.runs[0].task, g.runs[0].task)}: " if len(tasks) > 1 else ""
            g.label = prefix + group_label(dict(g.settings)) if g.settings else g.label
    groups.sort(key=lambda g: [_sort_key(k, g.settings.get(k)) for k in differing] + [g.label])
    return groups


def forgetting_rows(runs: list[Run], groups: list[CurveGroup]) -> list[dict[str, Any]]:
    """Per run: final distance, minimum distance and its step, final train loss, final main dev metric."""
    label_of = {id(run): g.label for g in groups for run in g.runs}
    rows = []
    for group in groups:
        for run in group.runs:
            train = [r for r in run.train if _finite(r.get("distance"))]
            low = min(train, key=lambda r: r["distance"]) if train else None
            final = run.eval_at("final")
            final_distance = (run.summary or {}).get("final_distance", train[-1]["distance"] if train else None)
            rows.append({
                "run": str(run.path),
                "name": run.name,
                "label": label_of[id(run)],
                "seed": run.settings.get("train.seed"),
                "steps": train[-1]["step"] if train else 0,
                "finished": run.finished,
                "final_distance": final_distance,
                "min_distance": low["distance"] if low else None,
                "min_distance_step": low["step"] if low else None,
                "final_loss": run.train[-1].get("loss") if run.train else None,
                "main": final.get("main") if final else None,
            })
    return rows


def forgetting_table(rows: list[dict[str, Any]]):
    from rich.markup import escape
    from rich.table import Table

    def num(value: Any, digits: str = ".4g") -> str:
        return "–" if value is None else format(value, digits)

    table = Table(title="forgetting: distance ||theta - theta*|| per run")
    for name in ("run", "setting", "seed", "dist end", "dist min", "at step", "loss end", "dev main"):
        width = min(16, max((len(r["label"]) for r in rows), default=8)) if name == "setting" else None
        table.add_column(name, justify="left" if name in ("run", "setting") else "right", min_width=width)
    for r in rows:
        table.add_row(escape(r["name"]) + ("" if r["finished"] else " (unfinished)"), escape(r["label"]), str(r["seed"]),
                      num(r["final_distance"]), num(r["min_distance"]), num(r["min_distance_step"], "d"),
                      num(r["final_loss"]), num(r["main"], ".4f"))
    return table
