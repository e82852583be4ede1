"""`recall compare` of continual sequences: folders holding continual.json (`recall continual`'s --out), one
row per method, with what continual-learning papers report of each sequence (ACC, BWT, FWT, mean forgetting,
the last task's score, the original model's kept STS skill after the last stage), the median over seeds, and,
against a reference method, each measure's paired interval over the seeds both ran (intervals.py).

A sequence's method is what its command set beyond its stage files: the overrides (train.seed aside) and the
sequence's own keys away from their defaults (continual.merge, its options, continual.theta_star,
continual.weights); sequences of other stage files (another task order) are other rows. Its seed is --seed,
else train.seed among its overrides, else null (such sequences pair with each other only). Only finished
sequences are read; the others are named in a warning. Torch-free: pure reading and arithmetic.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ReportError
from ..rundir import CONTINUAL_FILE, SEQUENCE_DEFAULTS
from .intervals import LEVEL, paired_interval

# (key in the row, its heading); every value is a fraction of the main score (x 100 when shown).
MEASURES = (("acc", "ACC"), ("bwt", "BWT"), ("fwt", "FWT"), ("forgetting", "forgetting"), ("last", "last task"),
            ("kept", "STS kept"))
SIGNED = {"bwt", "fwt"}
DEFAULTS = {k: v for k, v in SEQUENCE_DEFAULTS.items() if k != "probe"}  # whether it probed is no method


@dataclass
class Sequence_:
    folder: Path
    tasks: tuple[str, ...]
    setting: tuple[tuple[str, str], ...]  # (key, value) the method is named by
    seed: Any
    values: dict[str, float | None]


@dataclass
class Method:
    name: str
    setting: tuple[tuple[str, str], ...]
    tasks: tuple[str, ...]
    sequences: list[Sequence_] = field(default_factory=list)

    def by_seed(self, key: str) -> dict[Any, float]:
        out: dict[Any, list[float]] = {}
        for s in self.sequences:
            if s.values.get(key) is not None:
                out.setdefault(s.seed, []).append(float(s.values[key]))  # type: ignore[arg-type]
        return {seed: sum(v) / len(v) for seed, v in out.items()}

    def median(self, key: str) -> float | None:
        values = [s.values[key] for s in self.sequences if s.values.get(key) is not None]
        return statistics.median(values) if values else None  # type: ignore[type-var]


def has_sequences(roots: Sequence[Path]) -> bool:
    return any(True for root in roots for _ in _records(Path(root)))


def _records(root: Path):
    if (root / CONTINUAL_FILE).is_file():
        yield root / CONTINUAL_FILE
        return
    if root.is_dir():
        for path in sorted(root.rglob(CONTINUAL_FILE)):
            if "stages" not in path.relative_to(root).parts[:-1]:
                yield path


def _setting(command: dict[str, Any]) -> tuple[tuple[tuple[str, str], ...], Any]:
    seed = command.get("seed")
    pairs = []
    for text in command.get("overrides") or []:
        key, _, value = str(text).partition("=")
        if key.strip() == "train.seed":
            seed = value.strip() if seed is None else seed
            continue
        pairs.append((key.strip(), value.strip()))
    own = dict(command.get("continual") or {})
    for key, value in sorted((own.pop("merge_options", None) or {}).items()):
        pairs.append((f"continual.merge.{key}", str(value)))
    for key, default in DEFAULTS.items():
        if own.get(key, default) != default:
            pairs.append((f"continual.{key}", str(own[key])))
    if isinstance(seed, str) and seed.lstrip("-").isdigit():
        seed = int(seed)
    return tuple(sorted(pairs)), seed


def read_sequence(path: Path) -> Sequence_ | None:
    """One continual.json as a row's sequence; None when it has not finished."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        command, matrix = record["command"], record["matrix"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ReportError(f"{path}: not a continual sequence's record ({exc}): point compare at recall continual's --out") from None
    if not record.get("finished"):
        return None
    setting, seed = _setting(command)
    last = (record.get("stages") or [{}])[-1]
    values = {"acc": record.get("acc"), "bwt": record.get("bwt"), "fwt": record.get("fwt"),
              "forgetting": record.get("forgetting_mean"), "last": matrix[-1][-1] if matrix and matrix[-1] else None,
              "kept": (last.get("probe") or {}).get("sts_retained")}
    return Sequence_(path.parent, tuple(record.get("tasks") or ()), setting, seed, values)


