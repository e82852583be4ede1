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

`--select-on holdout` (issue 29) chooses on data the report does not score: best, within and the tie
on x read each setting's median holdout score (x at its runs' last holdout evaluation, under
task.holdout: summary.json's final.holdout), and what is reported is dev (final: the dev split scored
once at the end). A run without a holdout score cannot be chosen this way (ReportError: one line, exit
2). Each task's object then also has ``select_on`` ("holdout"), ``holdout`` ({x: the pick's holdout
median}; ``best`` and every candidate carry theirs), ``against`` (vanilla fine-tuning's name and label,
the level, resamples, bootstrap seed, method, ``margin`` W, and under x and y the pick's paired interval
against it: n, seeds, difference, low, high; intervals.py) and ``non_inferior``: true when the x
interval's lower end is above -W points (below +W for a lower-is-better x), false when not, null when
there is no interval (the pick is vanilla, no or several vanilla settings, fewer than 2 shared seeds).
Choosing on dev (the default) prints and returns what it did before.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from ..errors import ReportError
from ..names import TASKS
from ..plugins.probes import probes
from .comparison import TASK_TITLES, dev_label_shares
from .families import RANK, describe
from .intervals import LEVEL
from .runs import Run, _finite
from .tables import lower_is_better, raw_measures

# Floating-point slack at the boundary: 84.5 - 83.5 is 1.0000000000000009 in binary, and within 1.0.
BOUNDARY = 1e-9


def points(metric: str) -> float:
    """A metric's scale in a table: scores and ratios ×100 (points), raw measures as they are."""
    return 1.0 if metric in raw_measures() else 100.0


def check_within(within: float) -> None:
    if not (isinstance(within, (int, float)) and math.isfinite(within) and within >= 0):
        raise ReportError(f"--within {within}: give a finite number of points >= 0 (task score ×100), e.g. --within 1.0")


def whole_recipes(settings: list[dict[str, Any]], runs: list[Run] | None) -> list[dict[str, Any]]:
    """Per tradeoff_points setting, one member run's whole recipe as dotted keys (else its grouping keys)."""
    by_path = {str(run.path): run for run in runs or []}
    out = []
    for s in settings:
        run = by_path.get(s["points"][0]["run"]) if s["points"] else None
        out.append(run.settings if run is not None else s["settings"])
    return out


def names_of(settings: list[dict[str, Any]], runs: list[Run] | None) -> list:
    """families.describe for tradeoff_points' settings: each read with one member run's whole recipe."""
    return describe([(s["settings"], full) for s, full in zip(settings, whole_recipes(settings, runs))])


SELECT_ON = ("dev", "holdout")


def choose_within(runs: list[Run], settings: list[dict[str, Any]], x: str, y: str, within: float,
                  select_on: str = "dev", level: float = LEVEL) -> list[dict[str, Any]]:
    """One object per task, in the figure's panel order: the chosen setting and every candidate.

    ``select_on="holdout"`` chooses on the medians of each setting's holdout scores (x of the runs'
    last holdout evaluation, task.holdout; every run must have one) and reports the dev medians (x),
    adding per task ``select_on``, ``holdout`` ({x: the pick's holdout median}; the best's and each
    candidate's too), ``against`` (the pick's paired intervals against vanilla on x and y, intervals.py)
    and ``non_inferior`` (whether the x interval's worse end is within ``within`` points of 0)."""
    check_within(within)
    if select_on not in SELECT_ON:
        raise ReportError(f"unknown --select-on {select_on!r}: choose dev (today's choice) or holdout")
    _check_every_task_has(runs, settings, x, y)
    holdout = holdout_medians(runs, settings, x) if select_on == "holdout" else None
    out = []
    for task in tasks_in_order(settings):
        members = [s for s in settings if s["task"] == task]
        described = names_of(members, runs)
        rows = []
        row_of: dict[int, dict[str, Any]] = {}  # a setting (by id) -> its row
        vanilla = [s for s, d in zip(members, described) if d.rank[0] == RANK["vanilla"]]
        for s, d in sorted(zip(members, described), key=lambda pair: pair[1].rank):
            mx, my = s["median"]
            row_of[id(s)] = {"name": d.name, "label": s["label"], "settings": overrides(s["settings"]),
                             x: mx, y: my, "n": len(s["points"]),
                             **({"holdout": {x: holdout[id(s)]}} if holdout is not None else {})}
            rows.append(row_of[id(s)])
        on = (lambda r: r["holdout"][x]) if holdout is not None else (lambda r: r[x])
        sign_x = -1.0 if x in lower_is_better() else 1.0
        sign_y = -1.0 if y in lower_is_better() else 1.0
        eligible = rows
        if holdout is not None:  # medians over other seeds are not comparable: only the reference's seeds
            eligible = same_seeds(runs, [(s, row_of[id(s)]) for s in members], vanilla)
        best = max(eligible, key=lambda r: sign_x * on(r))
        ids = {id(r) for r in eligible}
        for r in rows:
            r["within"] = id(r) in ids and sign_x * (on(best) - on(r)) * points(x) <= within + BOUNDARY
        candidates = [r for r in rows if r["within"]]
        chosen = max(candidates, key=lambda r: (sign_y * r[y], sign_x * on(r), -rows.index(r)))
        entry = {"task": task, "name": chosen["name"], "label": chosen["label"], "settings": chosen["settings"],
                 x: chosen[x], y: chosen[y], "n": chosen["n"], "within": within,
                 "best": {"name": best["name"], "label": best["label"], "settings": best["settings"], x: best[x]},
                 "candidates": rows}
        if holdout is not None:
            entry["best"]["holdout"] = best["holdout"]
            pick = next(s for s in members if s["label"] == chosen["label"])
            entry = {**entry, "select_on": "holdout", "holdout": chosen["holdout"],
                     **against_vanilla(runs, pick, vanilla, x, y, within, level)}
        out.append(entry)
    return out


