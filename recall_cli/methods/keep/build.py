"""The embedding anchor made into the run's loss term.

theta*'s features are computed here, before step 1, for what the run will read and nothing else: the
training rows its steps draw (keep.texts: task; every row once the run reaches a second epoch), or the
texts of the pool or file its micro-batches draw (methods/anchor_texts.py's fixed order). They come from theta* itself:
on a new run the model as loaded (its encoder is theta*, and the head is not read); on a resumed run a
copy of the model with theta* (anchor.safetensors) loaded back. The rows are a function of the recipe and
the run's length, and the pass batches them alike, so the cache is rebuilt bit for bit rather than
saved (an SST-2 cache of every row is 103 MB; rebuilding it takes a forward pass).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from ...distributed import shard
from ...recipe import Recipe
from ...tasks import Features
from ...tasks.batches import BatchOrder, pad_inputs, padded_length
from ...plugins.methods import MethodRun
from ..teacher import copy_bytes, frozen_copy
from .. import anchor_texts
from .term import CACHE_LIMIT_BYTES, EmbeddingAnchor, TextAnchor, cache_bytes, embed_examples


class AnchorRun(MethodRun):
    """The anchor's part in one run: its term, which (on texts of its own) draws by each micro-batch's position."""

    def __init__(self, anchor: EmbeddingAnchor, info: dict[str, str]):
        super().__init__([anchor], info)
        self.anchor = anchor

    def before_micro_batch(self, position: int) -> None:
        if isinstance(self.anchor, TextAnchor):
            self.anchor.at(position)


def layers_of(recipe: Recipe) -> tuple[int, ...] | None:
    """keep.layers as the term reads it: None for the last layer's embedding."""
    layers = recipe.keep.layers
    return None if layers == "last" else tuple(layers)


@dataclass
class AnchorPlan:
    cached: bool  # theta*'s features in memory; False: a frozen theta* runs beside the student
    bytes: int  # what the cache takes (or would take)
    rows: list[int]  # the training rows, or the anchor texts, the run draws: what the cache holds, ascending
    total: int  # of how many
    line: str  # said at the start and in --dry-run, with the pre-pass's time after it, then ``step_cost``
    step_cost: str = ""  # on texts of its own: the student's second forward

    def say(self, prepass: str = "") -> str:
        return self.line + prepass + self.step_cost


def plan_anchor(recipe: Recipe, total: int, hidden_size: int, *, total_steps: int, world_size: int = 1) -> AnchorPlan:
    """What the anchor computes of theta* for a run of ``total_steps`` over ``total`` training rows
    (keep.texts: task) or anchor texts, and whether it fits the cache."""
    k = recipe.keep
    on_task = k.texts == anchor_texts.TASK
    order = (anchor_texts.task_order if on_task else anchor_texts.text_order)(total, recipe, world_size)
    rows = anchor_texts.drawn(order, total_steps * recipe.train.grad_accum)
    layers = layers_of(recipe)
    size = cache_bytes(len(rows), hidden_size, len(layers) if layers else 1)
    what = "embeddings" if layers is None else f"features at hidden states {', '.join(map(str, layers))}"
    source = "training examples" if on_task else (
        "general-pool texts" if k.texts == anchor_texts.POOL else f"texts of {anchor_texts.source_words(k)}")
    of = f"the {len(rows):,} {source} the run draws" + (f" (of {total:,})" if len(rows) < total else " (all of them)")
    second = "" if on_task else (f"; each micro-batch adds a forward of {order.batch_size // world_size} of them "
                                 "through the student")
    if size <= CACHE_LIMIT_BYTES:
        return AnchorPlan(True, size, rows, total, f"theta*'s {what} of {of} cached ({size / 2**20:.1f} MiB; "
                                                   f"limit {CACHE_LIMIT_BYTES / 2**30:g} GiB)", second)
    return AnchorPlan(False, size, rows, total, f"a frozen theta* runs beside the student on each batch: caching "
                                                f"its {what} of {of} would take {size / 2**30:.2f} GiB, over the "
                                                f"{CACHE_LIMIT_BYTES / 2**30:g} GiB limit", second)


