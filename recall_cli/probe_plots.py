"""Probe figures: forgetting in function space beside the distance, and the task-vs-skill trade-off.

``probe_figure``: (a) ‖θ − θ*‖, (b) retained skill (STS ρ ratio, else MLM loss ratio), (c) last-layer
CKA with θ*, against the step; (d) CKA per layer at the last probed step, one line per setting.
``tradeoff_figure``: each run's task score (x) against its retained skill (y), median per setting.
"""

from __future__ import annotations

from pathlib import Path

from .plots import FORMATS, _figure_title, _pyplot, save_figure
from .probe_report import SKILL_TITLES, final_layers, skill_field
from .report import CurveGroup, ReportError


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
        style = "--" if group.is_adamw else "-"
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
    if FORMATS.get(Path(out).suffix.lower()) is None:
        raise ReportError(f"--out {out}: the figure is written as .png, .svg or .pdf (by extension)")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5), dpi=dpi, layout="constrained")
    colors = plt.get_cmap("tab10").colors
    for i, s in enumerate(settings):
        color = colors[i % len(colors)]
        ax.scatter([p[x] for p in s["points"]], [p[y] for p in s["points"]], color=color, alpha=0.55, s=22)
        ax.scatter(*s["median"], color=color, marker="X", s=120, edgecolor="black", linewidth=0.8,
                   label=f"{s['label']} (median of {len(s['points'])})")
    ax.set_xlabel(f"task score: dev {x} (final eval)")
    ax.set_ylabel(f"retained skill: {y} (final probe)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    ax.set_title("trade-off: learning the task vs keeping the pretrained skill")
    return save_figure(fig, plt, out, dpi)
