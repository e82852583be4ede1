"""From text to batches: tokenizing text rows, padding a batch's inputs, and the order batches come in."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from .base import Examples, Features


def tokenize(examples: Examples, tokenizer: Any, max_seq_length: int) -> Features:
    """Tokenize every example in one batched call, truncating to ``max_seq_length`` tokens."""
    first = [t[0] for t in examples.texts]
    pairs = len(examples.texts[0]) == 2 if examples.texts else False
    second = [t[1] for t in examples.texts] if pairs else None
    encoded = tokenizer(
        first,
        second,
        truncation="longest_first",  # for pairs: trim the longer text first, one token at a time
        max_length=max_seq_length,
        padding=False,
        return_attention_mask=False,  # rebuilt per batch in pad_inputs, where padding is known
    )
    token_type_ids = encoded.get("token_type_ids")
    return Features(
        input_ids=list(encoded["input_ids"]),
        token_type_ids=list(token_type_ids) if token_type_ids is not None else None,
        labels=list(examples.labels),
    )


def padded_length(longest: int, pad_to_multiple_of: int | None, max_length: int | None = None) -> int:
    """The width of a batch whose longest row has ``longest`` tokens: itself (dynamic padding), or the
    next multiple of ``pad_to_multiple_of`` (a length bucket), never above ``max_length``."""
    if not pad_to_multiple_of:
        return longest
    width = -(-longest // pad_to_multiple_of) * pad_to_multiple_of
    return min(width, max_length) if max_length else width


def pad_inputs(features: Features, indices: Sequence[int], pad_token_id: int, pad_to_multiple_of: int | None = None,
               max_length: int | None = None) -> dict[str, torch.Tensor]:
    """The model's inputs for the rows ``indices``, right-padded to the longest sequence in the batch (not
    the split), or up to its length bucket (:func:`padded_length`) so that a compiled step sees a few
    shapes. No labels: a task type's collate adds them; scoring and the anchor's pre-pass need none."""
    if len(indices) == 0:
        raise ValueError("a batch needs at least one index")
    rows = [features.input_ids[i] for i in indices]
    width = padded_length(max(len(r) for r in rows), pad_to_multiple_of, max_length)

    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, ids in enumerate(rows):
        input_ids[b, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[b, : len(ids)] = 1
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}

    if features.token_type_ids is not None:
        token_type_ids = torch.zeros((len(rows), width), dtype=torch.long)
        for b, i in enumerate(indices):
            segments = features.token_type_ids[i]
            token_type_ids[b, : len(segments)] = torch.tensor(segments, dtype=torch.long)
        batch["token_type_ids"] = token_type_ids
    return batch


class BatchOrder:
    """Micro-batch i of the run, reproducible from (seed, i) alone: that index is the data position."""

    def __init__(self, n: int, batch_size: int, seed: int):
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.per_epoch = math.ceil(n / batch_size)
        self._epoch, self._perm = -1, torch.empty(0, dtype=torch.long)

    def batch(self, i: int) -> list[int]:
        epoch, j = divmod(i, self.per_epoch)
        if epoch != self._epoch:
            generator = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
            self._epoch, self._perm = epoch, torch.randperm(self.n, generator=generator)
        return self._perm[j * self.batch_size : (j + 1) * self.batch_size].tolist()


def subset(features: Features, indices: Sequence[int]) -> Features:
    return Features(
        input_ids=[features.input_ids[i] for i in indices],
        token_type_ids=[features.token_type_ids[i] for i in indices] if features.token_type_ids is not None else None,
        labels=[features.labels[i] for i in indices],
    )
