"""Paired bootstrap intervals over seeds: how sure a difference between two settings is.

Two settings trained on the same seeds are paired by seed: seed s of each saw the same data order and
(for a method that starts from the same weights) the same head initialisation, so their difference
on seed s removes what the seed alone did. For the seeds S both settings ran (n = |S|):

    d_s        = value(setting, s) - value(reference, s)     (a seed with several runs: their mean)
    difference = mean of d_s over S                           (the point estimate)
    interval   = the percentile interval of the mean of d over RESAMPLES resamples of S, each n seeds
                 drawn with replacement, by numpy's default_rng(BOOTSTRAP_SEED); its ends are numpy's
                 default (linear) quantiles at (1 - level) / 2 and (1 + level) / 2

With fewer than 2 shared seeds there is no interval (n/a, with a note saying why). With fewer than
RANGE_BELOW (5) the interval is the range of the d_s, lowest to highest, and says so (kind "range"):
a percentile bootstrap over 2 or 3 seeds is that range anyway (each end is drawn on more than 2.5 %
of the resamples), and calling it a 95 % interval would claim what so few seeds cannot. The same
seeds and the same generator give the same interval on every machine: the numbers in a committed
table can be recomputed. With n = 5 there are only 5^5 = 3125 distinct resamples; the interval is
coarse and, as every percentile bootstrap of a small sample, somewhat too narrow (Dodge et al. 2020
argue for more seeds).

Pure functions of numbers: compare (tables.py) and tradeoff (tradeoff.py) call them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
LEVEL = 0.95
RANGE_BELOW = 5  # fewer shared seeds than this: the seeds' range, not a bootstrap interval (docstring)
METHOD = "paired bootstrap over seeds: the mean of the per-seed differences, percentile interval"


@dataclass(frozen=True)
class Interval:
    """One setting's difference from the reference over their shared seeds."""

    seeds: tuple  # the shared seeds, sorted
    difference: float | None  # mean of the per-seed differences; None without a shared seed
    low: float | None  # None: fewer than 2 shared seeds
    high: float | None
    level: float = LEVEL
    resamples: int = RESAMPLES
    note: str | None = None  # why there is no interval
    kind: str = "bootstrap"  # or "range": the lowest and highest per-seed difference (n < RANGE_BELOW)

    @property
    def n(self) -> int:
        return len(self.seeds)

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "seeds": list(self.seeds), "difference": self.difference, "low": self.low,
                "high": self.high, "level": self.level, "resamples": self.resamples, "bootstrap_seed": BOOTSTRAP_SEED,
                "note": self.note, "kind": self.kind}


def check_level(level: float) -> None:
    from ..errors import ReportError

    if not (isinstance(level, (int, float)) and math.isfinite(level) and 0 < level < 1):
        raise ReportError(f"--ci {level}: give the interval's level as a fraction in (0, 1), e.g. --ci 0.95")


def by_seed(seeds: list, values: list[float]) -> dict[Any, float]:
    """Per seed, its value (the mean of a seed's values, where a setting ran a seed more than once)."""
    grouped: dict[Any, list[float]] = {}
    for seed, value in zip(seeds, values):
        grouped.setdefault(seed, []).append(float(value))
    return {seed: sum(v) / len(v) for seed, v in grouped.items()}


def paired_interval(values: Mapping[Any, float], reference: Mapping[Any, float], level: float = LEVEL,
                    resamples: int = RESAMPLES, seed: int = BOOTSTRAP_SEED) -> Interval:
    """``values`` - ``reference``, per seed, over the seeds both have (module docstring)."""
    import numpy as np

    shared = sorted((s for s in values if s in reference and s is not None), key=_seed_order)
    if not shared:
        return Interval((), None, None, None, level, resamples, "no seed in common with the reference")
    d = np.array([values[s] - reference[s] for s in shared], dtype=np.float64)
    difference = float(d.mean())
    if len(shared) < 2:
        return Interval(tuple(shared), difference, None, None, level, resamples,
                        f"1 seed in common with the reference (seed {shared[0]}): an interval needs 2 or more")
    if len(shared) < RANGE_BELOW:
        return Interval(tuple(shared), difference, float(d.min()), float(d.max()), level, resamples, kind="range")
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(resamples, len(d)))].mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return Interval(tuple(shared), difference, float(low), float(high), level, resamples)


def band_label(kinds: set[str], level: float = LEVEL) -> str:
    """The name of a row or column of intervals: '95% CI', 'range' (every one over fewer than 5 seeds),
    or both where a row mixes them."""
    ci = f"{100 * level:g}% CI"
    if kinds == {"range"}:
        return "range"
    return f"{ci} / range" if "range" in kinds else ci


def _seed_order(seed: Any) -> tuple:
    return (0, seed, "") if isinstance(seed, (int, float)) and not isinstance(seed, bool) else (1, 0, str(seed))


def seeds_text(seeds: tuple | list) -> str:
    """'1-5', '1, 2, 4': the seeds an interval is paired over."""
    seeds = list(seeds)
    if len(seeds) > 2 and all(isinstance(s, int) for s in seeds) and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(str(s) for s in seeds)
