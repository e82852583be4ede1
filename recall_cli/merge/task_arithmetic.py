"""Task arithmetic (Ilharco et al. 2023): theta = theta* + lambda * sum_i (theta_i - theta*)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..plugins.merges import register_merge
from .base import BASE, LAMBDA_HELP, Option, check_lambda

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from .io import Source


class TaskArithmetic:
    name = "task_arithmetic"
    title = "task arithmetic"  # as reports and figures name it
    label = "task_arithmetic"
    needs_base = True
    options = (BASE, Option("lambda", float, LAMBDA_HELP, default=0.5, parse=check_lambda))

    @classmethod
    def build(cls, sources: list[Source], values: Mapping[str, Any], *,
              device: torch.device | None = None) -> tuple[TaskArithmetic, dict[str, Any]]:
        return cls(values["lambda"]), {}

    def __init__(self, lam: float):
        self.lam = float(lam)

    def fuse(self, tensors: Iterable[Tensor], layer: int, base: Tensor | None) -> Tensor:
        import torch

        base = base.float()
        vectors = torch.zeros_like(base)
        for t in tensors:  # a running sum: one model's tensor read at a time
            vectors.add_(t.float() - base)
            del t
        return vectors.mul_(self.lam).add_(base)  # = base + lam * vectors, without another copy

    def describe(self) -> dict[str, Any]:
        return {"lambda": self.lam}


register_merge(TaskArithmetic)
