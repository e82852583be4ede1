"""What a merge method is: a rule that fuses one tensor's N versions, knowing the tensor's layer.

Every method sees the same thing per encoder tensor: its version in each model (in input order), the
layer it belongs to (0 = embeddings, k = block k, the last also the pooler) and, for methods built on
task vectors, theta* (the pretrained tensor). Methods compute in float32; the caller casts back.
"""

from __future__ import annotations

from typing import Any, Protocol

from torch import Tensor


class MergeMethod(Protocol):
    name: str
    needs_base: bool  # task vectors need theta*

    def fuse(self, tensors: list[Tensor], layer: int, base: Tensor | None) -> Tensor: ...

    def describe(self) -> dict[str, Any]:
        """Its settings, for merge.json."""
        ...