def methods_under(roots: Sequence[Path], warn: Callable[[str], None] = lambda _: None) -> list[Method]:
    """Every finished sequence under ``roots``, grouped by method (first seen first), each named by the keys
    in which the methods differ ("sequential" for none)."""
    found: dict[tuple, Method] = {}
    for root in roots:
        for path in _records(Path(root)):
            seq = read_sequence(path)
            if seq is None:
                warn(f"{path.parent}: the sequence has not finished (recall continual --resume --out {path.parent}): skipped")
                continue
            key = (seq.tasks, seq.setting)
            found.setdefault(key, Method("", seq.setting, seq.tasks)).sequences.append(seq)
    if not found:
        raise ReportError(f"no finished continual sequence under {', '.join(map(str, roots))}: finish one with "
                          "recall continual --resume --out DIR")
    methods = list(found.values())
    orders = {m.tasks for m in methods}
    for m in methods:
        words = " ".join(f"{k}={v}" for k, v in m.setting) or "sequential"
        m.name = words + (f" ({' → '.join(m.tasks)})" if len(orders) > 1 else "")
    return methods


def find_method(methods: list[Method], text: str) -> Method:
    for m in methods:
        if text in (m.name, " ".join(f"{k}={v}" for k, v in m.setting) or "sequential"):
            return m
    raise ReportError(f"--against {text}: no such method among the sequences; name one of: "
                      + "; ".join(m.name for m in methods))


def comparison(methods: list[Method], against: str | None = None, level: float = LEVEL) -> dict[str, Any]:
    """The rows: per method its seeds, the median of each measure, and with ``against`` each measure's paired
    interval of (method - reference) over the seeds both ran."""
    reference = find_method(methods, against) if against is not None else None
    rows = []
    for m in ([reference] + [m for m in methods if m is not reference]) if reference is not None else methods:
        row: dict[str, Any] = {"method": m.name, "setting": dict(m.setting), "tasks": list(m.tasks),
                               "seeds": sorted({s.seed for s in m.sequences}, key=str), "n": len(m.sequences),
                               "median": {key: m.median(key) for key, _ in MEASURES}}
        if reference is not None and m is not reference:
            row["against"] = {key: paired_interval(m.by_seed(key), reference.by_seed(key), level).to_dict()
                              for key, _ in MEASURES}
        rows.append(row)
    return {"kind": "continual", "against": reference.name if reference else None, "level": level, "rows": rows}


def _pct(value: float | None, signed: bool = False) -> str:
    return "—" if value is None else f"{value * 100:+.1f}" if signed else f"{value * 100:.1f}"


def markdown(result: dict[str, Any]) -> str:
    """The medians (x 100), then with --against each measure's difference and interval over the paired seeds."""
    heads = [h for _, h in MEASURES]
    lines = ["| method | seeds | " + " | ".join(heads) + " |", "|---" * (len(heads) + 2) + "|"]
    for row in result["rows"]:
        lines.append(f"| {row['method']} | {row['n']} | "
                     + " | ".join(_pct(row["median"][k], k in SIGNED) for k, _ in MEASURES) + " |")
    if result["against"] is not None:
        lines += ["", f"Against {result['against']}, paired by seed: mean difference [interval] (n = seeds both ran; "
                      f"a range below 5 seeds, else the {100 * result['level']:g}% bootstrap interval), points:", "",
                  "| method | " + " | ".join(f"Δ {h}" for h in heads) + " |", "|---" * (len(heads) + 1) + "|"]
        for row in result["rows"]:
            if "against" in row:
                lines.append(f"| {row['method']} | " + " | ".join(_interval(row["against"][k]) for k, _ in MEASURES) + " |")
    return "\n".join(lines) + "\n"


