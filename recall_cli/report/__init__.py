"""Reports from run directories: `recall compare`, `recall forgetting`, `recall probe` tables and figures.

One room per job, arrows pointing down (each module imports only those below it):

    runs.py          read run directories back (Run, read_run, load_runs), resolve keys, filter, differing keys
    labels.py        how a setting is spelled: an optimizer's words, a group's label, the order of values
    comparison.py    group runs by setting and aggregate over seeds: the paper's tables (Comparison)
    tables.py        render a Comparison: rich table, markdown, CSV, JSON, its title and notes
    curves.py        forgetting curves: runs grouped by setting, per-run distance rows and their table
    probe_tables.py  probe records: per-run rows, `recall probe`'s table, trade-off points
    families.py      what a figure calls a setting ("WiSE-FT α=0.75"), families of settings (floor, α, τ)
    tradeoff.py      `recall tradeoff --within`: the setting that keeps the most skill near the best score
    plots.py         the forgetting figure (matplotlib, Agg), the legends the figures share (colours: families.hues())
    probe_plots.py   the probe and trade-off figures

This module re-exports what the CLI and scripts use, so ``from recall_cli import report`` then
``report.load_runs`` keeps working; the figures and probe tables (numpy, matplotlib) are imported
from their own modules, so reading runs stays light.
"""

from __future__ import annotations

from .comparison import (
    AT,
    GLUE_TRAIN_SIZES,
    PRESETS,
    RUN_MEASURES,
    SMALL_TASK_LIMIT,
    STATS,
    TASK_TITLES,
    Cell,
    Comparison,
    Group,
    compare,
    constant_prediction,
    dev_label_shares,
)
from .curves import CurveGroup, forgetting_groups, forgetting_plain, forgetting_rows, forgetting_table
from .labels import METHOD_NAMES, group_label
from .runs import (
    LABEL_NAMES,
    NOT_SETTINGS,
    SHORT_KEYS,
    Run,
    differing_keys,
    filter_runs,
    load_runs,
    read_run,
    resolve_key,
)
from .tables import (
    FORMATS,
    markdown,
    notes,
    render,
    rich_table,
    title,
    to_csv,
    to_records,
)

__all__ = [
    "AT", "FORMATS", "GLUE_TRAIN_SIZES", "LABEL_NAMES", "LOWER_IS_BETTER", "METHOD_NAMES",
    "NOT_SETTINGS", "PRESETS", "PROBE_MEASURES", "RAW_MEASURES", "RUN_MEASURES",
    "SHORT_KEYS", "SMALL_TASK_LIMIT", "STATS", "TASK_TITLES", "Cell", "Comparison", "CurveGroup", "Group",
    "Run", "compare", "constant_prediction", "dev_label_shares", "differing_keys", "filter_runs",
    "forgetting_groups", "forgetting_plain", "forgetting_rows", "forgetting_table", "group_label", "load_runs", "markdown", "notes",
    "read_run", "render", "resolve_key", "rich_table", "title", "to_csv", "to_records",
]


def __getattr__(name: str):
    if name in ("LOWER_IS_BETTER", "PROBE_MEASURES", "RAW_MEASURES"):  # the probes' (plugins too): read when asked
        from . import tables

        return getattr(tables, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
