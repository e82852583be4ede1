"""Tables as plain text fitted to a width: what compare, forgetting and probe print at 100 columns or fewer.

The same characters go to a terminal and to a pipe (a terminal also gets bold where a table marks a
value, through rich styles; a pipe gets none, and no markup such as ``**``). A table that does not fit
gives up width in this order, until it fits:

    1. name columns (a setting, a run's folder) are cut to ``soft`` characters, with "…"
    2. columns with a drop rank are left out, the highest rank first (the ones a reader misses least)
    3. name columns are cut further, down to ``least`` characters

What was left out is said in a line under the table. A table that still does not fit (a very narrow
terminal) is printed as it is then.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

FIT_WIDTH = 100  # at this width or less, tables are fitted; wider, the full markdown table when it fits
GAP = "  "
ELLIPSIS = "…"


@dataclass
class Column:
    header: str
    right: bool = False  # numbers: right-aligned
    drop: int = 0  # 0: never left out; else left out highest first
    soft: int = 0  # a name column: cut to this many characters before any column is left out (0: never cut)
    least: int = 0  # ... and down to this many after every droppable column is gone
    cut: str = "end"  # where a name loses characters: "end" (a setting's name), "start" (a path)


@dataclass
class PlainTable:
    title: str
    columns: list[Column]
    rows: list[list[str]]
    bold: set[tuple[int, int]] = field(default_factory=set)  # (row, column) shown bold on a terminal


def _cut(text: str, width: int, where: str) -> str:
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    return ELLIPSIS + text[len(text) - width + 1:] if where == "start" else text[:width - 1].rstrip() + ELLIPSIS


def fit(table: PlainTable, width: int) -> tuple[list[int], dict[int, int], list[str]]:
    """(the columns kept, by index; each kept column's width; the headers of the columns left out)."""
    natural = [max([len(c.header), *(len(row[i]) for row in table.rows)]) for i, c in enumerate(table.columns)]
    widths = dict(enumerate(natural))
    kept = list(range(len(table.columns)))

    def total() -> int:
        return sum(widths[i] for i in kept) + len(GAP) * (len(kept) - 1)

    def shrink(limit: str) -> None:
        for i in kept:
            column = table.columns[i]
            floor = getattr(column, limit)
            if floor and widths[i] > floor and total() > width:
                widths[i] = max(floor, len(column.header), widths[i] - (total() - width))

    shrink("soft")
    dropped: list[str] = []
    for i in sorted((i for i, c in enumerate(table.columns) if c.drop), key=lambda i: -table.columns[i].drop):
        if total() <= width:
            break
        kept.remove(i)
        dropped.append(table.columns[i].header)
    if total() > width:
        shrink("least")
    return kept, {i: widths[i] for i in kept}, dropped


def lines(table: PlainTable, width: int):
    """The table as rich Text lines (bold spans where the table marks values), each at most ``width``
    characters when it can be fitted at all, and the line that names what was left out."""
    from rich.text import Text

    kept, widths, dropped = fit(table, width)

    def line(cells: list[str], row: int | None) -> Text:
        text = Text()
        for n, i in enumerate(kept):
            column = table.columns[i]
            cell = _cut(cells[i], widths[i], column.cut)
            padded = cell.rjust(widths[i]) if column.right else cell.ljust(widths[i])
            if n:
                text.append(GAP)
            start = len(text.plain)
            text.append(padded if n < len(kept) - 1 else padded.rstrip())
            if row is not None and (row, i) in table.bold and cell.strip():
                offset = len(padded) - len(padded.lstrip()) if column.right else 0
                text.stylize("bold", start + offset, start + offset + len(cell))
        return text

    # The title is prose: wrapped between words (the rows never are)
    out = [Text(line) for line in textwrap.wrap(table.title, width=max(width, 20))] if table.title else []
    out.append(line([c.header for c in table.columns], None))
    out.append(Text(GAP.join("-" * widths[i] for i in kept)))
    out += [line(row, r) for r, row in enumerate(table.rows)]
    if dropped:
        out.append(Text(f"(not shown at {width} columns: {', '.join(dropped)})"))
    return out


def render(table: PlainTable, width: int) -> str:
    """The fitted table as plain text (what a pipe gets)."""
    return "\n".join(t.plain for t in lines(table, width)) + "\n"
