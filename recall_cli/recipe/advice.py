"""Advice on a valid recipe: what its schedule will do to a run of this length, and which of its keys
the run will not read. Warnings, never errors (checks.check_recipe has those)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..names import OPTIMIZERS, RECADAM_ONLY_KEYS
from ..plugins.methods import Method
from .schema import OptimizerConfig, Recipe

# What only RecAdam's recall terms read: unused by an optimizer without them (adamw), unless the
# embedding anchor's weight follows the same schedule (keep.schedule=recall).


def unused_keys(recipe: Recipe, on: Sequence[Method]) -> list[str]:
    """Keys the recipe sets (away from their defaults) that this run does not read: RecAdam's under
    adamw, model.init=random among them (vanilla fine-tuning starts from the pretrained weights; RI is
    RecAdam's setting). Said once on the start line and in --dry-run, the same for every such key, so
    that optimizer.name=adamw alone turns any shipped recipe into its vanilla baseline."""
    o = recipe.optimizer
    if OPTIMIZERS[o.name].anchored:
        return []
    init = ["model.init"] if recipe.model.init == "random" else []
    # the anchor's keep.schedule=recall (``on``: the methods the run turns on, the plan's)
    if any(m.reads_recall_schedule(recipe) for m in on):
        return init
    default = OptimizerConfig()
    return init + [key for key in RECADAM_ONLY_KEYS if getattr(o, key.split(".")[1]) != getattr(default, key.split(".")[1])]


def runnable(recipe: Recipe) -> Recipe:
    """The recipe as the run reads it: under an optimizer without recall terms, model.init is
    pretrained (config.yaml then records what ran; unused_keys says what was set aside)."""
    import dataclasses

    if OPTIMIZERS[recipe.optimizer.name].anchored or recipe.model.init == "pretrained":
        return recipe
    return dataclasses.replace(recipe, model=dataclasses.replace(recipe.model, init="pretrained"))


def schedule_warnings(recipe: Recipe, total_steps: int) -> list[str]:
    """Warnings (not errors) about an annealing schedule that does not fit the run's length."""
    o = recipe.optimizer
    if not OPTIMIZERS[o.name].anchored:
        return []
    warnings = _floor_warnings(o)
    if o.anneal_fun != "sigmoid":
        return warnings
    t0 = recipe.anneal_t0_steps(total_steps)

    def round_down(value: float, digits: int = 1) -> float:  # 0.0833 -> 0.08
        scale = 10 ** (math.floor(math.log10(value)) - digits + 1)
        return math.floor(round(value / scale, 9)) * scale

    def round_up(value: float, digits: int = 2) -> float:  # 0.3333 -> 0.34
        scale = 10 ** (math.floor(math.log10(value)) - digits + 1)
        return float(f"{math.ceil(round(value / scale, 9)) * scale:.{digits + 6}g}")

    def shorter_recall_phase() -> str:
        """What ends the recall phase by half of the run (t0 + 4/k <= total/2), computed from this
        recipe so that it never suggests the value the recipe already has: the largest anneal_t0 that
        fits at this k, in the recipe's own form (a fraction or steps), the smallest anneal_k at this t0."""
        half, fraction, ways = total_steps / 2, o.anneal_t0 < 1, []
        t0_fits = half - 4 / o.anneal_k
        if t0_fits >= 1:
            shown = f"{round_down(t0_fits / total_steps):g}" if fraction else str(int(round_down(t0_fits, 2)))
            ways.append(f"optimizer.anneal_t0={shown} or less")
        if half - t0 > 0:
            ways.append(f"optimizer.anneal_k={round_up(4 / (half - t0)):g} or more")
        if ways:
            return "try " + ", or ".join(ways)
        # Neither alone fits: t0 at a tenth of the run (the recipe's is past half) and the k it then needs.
        t0_new = 0.1 if fraction else max(1, total_steps // 10)
        room = half - (t0_new * total_steps if fraction else t0_new)
        if room <= 0:  # a run of a step or two: no sigmoid fits
            return "a run this short has no room for a recall phase: train more steps"
        k_new = round_up(4 / room)
        return f"try optimizer.anneal_t0={t0_new:g} with optimizer.anneal_k={k_new:g} or more"

    if t0 + 4 / o.anneal_k > total_steps / 2:
        warnings.append(
            f"the recall phase is long for this run: lambda(t) reaches 0.98 only at step {t0 + 4 / o.anneal_k:.0f} "
            f"(t0 + 4/k), past half of the {total_steps} steps; the paper's t0 assumes 7,800-61,360 steps "
            f"({shorter_recall_phase()})"
        )
    if recipe.model.init == "random":
        # Steps before lambda reaches 0.1: t0 - ln(9)/k. Each shrinks theta - theta* by ~(1 - lr*gamma).
        recall_steps = max(0.0, t0 - math.log(9) / o.anneal_k)
        shrink = o.lr * o.pretrain_cof
        needed = math.log(0.01) / math.log(1 - shrink) if 0 < shrink < 1 else math.inf
        if recall_steps < needed:
            warnings.append(
                f"with random initialisation only {recall_steps:.0f} steps come before lambda reaches 0.1, but "
                f"{needed:.0f} are needed to pull the random weights to 1% of their distance from theta* at "
                f"lr={o.lr:g} and pretrain_cof={o.pretrain_cof:g}: the model will stay partly random "
                "(raise optimizer.anneal_t0 or use model.init=pretrained)"
            )
    return warnings


# Below this radius a floor has stopped a run from learning (see _floor_warnings).
FLOOR_RADIUS_WARN = 0.005


def _floor_warnings(o: OptimizerConfig) -> list[str]:
    """A floor so strong that the model cannot move far enough from theta* to learn the task.

    Once lambda has shifted, each step moves a weight by about lr (Adam's normalised step) and the
    floor pulls it back by lr * floor * gamma times its distance from theta*: the two balance at a
    distance of 1 / (floor * gamma) per weight, whatever lr is. Measured on all-MiniLM-L6-v2 (GPU,
    CoLA, gamma 5000, 3,000 steps): a radius of 0.002 (floor 0.1) learned nothing (MCC 0), 0.01
    (floor 0.02) learned (MCC 23.6-25.4 against vanilla's 27.2-31.1). The warning sits between."""
    if o.recall_floor <= 0:
        return []
    radius = 1.0 / (o.recall_floor * o.pretrain_cof)
    if radius >= FLOOR_RADIUS_WARN:
        return []
    return [f"optimizer.recall_floor={o.recall_floor:g} with pretrain_cof={o.pretrain_cof:g} holds each weight within "
            f"about {radius:.2g} of theta* (1 / (floor x pretrain_cof), where the pull balances Adam's step); "
            f"below {FLOOR_RADIUS_WARN:g} a run has learned nothing (CoLA, floor 0.1 at pretrain_cof 5000: MCC 0): "
            f"a floor of at most {1 / (FLOOR_RADIUS_WARN * o.pretrain_cof):.2g} keeps the task learnable"]
