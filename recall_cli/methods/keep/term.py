"""The embedding anchor: keep the pooled sentence embedding of each training example (or of general
sentences) near theta*'s.

RecAdam pulls the *weights* toward theta*; the skill recall measures (zero-shot STS) lives in the
*function*: the mean-pooled sentence embedding. This term keeps that function where theta* had it, as
LwF (Li & Hoiem 2016) keeps a network's outputs and LDIFS (Mukhoti et al. 2023, arXiv 2308.13320) its
features: on the task's own inputs (:class:`EmbeddingAnchor`), or on texts of its own, a general pool or
a file (:class:`TextAnchor`); of the last layer, or of several (``layers``, LDIFS-style: the distance of
each layer's pooled feature, averaged over the layers).

theta*'s features come from one forward pass before step 1 (theta* in eval mode, the run's tokenization
and precision) over the rows or texts the run will draw, kept in memory as float32. On the task's inputs
a step then costs no second forward: the student's embedding comes from the forward that the task loss
runs anyway. On texts of its own the student runs a second forward on each micro-batch's anchor texts.
Where that cache would pass :data:`CACHE_LIMIT_BYTES`, a frozen copy of theta* runs beside the student
on each batch instead.

Distances, each averaged over the batch:
    cosine   1 - cos(e, e*)                      (direction: what a cosine-similarity STS score reads)
    mse      mean squared difference of e and e*  (direction and length)
    gram     the batch's pairwise cosine similarities, kept as theta* had them (the geometry between
             sentences, free to rotate as a whole)
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

# Above this the cache of theta*'s embeddings gives way to a frozen theta* beside the student
# (SST-2 on MiniLM: 67,349 x 384 x 4 bytes = 103 MB; BERT-base on MNLI: 393k x 768 x 4 = 1.2 GB).
CACHE_LIMIT_BYTES = 2 * 2**30

POOLINGS = ("mean", "cls")
DISTANCES = ("cosine", "mse", "gram")
SCHEDULES = ("constant", "recall")


def pool(hidden: Tensor, attention_mask: Tensor, pooling: str) -> Tensor:
    """(B, T, H) token vectors -> (B, H): the mean over non-padding tokens, or the first token's."""
    if pooling == "cls":
        return hidden[:, 0]
    mask = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


def distance(student: Tensor, star: Tensor, kind: str) -> Tensor:
    """How far the batch's embeddings are from theta*'s, a scalar (float32 whatever the inputs)."""
    student, star = student.float(), star.float()
    if kind == "cosine":
        return (1.0 - F.cosine_similarity(student, star, dim=-1)).mean()
    if kind == "mse":
        return F.mse_loss(student, star)
    if kind == "gram":
        s, r = F.normalize(student, dim=-1), F.normalize(star, dim=-1)
        return ((s @ s.T - r @ r.T) ** 2).mean()
    raise ValueError(f"unknown distance {kind!r} (choose from {', '.join(DISTANCES)})")


def features(hidden_states: Sequence[Tensor], attention_mask: Tensor, pooling: str,
             layers: Sequence[int] | None = None) -> Tensor:
    """The pooled features the anchor keeps: (B, H) of the last hidden state (``layers`` None), or
    (B, K, H) of the K hidden states named (0: the embeddings' output, i: layer i's)."""
    if layers is None:
        return pool(hidden_states[-1], attention_mask, pooling)
    return torch.stack([pool(hidden_states[i], attention_mask, pooling) for i in layers], dim=1)


def gap(student: Tensor, star: Tensor, kind: str, layers: Sequence[int] | None = None) -> Tensor:
    """The anchor's distance between two :func:`features`: of the last layer, or each layer's averaged."""
    if layers is None:
        return distance(student, star, kind)
    return sum(distance(student[:, k], star[:, k], kind) for k in range(len(layers))) / len(layers)


def cache_bytes(examples: int, hidden_size: int, layers: int = 1) -> int:
    return examples * layers * hidden_size * 4


