"""What a merge method is: a rule that fuses one tensor's N versions, knowing the tensor's layer.

Every method sees the same thing per encoder tensor: its versions in the models (in input order), the
layer it belongs to (0 = embeddings, k = block k, the last also the pooler) and, for methods built on
task vectors, theta* (the pretrained tensor). Methods compute in float32; the caller casts back.

The versions are read when the method asks for them, so that memory holds the merged model and about
one tensor, not N: iterating reads one model's tensor at a time (enough for a weighted sum), and
``chunks()`` yields a range of rows of all N versions at once, sized by the caller (for methods that
compare the N versions entry by entry, like TIES). A plain list of tensors works as well (tests).

A method also says how it is built: its ``options`` (each an ``Option``: name, type, default, help,
check) and ``build(sources, values, device=...)``, which returns the rule above and what merge.json
records about it. The registry (plugins/merges.py) lists the methods.

Torch-free to import, like every method file: the command line reads the options when it starts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import MergeError

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from .io import Source


class Versions(Protocol):
    shape: tuple[int, ...]
    name: str  # the tensor's prefix-free name: a method that computes the whole model first looks it up by it

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Tensor]:
        """One model's whole tensor at a time, in input order."""
        ...

    def chunks(self) -> Iterator[tuple[slice, list[Tensor]]]:
        """(rows, the N versions of those rows of dimension 0), covering the tensor in order."""
        ...


class InMemory:
    """Versions already in memory: one chunk of every row."""

    def __init__(self, tensors: Sequence[Tensor], name: str = ""):
        self.tensors = list(tensors)
        self.shape = tuple(self.tensors[0].shape)
        self.name = name

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


@dataclass(frozen=True)
class Option:
    """One setting a method reads: ``recall merge --NAME VALUE``, and NAME in run_merge's options.

    ``help`` says what it does without naming the method (the command line prefixes the method's
    label). ``default`` is what the method reads when the option is not given, and what --help shows;
    ``show_default`` makes it the command line's own default too (else the option is None when not
    given). ``parse`` checks a given value and returns what the method reads (raising MergeError
    with the fix); like ``min``, it runs on every option given, whatever the method."""

    name: str
    type: type  # what the command line reads: str, int, float or Path
    help: str
    default: Any = None
    show_default: bool = False
    min: int | None = None
    parse: Callable[[Any], Any] | None = None
    excludes: str | None = None  # another option that cannot be given with this one

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def finite(flag: str, value: Any, rule: str = "a finite number") -> float:
    """A number a user gave, as a float, refused with one line unless it is finite (NaN and inf
    would go on to poison every merged tensor, and merge.json)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise MergeError(f"{flag} {value}: give {rule}") from None
    if not math.isfinite(number):
        raise MergeError(f"{flag} {value}: not a finite number: give {rule}")
    return number


def check_lambda(value: float) -> float:
    return finite("--lambda", value, "a finite number (e.g. 0.5)")


# theta*, for methods built on task vectors (needs_base): the engine reads it, each such method declares it.
BASE = Option("base", str, "theta*, the pretrained model (default: the runs' anchor.safetensors).")
# The scale of the merged task vector: every method that reads it declares it with this check.
LAMBDA_HELP = "scale of the merged task vector."


class MethodSpec(Protocol):
    """What the registry holds: a method's names, its options and how it is built from them."""

    name: str  # --method NAME, and merge.json's "method"
    label: str  # how --help names it ("RECALL")
    title: str  # how reports and figures name its outputs ("linear merge")
    options: tuple[Option, ...]

    @classmethod
    def build(cls, sources: list[Source], values: Mapping[str, Any], *,
              device: torch.device | None = None) -> tuple[MergeMethod, dict[str, Any]]:
        """The method ready to fuse ``sources``, from ``values`` (every one of its options, defaults
        filled in), and what merge.json records beyond ``describe()``."""
        ...
