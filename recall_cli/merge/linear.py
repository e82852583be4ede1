"""Weighted average of the models: theta = sum_i w_i theta_i, with weights normalised to sum to 1.

With the pretrained model among the inputs this is WiSE-FT's interpolation (Wortsman et al. 2022).
Weights are either one per model for every layer, or a table of one per model per layer: RECALL's
fusion is this method with the weights it computes per layer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from .io import MergeError


def normalise(weights: Sequence[float]) -> list[float]:
    total = float(sum(weights))
    if any(w < 0 for w in weights) or total <= 0:
        raise MergeError(f"--weights {','.join(f'{w:g}' for w in weights)}: weights must be >= 0 with a positive sum")
    return [float(w) / total for w in weights]


class Linear:
    name = "linear"
    needs_base = False

    def __init__(self, weights: Sequence[float] | Mapping[int, Sequence[float]]):
        if isinstance(weights, Mapping):
            self.per_layer = {int(n): normalise(w) for n, w in weights.items()}
            self.weights = None
        else:
            self.per_layer = None
            self.weights = normalise(weights)

    def weights_for(self, layer: int) -> list[float]:
        return self.per_layer[layer] if self.per_layer is not None else self.weights

    def fuse(self, tensors: Iterable[Tensor], layer: int, base: Tensor | None = None) -> Tensor:
        weights = self.weights_for(layer)
        out = None
        for w, t in zip(weights, tensors):  # a running sum: one model's tensor read at a time
            if out is None:
                out = torch.zeros(t.shape, dtype=torch.float32)
            out.add_(t.float(), alpha=w)
            del t  # freed before the next model's tensor is read
        return out

    def describe(self) -> dict[str, Any]:
        return {"weights": self.weights} if self.weights is not None else {}
