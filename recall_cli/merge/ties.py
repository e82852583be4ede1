"""TIES-merging (Yadav et al. 2023), per tensor, on task vectors tau_i = theta_i - theta*:

1. trim: keep the ``density`` fraction of each tau_i's entries largest in magnitude, zero the rest;
2. elect: each entry's sign is the sign of the sum of the trimmed vectors (the larger total mass);
3. disjoint mean: average, per entry, only the trimmed values that agree with the elected sign;
4. theta = theta* + lambda * merged.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from .io import MergeError


def trim(vectors: Tensor, density: float) -> Tensor:
    """Rows of ``vectors`` (one task vector each, flattened) with all but the top-k magnitudes zeroed."""
    n = vectors.shape[1]
    k = max(1, math.ceil(density * n))
    if k >= n:
        return vectors
    keep = torch.zeros_like(vectors, dtype=torch.bool)
    keep.scatter_(1, vectors.abs().topk(k, dim=1).indices, True)
    return vectors * keep


def ties_merge(vectors: Tensor, density: float) -> Tensor:
    """The merged task vector of the rows of ``vectors`` (N x D)."""
    trimmed = trim(vectors, density)
    elected = torch.sign(trimmed.sum(dim=0))
    agree = (torch.sign(trimmed) == elected) & (trimmed != 0)
    count = agree.sum(dim=0).clamp(min=1)
    return (trimmed * agree).sum(dim=0) / count


class Ties:
    name = "ties"
    needs_base = True

    def __init__(self, lam: float, density: float):
        if not 0 < density <= 1:
            raise MergeError(f"--density {density:g}: the kept fraction of each task vector must be in (0, 1]")
        self.lam, self.density = float(lam), float(density)

    def fuse(self, tensors: list[Tensor], layer: int, base: Tensor | None) -> Tensor:
        base = base.float()
        vectors = torch.stack([(t.float() - base).reshape(-1) for t in tensors])
        return base + self.lam * ties_merge(vectors, self.density).reshape(base.shape)

    def describe(self) -> dict[str, Any]:
        return {"lambda": self.lam, "density": self.density}
