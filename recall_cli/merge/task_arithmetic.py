"""Task arithmetic (Ilharco et al. 2023): theta = theta* + lambda * sum_i (theta_i - theta*)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor


class TaskArithmetic:
    name = "task_arithmetic"
    needs_base = True

    def __init__(self, lam: float):
        self.lam = float(lam)

    def fuse(self, tensors: Iterable[Tensor], layer: int, base: Tensor | None) -> Tensor:
        base = base.float()
        vectors = torch.zeros_like(base)
        for t in tensors:  # a running sum: one model's tensor read at a time
            vectors.add_(t.float() - base)
            del t
        return vectors.mul_(self.lam).add_(base)  # = base + lam * vectors, without another copy

    def describe(self) -> dict[str, Any]:
        return {"lambda": self.lam}