def anchor_bytes(recipe: Recipe, total: int, hidden_size: int, parameters: int, *, total_steps: int | None,
                 world_size: int = 1) -> int:
    """What the anchor adds to a process's memory: its cache of theta*'s features of what the run draws
    (``total_steps`` None: every one of the ``total`` rows or texts), or, past the cache's limit, a frozen
    theta* of ``parameters`` weights."""
    if total_steps is None:
        layers = layers_of(recipe)
        size = cache_bytes(total, hidden_size, len(layers) if layers else 1)
        return size if size <= CACHE_LIMIT_BYTES else copy_bytes(parameters)
    plan = plan_anchor(recipe, total, hidden_size, total_steps=total_steps, world_size=world_size)
    return plan.bytes if plan.cached else copy_bytes(parameters)


def prepass_batches(features: Features, rows: list[int], batch_size: int, pad_id: int, recipe: Recipe,
                    device: torch.device) -> Iterator[tuple[list[int], dict[str, torch.Tensor]]]:
    """The pre-pass: ``rows`` of ``features`` in order, ``batch_size`` at a time, as (cache rows, inputs)."""
    task = recipe.task
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        batch = pad_inputs(features, chunk, pad_id, task.pad_to_multiple_of, task.max_seq_length)
        yield list(range(start, start + len(chunk))), {key: value.to(device) for key, value in batch.items()}


def estimate_prepass(model: torch.nn.Module, features: Features, rows: list[int], *, batch_size: int, pad_id: int,
                     recipe: Recipe, device: torch.device, autocast=None) -> float:
    """The pre-pass's seconds, from one batch timed: its time per padded token times the pass's tokens."""
    if not rows:
        return 0.0
    task = recipe.task
    widths = [padded_length(max(len(features.input_ids[i]) for i in rows[s:s + batch_size]), task.pad_to_multiple_of,
                            task.max_seq_length) * len(rows[s:s + batch_size]) for s in range(0, len(rows), batch_size)]
    indices, inputs = next(prepass_batches(features, rows, batch_size, pad_id, recipe, device))
    started = time.perf_counter()
    embed_examples(model, iter([(indices, inputs)]), pooling=recipe.keep.pooling, autocast=autocast,
                   layers=layers_of(recipe))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - started) * sum(widths) / widths[0]


