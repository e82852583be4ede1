"""The continual-learning matrix and what papers report of it, as pure functions (no torch, no files).

R[i][j] is task j's main score after stage i (tasks and stages numbered from 1; row 0 is the starting
model, before any stage). A cell is None where no score exists: a task not yet seen by a classifier
sequence (its head does not exist yet), or all of row 0 when the starting model has no head for any task.

Definitions (Lopez-Paz & Ranzato 2017, "GEM", section 4; Chaudhry et al. 2018, "RWalk", section 5):

    ACC          = 1/T  * sum_j R[T][j]                              mean of the last row
    BWT          = 1/(T-1) * sum_{j<T} (R[T][j] - R[j][j])           < 0: earlier tasks were forgotten
    FWT          = 1/(T-1) * sum_{j>1} (R[j-1][j] - R[0][j])         what earlier stages did for task j
                   before it was trained, against the starting model (GEM's b_j); needs row 0 and the
                   cells above the diagonal, so a classifier sequence (a head per task) has none
    forgetting_j = max_{l in 1..T-1} R[l][j] - R[T][j]   for j < T  (Chaudhry et al.: the best the
                   task ever scored before the last stage, minus its last score; >= 0 is forgetting)
"""

from __future__ import annotations

from typing import Optional, Sequence

Row = Optional[Sequence[Optional[float]]]


def _stages(matrix: Sequence[Row]) -> int:
    if len(matrix) < 2:
        raise ValueError("a continual matrix needs row 0 and at least one stage's row")
    return len(matrix) - 1


def cell(matrix: Sequence[Row], i: int, j: int) -> float | None:
    """R[i][j] with tasks numbered from 1 (None where it does not exist)."""
    row = matrix[i]
    return None if row is None else row[j - 1]


def _mean(values: list[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return sum(values) / len(values)  # type: ignore[arg-type]


def average_accuracy(matrix: Sequence[Row]) -> float | None:
    """ACC: the mean of the last row."""
    t = _stages(matrix)
    return _mean([cell(matrix, t, j) for j in range(1, t + 1)])


def backward_transfer(matrix: Sequence[Row]) -> float | None:
    """BWT: the mean change of each earlier task from just after its own stage to after the last (None for one stage)."""
    t = _stages(matrix)
    if t < 2:
        return None
    diffs = []
    for j in range(1, t):
        last, own = cell(matrix, t, j), cell(matrix, j, j)
        diffs.append(None if last is None or own is None else last - own)
    return _mean(diffs)


def forward_transfer(matrix: Sequence[Row]) -> float | None:
    """FWT: the mean of R[j-1][j] - R[0][j] over j = 2..T; None without row 0 or the cells above the diagonal."""
    t = _stages(matrix)
    if t < 2 or matrix[0] is None:
        return None
    diffs = []
    for j in range(2, t + 1):
        before, start = cell(matrix, j - 1, j), cell(matrix, 0, j)
        diffs.append(None if before is None or start is None else before - start)
    return _mean(diffs)


def forgetting(matrix: Sequence[Row]) -> list[float | None]:
    """Per task j < T: the best score before the last stage minus the last (the last task has none: absent)."""
    t = _stages(matrix)
    out: list[float | None] = []
    for j in range(1, t):
        earlier = [cell(matrix, l, j) for l in range(1, t)]
        earlier = [v for v in earlier if v is not None]
        last = cell(matrix, t, j)
        out.append(None if not earlier or last is None else max(earlier) - last)
    return out


def summarize(matrix: Sequence[Row]) -> dict[str, object]:
    """ACC, BWT, FWT, forgetting per task and its mean: continual.json's numbers."""
    per_task = forgetting(matrix)
    known = [v for v in per_task if v is not None]
    return {"acc": average_accuracy(matrix), "bwt": backward_transfer(matrix), "fwt": forward_transfer(matrix),
            "forgetting": per_task, "forgetting_mean": sum(known) / len(known) if known and len(known) == len(per_task) else None}
