"""The containers a task's rows travel in: read (:class:`Examples`), then tokenized (:class:`Features`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Examples:
    """One split: texts (1 or 2 strings per example) and labels (class ids or regression targets)."""

    texts: list[tuple[str, ...]]
    labels: list[int] | list[float]
    source: str  # file path or hub id, for messages

    def __len__(self) -> int:
        return len(self.texts)


@dataclass
class Features:
    """A tokenized split, unpadded: padding happens per batch (tasks.batches)."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None  # None for models without segment ids (e.g. RoBERTa)
    labels: list[int] | list[float]

    def __len__(self) -> int:
        return len(self.input_ids)
