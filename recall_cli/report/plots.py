"""Figures from run directories, drawn with matplotlib's Agg backend (no display needed).

``forgetting_figure`` is the paper's Figure 2: the Euclidean distance ||theta - theta*|| and the
training loss against the step, one curve per setting (the median over seeds, with a min-max band),
plus the lambda(t) schedule each setting used, on a shared step axis.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ReportError
from .comparison import TASK_TITLES
from .curves import CurveGroup

FIGURE_INCHES = (13.0, 4.0)
FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def forgetting_figure(groups: list[CurveGroup], out: Path, dpi: int = 150) -> Path:
    """Draw and save the figure; the file's extension picks PNG, SVG or PDF. Returns ``out``."""
    out = Path(out)
    fmt = FORMATS.get(out.suffix.lower())
    if fmt is None:
        raise ReportError(f"--out {out}: the figure is written as .png, .svg or .pdf (by extension)")
    plt = _pyplot()
    fig, (ax_dist, ax_loss, ax_lambda) = plt.subplots(1, 3, figsize=FIGURE_INCHES, dpi=dpi, layout="constrained")
    colors = plt.get_cmap("tab10").colors
    positive = []
    drew_lambda = False
    for i, group in enumerate(groups):
        color = colors[i % len(colors)]
        n = len(group.runs)
        label = f"{group.label} (n={n})" if n > 1 else group.label
        # adamw is drawn dashed: the baseline the RecAdam curves are read against.
        style = "--" if group.is_vanilla else "-"
        for ax, name in ((ax_dist, "distance"), (ax_loss, "loss"), (ax_lambda, "lambda")):
            if name == "lambda" and group.is_vanilla:
                continue  # no recall penalty: lambda(t) does not apply
            steps, median, low, high = group.curves(name)
            if not len(steps):
                continue
            ax.plot(steps, median, style, color=color, label=label, linewidth=1.6)
            if n > 1:
                ax.fill_between(steps, low, high, color=color, alpha=0.18, linewidth=0)
            if name == "distance":
                positive += [v for v in low if v > 0] + [v for v in high if v > 0]
            drew_lambda |= name == "lambda"

    # RI runs start far from theta* (random weights) and PI/adamw runs at 0: a log axis shows both.
    if positive and max(positive) / min(positive) > 100:
        ax_dist.set_yscale("log")
    ax_dist.set_title("(a) distance to the pretrained weights")
    ax_dist.set_ylabel(r"$\|\theta - \theta^*\|_2$")
    ax_loss.set_title("(b) training loss (target task)")
    ax_loss.set_ylabel("loss")
    ax_lambda.set_title(r"(c) $\lambda(t)$: weight of the target loss")
    ax_lambda.set_ylabel(r"$\lambda(t)$")
    ax_lambda.set_ylim(-0.03, 1.03)
    if not drew_lambda:
        ax_lambda.text(0.5, 0.5, "no RecAdam runs", ha="center", va="center", transform=ax_lambda.transAxes)
    for ax in (ax_dist, ax_loss, ax_lambda):
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    ax_dist.legend(fontsize="small", loc="best")
    fig.suptitle(_figure_title(groups))

    return save_figure(fig, plt, out, dpi)


def save_figure(fig, plt, out: Path, dpi: int) -> Path:
    """Write ``fig`` in the format its extension names, through a temporary file: a kill never leaves
    half a figure under the final name."""
    out = Path(out)
    fmt = FORMATS.get(out.suffix.lower())
    if fmt is None:
        plt.close(fig)
        raise ReportError(f"--out {out}: the figure is written as .png, .svg or .pdf (by extension)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        fig.savefig(tmp, format=fmt, dpi=dpi)
        os.replace(tmp, out)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return out


def _figure_title(groups: list[CurveGroup]) -> str:
    runs = [run for g in groups for run in g.runs]
    tasks = sorted({TASK_TITLES.get(r.task, r.task) for r in runs})
    models = sorted({str(r.settings.get("model.name_or_path", "")).removeprefix("pkg:").rstrip("/").rsplit("/", 1)[-1]
                     for r in runs})
    return f"{', '.join(tasks)} — {', '.join(models)} — {len(runs)} run{'s' if len(runs) != 1 else ''}"
