"""The holdout (task.holdout): a fixed, stratified share of a task's training rows that chooses best/ and
the study's picks, so that the dev split the reports give is scored once and chooses nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import DataError
from .base import TaskType

HOLDOUT_SEED = 20_260_425  # fixed: every run of a task, whatever its train.seed, holds out the same rows


def holdout_split(task: TaskType, labels: Sequence[Any], fraction: float) -> tuple[list[int], list[int]]:
    """(training indices, holdout indices), both in the split's order. Stratified by the task type's
    strata (a class; a regression label's quintile): each gives round(fraction x its rows) rows, at
    least one. Raises DataError when a stratum has too few rows to give one and keep one."""
    import random

    by_stratum: dict[Any, list[int]] = {}
    for i, stratum in enumerate(task.strata(labels)):
        by_stratum.setdefault(stratum, []).append(i)
    rng = random.Random(HOLDOUT_SEED)
    held: set[int] = set()
    for stratum, rows in sorted(by_stratum.items(), key=lambda kv: str(kv[0])):
        take = max(1, round(fraction * len(rows)))
        if take >= len(rows):
            raise DataError(f"task.holdout={fraction:g}: {task.stratum} {stratum!r} has "
                            f"{len(rows)} training row{'s' if len(rows) != 1 else ''}, too few to hold one out and "
                            "train on the rest (lower task.holdout, or use more training rows)")
        held.update(rng.sample(rows, take))
    return [i for i in range(len(labels)) if i not in held], sorted(held)


def holdout_sample(task: TaskType, labels: Sequence[Any], held: list[int], cap: int | None) -> list[int]:
    """task.max_holdout_examples: at most ``cap`` of the ``held`` indices (into ``labels``), in order, a
    stratified sample by a fixed seed (the same rows for every run of the task, as the holdout itself):
    each stratum keeps its share of the cap, at least one row. All of them when ``cap`` is None or not
    smaller."""
    import random

    if cap is None or cap >= len(held):
        return held
    by_stratum: dict[Any, list[int]] = {}
    for i, stratum in zip(held, task.strata([labels[i] for i in held])):
        by_stratum.setdefault(stratum, []).append(i)
    rng = random.Random(HOLDOUT_SEED + 1)  # its own stream: the split above is unchanged by a cap
    kept: set[int] = set()
    for stratum, rows in sorted(by_stratum.items(), key=lambda kv: str(kv[0])):
        kept.update(rng.sample(rows, min(len(rows), max(1, round(cap * len(rows) / len(held))))))
    return sorted(kept)


def holdout_cost(scored: int, held: int, total_steps: int, eval_every: int) -> str:
    """The start line's word on the holdout: its size and what it costs, said before the first step. It is
    scored at every evaluation, and a large one (SST-2 at 0.2: 13,470 rows) can take longer than training."""
    evals = total_steps // eval_every + (total_steps % eval_every != 0) if eval_every else 1  # and the last step
    capped = f" (a fixed sample of the {held:,} held out)" if scored < held else \
        ("" if scored < 2000 else "; task.max_holdout_examples=N scores a fixed sample of N")
    return f"{scored:,} rows scored at each of {evals} evaluation{'s' if evals != 1 else ''}{capped}"
