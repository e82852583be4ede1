"""Reading the probe records of run directories: curves, final per-layer CKA, tables, trade-off points.

This module reads what recall_cli/probes wrote to metrics.jsonl (``split: "probe"``); probe_plots.py
draws it. Runs without probe records (written
before probes existed, or with probe.enabled false) simply have nothing here.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ReportError
from ..plugins.probes import probe_measures, probes
from .comparison import RUN_MEASURES
from .labels import group_label
from .curves import CurveGroup
from .runs import Run, _finite, _key, differing_keys, resolve_key

# The retained-skill curve: STS where the runs measured it, else the MLM loss ratio.
def skill_fields() -> tuple[str, ...]:
    return tuple(p.skill for p in probes().values() if p.skill)


def skill_titles() -> dict[str, str | None]:
    return {p.skill: p.skill_title for p in probes().values() if p.skill}


def has_probes(runs: list[Run]) -> bool:
    return any(run.probes for run in runs)


def skill_field(runs: list[Run]) -> str | None:
    for name in skill_fields():
        if any(_finite(r.get(name)) for run in runs for r in run.probes):
            return name
    return None


def final_layers(group: CurveGroup, field: str = "cka_layers") -> np.ndarray:
    """Per layer, the median over the group's runs of their last probe record's ``field``."""
    rows = []
    for run in group.runs:
        last = next((r for r in reversed(run.probes) if isinstance(r.get(field), list)), None)
        if last is not None:
            rows.append([v if _finite(v) else math.nan for v in last[field]])
    if not rows or len({len(r) for r in rows}) != 1:
        return np.array([])
    return np.nanmedian(np.array(rows, dtype=np.float64), axis=0)


def probe_rows(groups: list[CurveGroup]) -> list[dict[str, Any]]:
    """Per run with probe records: its first and last probe's measures."""
    from .curves import group_names

    rows = []
    for group, setting in zip(groups, group_names(groups)):
        for run in group.runs:
            if not run.probes:
                continue
            first, last = run.probes[0], run.probes[-1]
            row = {"run": str(run.path), "name": run.name, "label": group.label, "setting": setting,
                   "seed": run.settings.get("train.seed"),
                   "first_step": first["step"], "last_step": last["step"]}
            for name in ("sts", "sts_retained", "mlm_ratio", "cka", "cka_debiased", "drift", *_LM_FIELDS):
                row[name] = last.get(name)
            row["sts_start"] = first.get("sts")
            rows.append(row)
    return rows


def _num(value: Any, digits: str = ".3f") -> str:
    return "–" if not _finite(value) else format(value, digits)


def _table(title: str, columns: tuple[str, ...], text_columns: int, rows: list[list[str]]):
    """A rich table whose first ``text_columns`` columns are names (left, wrapping) and the rest numbers."""
    from rich.table import Table

    table = Table(title=title)
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i < text_columns else "right", no_wrap=i >= text_columns)
    for row in rows:
        table.add_row(*row)
    return table


def probe_rows_table(rows: list[dict[str, Any]]):
    from rich.markup import escape

    if _lm_runs(rows):
        return _table(_LM_RUNS_TITLE, ("run", "setting", "step", *_LM_COLUMNS), 2,
                      [[escape(r["name"]), escape(r["label"]), str(r["last_step"]), *_lm_cells(r)] for r in rows])
    return _table("probes vs theta* at the last probed step (kept = STS rho ratio, MLM = loss ratio)",
                  ("run", "setting", "step", "STS", "kept", "MLM", "CKA", "CKA-d", "drift"), 2,
                  [[escape(r["name"]), escape(r["label"]), str(r["last_step"]), _num(r["sts"]), _bold(r["sts_retained"]),
                    _num(r["mlm_ratio"]), _num(r["cka"]), _num(r["cka_debiased"]), _num(r["drift"])] for r in rows])


def _bold(value: Any) -> str:
    return f"[bold]{_num(value)}[/bold]" if _finite(value) else "–"


