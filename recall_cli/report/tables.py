"""Rendering a comparison: the wide table (rich, markdown), one object per cell (json, csv), its title and notes."""

from __future__ import annotations

import csv
import io
from typing import Any

from ..errors import ReportError
from ..names import MEASURE_WORDS
from ..plugins.probes import probe_measures, probes
from ..rundir import dumps_strict
from .comparison import RUN_MEASURES, TASK_TITLES, Comparison, Group
from .labels import _fmt_setting

FORMATS = ("table", "markdown", "csv", "json")


# The probes' measures (plugins/probes.py; a plugin's too, so read when asked, not at import): the scalar
# fields of metrics.jsonl's probe records, usable as --metric (probe_measures); those shown as they are, not
# x100 like scores and ratios; and those where smaller is better ("best" in a column).
def raw_measures() -> tuple[str, ...]:
    return ("distance", "train_seconds", *(m for p in probes().values() for m in p.raw))


def lower_is_better() -> tuple[str, ...]:
    return ("distance", "train_seconds", *(m for p in probes().values() for m in p.lower_is_better))


_READ_WHEN_ASKED = {"RAW_MEASURES": raw_measures, "LOWER_IS_BETTER": lower_is_better, "PROBE_MEASURES": probe_measures}


def __getattr__(name: str) -> Any:
    if name in _READ_WHEN_ASKED:  # the names earlier versions offered
        return _READ_WHEN_ASKED[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


LABELS = ("names", "keys")


def to_records(result: Comparison) -> list[dict[str, Any]]:
    """One object per (group, task): what --format json prints and scripts rely on. ``group`` spells the
    grouping keys (stable: scripts match it); ``name`` is what the tables and figures call the setting;
    ``seeds`` the train.seed of each value; with --against, ``against`` (against_record)."""
    out = []
    for group in result.groups:
        for task in result.tasks:
            cell = group.cells.get(task)
            if cell is None:
                continue
            out.append({
                **group.settings,
                "group": group.label,
                "name": group.name,
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
                "seeds": cell.seeds,
                "flagged": cell.flagged,
                **({"selected": cell.selected, "candidates": cell.candidates} if cell.selected is not None else {}),
                **({"against": against_record(result, group, task)} if result.against is not None else {}),
            })
    return out


def against_record(result: Comparison, group: Group, task: str) -> dict[str, Any]:
    """--against in JSON: the reference, the method, and per metric the interval (intervals.Interval)."""
    from .intervals import BOOTSTRAP_SEED, METHOD, RESAMPLES

    against = result.against
    ref = against.reference
    out: dict[str, Any] = {"name": ref.name, "group": ref.label, "level": against.level, "resamples": RESAMPLES,
                           "bootstrap_seed": BOOTSTRAP_SEED, "method": METHOD}
    if group is ref:
        return {**out, "reference": True}
    for metric in against.metrics:
        interval = against.intervals.get((group.label, task, metric))
        out[metric] = interval.to_dict() if interval is not None else {
            "n": 0, "seeds": [], "difference": None, "low": None, "high": None,
            "note": f"{ref.name} has no runs on this task"}
    return out


def _diff(value: float | None, metric: str) -> str:
    if value is None:
        return "n/a"
    if metric in raw_measures():
        return f"{value:+.3g}"
    return f"{100 * value:+.1f}"


def _against_rows(result: Comparison, group: Group, columns: list[tuple[str, Any]]) -> list[list[tuple[str, bool]]]:
    """Per metric, a "Δ metric" row (the mean paired difference) and a "95% CI" row under it ("range"
    where its intervals are over fewer than 5 seeds: intervals.py)."""
    from .intervals import band_label

    against = result.against
    if against is None or group is against.reference:
        return []
    rows = []
    for metric in against.metrics:
        shown = MEASURE_WORDS.get(metric, metric)
        diff: list[tuple[str, bool]] = [("", False), (f"Δ {shown}", False)]
        band: list[tuple[str, bool]] = [("", False), ("", False)]
        kinds = set()
        for _, column in columns:
            interval = against.intervals.get((group.label, column, metric)) if isinstance(column, str) else None
            if not isinstance(column, str) or column not in group.cells:
                diff.append(("", False))
                band.append(("", False))
            elif interval is None or interval.difference is None:
                diff.append(("n/a", False))
                band.append(("n/a", False))
            else:
                if interval.low is not None:
                    kinds.add(interval.kind)
                diff.append((_diff(interval.difference, metric), False))
                band.append(("n/a" if interval.low is None else
                             f"[{_diff(interval.low, metric)}, {_diff(interval.high, metric)}]", False))
        band[1] = (band_label(kinds or {"bootstrap"}, against.level), False)
        rows += [diff, band]
    return rows


def _pct(value: float | None, metric: str = "main") -> str:
    if value is None:
        return "–"
    if metric in raw_measures():
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


def _rows(result: Comparison, labels: str = "keys") -> tuple[list[str], list[list[tuple[str, bool]]]]:
    """Header and rows of the wide table; each cell is (text, is the best of its column for that stat).
    ``labels``: "keys" names each row by its grouping keys (group.label), "names" as the figures do."""
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
                best[(stat, i)] = min(values) if result.metric in lower_is_better() else max(values)
    header = ["", "" if len(stats) == 1 else "stat"] + [title for title, _ in columns]
    rows = []
    for group in result.groups:
        for j, stat in enumerate(stats):
            row = [(_label(group, labels) if j == 0 else "", False), (stat if stat != "mean" else "mean ± std", False)]
            for i, (_, column) in enumerate(columns):
                text, value = _cell_text(result, group, stat, column)
                row.append((text, value is not None and best.get((stat, i)) == value))
            rows.append(row)
        rows += _against_rows(result, group, columns)
    if result.against is not None and header[1] == "":
        header[1] = "stat"
    return header, rows


def _label(group: Group, labels: str) -> str:
    if labels not in LABELS:
        raise ReportError(f"unknown --labels {labels!r}: choose names (as the figures call a setting) or keys "
                          "(the grouping keys spelled out)")
    return group.name if labels == "names" else group.label


def title(result: Comparison) -> str:
    ns = sorted({cell.n for g in result.groups for cell in g.cells.values()})
    seeds = f"n={ns[0]} runs per cell" if len(ns) == 1 else "n runs per cell in the n rows"
    kind = "probe" if result.metric in probe_measures() else "run" if result.metric in RUN_MEASURES else "dev"
    scale = "" if result.metric in raw_measures() else " x100"
    lower = ", lower is better" if result.metric in lower_is_better() else ""
    return f"{kind} {result.metric}{scale} ({result.at} eval{lower}), over seeds: {seeds}"


def notes(result: Comparison, labels: str = "keys") -> list[str]:
    lines = []
    for group in result.groups:
        label = _label(group, labels)
        for cell in group.cells.values():
            if cell.selected and cell.candidates > 1:
                chosen = ", ".join(f"{k}={_fmt_setting(v)}" for k, v in cell.selected.items() if v is not None) \
                    or ("the trained runs, no merge" if all(k.startswith("record.") for k in cell.selected)
                        else "every selection key unset")
                lines.append(f"{label} / {TASK_TITLES.get(cell.task, cell.task)}: {chosen} "
                             f"(best median on dev of {cell.candidates} settings)")
            for item in cell.flagged:
                lines.append(f"* {label} / {cell.task}: {item['run']}: {item['reason']}")
    for title_, tasks in result.averages:
        lines.append(f"{title_}: mean over {', '.join(TASK_TITLES.get(t, t) for t in tasks)}")
    if result.against is not None:
        lines += against_notes(result)
    return lines + result.remarks


def against_notes(result: Comparison) -> list[str]:
    """What the Δ and CI rows are, over which seeds, and which cells have none."""
    from .intervals import BOOTSTRAP_SEED, RANGE_BELOW, RESAMPLES

    against = result.against
    scale = "" if result.metric in raw_measures() else " (x100: points)"
    kept = f" and of the kept skill ({against.metrics[1]} x100)" if len(against.metrics) > 1 else ""
    kinds = {i.kind for i in against.intervals.values() if i.low is not None}
    what = []
    if kinds - {"range"} or not kinds:
        what.append(f"{100 * against.level:g}% CI: paired bootstrap percentile interval, {RESAMPLES:,} resamples of "
                    f"those seeds (numpy default_rng({BOOTSTRAP_SEED}))")
    if "range" in kinds:
        what.append(f"range: the lowest and highest per-seed difference (fewer than {RANGE_BELOW} seeds: too few "
                    f"for a confidence interval)")
    return [f"Δ: each setting minus {against.reference.name}, per task: the mean over the seeds both ran of the "
            f"per-seed difference of {result.metric}{scale}{kept}; {'; '.join(what)}", *against.notes]


def rich_table(result: Comparison, labels: str = "names"):
    from rich.markup import escape
    from rich.table import Table

    header, rows = _rows(result, labels)
    table = Table(title=title(result))
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i < 2 else "right")
    for row in rows:
        table.add_row(*(f"[bold green]{escape(text)}[/]" if best else escape(text) for text, best in row))
    return table


