"""Probe figures: forgetting in function space beside the distance, and the task-vs-skill trade-off.

``probe_figure``: (a) ‖θ − θ*‖, (b) retained skill (STS ρ ratio, else MLM loss ratio), (c) last-layer
CKA with θ*, against the step; (d) CKA per layer at the last probed step, one line per setting.
``tradeoff_figure``: each run's task score (x) against its retained skill (y), median per setting,
families of settings as lines, and `--within`'s choice.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..errors import ReportError
from ..names import MEASURE_TITLES, METRIC_TITLES, TASKS
from .comparison import TASK_TITLES
from .curves import CurveGroup
from .families import family_colors, family_styles, family_title
from .plots import FORMATS, _figure_title, _pyplot, legend_entries, outside_legend, save_figure
from .probe_tables import final_layers, skill_field, skill_titles
from .runs import Run
from .tables import lower_is_better
from .tradeoff import constant_scores, names_of, points, tasks_in_order, whole_recipes


def probe_figure(groups: list[CurveGroup], out: Path, dpi: int = 150) -> Path:
    if FORMATS.get(Path(out).suffix.lower()) is None:
        raise ReportError(f"--out {out}: the figure is written as .png, .svg or .pdf (by extension)")
    plt = _pyplot()
    runs = [run for g in groups for run in g.runs]
    skill = skill_field(runs)
    fig, axes = plt.subplots(1, 4, figsize=(16.0, 4.0), dpi=dpi, layout="constrained")
    ax_dist, ax_skill, ax_cka, ax_layers = axes
    for group, legend_name, color in legend_entries(plt, groups):
        n = len(group.runs)
        label = f"{legend_name} (n={n})" if n > 1 else legend_name
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
    ax_skill.set_title(f"(b) {skill_titles().get(skill, 'retained skill (no STS/MLM probe)')}")
    ax_cka.set_title("(c) last-layer CKA with θ*")
    ax_cka.set_ylabel("linear CKA")
    ax_layers.set_title("(d) CKA with θ* per layer, last probe")
    ax_layers.set_xlabel("layer (0 = embeddings)")
    ax_layers.set_ylabel("linear CKA")
    for ax in (ax_dist, ax_skill, ax_cka):
        ax.set_xlabel("step")
    for ax in axes:
        ax.grid(alpha=0.3)
    outside_legend(fig, ax_layers)
    fig.suptitle(_figure_title(groups) + " — probes")
    return save_figure(fig, plt, out, dpi)


def x_frame(xs: list[float], line: float | None, *, percent: bool) -> tuple[float, float]:
    """The x-range of a panel: around its points, a one-class line included when it is near them
    (within the points' own spread, or 5 points); a far line, or a --within band's part beyond the
    frame, is left out (either would squeeze every point against one edge)."""
    if not xs:
        return -math.inf, math.inf
    low, high = min(xs), max(xs)
    if line is not None and -max(high - low, 5.0 if percent else 0.05) <= min(line - low, high - line):
        low, high = min(low, line), max(high, line)
    pad = max(0.08 * (high - low), 0.5 if percent else 0.02 * max(abs(high), 1e-3))
    return low - pad, high + pad


def mark_choice(ax, c: dict, x: str, y: str, sx: float, sy: float, frame: tuple[float, float], extra: dict) -> None:
    """tradeoff --within's choice on its panel: the band of dev scores it chose in (not for a holdout
    choice, whose band is not on this axis), clipped to the frame, and a ring on the chosen setting."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    unit = "point" if c["within"] == 1 else "points"
    if c.get("select_on") != "holdout":
        best, within = c["best"][x] * sx, c["within"]  # W is in the axis' units: points, or raw
        low, high = (best, best + within) if x in lower_is_better() else (best - within, best)
        low, high = max(low, frame[0]), min(high, frame[1])  # a band wider than the frame is the frame
        ax.axvspan(low, high, color="#FFE08A", alpha=0.45, linewidth=0, zorder=0)
        extra.setdefault("band", Patch(color="#FFE08A", alpha=0.45, label=f"within {c['within']:g} {unit} of the best median"))
    ax.scatter(c[x] * sx, c[y] * sy, s=420, facecolors="none", edgecolors="black", linewidths=1.8, zorder=4)
    ring = ("chosen: keeps the most skill in the band" if c.get("select_on") != "holdout" else
            f"chosen on the holdout (within {c['within']:g} {unit} of its best)")
    extra.setdefault("ring", Line2D([], [], marker="o", markersize=14, markerfacecolor="none",
                                    markeredgecolor="black", markeredgewidth=1.8, linestyle="none", label=ring))