def probe_rows_plain(rows: list[dict[str, Any]]):
    """probe_rows_table fitted to a terminal or a pipe (text.py): kept skill bold on a terminal only."""
    from .text import Column, PlainTable

    if _lm_runs(rows):
        columns = [Column("run", soft=20, least=10, cut="start"), Column("setting", soft=24, least=12),
                   Column("step", right=True, drop=4), *(Column(name, right=True) for name in _LM_COLUMNS)]
        return PlainTable(_LM_RUNS_TITLE, columns, [[r["name"], r["setting"], str(r["last_step"]), *_lm_cells(r)]
                                                    for r in rows], {(i, c) for i in range(len(rows)) for c in (5, 7, 9)})
    columns = [Column("run", soft=20, least=10, cut="start"), Column("setting", soft=24, least=12),
               Column("step", right=True, drop=4), Column("STS", right=True, drop=3), Column("kept", right=True),
               Column("MLM", right=True, drop=5), Column("CKA", right=True), Column("CKA-d", right=True, drop=6),
               Column("drift", right=True, drop=2)]
    table = [[r["name"], r["setting"], str(r["last_step"]), _num(r["sts"]), _num(r["sts_retained"]), _num(r["mlm_ratio"]),
              _num(r["cka"]), _num(r["cka_debiased"]), _num(r["drift"])] for r in rows]
    return PlainTable("probes vs theta* at the last probed step (kept = STS rho ratio, MLM = loss ratio)", columns,
                      table, {(i, 4) for i in range(len(rows))})


def probe_plain(rows: list[dict[str, Any]]):
    """`recall probe`'s table fitted to a terminal or a pipe: targets cut from the start (their last
    folders stay), θ*'s column, CKA-d, the MLM loss and drift left out first; retained values bold on
    a terminal only."""
    from .text import Column, PlainTable

    if _lm(rows):
        columns = [Column("target", soft=28, least=12, cut="start"), Column("theta*", soft=16, least=8, cut="start", drop=3),
                   *(Column(name, right=True) for name in _LM_COLUMNS)]
        return PlainTable("a causal LM's probes against theta* (kept: 1 is theta*'s own)", columns,
                          [[r["target"], r["reference"], *_lm_cells(r)] for r in rows],
                          {(i, c) for i in range(len(rows)) for c in (4, 6, 8)})
    columns = [Column("target", soft=28, least=12, cut="start"), Column("theta*", soft=16, least=8, cut="start", drop=6),
               Column("STS", right=True, drop=3), Column("kept", right=True), Column("CKA", right=True),
               Column("CKA-d", right=True, drop=5), Column("drift", right=True, drop=2), Column("MLM", right=True, drop=4),
               Column("ratio", right=True)]
    table = [[r["target"], r["reference"], _num(r.get("sts")), _num(r.get("sts_retained")), _num(r.get("cka")),
              _num(r.get("cka_debiased")), _num(r.get("drift"), ".4f"), _num(r.get("mlm_loss")), _num(r.get("mlm_ratio"))]
             for r in rows]
    return PlainTable("probes against theta* (retained values in bold on a terminal; CKA-d: debiased)", columns, table,
                      {(i, c) for i in range(len(rows)) for c in (3, 4, 8)})


def probe_table(rows: list[dict[str, Any]]):
    """`recall probe`: one row per target, retained values in bold."""
    from rich.markup import escape

    if _lm(rows):
        return _table("a causal LM's probes against theta* (kept: 1 is theta*'s own)", ("target", "theta*", *_LM_COLUMNS), 2,
                      [[escape(r["target"]), escape(r["reference"]), *_lm_cells(r)] for r in rows])
    return _table("probes against theta* (retained values in bold; CKA-d: debiased)",
                  ("target", "theta*", "STS", "kept", "CKA", "CKA-d", "drift", "MLM", "ratio"), 2,
                  [[escape(r["target"]), escape(r["reference"]), _num(r.get("sts")), _bold(r.get("sts_retained")),
                    _bold(r.get("cka")), _num(r.get("cka_debiased")), _num(r.get("drift"), ".4f"),
                    _num(r.get("mlm_loss")), _bold(r.get("mlm_ratio"))] for r in rows])


_LM_COLUMNS = ("LM loss", "ref loss", "kept", "KL", "kept", "choice", "kept")
_LM_FIELDS = ("lm_loss", "lm_loss_ref", "lm_kept", "kl", "kl_kept", "choice_acc", "choice_kept")
_LM_RUNS_TITLE = "a causal LM's probes vs theta* at the last probed step (kept: 1 is theta*'s own)"