def plain_table(result: Comparison, labels: str = "names"):
    """The table fitted to a terminal or a pipe (text.py): the averages over tasks are left out first,
    then the names are cut; the tasks' columns always stay."""
    from .text import Column, PlainTable

    header, rows = _rows(result, labels)
    columns = [Column(header[0] or "setting", soft=28, least=12), Column(header[1])]
    for title_ in header[2:]:
        drop = {"Avg <10k": 3, "Avg >10k": 3, "Avg": 2}.get(title_, 0) if title_ not in TASK_TITLES.values() else 0
        columns.append(Column(title_, right=True, drop=drop))
    bold = {(r, c) for r, row in enumerate(rows) for c, (_, best) in enumerate(row) if best}
    return PlainTable(title(result), columns, [[text for text, _ in row] for row in rows], bold)


def markdown(result: Comparison, labels: str = "keys") -> str:
    header, rows = _rows(result, labels)
    lines = [f"| {' | '.join(header)} |", "|" + "|".join(["---", "---"] + ["---:"] * (len(header) - 2)) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(f"**{t}**" if best and t else t for t, best in row) + " |")
    lines.append("")
    lines.append(f"{title(result)}; best per column in bold.")
    lines += [f"{line}  " if not line.startswith("*") else f"\\{line}  " for line in notes(result, labels)]
    return "\n".join(lines) + "\n"


