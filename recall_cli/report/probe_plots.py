"""Probe figures: forgetting in function space beside the distance, and the task-vs-skill trade-off.

``probe_figure``: (a) ‖θ − θ*‖, (b) retained skill (STS ρ ratio, else MLM loss ratio), (c) last-layer
CKA with θ*, against the step; (d) CKA per layer at the last probed step, one line per setting.
``tradeoff_figure``: each run's task score (x) against its retained skill (y), median per setting.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ReportError
from .comparison import TASK_TITLES
from .curves import CurveGroup
from .plots import FORMATS, _figure_title, _pyplot, save_figure
from .probe_tables import SKILL_TITLES, final_layers, skill_field


def probe_figure(groups: list[CurveGroup], out: Path, dpi: int = 150) -> Path:
    if FORMATS.get(Path(out).suffix.lower()) is None:
        raise ReportError(f"--out {out}: the figure is written as .png, .svg or .pdf (by extension)")
    plt = _pyplot()
    runs = [run for g in groups for run in g.runs]
    skill = skill_field(runs)
    fig, axes = plt.subplots(1, 4, figsize=(16.0, 4.0), dpi=dpi, layout="constrained")
    ax_dist, ax_skill, ax_cka, ax_layers = axes
    colors = plt.get_cmap("tab10").colors
    for i, group in enumerate(groups):
        color = colors[i % len(colors)]
        n = len(group.runs)
        label = f"{group.label} (n={n})" if n > 1 else group.label
        style = "--" if group.is_vanilla else "-"
        curves = [(ax_dist, group.curves("distance")), (ax_cka, group.curves("cka", split="probe"))]
        if skill:
            curves.append((ax_skill, group.curves(skill, split="probe")))
        for ax, (steps, median, low, high) in curves:
            if not len(steps):
                continue
            ax.plot(steps, median, style, color=color, label=label, linewidth=1.6, marker="o" if ax is not ax_dist else None,
                    markersize=3)
            if n > 1:
                ax.fill_between(steps, low, high, color=color, alpha=0.18, linewidth=0)
        layers = final_layers(group)
        if len(layers):
            ax_layers.plot(range(len(layers)), layers, style, color=color, label=label, marker="o", markersize=3)
    ax_dist.set_title("(a) distance to the pretrained weights")
    ax_dist.set_ylabel(r"$\|\theta - \theta^*\|_2$")
    ax_skill.set_title(f"(b) {SKILL_TITLES.get(skill, 'retained skill (no STS/MLM probe)')}")
    ax_cka.set_title("(c) last-layer CKA with θ*")
    ax_cka.set_ylabel("linear CKA")
    ax_layers.set_title("(d) CKA with θ* per layer, last probe")
    ax_layers.set_xlabel("layer (0 = embeddings)")
    ax_layers.set_ylabel("linear CKA")
    for ax in (ax_dist, ax_skill, ax_cka):
        ax.set_xlabel("step")
    for ax in axes:
        ax.grid(alpha=0.3)
    ax_layers.legend(fontsize="small", loc="best")
    fig.suptitle(_figure_title(groups) + " — probes")
    return save_figure(fig, plt, out, dpi)


def tradeoff_figure(settings: list[dict], x: str, y: str, out: Path, dpi: int = 150) -> Path:
    """One panel per task (a score's scale is the task's), one colour per setting across the panels:
    each run a dot, each setting's median a cross."""
    if FORMATS.get(Path(out).suffix.lower()) is None:
        raise ReportError(f"--out {out}: the figure is written as .png, .svg or .pdf (by extension)")
    plt = _pyplot()
    order = list(TASK_TITLES)  # the paper's column order, as in recall compare
    tasks = sorted(dict.fromkeys(s.get("task") for s in settings),
                   key=lambda t: (order.index(t) if t in order else len(order), str(t)))
    labels = list(dict.fromkeys(s["label"] for s in settings))
    fig, axes = plt.subplots(1, len(tasks), figsize=(1.0 + 4.6 * len(tasks), 4.6 + 0.22 * len(labels)), dpi=dpi,
                             layout="constrained", squeeze=False)
    cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    colors = {label: cmap(i % cmap.N) for i, label in enumerate(labels)}
    handles = {}
    for ax, task in zip(axes[0], tasks):
        for s in (s for s in settings if s.get("task") == task):
            color = colors[s["label"]]
            ax.scatter([p[x] for p in s["points"]], [p[y] for p in s["points"]], color=color, alpha=0.5, s=20)
            handles[s["label"]] = ax.scatter(*s["median"], color=color, marker="X", s=110, edgecolor="black",
                                             linewidth=0.7)
        ax.set_title(TASK_TITLES.get(task, str(task)))
        ax.set_xlabel(f"task score: dev {x} (final eval)")
        ax.set_ylabel(f"retained skill: {y} (final probe)")
        ax.grid(alpha=0.3)
    fig.legend([handles[label] for label in labels if label in handles], [label for label in labels if label in handles],
               loc="outside lower center", ncol=2 if len(labels) > 3 else 1, fontsize="small",
               title="setting: x = median over seeds, dots = runs")
    fig.suptitle("trade-off: learning the task vs keeping the pretrained skill")
    return save_figure(fig, plt, out, dpi)
