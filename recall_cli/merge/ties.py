"""TIES-merging (Yadav et al. 2023), per tensor, on task vectors tau_i = theta_i - theta*:

1. trim: keep the ``density`` fraction of each tau_i's entries largest in magnitude, zero the rest;
2. elect: each entry's sign is the sign of the sum of the trimmed vectors (the larger total mass);
3. disjoint mean: average, per entry, only the trimmed values that agree with the elected sign;
4. theta = theta* + lambda * merged.

Steps 2 and 3 are entry by entry, so they run on a few rows of all N vectors at a time; the trim needs
each whole vector's k-th largest magnitude, which is found first, one model at a time. Entries tied at
that magnitude are kept first come (in row-major order) until exactly k are kept, so the result does
not depend on how the tensor is cut into chunks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import MergeError
from ..plugins.merges import register_merge
from .base import BASE, LAMBDA_HELP, Option, Versions, as_versions, check_lambda, finite

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from .io import Source


class _Threshold:
    """Which entries of one task vector the trim keeps: magnitudes above ``value``, and the first
    ``ties`` entries equal to it; ``seen`` counts the equal ones met in earlier chunks."""

    def __init__(self, magnitudes: Tensor, k: int):
        """``magnitudes`` (flat, float32) is reordered in place: a partial sort (numpy's introselect)
        finds the k-th largest without the copies (and int64 indices) that kthvalue or topk make."""
        n = magnitudes.numel()
        values = magnitudes.numpy()
        values.partition(n - k)
        self.value = float(values[n - k])  # the k-th largest; everything after it is >= it
        self.ties = k - int((magnitudes[n - k + 1:] > self.value).sum())
        self.seen = 0

    def keep(self, magnitudes: Tensor) -> Tensor:
        import torch

        equal = magnitudes == self.value
        rank = torch.cumsum(equal, dim=0) + self.seen
        self.seen += int(equal.sum())
        return (magnitudes > self.value) | (equal & (rank <= self.ties))


def _kept_count(n: int, density: float) -> int:
    return max(1, math.ceil(density * n))


def trim(vectors: Tensor, density: float) -> Tensor:
    """Rows of ``vectors`` (one task vector each, flattened) with all but the top-k magnitudes zeroed."""
    import torch

    n = vectors.shape[1]
    k = _kept_count(n, density)
    if k >= n:
        return vectors
    keep = torch.stack([_Threshold(v.abs().float(), k).keep(v.abs()) for v in vectors])
    return vectors * keep


def _disjoint_mean(trimmed: Tensor) -> Tensor:
    import torch

    elected = torch.sign(trimmed.sum(dim=0))
    agree = (torch.sign(trimmed) == elected) & (trimmed != 0)
    count = agree.sum(dim=0).clamp(min=1)
    return (trimmed * agree).sum(dim=0) / count


def check_density(value: float) -> float:
    density = finite("--density", value, "the kept fraction of each task vector, in (0, 1]")
    if not 0 < density <= 1:
        raise MergeError(f"--density {density:g}: the kept fraction of each task vector must be in (0, 1]")
    return density


class Ties:
    name = "ties"
    title = "TIES"  # as reports and figures name it
    label = "ties"
    needs_base = True
    options = (
        BASE,
        Option("lambda", float, LAMBDA_HELP, default=1.0, parse=check_lambda),
        Option("density", float, "fraction of each task vector kept.", default=0.2, show_default=True,
               parse=check_density),
    )

    @classmethod
    def build(cls, sources: list[Source], values: Mapping[str, Any], *,
              device: torch.device | None = None) -> tuple[Ties, dict[str, Any]]:
        return cls(values["lambda"], values["density"]), {}

    def __init__(self, lam: float, density: float):
        self.lam, self.density = check_lambda(lam), check_density(density)

    def fuse(self, tensors: Versions | Sequence[Tensor], layer: int, base: Tensor | None) -> Tensor:
        import torch

        versions = as_versions(tensors)
        base = base.float()
        flat_base = base.reshape(-1)
        n = flat_base.numel()
        k = _kept_count(n, self.density)
        thresholds = None
        if k < n:  # each vector's k-th largest magnitude, one model at a time
            thresholds = []
            for t in versions:
                magnitudes = t.float().reshape(-1) - flat_base
                del t
                thresholds.append(_Threshold(magnitudes.abs_(), k))
                del magnitudes
        merged = torch.empty(n, dtype=torch.float32)
        start = 0
        for _, chunk in versions.chunks():  # a few rows of all N vectors: sign election and mean
            size = chunk[0].numel()
            vectors = torch.stack([c.float().reshape(-1) for c in chunk])
            del chunk
            vectors.sub_(flat_base[start:start + size])
            if thresholds is not None:
                magnitudes = vectors.abs()
                vectors.mul_(torch.stack([th.keep(m) for th, m in zip(thresholds, magnitudes)]))
            merged[start:start + size] = _disjoint_mean(vectors)
            start += size
        return merged.reshape(base.shape).mul_(self.lam).add_(base)

    def describe(self) -> dict[str, Any]:
        return {"lambda": self.lam, "density": self.density}


register_merge(Ties)
