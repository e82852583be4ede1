"""Learning-rate schedules as pure functions of the optimizer step (stateless, so resume is trivial)."""

from __future__ import annotations


def linear_warmup_decay(step: int, warmup_steps: int, total_steps: int) -> float:
    """Factor on the base lr for the ``step``-th update (1-based): linear warm-up to 1, then linear
    decay to 0 at ``total_steps`` (BERT's schedule, as in the paper's setup)."""
    if warmup_steps > 0 and step <= warmup_steps:
        return step / warmup_steps
    remaining = total_steps - step + 1  # the last update still gets a non-zero rate
    return max(0.0, remaining / max(1, total_steps - warmup_steps))
