"""Objective Shifting: the annealing coefficient lambda(t) as pure functions of the step.

lambda(t) weighs the target-task loss; (anneal_w - lambda(t)) weighs the quadratic recall penalty.
Early in training lambda is near 0 and the optimizer mostly recalls theta*; later it is near
anneal_w and the optimizer mostly learns the task.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping

from ..names import ANNEAL_FUNCTION_NAMES

ANNEAL_FUNCTIONS = ANNEAL_FUNCTION_NAMES  # the table in names.py, under optim's public name


def _sigmoid(x: float) -> float:
    # Written in the two stable halves so that a large |k * (t - t0)| never overflows math.exp.
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def anneal_lambda(fun: str, step: float, k: float, t0: float, w: float = 1.0) -> float:
    """lambda(step) for the annealing function ``fun``.

    sigmoid:  w / (1 + exp(-k * (step - t0)))
    linear:   w * min(1, step / t0)          (t0 must be > 0)
    constant: w
    """
    if fun == "sigmoid":
        return w * _sigmoid(k * (step - t0))
    if fun == "linear":
        if t0 <= 0:
            raise ValueError(f"anneal_fun 'linear' needs anneal_t0 > 0, got {t0}")
        return w * min(1.0, step / t0)
    if fun == "constant":
        return float(w)
    raise ValueError(f"unknown anneal_fun {fun!r}: expected one of {', '.join(ANNEAL_FUNCTIONS)}")


def pull_weight(anneal_w: float, lam: float, recall_floor: float) -> float:
    """The penalty's weight at one step: the paper's anneal_w - lambda, never below the floor.
    lambda <= anneal_w always, so a floor of 0 returns anneal_w - lambda exactly (bit for bit)."""
    return max(anneal_w - lam, recall_floor)


@dataclass(frozen=True)
class RecallSchedule:
    """RecAdam's recall terms as one value: lambda(t)'s shape (Objective Shifting) and the quadratic
    pull's strength gamma and floor (Pretraining Simulation). Its field names are RecAdam's keyword
    arguments and param-group keys, so it is built from either and unpacked into either.

    anneal_t0 is in optimizer steps here: a recipe's fraction of the run is turned into steps once, by
    the run's plan (training/setup.py), and this value travels from there."""

    anneal_fun: str = "sigmoid"
    anneal_k: float = 0.5
    anneal_t0: float = 250
    anneal_w: float = 1.0
    pretrain_cof: float = 5000.0
    recall_floor: float = 0.0

    @classmethod
    def of(cls, values: Mapping[str, Any], **changes: Any) -> RecallSchedule:
        """From a param group, a recipe's optimizer section as a dict, or any mapping with the keys."""
        return cls(**{f.name: changes.get(f.name, values[f.name]) for f in fields(cls)})

    def lam(self, step: float) -> float:
        """lambda(step): the task loss's weight."""
        return anneal_lambda(self.anneal_fun, step, self.anneal_k, self.anneal_t0, self.anneal_w)

    def pull(self, lam: float) -> float:
        """The recall penalty's weight at a step whose lambda is ``lam``: max(anneal_w - lambda, floor)."""
        return pull_weight(self.anneal_w, lam, self.recall_floor)

    @property
    def recalls(self) -> bool:
        """Whether the pull can act at all (anneal_w 0 turns the recall terms off)."""
        return self.anneal_w > 0


def recall_state(optimizer: Any) -> tuple[float | None, float | None]:
    """(lambda, the recall penalty's weight) now, of any torch optimizer: one with recall terms (RecAdam)
    reports them as ``current_lambda`` and ``current_penalty_weight``; any other has none (None, None),
    and a train record then writes lambda 1 (every step is the task's)."""
    return getattr(optimizer, "current_lambda", None), getattr(optimizer, "current_penalty_weight", None)