def build_anchor(recipe: Recipe, model: torch.nn.Module, theta_star: dict[str, torch.Tensor], features: Features,
                 *, total_steps: int, device: torch.device, autocast, pad_id: int, batch_size: int, fresh: bool,
                 tokenizer: Any = None, rank: int = 0, world_size: int = 1,
                 pull: Callable[[int], float] | None = None) -> tuple[EmbeddingAnchor, AnchorPlan, float]:
    """(the anchor term, its plan, the pre-pass seconds). ``features``: the training rows (the anchor's
    inputs under keep.texts=task); ``tokenizer`` tokenizes a pool or file of texts. ``fresh``: ``model``
    still holds theta* (a new run, before step 1); else a copy with theta* loaded back computes theta*'s features.
    ``pull``: RecAdam's pull weight at a run's step, as the run's plan has it (RunPlan.pull_at, LP-FT's head
    phase included), which keep.schedule=recall follows."""
    k = recipe.keep
    if k.schedule == "recall" and pull is None:
        raise ValueError("keep.schedule=recall follows RecAdam's pull weight: give pull (the run's RunPlan.pull_at)")
    on_task = k.texts == anchor_texts.TASK
    texts = None if on_task else anchor_texts.read_texts(k)
    plan = plan_anchor(recipe, len(features) if on_task else len(texts), model.config.hidden_size,
                       total_steps=total_steps, world_size=world_size)
    if not on_task:  # only the texts the run draws are tokenized: row r of `features` is the r-th of plan.rows
        features = anchor_texts.tokenize_texts([texts[i] for i in plan.rows], tokenizer, recipe.task.max_seq_length)
    common: dict[str, Any] = {"pooling": k.pooling, "distance": k.distance, "layers": layers_of(recipe),
                              "schedule": pull if k.schedule == "recall" else None}
    seconds = 0.0
    if plan.cached:
        source = model if fresh else frozen_copy(model, theta_star)
        rows = plan.rows if on_task else list(range(len(features)))
        started = time.perf_counter()
        common["cache"] = embed_examples(source, prepass_batches(features, rows, batch_size, pad_id, recipe, device),
                                         pooling=k.pooling, autocast=autocast, layers=common["layers"]).to(device)
        seconds = time.perf_counter() - started
        del source
    else:
        common["theta_star"] = frozen_copy(model, theta_star)
    if on_task:
        if plan.cached and len(plan.rows) < plan.total:  # example i's row in the cache
            common["slot"] = _slots(plan.rows, plan.total, device)
        return EmbeddingAnchor(k.embeddings, **common), plan, seconds
    order = anchor_texts.text_order(plan.total, recipe, world_size)
    return TextAnchor(k.embeddings, student=model, texts=features, draw=_draw(order, plan.rows, rank, world_size),
                      pad_id=pad_id, pad_to_multiple_of=recipe.task.pad_to_multiple_of,
                      max_length=recipe.task.max_seq_length, **common), plan, seconds


def _slots(rows: list[int], total: int, device: torch.device) -> torch.Tensor:
    slot = torch.full((total,), -1, dtype=torch.long)
    slot[torch.tensor(rows, dtype=torch.long)] = torch.arange(len(rows))
    return slot.to(device)


def _draw(order: BatchOrder, rows: list[int], rank: int, world_size: int):
    """position -> this process's rows of the drawn texts: its share of the global micro-batch (every
    process one, as the task's batches are split; a process left none by an epoch's last, short draw
    keeps its first text, as the loop does with the task's)."""
    row_of = {text: r for r, text in enumerate(rows)}

    def draw(position: int) -> list[int]:
        texts = order.batch(position)
        return [row_of[t] for t in (shard(texts, rank, world_size) or texts[:1])]

    return draw


def dry_run_line(prepared: Any) -> str:
    """--dry-run's anchor line: the plan's, and the pre-pass's seconds from one batch timed on the run's device."""
    from ...runtime import autocast_for

    recipe, model, tc = prepared.recipe, prepared.built.model, prepared.recipe.train
    on_task = recipe.keep.texts == anchor_texts.TASK
    texts = None if on_task else anchor_texts.read_texts(recipe.keep)
    features = prepared.task.train
    plan = plan_anchor(recipe, len(features) if on_task else len(texts), model.config.hidden_size,
                       total_steps=prepared.total_steps, world_size=prepared.ctx.world_size)
    if not plan.cached:
        return plan.say()
    rows = plan.rows
    if not on_task:
        features = anchor_texts.tokenize_texts([texts[i] for i in plan.rows], prepared.tokenizer, recipe.task.max_seq_length)
        rows = list(range(len(features)))
    batch = tc.eval_batch_size or 2 * tc.batch_size
    pad_id = prepared.tokenizer.pad_token_id if prepared.tokenizer.pad_token_id is not None else 0
    seconds = estimate_prepass(model.to(prepared.device), features, rows, batch_size=batch, pad_id=pad_id,
                               recipe=recipe, device=prepared.device,
                               autocast=autocast_for(prepared.precision, prepared.device))
    return plan.say(f", pre-pass ~{seconds:.{0 if seconds >= 10 else 1}f} s (one batch of {batch} timed on "
                    f"{prepared.device})")
