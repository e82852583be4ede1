"""Rendering a comparison: the wide table (rich, markdown), one object per cell (json, csv), its title and notes."""

from __future__ import annotations

import csv
import io
from typing import Any

from ..errors import ReportError
from ..names import PROBE_MEASURES, PROBES
from ..rundir import dumps_strict
from .comparison import RUN_MEASURES, TASK_TITLES, Comparison, Group, _fmt_setting

FORMATS = ("table", "markdown", "csv", "json")
# PROBE_MEASURES: the scalar fields of metrics.jsonl's probe records (names.PROBES), usable as --metric.
# Shown as they are, not x100 like scores and ratios; and where smaller is better ("best" in a column).
RAW_MEASURES = ("distance", "train_seconds", *(m for p in PROBES.values() for m in p.raw))
LOWER_IS_BETTER = ("distance", "train_seconds", *(m for p in PROBES.values() for m in p.lower_is_better))


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
        return dumps_strict(to_records(result), indent=2) + "\n"
    if fmt == "csv":
        return to_csv(result)
    if fmt == "markdown":
        return markdown(result)
    raise ReportError(f"unknown --format {fmt!r}: choose {', '.join(FORMATS)}")
