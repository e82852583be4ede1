"""Task arithmetic (Ilharco et al. 2023): theta = theta* + lambda * sum_i (theta_i - theta*)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


class TaskArithmetic:
    name = "task_arithmetic"
    needs_base = True

    def __init__(self, lam: float):
        self.lam = float(lam)

    def fuse(self, tensors: list[Tensor], layer: int, base: Tensor | None) -> Tensor:
        base = base.float()
        vectors = torch.zeros_like(base)
        for t in tensors:
            vectors.add_(t.float() - base)
        return base + self.lam * vectors

    def describe(self) -> dict[str, Any]:
        return {"lambda": self.lam}
