"""The frontier study's tables, from the committed records alone (docs/study/runs/frontier/, the GPU's, and frontier_cpu/, a CPU's):
reading only.

    python docs/study/frontier.py report      # writes docs/study/tables/frontier.md

Every number is the checkpoint the holdout chose: its dev score and kept skill from the cell's chosen/
record (`recall evaluate` of best/), its holdout score from the run's summary. A family's pick is its
setting with the best median holdout score; the comparisons pair seeds with tuned vanilla (vanilla's
pick). An interval is a 95 % percentile bootstrap of the mean paired difference (10,000 resamples, fixed
seed), given from n = 3 on; at n = 3-5 it is rough (it cannot be wider than the seeds' own spread).
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from pathlib import Path

import frontier as F

OUT = F.TABLES / "frontier.md"
KEPT_BAR = 0.85  # the bar the study's goal is stated against
WITHIN = 1.0  # points of dev score: "at tuned vanilla's task score"


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


ROOTS = ("frontier", "frontier_cpu")  # one folder of records per device kind: a comparison never spans two


def cells(root: Path) -> dict[tuple[str, str, str], dict[int, dict]]:
    """(budget, task, point) -> seed -> {holdout, dev, kept, pairs, device, precision, steps}."""
    out: dict[tuple[str, str, str], dict[int, dict]] = {}
    for summary_path in sorted(root.glob(f"*/*/*/s*/{F.CHOSEN}/summary.json")):
        chosen_dir = summary_path.parent
        cell_dir = chosen_dir.parent
        budget, task, point = cell_dir.parts[-4], cell_dir.parts[-3], cell_dir.parts[-2]
        run, chosen = _read(cell_dir / "summary.json"), _read(summary_path)
        if not run or not chosen:
            continue
        probe = chosen.get("probe") or {}
        final = chosen.get("final") or {}
        out.setdefault((budget, task, point), {})[int(cell_dir.name[1:])] = {
            "holdout": (run.get("best") or {}).get("main"),
            "best_step": (run.get("best") or {}).get("step"),
            "dev": final.get("main"),
            "kept": probe.get("sts_retained"),
            "pairs": probe.get("sts_pairs", 256),  # records made before the count was written used 256 pairs
            "device": run.get("device_name") or run.get("device"),
            "precision": run.get("precision"),
            "steps": run.get("steps"),
        }
    return out


def _median(values: list[float]) -> float:
    return statistics.median(values)


def bootstrap(diffs: list[float], seed: int = 0, resamples: int = 10_000) -> tuple[float, float] | None:
    if len(diffs) < 3:
        return None
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(resamples))
    return means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def family_of(point: str) -> str:
    head = point.split("_")[0].rstrip("0123456789.")
    if point.startswith("lora_corda"):
        return "lora_corda"
    if point.startswith("anchor_task"):
        return "anchor_task"
    return head


def pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def report() -> int:
    lines = ["# The frontier study: tables", "",
             "Written by `python docs/study/frontier.py report` from docs/study/runs/frontier*/ alone (one folder per device); the protocol is in",
             "docs/study/frontier.py and docs/results.md. Scores ×100 (MRPC, RTE: accuracy; CoLA: MCC); *kept*: the STS",
             "skill kept (`sts_retained` ×100) of the checkpoint the holdout chose, on every STS-B dev pair; medians over n seeds.",
             ""]
    for root_name in ROOTS:
        data = cells(F.DOCS.parent / root_name)
        if data and section(data, root_name, lines) != 0:
            return 2
    text = "\n".join(lines).rstrip("\n") + "\n"
    F.TABLES.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


def section(data: dict, root_name: str, lines: list[str]) -> int:
    """The tables of one folder of records (one device kind), appended to ``lines``."""
    for budget in F.BUDGETS:
        for task in F.TASKS:
            points = sorted(p for (b, t, p) in data if b == budget and t == task)
            if not points:
                continue
            rows = {p: data[(budget, task, p)] for p in points}
            kinds = {(r["device"], r["precision"]) for seeds in rows.values() for r in seeds.values()}
            if len(kinds) > 1:
                print(f"frontier report: {budget}/{task} mixes devices or precisions {sorted(kinds)}: "
                      "a comparison runs on one (rerun the odd cells)", file=sys.stderr)
                return 2
            (device, precision), = kinds
            steps = sorted({r["steps"] for seeds in rows.values() for r in seeds.values()})
            pairs = sorted({r["pairs"] for seeds in rows.values() for r in seeds.values()})
            lines += [f"## {F.FOLDERS[task]}, {'3 epochs' if budget == 'e3' else f'{F.LONG_STEPS:,} steps'} ({root_name}/)", "",
                      f"{device}, {precision}; {', '.join(map(str, steps))} steps; kept skill on {', '.join(map(str, pairs))} pairs.", "",
                      "| point | n | holdout | dev | kept | best/ at step |", "|---|---:|---:|---:|---:|---|"]
            for p in points:
                seeds = rows[p]
                med = lambda k: _median([r[k] for r in seeds.values() if r[k] is not None]) if any(  # noqa: E731
                    r[k] is not None for r in seeds.values()) else None
                at = ", ".join(str(seeds[s]["best_step"]) for s in sorted(seeds))
                lines.append(f"| {p} | {len(seeds)} | {pct(med('holdout'))} | {pct(med('dev'))} | {pct(med('kept'))} | {at} |")
            lines += [""] + frontier_lines(rows) + [""]
    return 0


def frontier_lines(rows: dict[str, dict[int, dict]]) -> list[str]:
    """Each family's pick on the holdout, and the two numbers against tuned vanilla."""
    picks: dict[str, str] = {}
    for family in sorted({family_of(p) for p in rows}):
        options = [p for p in rows if family_of(p) == family]
        common = set.intersection(*(set(rows[p]) for p in options))
        if not common:
            continue
        score = lambda p: _median([rows[p][s]["holdout"] for s in common])  # noqa: E731
        picks[family] = max(options, key=lambda p: (score(p), -options.index(p)))
    vanilla = picks.get("vanilla")
    if vanilla is None:
        return ["No vanilla cells: nothing to compare against."]
    tried = sum(1 for p in rows if family_of(p) == "vanilla")
    out = [f"Against vanilla's pick ({vanilla}, chosen on the holdout among {tried} learning rate{'s' if tried > 1 else ''}); "
           "differences ×100, mean over paired seeds:", "",
           "| family | its pick (holdout) | n paired | dev − vanilla's pick | kept − vanilla's pick | dev | kept |",
           "|---|---|---:|---|---|---:|---:|"]
    within, above_bar = [], []
    for family, p in picks.items():
        seeds = sorted(set(rows[p]) & set(rows[vanilla]))
        d_dev = [100 * (rows[p][s]["dev"] - rows[vanilla][s]["dev"]) for s in seeds]
        d_kept = [100 * (rows[p][s]["kept"] - rows[vanilla][s]["kept"]) for s in seeds]
        dev, kept = _median([rows[p][s]["dev"] for s in rows[p]]), _median([rows[p][s]["kept"] for s in rows[p]])

        def said(diffs: list[float]) -> str:
            if not diffs:
                return "–"
            ci = bootstrap(diffs)
            mean = statistics.fmean(diffs)
            return f"{mean:+.1f} [{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else f"{mean:+.1f} (n = {len(diffs)}, no interval)"

        out.append(f"| {family} | {p} | {len(seeds)} | {said(d_dev)} | {said(d_kept)} | {pct(dev)} | {pct(kept)} |")
        if d_dev and statistics.fmean(d_dev) >= -WITHIN:
            within.append((kept, family, p))
        if kept >= KEPT_BAR:
            above_bar.append((dev, family, p))
    out.append("")
    if within:
        kept, family, p = max(within)
        out.append(f"Most skill kept within {WITHIN:g} point of vanilla's pick's dev score (mean paired difference): "
                   f"{family} ({p}), {pct(kept)} % kept.")
    if above_bar:
        dev, family, p = max(above_bar)
        out.append(f"Best dev score at ≥ {100 * KEPT_BAR:.0f} % kept (median): {family} ({p}), {pct(dev)}.")
    else:
        out.append(f"No family's pick keeps ≥ {100 * KEPT_BAR:.0f} % (median).")
    return out
