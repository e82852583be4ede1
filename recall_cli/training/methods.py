"""The recipe's methods (names.METHODS) made into what the loop runs: loss terms, the LP-FT phase.

The embedding anchor's cache of theta*'s embeddings is built here, before step 1, from theta* itself:
on a new run that is the model as loaded (its encoder is theta*, and the head is not read); on a
resumed run a copy of the model with theta* (anchor.safetensors) loaded back, so that the cache is
rebuilt bit for bit rather than saved (an SST-2 cache is 103 MB; rebuilding it takes a forward pass).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


from ..methods.keep import CACHE_LIMIT_BYTES, EmbeddingAnchor, cache_bytes, embed_examples, theta_star_copy
from ..optim import anneal_lambda, pull_weight
from ..recipe import Recipe
from ..tasks import Features
from ..tasks.batches import pad_inputs


def recall_schedule(recipe: Recipe, total_steps: int):
    """RecAdam's pull weight at a step, max(anneal_w - lambda(t), recall_floor), from the recipe's
    anneal keys whatever the optimizer (keep.schedule=recall). Under LP-FT the schedule starts with the
    fine-tuning phase, as RecAdam's does: it anneals on each weight's own step count, and the encoder's
    first step is the run's step linear_probe_steps + 1."""
    o = recipe.optimizer
    t0 = recipe.anneal_t0_steps(total_steps)
    shift = recipe.train.linear_probe_steps
    return lambda step: pull_weight(o.anneal_w, anneal_lambda(o.anneal_fun, max(0, step - shift), o.anneal_k, t0,
                                                              o.anneal_w), o.recall_floor)


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


def dry_run_lines(prepared: Any) -> dict[str, str]:
    """What --dry-run says of the methods (and of keys this run does not read), from the run's own
    set-up: the anchor's cache and its bound, LoRA's trainable parameters as peft counts them."""
    from ..methods import active_methods, method_labels

    recipe, lines = prepared.recipe, {}
    if active_methods(recipe):
        lines["methods"] = "; ".join(method_labels(recipe))
    unused = prepared.unused
    if unused:
        lines["unused"] = f"{', '.join(unused)} (only RecAdam reads them; this run is {recipe.optimizer.name})"
    built = prepared.built
    if built is None:
        return lines
    lines["disk"] = disk_line(prepared)
    if recipe.keep.embeddings > 0:
        lines["anchor"] = plan_anchor(recipe, len(prepared.task.train), built.model.config.hidden_size).line
    if prepared.adapter is not None:
        trainable, total = prepared.adapter.get_nb_trainable_parameters()
        frozen = total - trainable
        # Full fine-tuning keeps a gradient and Adam's two moments (fp32) for every parameter.
        lines["lora"] = (f"{trainable:,} of {total:,} parameters train ({100 * trainable / total:.2f} %, as peft counts "
                         f"them); ~{frozen * 12 / 2**20:.0f} MiB less for gradients and Adam's moments than full fine-tuning")
    return lines


def disk_line(prepared: Any) -> str:
    """What the run directory will take at the end: each checkpoint folder's weights (fp32), theta*,
    last/'s Adam moments (two per trainable weight); and what train.save=final keeps of it."""
    recipe, model = prepared.recipe, prepared.built.model
    weights = sum(p.numel() for p in model.parameters()) * 4
    if prepared.adapter is not None:  # saved merged: the base model's size, plus the small adapter
        weights = sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n and "original_module" not in n) * 4
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad) * 4
    theta_star = sum(t.numel() for t in (prepared.built.theta_star or {}).values()) * 4
    folders = 2 + (recipe.train.linear_probe_steps > 0)  # best/, last/, lp/
    final = folders * weights
    everything = final + theta_star + 2 * trainable + recipe.train.keep_last * (weights + 2 * trainable)
    mib = lambda n: f"{n / 2**20:,.0f} MiB"  # noqa: E731
    parts = (f"{folders} checkpoint folders of {mib(weights)}, theta* {mib(theta_star)}, Adam's moments "
             f"{mib(2 * trainable)}" + (f", {recipe.train.keep_last} step copies" if recipe.train.keep_last else ""))
    if recipe.train.save == "all":
        return f"~{mib(everything)} at the end, all kept (train.save=all: {parts}); train.save=final keeps ~{mib(final)}"
    return f"~{mib(everything)} while it trains ({parts}); train.save=final keeps ~{mib(final)} at the end"
