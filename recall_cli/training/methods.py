"""The registry's methods in one run: what set-up hands each method (RunView), what --dry-run says of
them and of the run directory's size. Names no method: every line here loops over the registry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..plugins import methods as registry
from ..plugins.methods import MethodRun
from ..recipe import Recipe
from ..tasks import Features
from .loss import Term
from .plan import RunPlan


@dataclass
class RunView:
    """What a method's ``start`` may read of the run being set up (before the run directory is written)."""

    recipe: Recipe
    model: torch.nn.Module  # holds theta* on a new run (before step 1)
    # Every parameter as the run began, by the model's own names (an adapter's, under one): theta*, and the
    # new head's start (start.safetensors on --resume). methods/teacher.frozen_copy(model, theta_star) is the
    # teacher, the same before and after a resume.
    theta_star: dict[str, torch.Tensor]
    train: Features
    plan: RunPlan  # what set-up decided: the steps, RecAdam's schedule (plan.pull_at), the methods on
    device: torch.device
    autocast: Any
    pad_id: int
    eval_batch: int
    fresh: bool  # a new run: ``model`` still holds theta*; else it holds last/'s weights
    reporter: Any
    tokenizer: Any = None  # the run's (a method's own texts are tokenized as the task's are)
    rank: int = 0  # this process among world_size (torchrun); the training order's batches are global
    world_size: int = 1

    @property
    def total_steps(self) -> int:
        return self.plan.total_steps


@dataclass
class MethodParts:
    """The methods the plan turns on, started for this run (what the loop's Training holds of them)."""

    terms: list[Term] = field(default_factory=list)  # their loss terms (training/loss.py)
    runs: list[MethodRun] = field(default_factory=list)  # each method on: its hooks in this run
    info: dict[str, str] = field(default_factory=dict)  # the start line's words on them

    @classmethod
    def of(cls, runs: list[MethodRun]) -> MethodParts:
        return cls([term for run in runs for term in run.terms], runs, {k: v for run in runs for k, v in run.info.items()})


def start_methods(view: RunView) -> list[MethodRun]:
    """Each method the recipe turns on (the plan's), started for this run, in registry order."""
    return [run for run in (registry.start(m, view) for m in view.plan.methods) if run is not None]


def dry_run_lines(prepared: Any) -> dict[str, str]:
    """What --dry-run says of the methods (and of keys this run does not read), from the run's own
    set-up: each method's own lines (the anchor's cache and its bound, an adapter's trainable count)."""
    recipe, lines = prepared.recipe, {}
    on = prepared.plan.methods
    if on:
        lines["methods"] = "; ".join(registry.labels(recipe, on))
    unused = prepared.unused
    if unused:
        lines["unused"] = f"{', '.join(unused)} (only RecAdam reads them; this run is {recipe.optimizer.name})"
    if prepared.built is None:
        return lines
    lines["disk"] = disk_line(prepared)
    for method in on:
        lines.update(method.dry_run_lines(prepared))
    return lines


def disk_line(prepared: Any) -> str:
    """What the run directory will take at the end: each checkpoint folder's weights (in the dtype they were
    loaded in: 2 bytes a parameter under model.dtype=bf16), theta* (in its own), last/'s optimizer state (Adam's
    two fp32 moments per trainable weight, and RecAdam's fp32 master copy of a 16-bit one); and what
    train.save=final keeps of it."""
    recipe, model = prepared.recipe, prepared.built.model
    size = lambda tensors: sum(t.numel() * t.element_size() for t in tensors)  # noqa: E731
    base = list(model.named_parameters())
    if prepared.adapter is not None:  # saved merged: the base model's size, plus the small adapter
        markers = prepared.adapter.extra_markers
        base = [(n, p) for n, p in base if not any(m in n for m in markers)]
    weights = size(p for _, p in base)
    trainable = [p for p in model.parameters() if p.requires_grad]
    moments = 8 * sum(p.numel() for p in trainable)  # RecAdam keeps them in fp32 whatever the weights' dtype
    masters = 4 * sum(p.numel() for p in trainable if p.element_size() < 4)  # training/weights.py: fp32 masters
    optimizer = moments + masters
    theta_star = size((prepared.built.theta_star or {}).values())
    folders = 2 + len([f for m in prepared.plan.methods for f in m.checkpoint_folders(recipe)])  # best/, last/, lp/
    final = folders * weights
    everything = final + theta_star + optimizer + recipe.train.keep_last * (weights + optimizer)
    mib = lambda n: f"{n / 2**20:,.0f} MiB"  # noqa: E731
    parts = (f"{folders} checkpoint folders of {mib(weights)}, theta* {mib(theta_star)}, Adam's moments "
             f"{mib(moments)}" + (f", fp32 master weights {mib(masters)}" if masters else "")
             + (f", {recipe.train.keep_last} step copies" if recipe.train.keep_last else ""))
    if recipe.train.save == "all":
        return f"~{mib(everything)} at the end, all kept (train.save=all: {parts}); train.save=final keeps ~{mib(final)}"
    return f"~{mib(everything)} while it trains ({parts}); train.save=final keeps ~{mib(final)} at the end"
