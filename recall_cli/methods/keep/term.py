"""The embedding anchor: keep each training example's pooled sentence embedding near theta*'s.

RecAdam pulls the *weights* toward theta*; the skill recall measures (zero-shot STS) lives in the
*function*: the mean-pooled sentence embedding. This term keeps that function where theta* had it on
the task's own inputs, as LwF (Li & Hoiem 2016) keeps a network's outputs and LDIFS (Mukhoti et al.
2023, arXiv 2308.13320) its features. It needs no data beyond the task's.

theta*'s embeddings of the training examples come from one forward pass before step 1 (theta* in eval
mode, the run's tokenization and precision), kept in memory as float32: a step then costs no second
forward, since the student's embedding comes from the forward that the task loss runs anyway. Where
that cache would pass :data:`CACHE_LIMIT_BYTES`, a frozen copy of theta* runs beside the student on
each batch instead.

Distances, each averaged over the batch:
    cosine   1 - cos(e, e*)                      (direction: what a cosine-similarity STS score reads)
    mse      mean squared difference of e and e*  (direction and length)
    gram     the batch's pairwise cosine similarities, kept as theta* had them (the geometry between
             sentences, free to rotate as a whole)
"""

from __future__ import annotations

import copy
import math
from contextlib import nullcontext
from typing import Any, Callable

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


def cache_bytes(examples: int, hidden_size: int) -> int:
    return examples * hidden_size * 4


class EmbeddingAnchor:
    """The anchor as a loss term (training/loss.py calls it): ``anchor(outputs, batch, indices)`` is
    the unweighted distance, ``anchor.weight(step)`` its weight at that step.

    ``cache`` holds theta*'s pooled embedding of every training example (row = example index), or
    ``theta_star`` is a frozen theta* run on each batch (the library's way, and the loop's past
    :data:`CACHE_LIMIT_BYTES`)."""

    name = "keep"
    needs_hidden_states = True

    def __init__(self, weight: float, *, pooling: str = "mean", distance: str = "cosine",
                 cache: Tensor | None = None, theta_star: torch.nn.Module | None = None,
                 schedule: Callable[[int], float] | None = None):
        if not (isinstance(weight, (int, float)) and math.isfinite(weight) and weight >= 0):
            raise ValueError(f"weight: a finite number >= 0, got {weight!r}")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling: choose from {', '.join(POOLINGS)}, got {pooling!r}")
        if distance not in DISTANCES:
            raise ValueError(f"distance: choose from {', '.join(DISTANCES)}, got {distance!r}")
        if (cache is None) == (theta_star is None):
            raise ValueError("give theta*'s embeddings (cache) or theta* itself (theta_star), one of them")
        self.base_weight, self.pooling, self.kind = float(weight), pooling, distance
        self.cache, self.theta_star = cache, theta_star
        self.schedule = schedule  # step -> factor in [0, 1]; None: constant

    def weight(self, step: int) -> float:
        return self.base_weight * (self.schedule(step) if self.schedule is not None else 1.0)

    def __call__(self, outputs: Any, batch: dict[str, Tensor], indices: Tensor | None = None) -> Tensor:
        mask = batch["attention_mask"]
        student = pool(outputs.hidden_states[-1], mask, self.pooling)
        if self.cache is not None:
            if indices is None:
                raise ValueError("a cached anchor needs the batch's example indices")
            star = self.cache[indices]
        else:
            star = self.theta_star_embeddings(batch)
        return distance(student, star, self.kind)

    @torch.no_grad()
    def theta_star_embeddings(self, batch: dict[str, Tensor]) -> Tensor:
        inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        out = self.theta_star(**inputs, output_hidden_states=True)
        return pool(out.hidden_states[-1], batch["attention_mask"], self.pooling).float()


def theta_star_copy(model: torch.nn.Module, theta_star: dict[str, Tensor]) -> torch.nn.Module:
    """A frozen copy of ``model`` holding theta* (by parameter name), in eval mode: the function to keep."""
    frozen = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in frozen.named_parameters():
            if name in theta_star:
                p.copy_(theta_star[name].to(p.device, p.dtype))
            p.requires_grad_(False)
    return frozen.eval()


@torch.no_grad()
def embed_examples(model: torch.nn.Module, batches, *, pooling: str, autocast=None) -> Tensor:
    """theta*'s pooled embedding of every example: ``batches`` yields (indices, inputs on the device)
    covering each example once. ``model`` is put in eval mode for the pass (dropout off) and back."""
    was_training = model.training
    model.eval()
    rows: dict[int, Tensor] = {}
    try:
        for indices, inputs in batches:
            with autocast or nullcontext():
                out = model(**inputs, output_hidden_states=True)
            pooled = pool(out.hidden_states[-1], inputs["attention_mask"], pooling).float()
            for i, row in zip(indices, pooled):
                rows[i] = row
    finally:
        model.train(was_training)
    return torch.stack([rows[i] for i in range(len(rows))])
