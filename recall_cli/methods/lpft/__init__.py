"""LP-FT (Kumar et al. 2022, arXiv 2202.10054): train the head alone first, then fine-tune everything.

    freeze.py   freezing and unfreezing the encoder (the library's LinearProbeCallback uses it too)

A fresh head on a pretrained encoder sends large, random gradients into the encoder in the first steps,
and these distort the pretrained features. Fitting the head first (a linear probe, encoder frozen) and
fine-tuning from there changes the features less. The run keeps the probed point as lp/, so that
WiSE-FT has a real alpha = 0 end: `recall merge --method linear lp/ best/`.

Its keys are ``train.linear_probe_steps`` (which turns it on) and ``train.linear_probe_lr``.
"""

from __future__ import annotations

from typing import Any

from ...rundir.layout import LP_DIR
from ...plugins.methods import Family, Method, MethodRun, register_method


class LinearProbeThenFinetune(Method):
    name = "lp_ft"
    label = "LP-FT"
    paper = "Kumar et al. 2022, arXiv 2202.10054"
    switch = "train.linear_probe_steps"
    keys = ("train.linear_probe_steps", "train.linear_probe_lr")
    cell = "lp"
    short = "lp"
    family = Family("lpft", "#56B4E9", hue_rank=2, wise_hue="#882255")

    def describe(self, recipe: Any) -> str:
        return f"LP-FT {recipe.train.linear_probe_steps}"

    def words(self, strength: Any) -> str:
        return f"LP-FT {strength}"

    def summary(self, recipe: Any) -> dict[str, Any]:
        return {"linear_probe_steps": recipe.train.linear_probe_steps}

    def check(self, recipe: Any) -> list[str]:
        tr, problems = recipe.train, []
        if tr.linear_probe_lr is not None and tr.linear_probe_lr <= 0:
            problems.append(f"train.linear_probe_lr: must be > 0, or null for optimizer.lr, got {tr.linear_probe_lr}")
        if tr.linear_probe_steps < 0:
            problems.append(f"train.linear_probe_steps: must be >= 0 (0 = off), got {tr.linear_probe_steps}")
        elif tr.max_steps is not None and tr.linear_probe_steps >= tr.max_steps:
            problems.append(f"train.linear_probe_steps: {tr.linear_probe_steps} head-only steps leave none of the run's "
                            f"{tr.max_steps} to fine-tune (set it below train.max_steps)")
        return problems

    def check_steps(self, recipe: Any, total_steps: int) -> list[str]:
        steps = recipe.train.linear_probe_steps
        if steps >= total_steps:
            return [f"train.linear_probe_steps: {steps} head-only steps leave none of the run's {total_steps} to "
                    f"fine-tune (set it below {total_steps})"]
        return []

    def recall_offset(self, recipe: Any) -> int:
        # RecAdam anneals on each weight's own step count: the encoder's first step is the run's steps + 1.
        return recipe.train.linear_probe_steps

    def checkpoint_folders(self, recipe: Any) -> tuple[str, ...]:
        return (LP_DIR,)

    def start(self, run: Any) -> MethodRun:
        return HeadPhase(run.recipe.train.linear_probe_steps, run.recipe.train.linear_probe_lr)


class HeadPhase(MethodRun):
    """The head phase of one run: the encoder frozen until ``steps``, then lp/ saved and everything trains."""

    def __init__(self, steps: int, lr: float | None):
        super().__init__()
        self.steps, self.lr, self.head_only = steps, lr, False

    def before_wrap(self, model: Any, step: int) -> None:
        # Frozen before DDP and torch.compile see the model (after_step unfreezes it after the phase).
        from .freeze import freeze_encoder, in_probe_phase

        self.head_only = in_probe_phase(step, self.steps)
        if self.head_only:
            freeze_encoder(model)

    def peak_lr(self, lr: float) -> float:
        return self.lr if self.head_only and self.lr else lr

    def after_step(self, loop: Any, step: int) -> None:
        """The head is fitted: keep this point as lp/ and let the encoder train from the next step. DDP's
        reducer and a compiled forward were built for the frozen model: both are made again."""
        if not (self.head_only and step >= self.steps):
            return
        from .freeze import unfreeze_encoder

        loop.save(LP_DIR, step)
        unfreeze_encoder(loop.t.model)
        self.head_only = False
        loop.rewrap()
        loop.note(f"LP-FT: the head is fitted after {step} steps (saved as {LP_DIR}/); fine-tuning every weight from here")


register_method(LinearProbeThenFinetune())