def to_csv(result: Comparison) -> str:
    """One row per (group, task), as JSON; with --against, per metric M the columns M_diff, M_low, M_high,
    M_n and M_seeds (seeds joined by ;)."""
    buffer = io.StringIO()
    records = to_records(result)
    keys = result.keys + ["group", "name", "task", "metric", "at", "n", "median", "max", "mean", "std", "min", "runs",
                          "seeds", "flagged"]
    metrics = result.against.metrics if result.against is not None else []
    keys += ["against"] + [f"{m}_{part}" for m in metrics for part in ("diff", "low", "high", "n", "seeds")] if metrics else []
    writer = csv.DictWriter(buffer, fieldnames=keys, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for record in records:
        row = dict(record)
        row["runs"] = ";".join(record["runs"])
        row["seeds"] = ";".join(str(s) for s in record["seeds"])
        row["flagged"] = ";".join(f"{f['run']}: {f['reason']}" for f in record["flagged"])
        if metrics:
            against = record["against"]
            row["against"] = against["name"]
            for m in metrics:
                interval = against.get(m) or {}
                row.update({f"{m}_diff": interval.get("difference"), f"{m}_low": interval.get("low"),
                            f"{m}_high": interval.get("high"), f"{m}_n": interval.get("n"),
                            f"{m}_seeds": ";".join(str(s) for s in interval.get("seeds", []))})
        writer.writerow(row)
    return buffer.getvalue()


def render(result: Comparison, fmt: str, labels: str = "keys") -> str:
    """markdown, csv or json as text (the table is printed by the CLI). ``labels`` names markdown's rows
    (csv and json carry both: ``group``, the keys, and ``name``)."""
    if fmt == "json":
        return dumps_strict(to_records(result), indent=2) + "\n"
    if fmt == "csv":
        return to_csv(result)
    if fmt == "markdown":
        return markdown(result, labels)
    raise ReportError(f"unknown --format {fmt!r}: choose {', '.join(FORMATS)}")
