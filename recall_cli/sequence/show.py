"""What a finished sequence shows: the matrix as a rich table, DIR/matrix.png, and one summary line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .plan import MATRIX_PNG


def _row_names(record: dict[str, Any]) -> list[str]:
    return ["start"] + [f"after {i}: {t}" for i, t in enumerate(record["tasks"], 1)]


def _fmt(value: float | None, scale: float = 100.0) -> str:
    return "—" if value is None else f"{value * scale:.1f}"


def table(record: dict[str, Any]) -> Any:
    """A rich Table: one row per stage (row 0 where it exists), one column per task, scores x 100."""
    from rich.table import Table

    out = Table(title="R\\[i]\\[j]: task j's main score (x100) after stage i")
    out.add_column("")
    for j, task in enumerate(record["tasks"], 1):
        out.add_column(f"{j}: {task}", justify="right")
    for name, row in zip(_row_names(record), record["matrix"]):
        if row is None:
            continue
        out.add_row(name, *[_fmt(v) for v in row])
    return out


def summary_line(record: dict[str, Any], out: Path) -> str:
    def signed(v: float | None) -> str:
        return "—" if v is None else f"{v * 100:+.1f}"

    stages = record["stages"]
    kept = (stages[-1].get("probe") or {}).get("sts_retained") if stages else None
    parts = [f"ACC {_fmt(record.get('acc'))}", f"BWT {signed(record.get('bwt'))}", f"FWT {signed(record.get('fwt'))}"]
    parts += [f"STS kept {kept * 100:.1f} %"] if isinstance(kept, (int, float)) else []
    return f"continual: {len(stages)} stages ({' → '.join(record['tasks'])}): " + ", ".join(parts) + f"; {out / 'continual.json'}"


def heatmap(record: dict[str, Any], out: Path, dpi: int = 120) -> Path:
    """DIR/matrix.png: the matrix as a heatmap, each cell's score written in it (missing cells blank)."""
    import numpy as np

    from ..report.plots import _pyplot, save_figure

    plt = _pyplot()
    names = _row_names(record)
    rows = [(n, r) for n, r in zip(names, record["matrix"]) if r is not None]
    data = np.array([[np.nan if v is None else v * 100 for v in r] for _, r in rows], dtype=float)
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(record["tasks"]), 1.0 + 0.55 * len(rows)))
    ax.imshow(np.ma.masked_invalid(data), cmap="viridis", vmin=np.nanmin(data) if np.isfinite(data).any() else 0,
              vmax=np.nanmax(data) if np.isfinite(data).any() else 100, aspect="auto")
    for i in range(data.shape[0]):
        for j in range(data.shape[1]):
            if np.isfinite(data[i, j]):
                ax.text(j, i, f"{data[i, j]:.1f}", ha="center", va="center", color="white", fontsize=9)
    ax.set_xticks(range(len(record["tasks"])), [f"{j}: {t}" for j, t in enumerate(record["tasks"], 1)])
    ax.set_yticks(range(len(rows)), [n for n, _ in rows])
    ax.set_xlabel("task j (scored)")
    ax.set_title("R[i][j] x100 (row: after stage i)", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, plt, Path(out) / MATRIX_PNG, dpi)
