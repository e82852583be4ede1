"""EWC (Kirkpatrick et al. 2017, arXiv 1612.00796): keep the weights that mattered to the tasks before this
one near where those tasks left them, each weighted by its diagonal Fisher information.

    fisher.py   the diagonal empirical Fisher of the previous stage's training rows at its end, saved with
                that stage as fisher.safetensors (so a resume or a second sequence does not recompute it),
                and the penalty term

The loss term is lambda/2 * sum_i F_i (theta_i - theta_prev_i)^2 over the encoder's weights (the new task's
head has no past), theta_prev being the weights this stage starts from: the previous stage's. Across more
than two stages the Fisher is online EWC's (Schwarz et al. 2018, arXiv 1805.06370): F = F_prev_stage +
gamma * F_of_the_stage_before, so one penalty anchored at the latest weights carries every earlier task.

Keys: ``ewc.weight`` (lambda; turns it on), ``ewc.samples`` (training rows the Fisher averages over, drawn
by the previous stage's seed), ``ewc.gamma`` (online EWC's decay; 1 = every earlier task alike), and
``ewc.previous`` (the previous stage's run directory, which `recall continual` sets).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..registry import Family, Method, MethodRun, register_method


@dataclass(frozen=True)
class EwcConfig:
    weight: float = 0.0  # lambda; 0 = off
    samples: int = 128  # training rows of the previous stage the Fisher averages over
    gamma: float = 1.0  # online EWC: the Fisher of the stages before the previous one, decayed by gamma
    previous: str | None = None  # the previous stage's run directory (recall continual sets it)


class ElasticWeightConsolidation(Method):
    name = "ewc"
    label = "EWC"
    paper = "Kirkpatrick et al. 2017, arXiv 1612.00796"
    switch = "ewc.weight"
    keys = ("ewc.weight", "ewc.samples", "ewc.gamma", "ewc.previous")
    cell = "ewc"
    short = "ewc"
    family = Family("ewc", "#F0E442", hue_rank=4)
    section = "ewc"
    config = EwcConfig

    def describe(self, recipe: Any) -> str:
        e = self.settings(recipe)
        return f"EWC {e.weight:g} (Fisher of {e.samples} rows" + (f", gamma {e.gamma:g})" if e.gamma != 1 else ")")

    def check(self, recipe: Any) -> list[str]:
        e, problems = self.settings(recipe), []
        if e.weight < 0:
            problems.append(f"ewc.weight: lambda must be >= 0 (0 = off), got {e.weight}")
        if e.samples < 1:
            problems.append(f"ewc.samples: at least 1 training row for the Fisher, got {e.samples}")
        if not 0 < e.gamma <= 1:
            problems.append(f"ewc.gamma: online EWC's decay is in (0, 1] (1: every earlier task alike), got {e.gamma}")
        if e.weight > 0 and recipe.model.init == "random":
            problems.append("ewc.weight: a random-init run has no previous weights to keep (set model.init=pretrained)")
        return problems

    def check_inputs(self, recipe: Any, config: Any) -> list[str]:
        from ..stages import problem

        e = self.settings(recipe)
        if e.previous is None:
            return ["ewc.previous: EWC keeps what the previous stage learned: run it as a later stage of `recall "
                    "continual`, or set ewc.previous=RUN_DIR of the run this one starts from"]
        found = problem("ewc.previous", e.previous)
        return [found] if found else []

    def continual_overrides(self, earlier: list[Any]) -> list[str]:
        """What `recall continual` adds to a stage: the previous stage's run directory (stage 1 has none: off)."""
        return [f"ewc.previous={earlier[-1]}"] if earlier else ["ewc.weight=0"]

    def start(self, run: Any) -> MethodRun:
        from .fisher import EwcPenalty, fisher_for

        e = self.settings(run.recipe)
        run.reporter.note(f"EWC: the Fisher of {e.samples} training rows of {e.previous}…")
        fisher, seconds, computed = fisher_for(e.previous, run.recipe.model.name_or_path, e.samples, e.gamma,
                                               run.tokenizer, run.device, run.pad_id)
        term = EwcPenalty(run.model, run.theta_star, fisher, e.weight, run.device)
        how = "computed" if computed else "read from fisher.safetensors"
        return MethodRun([term], {"ewc": f"lambda {e.weight:g}, Fisher of {e.samples} rows over {term.size:,} weights "
                                         f"({how}, {seconds:.1f} s)", "ewc_fisher_seconds": f"{seconds:.3f}"})


register_method(ElasticWeightConsolidation())