class EmbeddingAnchor:
    """The anchor on the task's inputs as a loss term (training/loss.py calls it): ``anchor(outputs,
    batch, indices)`` is the unweighted distance, ``anchor.weight(step)`` its weight at that step.

    ``cache`` holds theta*'s pooled features of the training examples (row ``slot[i]`` for example i, or
    row i without ``slot``), or ``theta_star`` is a frozen theta* run on each batch (the library's way,
    and the loop's past :data:`CACHE_LIMIT_BYTES`). ``layers``: None keeps the last layer's embedding,
    a list the features of those hidden states (0: the embeddings' output, i: layer i's)."""

    name = "keep"
    needs_hidden_states = True

    def __init__(self, weight: float, *, pooling: str = "mean", distance: str = "cosine",
                 cache: Tensor | None = None, theta_star: torch.nn.Module | None = None,
                 schedule: Callable[[int], float] | None = None, layers: Sequence[int] | None = None,
                 slot: Tensor | None = None):
        if not (isinstance(weight, (int, float)) and math.isfinite(weight) and weight >= 0):
            raise ValueError(f"weight: a finite number >= 0, got {weight!r}")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling: choose from {', '.join(POOLINGS)}, got {pooling!r}")
        if distance not in DISTANCES:
            raise ValueError(f"distance: choose from {', '.join(DISTANCES)}, got {distance!r}")
        if (cache is None) == (theta_star is None):
            raise ValueError("give theta*'s embeddings (cache) or theta* itself (theta_star), one of them")
        if layers is not None and (not layers or any(not isinstance(i, int) or i < 0 for i in layers)):
            raise ValueError(f"layers: None (the last) or hidden-state indices >= 0, got {layers!r}")
        self.base_weight, self.pooling, self.kind = float(weight), pooling, distance
        self.cache, self.theta_star, self.slot = cache, theta_star, slot
        self.layers = tuple(layers) if layers is not None else None
        self.schedule = schedule  # step -> factor in [0, 1]; None: constant

    def weight(self, step: int) -> float:
        return self.base_weight * (self.schedule(step) if self.schedule is not None else 1.0)

    def __call__(self, outputs: Any, batch: dict[str, Tensor], indices: Tensor | None = None) -> Tensor:
        student = features(outputs.hidden_states, batch["attention_mask"], self.pooling, self.layers)
        if self.cache is not None:
            if indices is None:
                raise ValueError("a cached anchor needs the batch's example indices")
            star = self.cache[indices if self.slot is None else self.slot[indices]]
        else:
            star = self.theta_star_features(batch)
        return gap(student, star, self.kind, self.layers)

    @torch.no_grad()
    def theta_star_features(self, batch: dict[str, Tensor]) -> Tensor:
        inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        out = self.theta_star(**inputs, output_hidden_states=True)
        return features(out.hidden_states, batch["attention_mask"], self.pooling, self.layers).float()


class TextAnchor(EmbeddingAnchor):
    """The anchor on texts of its own (keep.texts: the general pool or a file). Before each micro-batch
    the loop tells it its position (:meth:`at`); ``draw(position)`` names the rows of ``texts`` (tokenized,
    unpadded) it keeps there. The student runs a second forward on them, since the task batch's forward
    cannot give their features; the task forward itself runs as it would without the anchor. ``cache``
    row r (or the frozen ``theta_star``) is theta*'s of ``texts`` row r."""

    needs_hidden_states = False

    def __init__(self, weight: float, *, student: torch.nn.Module, texts: Any, draw: Callable[[int], list[int]],
                 pad_id: int, pad_to_multiple_of: int | None = None, max_length: int | None = None, **kwargs: Any):
        super().__init__(weight, **kwargs)
        self.student, self.texts, self.draw = student, texts, draw
        self.pad = (pad_id, pad_to_multiple_of, max_length)
        self.position: int | None = None

    def at(self, position: int) -> None:
        self.position = position

    def __call__(self, outputs: Any, batch: dict[str, Tensor], indices: Tensor | None = None) -> Tensor:
        from ...tasks.batches import pad_inputs

        if self.position is None:
            raise ValueError("a text anchor draws by the micro-batch's position: call anchor.at(position) first")
        rows = self.draw(self.position)
        device = batch["input_ids"].device
        inputs = {k: v.to(device, non_blocking=True) for k, v in pad_inputs(self.texts, rows, *self.pad).items()}
        out = self.student(**inputs, output_hidden_states=True)
        student = features(out.hidden_states, inputs["attention_mask"], self.pooling, self.layers)
        if self.cache is not None:
            star = self.cache[torch.tensor(rows, dtype=torch.long, device=self.cache.device)]
        else:
            star = self.theta_star_features(inputs)
        return gap(student, star, self.kind, self.layers)


@torch.no_grad()
def embed_examples(model: torch.nn.Module, batches, *, pooling: str, autocast=None,
                   layers: Sequence[int] | None = None) -> Tensor:
    """theta*'s pooled features (:func:`features`) of every example: ``batches`` yields (indices, inputs
    on the device) covering rows 0..n-1 once. ``model`` is put in eval mode for the pass (dropout off) and back."""
    was_training = model.training
    model.eval()
    rows: dict[int, Tensor] = {}
    try:
        for indices, inputs in batches:
            with autocast or nullcontext():
                out = model(**inputs, output_hidden_states=True)
            pooled = features(out.hidden_states, inputs["attention_mask"], pooling, layers).float()
            for i, row in zip(indices, pooled):
                rows[i] = row
    finally:
        model.train(was_training)
    return torch.stack([rows[i] for i in range(len(rows))])
