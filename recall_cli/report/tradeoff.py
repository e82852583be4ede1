"""The trade-off's choice: per task, the setting that keeps the most skill among those that score
within W points of the best (`recall tradeoff --within W`), and what constant prediction scores.

Reads the per-setting points of probe_tables.tradeoff_points (medians over seeds) and names the
settings with families.describe; probe_plots.py marks the choice on the figure.

    best       the setting with the best median task score (x)
    within     every setting whose median x is at most W points below it (points: x ×100, as the
               tables print it; the boundary counts as within)
    chosen     among those, the highest median y (the lowest for a lower-is-better y such as drift);
               a tie goes to the better x, then to the earlier setting

`--json` prints ``choose_within``'s list: per task ``task``, ``name`` (the figure's words), ``label``
(the group label), ``settings`` (the chosen setting's keys, dotted, without the ones it leaves unset),
the medians under the metrics' names (``main``, ``sts_retained``), ``n`` runs, ``within`` (W),
``best`` (the best setting's name, label, settings and median x) and ``candidates`` (every setting of
the task with its medians, n and ``within``: true when it was in the band).
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import ReportError
from ..names import PROBES, TASKS
from .comparison import TASK_TITLES, dev_label_shares
from .families import describe
from .runs import Run, _finite
from .tables import LOWER_IS_BETTER, RAW_MEASURES

# Floating-point slack at the boundary: 84.5 - 83.5 is 1.0000000000000009 in binary, and within 1.0.
BOUNDARY = 1e-9


def points(metric: str) -> float:
    """A metric's scale in a table: scores and ratios ×100 (points), raw measures as they are."""
    return 1.0 if metric in RAW_MEASURES else 100.0


def check_within(within: float) -> None:
    if not (isinstance(within, (int, float)) and math.isfinite(within) and within >= 0):
        raise ReportError(f"--within {within}: give a finite number of points >= 0 (task score ×100), e.g. --within 1.0")


def names_of(settings: list[dict[str, Any]], runs: list[Run] | None) -> list:
    """families.describe for tradeoff_points' settings: each read with one member run's whole recipe."""
    by_path = {str(run.path): run for run in runs or []}
    pairs = []
    for s in settings:
        run = by_path.get(s["points"][0]["run"]) if s["points"] else None
        pairs.append((s["settings"], run.settings if run is not None else s["settings"]))
    return describe(pairs)


def choose_within(runs: list[Run], settings: list[dict[str, Any]], x: str, y: str, within: float) -> list[dict[str, Any]]:
    """One object per task, in the figure's panel order: the chosen setting and every candidate."""
    check_within(within)
    _check_every_task_has(runs, settings, x, y)
    out = []
    for task in tasks_in_order(settings):
        members = [s for s in settings if s["task"] == task]
        described = names_of(members, runs)
        rows = []
        for s, d in sorted(zip(members, described), key=lambda pair: pair[1].rank):
            mx, my = s["median"]
            rows.append({"name": d.name, "label": s["label"], "settings": overrides(s["settings"]),
                         x: mx, y: my, "n": len(s["points"])})
        sign_x = -1.0 if x in LOWER_IS_BETTER else 1.0
        sign_y = -1.0 if y in LOWER_IS_BETTER else 1.0
        best = max(rows, key=lambda r: sign_x * r[x])
        for r in rows:
            r["within"] = sign_x * (best[x] - r[x]) * points(x) <= within + BOUNDARY
        candidates = [r for r in rows if r["within"]]
        chosen = max(candidates, key=lambda r: (sign_y * r[y], sign_x * r[x], -rows.index(r)))
        out.append({"task": task, "name": chosen["name"], "label": chosen["label"], "settings": chosen["settings"],
                    x: chosen[x], y: chosen[y], "n": chosen["n"], "within": within,
                    "best": {"name": best["name"], "label": best["label"], "settings": best["settings"], x: best[x]},
                    "candidates": rows})
    return out


def overrides(settings: dict[str, Any]) -> dict[str, Any]:
    """A setting's keys that it sets: None (a RecAdam key for adamw, a record key for a trained run) is no setting."""
    return {k: v for k, v in settings.items() if v is not None}


def choice_line(choice: dict[str, Any], x: str, y: str) -> str:
    """Why this setting, in one line: its medians, the best score, how many settings were within W."""
    within = [c for c in choice["candidates"] if c["within"]]
    best = choice["best"]
    who = "itself" if best["label"] == choice["label"] else best["name"]
    most = "lowest" if y in LOWER_IS_BETTER else "highest"
    unit = "point" if choice["within"] == 1 else "points"
    return (f"{TASK_TITLES.get(choice['task'], choice['task'])}: {choice['name']} — {x} {_shown(choice[x], x)}, "
            f"{y} {_shown(choice[y], y)} (medians of {choice['n']} runs): the {most} {y} of the {len(within)} of "
            f"{len(choice['candidates'])} settings whose {x} is within {choice['within']:g} {unit} of the best, "
            f"{_shown(best[x], x)} ({who})")


def _shown(value: float, metric: str) -> str:
    return f"{value * points(metric):.1f}" if points(metric) != 1.0 else f"{value:.4g}"


def tasks_in_order(settings: list[dict[str, Any]]) -> list[str]:
    order = list(TASK_TITLES)  # the paper's column order, as in recall compare
    return sorted(dict.fromkeys(s.get("task") for s in settings),
                  key=lambda t: (order.index(t) if t in order else len(order), str(t)))


def _check_every_task_has(runs: list[Run], settings: list[dict[str, Any]], x: str, y: str) -> None:
    """A task whose finished runs score x but none measured y (probes off) cannot be chosen for: say so."""
    shown = {s["task"] for s in settings}
    scored: dict[str, int] = {}
    for run in runs:
        record = run.eval_at("final") if run.finished else None
        if record and _finite(record.get(x)) and run.task not in shown:
            scored[run.task] = scored.get(run.task, 0) + 1
    if scored:
        task, n = next(iter(scored.items()))
        probe = next((p.name for p in PROBES.values() if y in p.measures), None)
        which = f" (probe.enabled false, or no {probe} in probe.probes)" if probe else ""
        raise ReportError(f"task {task}: none of its {n} finished runs has {y} at its final step: probes were off "
                          f"for them{which}; train them with probes on, score them with recall evaluate --record, "
                          "or tradeoff a folder without them")


def constant_scores(runs: list[Run], x: str) -> dict[str, float]:
    """Per task, what a model that predicts one class for every example scores on x, where it is known:
    MCC 0; accuracy the majority class's share of the dev examples (read from a local copy of the data)."""
    out: dict[str, float] = {}
    for run in runs:
        if run.task in out:
            continue
        task = TASKS.get(run.task)
        metric = task.main_metric if x == "main" and task is not None else x
        if metric == "mcc":
            out[run.task] = 0.0
        elif metric == "accuracy" and (shares := dev_label_shares(run.settings)):
            out[run.task] = max(shares.values())
    return out
