"""Objective Shifting: the annealing coefficient lambda(t) as pure functions of the step.

lambda(t) weighs the target-task loss; (anneal_w - lambda(t)) weighs the quadratic recall penalty.
Early in training lambda is near 0 and the optimizer mostly recalls theta*; later it is near
anneal_w and the optimizer mostly learns the task.
"""

from __future__ import annotations

import math

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
