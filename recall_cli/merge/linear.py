"""Weighted average of the models: theta = sum_i w_i theta_i, with weights normalised to sum to 1.

With the pretrained model among the inputs this is WiSE-FT's interpolation (Wortsman et al. 2022).
Weights are either one per model for every layer, or a table of one per model per layer: RECALL's
fusion is this method with the weights it computes per layer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import MergeError
from ..plugins.merges import register_merge
from .base import Option

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from .io import Source


def normalise(weights: Sequence[float]) -> list[float]:
    """Weights divided by their sum; refused unless finite, >= 0, with a finite positive sum."""
    total = float(sum(weights))
    if any(not math.isfinite(w) or w < 0 for w in weights) or not 0 < total < math.inf:
        raise MergeError(f"--weights {','.join(f'{w:g}' for w in weights)}: weights must be finite numbers >= 0 "
                         "with a positive sum (e.g. 0.5,0.5)")
    return [float(w) / total for w in weights]


def parse_weights(text: str | Sequence[float]) -> tuple[float, ...]:
    """--weights 0.5,0.5 (or a sequence of numbers, from Python), checked as normalise checks them."""
    try:
        weights = tuple(float(w) for w in (text.split(",") if isinstance(text, str) else text))
    except (TypeError, ValueError):
        raise MergeError(f"--weights {text}: give numbers separated by commas, one per model (e.g. 0.5,0.5)") from None
    normalise(weights)
    return weights


class Linear:
    name = "linear"
    title = "linear merge"  # as reports and figures name it
    label = "linear"
    needs_base = False
    options = (Option("weights", str, "one weight per model, comma-separated (default: equal).", parse=parse_weights),)

    @classmethod
    def build(cls, sources: list[Source], values: Mapping[str, Any], *,
              device: torch.device | None = None) -> tuple[Linear, dict[str, Any]]:
        weights = values["weights"] or tuple(1.0 / len(sources) for _ in sources)
        if len(weights) != len(sources):
            raise MergeError(f"--weights has {len(weights)} values for {len(sources)} models: give one per model")
        return cls(weights), {}

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
        import torch

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


register_merge(Linear)
