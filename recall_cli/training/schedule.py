"""Learning-rate schedules as pure functions of the optimizer step (stateless, so resume is trivial)."""

from __future__ import annotations


def linear_warmup_decay(step: int, warmup_steps: int, total_steps: int) -> float:
    """Factor on the base lr for the ``step``-th update (1-based): linear warm-up to 1, then linear
    decay to 0 at ``total_steps`` (BERT's schedule, as in the paper's setup)."""
    if warmup_steps > 0 and step <= warmup_steps:
        return step / warmup_steps
    remaining = total_steps - step + 1  # the last update still gets a non-zero rate
    return max(0.0, remaining / max(1, total_steps - warmup_steps))


def set_lr(optimizer, step: int, *, peak: float, warmup_steps: int, total_steps: int, runs=()) -> float:
    """Sets every group's lr for the ``step``-th update and returns it: ``peak`` (which a method's phase may
    change: LP-FT's head phase has a peak of its own), warmed up and decayed by linear_warmup_decay."""
    for run in runs:
        peak = run.peak_lr(peak)
    lr = peak * linear_warmup_decay(step, warmup_steps, total_steps)
    for group in optimizer.param_groups:
        group["lr"] = lr
    return lr
