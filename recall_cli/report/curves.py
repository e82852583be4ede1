"""Forgetting curves: runs grouped by setting (seeds pooled), their distance and loss per step, a table per run.

plots.py draws the groups (the paper's Figure 2); probe_tables.py and probe_plots.py read their probe records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..names import is_vanilla
from .comparison import TASK_TITLES
from .labels import _sort_key, group_label
from .runs import Run, _finite, _key, differing_keys, resolve_key


@dataclass
class CurveGroup:
    label: str
    settings: dict[str, Any]
    runs: list[Run]
    shown: dict[str, Any] | None = None  # the keys the label names (a figure's legend names them in words)

    @property
    def is_vanilla(self) -> bool:
        return all(is_vanilla(r.settings.get("optimizer.name")) for r in self.runs)

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
        groups.append(CurveGroup(text, {k: first.settings.get(k) for k in differing}, members, shown))
    # Two groups with one label (the label key alone does not tell them apart): name every setting
    # that differs, on every curve, so that the legend reads one way.
    if len({g.label for g in groups}) < len(groups):
        for g in groups:
            prefix = f"{TASK_TITLES.get(g.runs[0].task, g.runs[0].task)}: " if len(tasks) > 1 else ""
            g.label = prefix + group_label(dict(g.settings)) if g.settings else g.label
            g.shown = dict(g.settings)
    groups.sort(key=lambda g: [_sort_key(k, g.settings.get(k)) for k in differing] + [g.label])
    return groups


def group_names(groups: list[CurveGroup]) -> list[str]:
    """What the figures' legends call each group (families.describe; plots.legend_entries): "WiSE-FT
    α=0.75", the task first where there are several; the label where the group names no key."""
    from .families import describe

    tasks = {run.task for g in groups for run in g.runs}
    described = describe([(g.shown if g.shown is not None else g.settings, g.runs[0].settings) for g in groups])
    names = []
    for group, d in zip(groups, described):
        name = d.name
        if not (group.shown if group.shown is not None else group.settings) or not name:
            name = group.label
        elif len(tasks) > 1:
            name = f"{TASK_TITLES.get(group.runs[0].task, group.runs[0].task)}: {name}"
        names.append(name)
    return names


def forgetting_rows(runs: list[Run], groups: list[CurveGroup]) -> list[dict[str, Any]]:
    """Per run: final distance, minimum distance and its step, final train loss, final main dev metric;
    ``label`` (the grouping keys) and ``setting`` (the figures' name) of its group."""
    label_of = {id(run): g.label for g in groups for run in g.runs}
    name_of = {id(run): name for g, name in zip(groups, group_names(groups)) for run in g.runs}
    rows = []
    for group in groups:
        for run in group.runs:
            train = [r for r in run.train if _finite(r.get("distance"))]
            low = min(train, key=lambda r: r["distance"]) if train else None
            final = run.eval_at("final")
            final_distance = run.summary.final_distance if run.summary else None
            if final_distance is None and train:  # a run that has not finished: its last logged distance
                final_distance = train[-1]["distance"]
            rows.append({
                "run": str(run.path),
                "name": run.name,
                "label": label_of[id(run)],
                "setting": name_of[id(run)],
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


def forgetting_plain(rows: list[dict[str, Any]]):
    """The per-run table fitted to a terminal or a pipe (text.py): the setting's name as the figures
    say it; the minimum distance's step, the minimum, the loss and the seed are left out first."""
    from .text import Column, PlainTable

    def num(value: Any, digits: str = ".4g") -> str:
        return "–" if value is None else format(value, digits)

    columns = [Column("run", soft=20, least=10, cut="start"), Column("setting", soft=24, least=12),
               Column("seed", right=True, drop=3), Column("dist end", right=True),
               Column("dist min", right=True, drop=5), Column("at step", right=True, drop=6),
               Column("loss end", right=True, drop=4), Column("dev main", right=True)]
    table = [[r["name"] + ("" if r["finished"] else " (unfinished)"), r["setting"], str(r["seed"]),
              num(r["final_distance"]), num(r["min_distance"]), num(r["min_distance_step"], "d"),
              num(r["final_loss"]), num(r["main"], ".4f")] for r in rows]
    return PlainTable("forgetting: distance ||theta - theta*|| per run", columns, table)
