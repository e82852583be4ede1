"""The embedding anchor made into the run's loss term.

Its cache of theta*'s embeddings is built here, before step 1, from theta* itself:
on a new run that is the model as loaded (its encoder is theta*, and the head is not read); on a
resumed run a copy of the model with theta* (anchor.safetensors) loaded back, so that the cache is
rebuilt bit for bit rather than saved (an SST-2 cache is 103 MB; rebuilding it takes a forward pass).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ...recipe import Recipe
from ...tasks import Features
from ...tasks.batches import pad_inputs
from ...training.plan import recall_terms
from .term import CACHE_LIMIT_BYTES, EmbeddingAnchor, cache_bytes, embed_examples, theta_star_copy


def recall_schedule(recipe: Recipe, total_steps: int):
    """RecAdam's pull weight at a step, max(anneal_w - lambda(t), recall_floor), from the recipe's
    anneal keys whatever the optimizer (keep.schedule=recall). Under LP-FT the schedule starts with the
    fine-tuning phase, as RecAdam's does: it anneals on each weight's own step count, and the encoder's
    first step is the run's step linear_probe_steps + 1."""
    schedule, offset = recall_terms(recipe, total_steps)
    return lambda step: schedule.pull(schedule.lam(max(0, step - offset)))


@dataclass
class AnchorPlan:
    cached: bool  # theta*'s embeddings in memory; False: a frozen theta* runs beside the student
    bytes: int  # what the cache takes (or would take)
    line: str  # said at the start and in --dry-run


def plan_anchor(recipe: Recipe, examples: int, hidden_size: int) -> AnchorPlan:
    size = cache_bytes(examples, hidden_size)
    if size <= CACHE_LIMIT_BYTES:
        return AnchorPlan(True, size, f"theta*'s embeddings of the {examples} training examples cached "
                                      f"({size / 2**20:.1f} MiB; limit {CACHE_LIMIT_BYTES / 2**30:g} GiB)")
    return AnchorPlan(False, size, f"a frozen theta* runs beside the student on each batch: caching its embeddings "
                                   f"would take {size / 2**30:.2f} GiB, over the {CACHE_LIMIT_BYTES / 2**30:g} GiB limit")


def build_anchor(recipe: Recipe, model: torch.nn.Module, theta_star: dict[str, torch.Tensor], features: Features,
                 *, total_steps: int, device: torch.device, autocast, pad_id: int, batch_size: int,
                 fresh: bool) -> tuple[EmbeddingAnchor, AnchorPlan, float]:
    """(the anchor term, its plan, the pre-pass seconds). ``fresh``: ``model`` still holds theta*
    (a new run, before step 1); else a copy with theta* loaded back computes theta*'s embeddings."""
    import time

    k = recipe.keep
    plan = plan_anchor(recipe, len(features), model.config.hidden_size)
    schedule = recall_schedule(recipe, total_steps) if k.schedule == "recall" else None
    if not plan.cached:
        return EmbeddingAnchor(k.embeddings, pooling=k.pooling, distance=k.distance, theta_star=theta_star_copy(model, theta_star),
                               schedule=schedule), plan, 0.0
    task = recipe.task
    source = model if fresh else theta_star_copy(model, theta_star)

    def batches():
        for start in range(0, len(features), batch_size):
            indices = list(range(start, min(start + batch_size, len(features))))
            batch = pad_inputs(features, indices, pad_id, task.pad_to_multiple_of, task.max_seq_length)
            yield indices, {key: value.to(device) for key, value in batch.items()}

    started = time.perf_counter()
    cache = embed_examples(source, batches(), pooling=k.pooling, autocast=autocast).to(device)
    seconds = time.perf_counter() - started
    del source
    return EmbeddingAnchor(k.embeddings, pooling=k.pooling, distance=k.distance, cache=cache,
                           schedule=schedule), plan, seconds