def _interval(i: dict[str, Any]) -> str:
    if i["difference"] is None:
        return "—"
    ends = f" [{i['low'] * 100:+.1f}, {i['high'] * 100:+.1f}]" if i["low"] is not None else ""
    return f"{i['difference'] * 100:+.1f}{ends} (n={i['n']})"


def csv_text(result: dict[str, Any]) -> str:
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    keys = [k for k, _ in MEASURES]
    writer.writerow(["method", "n", *keys, *(f"d_{k}" for k in keys), *(f"d_{k}_low" for k in keys), *(f"d_{k}_high" for k in keys)])
    for row in result["rows"]:
        against = row.get("against") or {}
        writer.writerow([row["method"], row["n"], *(row["median"][k] for k in keys),
                         *((against.get(k) or {}).get("difference") for k in keys),
                         *((against.get(k) or {}).get("low") for k in keys), *((against.get(k) or {}).get("high") for k in keys)])
    return out.getvalue()


# `recall tradeoff` of sequences: its run-level defaults (a run's main score against its STS kept) read as the
# sequence's own pair (ACC against the original model's STS kept after the last stage).
TRADEOFF_DEFAULTS = {"main": "acc", "sts_retained": "kept"}


def tradeoff_axis(name: str, option: str) -> str:
    key = TRADEOFF_DEFAULTS.get(name, name)
    if key not in dict(MEASURES):
        raise ReportError(f"{option} {name}: a continual sequence has {', '.join(k for k, _ in MEASURES)} "
                          f"(e.g. --x bwt --y last): choose one of them")
    return key


def tradeoff_points(methods: list[Method], x: str, y: str) -> list[dict[str, Any]]:
    """Per method (methods_under's order): one point per sequence that has both measures ({folder, seed, x, y})
    and the medians of those points; a method with none is left out, and no point at all is an error (one line)."""
    out = []
    for m in methods:
        points = [{"folder": str(s.folder), "seed": s.seed, x: s.values[x], y: s.values[y]} for s in m.sequences
                  if s.values.get(x) is not None and s.values.get(y) is not None]
        if points:
            out.append({"method": m.name, "setting": dict(m.setting), "tasks": list(m.tasks), "points": points,
                        "median": [statistics.median(p[x] for p in points), statistics.median(p[y] for p in points)]})
    if not out:
        hint = " (the STS kept is measured with probes on: continual.probe=true)" if "kept" in (x, y) else ""
        raise ReportError(f"no finished sequence has both {x} and {y}{hint}: choose other axes with --x and --y")
    return out


def tradeoff_figure(methods: list[dict[str, Any]], x: str, y: str, out: Path, dpi: int = 150) -> Path:
    """One colour per method: a small dot per sequence (seed), a large marker at the medians."""
    from .plots import _pyplot, save_figure

    plt = _pyplot()
    heads = dict(MEASURES)
    fig, ax = plt.subplots(figsize=(7.0, 5.0), layout="constrained")
    for i, m in enumerate(methods):
        colour = f"C{i % 10}"
        ax.scatter([p[x] * 100 for p in m["points"]], [p[y] * 100 for p in m["points"]], s=18, alpha=0.5, color=colour)
        ax.scatter([m["median"][0] * 100], [m["median"][1] * 100], s=90, marker="D", color=colour,
                   edgecolors="black", label=f"{m['method']} (n={len(m['points'])})")
    ax.set_xlabel(f"{heads[x]} (x100)")
    ax.set_ylabel(f"{heads[y]} (x100)")
    ax.set_title("continual sequences: one point per seed, median marked")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return save_figure(fig, plt, out, dpi)