def same_seeds(runs: list[Run], pairs: list[tuple[dict[str, Any], dict[str, Any]]],
               vanilla: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows (of (setting, row) pairs) whose setting ran on exactly the reference's seeds: vanilla's
    (the most-seeded vanilla group's, if several), else the seed set most settings ran on. The others
    get ``eligible: false`` and the seeds they ran: a median over other seeds is over other data, and a
    setting must not be chosen for a lucky seed the others lack (nor for extra seeds they lack)."""
    by_path = {str(run.path): run for run in runs}
    seeds = {id(s): frozenset(by_path[p["run"]].seed for p in s["points"] if p["run"] in by_path) for s, _ in pairs}
    order = lambda found: (len(found), sorted(map(str, found)))  # noqa: E731 - ties: the same choice every time
    if vanilla:
        wanted = max((seeds[id(v)] for v in vanilla), key=order)
    else:
        counts = Counter(seeds.values())
        wanted = max(counts, key=lambda found: (counts[found], *order(found)))
    out = []
    for s, row in pairs:
        if seeds[id(s)] == wanted:
            out.append(row)
        else:
            row["eligible"] = False
            row["seeds"] = sorted(seeds[id(s)], key=str)
    return out


def holdout_medians(runs: list[Run], settings: list[dict[str, Any]], x: str) -> dict[int, float]:
    """Per setting (by id), the median over its runs of x at their last holdout evaluation; ReportError
    (one line, exit 2) naming the runs that have none."""
    import numpy as np

    by_path = {str(run.path): run for run in runs}
    missing: list[Run] = []
    out: dict[int, float] = {}
    for s in settings:
        values = []
        for p in s["points"]:
            run = by_path.get(p["run"])
            record = run.holdout_final() if run is not None else None
            if record is None or not _finite(record.get(x)):
                missing.append(run)
            else:
                values.append(record[x])
        if values:
            out[id(s)] = float(np.median(values))
    if missing:
        total = sum(len(s["points"]) for s in settings)
        records = any(r is not None and r.settings.get("record.merge") is not None for r in missing)
        why = ("trained without task.holdout" + (", or scored records (recall evaluate --record and recall merge "
                                                 "score the dev split only)" if records else ""))
        raise ReportError(f"--select-on holdout: {len(missing)} of the {total} runs have no holdout {x} ({why}), "
                          f"e.g. {missing[0].path if missing[0] is not None else '?'}: train them with task.holdout, "
                          "leave them out of the folders, or choose on dev (--select-on dev)")
    return out


def against_vanilla(runs: list[Run], pick: dict[str, Any], vanilla: list[dict[str, Any]], x: str, y: str,
                    within: float, level: float) -> dict[str, Any]:
    """The pick's paired intervals against the task's vanilla setting over their shared seeds, on dev x
    and on y, and whether x's is within the margin: {"against": ..., "non_inferior": bool or None}."""
    from .intervals import BOOTSTRAP_SEED, METHOD, RESAMPLES, by_seed, paired_interval

    seed_of = {str(run.path): run.seed for run in runs}

    def per_seed(s: dict[str, Any], metric: str) -> dict[Any, float]:
        return by_seed([seed_of.get(p["run"]) for p in s["points"]], [p[metric] for p in s["points"]])

    if len(vanilla) != 1:
        note = ("no vanilla fine-tuning among this task's settings" if not vanilla else
                f"{len(vanilla)} vanilla fine-tuning settings (pass one with --by or fewer folders)")
        return {"against": {"name": None, "note": note}, "non_inferior": None}
    reference = vanilla[0]
    head = {"name": "vanilla fine-tuning", "label": reference["label"], "level": level, "resamples": RESAMPLES,
            "bootstrap_seed": BOOTSTRAP_SEED, "method": METHOD, "margin": within}
    if reference is pick:
        return {"against": {**head, "note": "the pick is vanilla fine-tuning itself"}, "non_inferior": None}
    intervals = {m: paired_interval(per_seed(pick, m), per_seed(reference, m), level) for m in dict.fromkeys((x, y))}
    ix = intervals[x]
    verdict = None
    if ix.low is not None:
        verdict = (ix.high * points(x) < within if x in lower_is_better() else ix.low * points(x) > -within)
    return {"against": {**head, **{m: i.to_dict() for m, i in intervals.items()}}, "non_inferior": verdict}


def overrides(settings: dict[str, Any]) -> dict[str, Any]:
    """A setting's keys that it sets: None (a RecAdam key for adamw, a record key for a trained run) is no setting."""
    return {k: v for k, v in settings.items() if v is not None}


def choice_line(choice: dict[str, Any], x: str, y: str) -> str:
    """Why this setting, in one line: its medians, the best score, how many settings were within W."""
    within = [c for c in choice["candidates"] if c["within"]]
    best = choice["best"]
    who = "itself" if best["label"] == choice["label"] else best["name"]
    most = "lowest" if y in lower_is_better() else "highest"
    unit = "point" if choice["within"] == 1 else "points"
    return (f"{TASK_TITLES.get(choice['task'], choice['task'])}: {choice['name']} — {x} {_shown(choice[x], x)}, "
            f"{y} {_shown(choice[y], y)} (medians of {choice['n']} runs): the {most} {y} of the {len(within)} of "
            f"{len(choice['candidates'])} settings whose {x} is within {choice['within']:g} {unit} of the best, "
            f"{_shown(best[x], x)} ({who})")


def holdout_lines(choice: dict[str, Any], x: str, y: str) -> list[str]:
    """--select-on holdout: why this setting (chosen on the holdout medians), then what it scores on dev
    and its interval against vanilla, with the verdict at margin W."""
    within = [c for c in choice["candidates"] if c["within"]]
    best = choice["best"]
    who = "itself" if best["label"] == choice["label"] else best["name"]
    most = "lowest" if y in lower_is_better() else "highest"
    unit = "point" if choice["within"] == 1 else "points"
    margin = f"{choice['within']:g}"
    first = (f"{TASK_TITLES.get(choice['task'], choice['task'])}: {choice['name']} — chosen on the holdout: {x} "
             f"{_shown(choice['holdout'][x], x)} (holdout median of {choice['n']} run{'s' if choice['n'] != 1 else ''}), "
             f"{y} {_shown(choice[y], y)}: "
             f"the {most} {y} of the {len(within)} of {len(choice['candidates'])} settings whose holdout {x} is within "
             f"{margin} {unit} of the best, {_shown(best['holdout'][x], x)} ({who})")
    fewer = [c for c in choice["candidates"] if c.get("eligible") is False]
    if fewer:
        first += (f"; {len(fewer)} setting{'s' if len(fewer) != 1 else ''} on other seeds than the reference not compared "
                  f"(e.g. {fewer[0]['name']}: seed{'s' if len(fewer[0]['seeds']) != 1 else ''} "
                  f"{', '.join(map(str, fewer[0]['seeds']))})")
    against = choice["against"]
    second = f"  on dev: {x} {_shown(choice[x], x)} (median); "
    if against.get(x) is None:
        return [first, second + f"no interval against vanilla: {against['note']}"]
    ix, iy = against[x], against.get(y)
    if ix["low"] is None:
        return [first, second + f"against vanilla fine-tuning: n/a ({ix['note']})"]
    from .intervals import seeds_text

    parts = [f"{m} {_signed(i['difference'], m)} [{_signed(i['low'], m)}, {_signed(i['high'], m)}]"
             for m, i in ((x, ix), (y, iy)) if i is not None and i["low"] is not None]
    how = (f"the seeds' range, too few for a {100 * against['level']:g}% interval" if ix.get("kind") == "range"
           else f"{100 * against['level']:g}% paired bootstrap, {against['resamples']:,} resamples")
    if choice["non_inferior"]:
        verdict = f"non-inferior at margin {margin}"
    else:
        end, bound = (ix["high"], f"above {margin}") if x in lower_is_better() else (ix["low"], f"below -{margin}")
        verdict = f"not shown non-inferior at margin {margin} (the interval's end {_signed(end, x)} is {bound})"
    return [first, second + f"against vanilla fine-tuning, paired over seeds {seeds_text(ix['seeds'])} (n={ix['n']}): "
            + ", ".join(parts) + f" ({how}): " + verdict]


def _signed(value: float, metric: str) -> str:
    return f"{value * points(metric):+.1f}" if points(metric) != 1.0 else f"{value:+.4g}"


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
        probe = next((p.name for p in probes().values() if y in p.measures), None)
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