def tradeoff_figure(settings: list[dict], x: str, y: str, out: Path, dpi: int = 150, runs: list[Run] | None = None,
                    choices: list[dict] | None = None) -> Path:
    """One panel per task (a score's scale is the task's), one colour per setting across the panels:
    each run a dot, each setting's median a cross, each family (families.py) a line through its medians
    from the weakest setting to the strongest, a dashed line where predicting one class for every
    example scores. With ``choices`` (tradeoff.choose_within): the band of scores within W points of
    the best median, and a ring on the chosen setting. ``runs`` give the names and the dashed line."""
    if FORMATS.get(Path(out).suffix.lower()) is None:
        raise ReportError(f"--out {out}: the figure is written as .png, .svg or .pdf (by extension)")
    plt = _pyplot()
    from matplotlib.lines import Line2D

    tasks = tasks_in_order(settings)
    described = names_of(settings, runs)
    name_of = {s["label"]: d.name for s, d in zip(settings, described)}
    rank_of = {s["label"]: d.rank for s, d in zip(settings, described)}
    labels = sorted(dict.fromkeys(s["label"] for s in settings), key=lambda label: rank_of[label])
    whole = {}  # label -> one member run's whole recipe (its family's hue)
    for s, full in zip(settings, whole_recipes(settings, runs)):
        whole.setdefault(s["label"], full)
    colors = family_colors([(label, whole[label]) for label in labels])
    constant = constant_scores(runs, x) if runs else {}
    chosen = {c["task"]: c for c in choices or []}
    sx, sy = points(x), points(y)
    handles: dict[str, object] = {}
    strengths: dict[str, set[float]] = {}  # per family kind drawn: its strengths, for the legend
    extra: dict[str, object] = {}  # the dashed line, the band, the ring: last in the legend
    # One panel is narrower than three legend columns: its legend takes one column, inside the image.
    ncol = 3 if len(tasks) > 1 else 1
    rows = math.ceil((len(labels) + 5) / ncol)
    fig, axes = plt.subplots(1, len(tasks), figsize=(1.0 + 4.6 * len(tasks), 4.8 + 0.2 * rows), dpi=dpi,
                             layout="constrained", squeeze=False)
    for ax, task in zip(axes[0], tasks):
        members = [(s, d) for s, d in zip(settings, described) if s.get("task") == task]
        for family, line in family_lines(members).items():
            kind = family_title(family)
            strengths.setdefault(kind, set()).update(strength for strength, _, _ in line)
            ax.plot([mx * sx for _, mx, _ in line], [my * sy for _, _, my in line], family_styles().get(kind, "-"),
                    color="0.35", linewidth=1.3, zorder=1)
        for s, _ in members:
            color = colors[s["label"]]
            ax.scatter([p[x] * sx for p in s["points"]], [p[y] * sy for p in s["points"]], color=color, alpha=0.5,
                       s=20, zorder=2)
            handles[s["label"]] = ax.scatter(s["median"][0] * sx, s["median"][1] * sy, color=color, marker="X", s=110,
                                             edgecolor="black", linewidth=0.7, zorder=3)
        xs = [p[x] * sx for s, _ in members for p in s["points"]] + [c[x] * sx for c in ([chosen[task]] if task in chosen else [])]
        line = constant[task] * sx if task in constant else None
        frame = x_frame(xs, line, percent=sx == 100)
        if xs:
            ax.set_xlim(*frame)
        if task in constant and frame[0] <= constant[task] * sx <= frame[1]:
            ax.axvline(constant[task] * sx, linestyle="--", color="0.45", linewidth=1.0, zorder=0)
            extra.setdefault("chance", Line2D([], [], linestyle="--", color="0.45", linewidth=1.0,
                                              label="one class for every example (MCC 0, majority share)"))
        if task in chosen:
            mark_choice(ax, chosen[task], x, y, sx, sy, frame, extra)
        ax.set_title(TASK_TITLES.get(task, str(task)))
        ax.set_xlabel(axis_title(x, task))
        ax.set_ylabel(axis_title(y))
        ax.grid(alpha=0.3)
    entries = [(handles[label], name_of[label]) for label in labels if label in handles]
    order = list(family_styles())  # a family without a style of its own sorts last
    for kind, values in sorted(strengths.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order)):
        ends = f"{min(values):g} → {max(values):g}" + (" (1: the fine-tuned runs)" if kind == "WiSE-FT α" else "")
        entries.append((Line2D([], [], linestyle=family_styles().get(kind, "-"), color="0.35", linewidth=1.3),
                        f"{kind} {ends}"))
    entries += [(extra[key], extra[key].get_label()) for key in ("chance", "band", "ring") if key in extra]
    fig.legend([h for h, _ in entries], [t for _, t in entries], loc="outside lower center",
               ncol=min(ncol, len(entries)), fontsize="small", title="median over seeds (×), one dot per run")
    fig.suptitle("trade-off: learning the task vs keeping the pretrained skill")
    return save_figure(fig, plt, out, dpi)


def axis_title(metric: str, task: str | None = None) -> str:
    """'dev accuracy ×100', 'dev MCC ×100', 'STS skill kept, % of pretrained': what the axis shows."""
    name = TASKS[task].main_metric if metric == "main" and task in TASKS else metric
    if name in METRIC_TITLES:
        return f"dev {METRIC_TITLES[name]} ×100"
    if name in MEASURE_TITLES:
        return MEASURE_TITLES[name]
    return name if points(name) == 1.0 else f"{name} ×100"


def family_lines(members: list[tuple[dict, object]]) -> dict[str, list[tuple[float, float, float]]]:
    """Per family with two or more settings among ``members`` (one task's settings and their
    families.Described): (strength, median x, median y) of each, weakest first."""
    lines: dict[str, list[tuple[float, float, float]]] = {}
    for s, d in members:
        for family, strength in d.families:
            lines.setdefault(family, []).append((strength, *s["median"]))
    return {family: sorted(line, key=lambda p: p[0]) for family, line in lines.items() if len(line) > 1}
