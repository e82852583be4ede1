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
from .families import describe, family_colors

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
    positive = []
    drew_lambda = drew_penalty = False
    for group, legend_name, color in legend_entries(plt, groups):
        n = len(group.runs)
        label = f"{legend_name} (n={n})" if n > 1 else legend_name
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
        # A run with a recall_floor logs the penalty's weight, max(anneal_w - lambda, floor): dotted
        # beside its lambda(t), so the floor under the fading pull shows.
        steps, median, _, _ = group.curves("penalty_weight")
        if len(steps):
            ax_lambda.plot(steps, median, ":", color=color, linewidth=1.6)
            drew_penalty = True

    # RI runs start far from theta* (random weights) and PI/adamw runs at 0: a log axis shows both.
    if positive and max(positive) / min(positive) > 100:
        ax_dist.set_yscale("log")
    ax_dist.set_title("(a) distance to the pretrained weights")
    ax_dist.set_ylabel(r"$\|\theta - \theta^*\|_2$")
    ax_loss.set_title("(b) training loss (target task)")
    ax_loss.set_ylabel("loss")
    ax_lambda.set_title(r"(c) $\lambda(t)$, and dotted the penalty's weight" if drew_penalty
                        else r"(c) $\lambda(t)$: weight of the target loss")
    ax_lambda.set_ylabel(r"$\lambda(t)$")
    ax_lambda.set_ylim(-0.03, 1.03)
    if not drew_lambda:
        ax_lambda.text(0.5, 0.5, "no RecAdam runs", ha="center", va="center", transform=ax_lambda.transAxes)
    for ax in (ax_dist, ax_loss, ax_lambda):
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    outside_legend(fig, ax_dist)
    fig.suptitle(_figure_title(groups))

    return save_figure(fig, plt, out, dpi)


def legend_entries(plt, groups: list[CurveGroup]) -> list[tuple[CurveGroup, str, object]]:
    """(group, legend name, colour) in legend order: the baseline, the methods, then the merges, each
    family weakest first (families.describe). A group whose label names no key keeps its label (a run's
    folder name); with several tasks the name starts with the task, as the label does."""
    tasks = {run.task for g in groups for run in g.runs}
    described = describe([(g.shown if g.shown is not None else g.settings, g.runs[0].settings) for g in groups])
    order = sorted(range(len(groups)), key=lambda i: described[i].rank)
    # One colour per setting, the same on every task's curves (a name is task-free: families.describe).
    by_name = family_colors([(described[i].name or groups[i].label, groups[i].runs[0].settings) for i in order])
    entries = []
    for i in order:
        color = by_name[described[i].name or groups[i].label]
        group, name = groups[i], described[i].name
        if not (group.shown if group.shown is not None else group.settings) or not name:
            name = group.label
        elif len(tasks) > 1:
            name = f"{TASK_TITLES.get(group.runs[0].task, group.runs[0].task)}: {name}"
        entries.append((group, name, color))
    return entries


def outside_legend(fig, ax, ncol: int = 3) -> None:
    """The axes' curves in one legend under the panels, where it covers none of them."""
    handles, names = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, names, loc="outside lower center", ncol=min(ncol, len(handles)), fontsize="small")


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
