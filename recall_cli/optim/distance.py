"""Forgetting as the paper measures it: the Euclidean distance ||theta - theta*||."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


@torch.no_grad()
def distance_to_theta_star(params: Sequence[Tensor], theta_star: Sequence[Tensor]) -> float:
    """sqrt(sum_i ||p_i - a_i||^2) over aligned lists, the sum of squares accumulated in float64."""
    total = 0.0
    for p, a in zip(params, theta_star, strict=True):
        if p.numel():
            diff = p.detach() - a.to(p.dtype)
            total += torch.linalg.vector_norm(diff, dtype=torch.float64).item() ** 2
    return total**0.5