def _lm_runs(rows: list[dict[str, Any]]) -> bool:
    """probe_rows of causal LMs alone: some LM measure, no encoder one."""
    return (any(_finite(r.get(k)) for r in rows for k in ("lm_loss", "kl", "choice_acc"))
            and not any(_finite(r.get(k)) for r in rows for k in ("sts", "cka")))


def _lm(rows: list[dict[str, Any]]) -> bool:
    """Rows of a causal LM's probes alone (lm, kl, choice): their own columns."""
    return (any("lm_loss" in r or "kl" in r or "choice_acc" in r for r in rows)
            and not any("sts" in r or "cka" in r for r in rows))


def _lm_cells(r: dict[str, Any]) -> list[str]:
    return [_num(r.get("lm_loss")), _num(r.get("lm_loss_ref")), _num(r.get("lm_kept")), _num(r.get("kl"), ".4f"),
            _num(r.get("kl_kept")), _num(r.get("choice_acc")), _num(r.get("choice_kept"))]


def tradeoff_points(runs: list[Run], x: str, y: str, by: list[str],
                    warn: Callable[[str], None] = lambda message: None) -> list[dict[str, Any]]:
    """Per setting: each finished run's (final eval x, final probe y) and the medians. A run whose x or
    y is NaN or inf is named in ``warn`` (load_runs has named a summary.json that cannot be read: the
    run reads as unfinished); unfinished runs and runs without y (probes off) are left out quietly."""
    check_metrics(runs, x, y)
    keys = [resolve_key(k) for k in by] if by else differing_keys(runs)
    settings: dict[str, dict[str, Any]] = {}
    not_finite = 0
    for run in runs:
        if not run.finished:
            continue
        record = run.eval_at("final")
        if not record:
            continue
        bad = [f"{m} is {record[m]}" for m in dict.fromkeys((x, y))
               if m in record and record[m] is not None and not _finite(record[m])]
        if bad:
            warn(f"{run.path}: left out: {' and '.join(bad)} at its final step {record.get('step')}")
            not_finite += 1
            continue
        if not _finite(record.get(x)) or not _finite(record.get(y)):
            continue
        chosen = {k: run.settings.get(k) for k in keys}
        # One entry per (task, setting): scores of different tasks are not on one scale (MCC vs accuracy),
        # so the figure gives each task its own panel, and a setting keeps its label and colour across them.
        entry = settings.setdefault(_key({"task.name": run.task, **chosen}),
                                    {"label": group_label(chosen) if chosen else "all runs", "task": run.task,
                                     "settings": chosen, "points": []})
        entry["points"].append({"run": str(run.path), x: record[x], y: record[y]})
    if not settings and not_finite:
        raise ReportError(f"no finished run has a finite {x} (eval) and {y} (probe) at its final step: "
                          f"{not_finite} {'were' if not_finite > 1 else 'was'} left out for NaN or inf (the warnings "
                          "above name them)")
    if not settings:
        raise ReportError(f"no finished run records both {x} (eval) and {y} (probe) at its final step: "
                          "were the runs trained with probes on (probe.enabled, probe.probes)?")
    out = list(settings.values())
    for s in out:
        s["median"] = [float(np.median([p[x] for p in s["points"]])), float(np.median([p[y] for p in s["points"]]))]
    return out


def check_metrics(runs: list[Run], x: str, y: str) -> None:
    """--x and --y must name something the runs record (an eval metric, a probe measure, distance); a
    probe measure that no run recorded is left to tradeoff_points' "probes off" message."""
    known = sorted({k for run in runs for r in run.evals + run.probes for k, v in r.items()
                    if k not in ("step", "split", "data") and not isinstance(v, list)}
                   | {k for run in runs for k in RUN_MEASURES if k in (run.eval_at("final") or {})})
    for option, metric in (("--x", x), ("--y", y)):
        if metric not in known and metric not in probe_measures():
            close = difflib.get_close_matches(metric, known, n=1, cutoff=0.6)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ReportError(f"unknown {option} metric '{metric}'{hint}: these runs record {', '.join(known) or 'no metrics'}")
