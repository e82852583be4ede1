"""What a merge method is: a rule that fuses one tensor's N versions, knowing the tensor's layer.

Every method sees the same thing per encoder tensor: its versions in the models (in input order), the
layer it belongs to (0 = embeddings, k = block k, the last also the pooler) and, for methods built on
task vectors, theta* (the pretrained tensor). Methods compute in float32; the caller casts back.

The versions are read when the method asks for them, so that memory holds the merged model and about
one tensor, not N: iterating reads one model's tensor at a time (enough for a weighted sum), and
``chunks()`` yields a range of rows of all N versions at once, sized by the caller (for methods that
compare the N versions entry by entry, like TIES). A plain list of tensors works as well (tests).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from torch import Tensor


class Versions(Protocol):
    shape: tuple[int, ...]

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Tensor]:
        """One model's whole tensor at a time, in input order."""
        ...

    def chunks(self) -> Iterator[tuple[slice, list[Tensor]]]:
        """(rows, the N versions of those rows of dimension 0), covering the tensor in order."""
        ...


class InMemory:
    """Versions already in memory: one chunk of every row."""

    def __init__(self, tensors: Sequence[Tensor]):
        self.tensors = list(tensors)
        self.shape = tuple(self.tensors[0].shape)

    def __len__(self) -> int:
        return len(self.tensors)

    def __iter__(self) -> Iterator[Tensor]:
        return iter(self.tensors)

    def chunks(self) -> Iterator[tuple[slice, list[Tensor]]]:
        rows = self.shape[0] if self.shape else 1
        yield slice(0, rows), [t.reshape(rows, -1) if not self.shape else t for t in self.tensors]


def as_versions(tensors: Versions | Sequence[Tensor]) -> Versions:
    return tensors if hasattr(tensors, "chunks") else InMemory(tensors)


class MergeMethod(Protocol):
    name: str
    needs_base: bool  # task vectors need theta*

    def fuse(self, tensors: Versions | Sequence[Tensor], layer: int, base: Tensor | None) -> Tensor: ...

    def describe(self) -> dict[str, Any]:
        """Its settings, for merge.json."""
        ...
