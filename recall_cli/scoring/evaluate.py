"""Scoring a model on a task's dev split(s): shared by the training loop and `recall evaluate`."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..names import Task
from ..distributed import Distributed
from ..errors import NonFiniteWeights
from ..tasks import Examples, Features, TaskType, load_split, task_for, task_type_for
from ..tasks.batches import pad_inputs, subset
from .scored import checkpoint_task


@torch.no_grad()
def predict(
    model: torch.nn.Module,
    features: Features,
    batch_size: int,
    device: torch.device,
    pad_token_id: int,
    autocast: AbstractContextManager | None = None,
    dist: Distributed | None = None,
) -> np.ndarray:
    """Raw outputs (logits, or scores for regression) in the order of ``features``, as float32.

    Under torchrun each rank scores every world_size-th batch and all ranks gather the rest. The
    batches are the ones a single process would form, so every output (and every metric) is the
    single-process one, and no example is scored twice (no sampler padding)."""
    rank, world = (dist.rank, dist.world_size) if dist is not None else (0, 1)
    was_training = model.training
    model.eval()
    # Batches of similar length waste little on padding; the order is undone below.
    order = sorted(range(len(features)), key=lambda i: len(features.input_ids[i]))
    batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    mine: dict[int, np.ndarray] = {}
    try:
        for b in range(rank, len(batches), world):
            batch = pad_inputs(features, batches[b], pad_token_id)
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            with autocast or nullcontext():
                logits = model(**batch).logits
            mine[b] = logits.float().cpu().numpy()
    finally:
        model.train(was_training)
    outputs = mine
    if world > 1:
        outputs = {b: out for part in dist.all_gather_object(mine) for b, out in part.items()}
    stacked = np.concatenate([outputs[b] for b in range(len(batches))]) if batches else np.zeros((0, 1), dtype=np.float32)
    result = np.empty_like(stacked)
    result[np.asarray(order, dtype=np.int64)] = stacked
    bad = np.flatnonzero(~np.isfinite(result).all(axis=tuple(range(1, result.ndim))))
    if bad.size:  # a diverged model scores as one class, and predict would write it: refuse it instead
        raise NonFiniteWeights.in_outputs(bad.size, len(result), int(bad[0]))
    return result


def score(
    model: torch.nn.Module,
    task: Task,
    dev: dict[str, Features],
    batch_size: int,
    device: torch.device,
    pad_token_id: int,
    autocast: AbstractContextManager | None = None,
    dist: Distributed | None = None,
) -> dict[str, float]:
    """The task's metrics by name plus "main". A second dev split (MNLI mismatched) adds its
    metrics with the split's suffix, e.g. accuracy_mismatched. Under torchrun every rank must call
    it (the predictions are gathered) and every rank gets the same metrics."""
    kind = task_type_for(task)
    metrics: dict[str, float] = {}
    for i, (split, features) in enumerate(dev.items()):
        # A causal LM scores its completions itself (loss, greedy generation): each rank its share of the rows.
        predictions = sharded_outputs(kind, model, features, batch_size, device, pad_token_id, autocast, dist)
        if predictions is None:
            predictions = predict(model, features, batch_size, device, pad_token_id, autocast, dist)
        values = kind.metrics(predictions, np.asarray(features.labels))
        if i == 0:
            metrics.update(values)
        else:
            suffix = split.rsplit("_", 1)[-1]
            metrics.update({f"{name}_{suffix}": value for name, value in values.items() if name != "main"})
    return metrics


def sharded_outputs(kind: TaskType, model: torch.nn.Module, features: Features, batch_size: int, device: torch.device,
                    pad_token_id: int, autocast: AbstractContextManager | None = None,
                    dist: Distributed | None = None) -> np.ndarray | None:
    """``kind.outputs`` (None for a type whose outputs are the logits), under torchrun split across the ranks as
    predict splits its batches: the rows sorted by length, cut into batches, batch b to rank b % world_size. A
    rank's rows, so ordered, form the same batches again in outputs (its own length sort is stable), so every
    row is scored once, in the batch a single process scores it in, and every rank gets all the rows back. A
    NaN/inf refusal on any rank is raised on every rank, its counts over all the rows."""
    rank, world = (dist.rank, dist.world_size) if dist is not None else (0, 1)
    if world == 1:
        return kind.outputs(model, features, batch_size, device, pad_token_id, autocast)
    order = sorted(range(len(features)), key=lambda i: len(features.input_ids[i]))
    batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    mine = [i for b in range(rank, len(batches), world) for i in batches[b]]
    try:
        out, refused = kind.outputs(model, subset(features, mine), batch_size, device, pad_token_id, autocast), None
    except NonFiniteWeights as error:  # raised below on every rank: alone, it would leave the others waiting
        out, refused = None, getattr(error, "rows", None) or (1, len(mine), 0)
    parts = dist.all_gather_object((mine, None if out is None else np.asarray(out), refused))
    # (rows refused, the first of them as a row of ``features``) per rank that refused
    bad = [(part[2][0], part[0][part[2][2]]) for part in parts if part[2] is not None]
    if bad:
        raise NonFiniteWeights.in_outputs(sum(n for n, _ in bad), len(features), min(f for _, f in bad))
    if all(part[1] is None for part in parts):
        return None
    shaped = next(part[1] for part in parts if part[1] is not None and len(part[1]))
    result = np.empty((len(features), *shaped.shape[1:]), dtype=shaped.dtype)
    for rows, values, _ in parts:
        if rows:
            result[np.asarray(rows, dtype=np.int64)] = values
    return result


def evaluate_checkpoint(
    path: Path,
    *,
    task: str | None = None,
    data_dir: Path | None = None,
    split: str | None = None,
    batch_size: int | None = None,
    device: str = "auto",
    holdout: bool = False,
) -> dict[str, Any]:
    """Score a run directory's best/ (else last/) checkpoint, or a checkpoint folder, with the run's
    tokenization and eval batch size, so that the numbers agree with the ones the run recorded.
    ``holdout``: a run trained with task.holdout also has its held-out training rows scored (the same
    rows the run held out: the split is fixed by the task, not the seed), under "holdout_metrics"."""
    from ..model import load_checkpoint_model, load_tokenizer
    from ..runtime import autocast_for, resolve_device, resolve_precision

    scored = checkpoint_task(path, task, data_dir)
    folder, recipe, task_cfg = scored.folder, scored.recipe, scored.task

    kind = task_for(task_cfg)
    spec = kind.spec
    splits = [split] if split else list(spec.dev_splits)
    tokenizer = load_tokenizer(str(folder))
    model = load_checkpoint_model(folder, kind)
    dev = {}
    for name in splits:
        examples = load_split(task_cfg, name, task_cfg.max_eval_examples)
        dev[name] = kind.tokenize(examples, tokenizer, task_cfg.max_seq_length)

    dev_device = resolve_device(device)
    precision = recipe.train.precision if recipe else "auto"
    if precision == "fp16" and dev_device.type != "cuda":
        precision = "fp32"  # a run trained in fp16 on a GPU, scored on a CPU: fp32 is exact enough
    precision = resolve_precision(precision, dev_device)
    if batch_size is None:
        batch_size = (recipe.train.eval_batch_size or 2 * recipe.train.batch_size) if recipe else 64
    model.to(dev_device)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    autocast = autocast_for(precision, dev_device)
    metrics = score(model, spec, dev, batch_size, dev_device, pad_id, autocast)
    scored_run = {"checkpoint": str(folder), "task": spec.name, "splits": splits,
                  "examples": {k: len(v) for k, v in dev.items()}, "metrics": metrics}
    if holdout and task_cfg.holdout > 0:
        held = held_out_rows(task_cfg, kind, tokenizer)
        scored_run["holdout_metrics"] = score(model, spec, {"holdout": held}, batch_size, dev_device, pad_id, autocast)
        scored_run["examples"]["holdout"] = len(held.labels)
    return scored_run


def held_out_rows(task_cfg: Any, task: TaskType, tokenizer: Any) -> Features:
    """The rows a run with task.holdout took out of its training split, tokenized as the run did."""
    from ..tasks.holdout import holdout_sample, holdout_split

    train = load_split(task_cfg, "train", task_cfg.max_train_examples)
    _, held = holdout_split(task, train.labels, task_cfg.holdout)
    held = holdout_sample(task, train.labels, held, task_cfg.max_holdout_examples)
    rows = Examples([train.texts[i] for i in held], [train.labels[i] for i in held], train.source)
    return task.tokenize(rows, tokenizer, task_cfg.max_seq_length)
