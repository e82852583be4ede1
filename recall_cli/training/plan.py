"""The run's plan, decided once before the first step and read by everyone after: the loop, preflight,
--dry-run, summary.json and the model cards. Nothing here is recomputed elsewhere.

- the schedule: total optimizer steps, RecAdam's t0 in steps (a recipe's fraction of the run turned into
  steps here and nowhere else) and its recall terms as one value (optim.RecallSchedule), with the step
  RecAdam's clock starts after (a method's head phase: LP-FT's encoder starts at linear_probe_steps + 1);
- the step: compiled or not, in which precision, and why (training/compiled.py decides the first,
  runtime.choose_precision the second; setup._plan_step asks both);
- the methods the recipe turns on, and preflight's memory estimate.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..plugins.methods import Method
from ..optim import RecallSchedule
from ..recipe import Recipe


@dataclass(frozen=True)
class StepPlan:
    """How the run's step computes: compiled or not, in which precision, and why (the start line,
    --dry-run and summary.json say both)."""

    mode: str | None
    reason: str
    precision: str
    precision_reason: str


@dataclass(frozen=True)
class RunPlan:
    total_steps: int
    anneal_t0: float  # RecAdam's t0 in optimizer steps
    recall: RecallSchedule  # RecAdam's terms, t0 in steps: what the optimizer is built with
    recall_offset: int  # RecAdam's clock starts after this many of the run's steps (LP-FT's head phase)
    step: StepPlan
    methods: tuple[Method, ...]  # the registry's methods the recipe turns on, in its order
    memory: Any = None  # preflight's MemoryEstimate (None where a failed check stopped it)

    def lam_at(self, step: int) -> float:
        """lambda at the run's ``step`` (on the encoder's clock)."""
        return self.recall.lam(max(0, step - self.recall_offset))

    def pull_at(self, step: int) -> float:
        """RecAdam's pull weight at the run's ``step``: max(anneal_w - lambda, recall_floor)."""
        return self.recall.pull(self.lam_at(step))


def plan_run(recipe: Recipe, total_steps: int, step: StepPlan, on: tuple[Method, ...], memory: Any = None) -> RunPlan:
    """The plan, from the methods the recipe turns on (``on``: set-up asks the registry once). Here, and nowhere
    else, a recipe's anneal_t0 becomes steps, and RecAdam's clock its offset (LP-FT's head phase)."""
    on = tuple(on)
    schedule = RecallSchedule.of(dataclasses.asdict(recipe.optimizer), anneal_t0=recipe.anneal_t0_steps(total_steps))
    offset = sum(m.recall_offset(recipe) for m in on)
    return RunPlan(total_steps, schedule.anneal_t0, schedule, offset, step, on, memory)
