"""The embedding anchor (LwF, Li & Hoiem 2016; LDIFS, Mukhoti et al. 2023): a loss term keeping the
pooled sentence embedding of each training example near theta*'s.

    term.py    the term itself (EmbeddingAnchor), its poolings and distances; the library's too
    build.py   the run's anchor: theta*'s embeddings cached by a pre-pass, or a frozen theta* beside the student

Its keys are the recipe's keep section (recipe/schema.py's KeepConfig): ``keep.embeddings`` turns it on.
"""

from __future__ import annotations

from typing import Any

from ...names import OPTIMIZERS
from ..registry import Family, Method, MethodRun, register_method


class EmbeddingAnchorMethod(Method):
    name = "keep"
    label = "embedding anchor"
    paper = "LwF (Li & Hoiem 2016); LDIFS (Mukhoti et al. 2023, arXiv 2308.13320)"
    url = "https://arxiv.org/abs/2308.13320"
    switch = "keep.embeddings"
    keys = ("keep.embeddings", "keep.pooling", "keep.distance", "keep.schedule")
    cell = "keep"
    short = "keep"
    needs = "features"
    record_fields = ("loss_task", "loss_keep", "keep_weight")
    family = Family("keep", "#E69F00", hue_rank=0, line_title="embedding anchor", line_style="--")

    def describe(self, recipe: Any) -> str:
        k = recipe.keep
        schedule = "" if k.schedule == "constant" else ", following RecAdam's pull"
        return f"embedding anchor {k.embeddings:g} ({k.pooling}, {k.distance}{schedule})"

    def summary(self, recipe: Any) -> dict[str, Any]:
        return {"keep": {k: getattr(recipe.keep, k) for k in ("embeddings", "pooling", "distance", "schedule")}}

    def check(self, recipe: Any) -> list[str]:
        k, problems = recipe.keep, []
        if k.embeddings < 0:
            problems.append(f"keep.embeddings: the anchor's weight must be >= 0 (0 = off), got {k.embeddings}")
        # RI only under RecAdam: an optimizer without recall terms sets model.init aside (recipe.advice.runnable).
        if k.embeddings > 0 and recipe.model.init == "random" and OPTIMIZERS[recipe.optimizer.name].anchored:
            problems.append("keep.embeddings: a random-init run has no pretrained function to keep "
                            "(set model.init=pretrained, or keep.embeddings=0)")
        return problems

    def reads_recall_schedule(self, recipe: Any) -> bool:
        return recipe.keep.schedule == "recall"

    def start(self, run: Any) -> MethodRun:
        """The anchor's term, built before the run directory is written (the pre-pass is the slow part:
        a stop during it leaves nothing behind)."""
        from .build import build_anchor

        run.reporter.note("embedding anchor: computing theta*'s embeddings of the training examples…")
        anchor, plan, seconds = build_anchor(
            run.recipe, run.model, run.theta_star, run.train, total_steps=run.total_steps, device=run.device,
            autocast=run.autocast, pad_id=run.pad_id, batch_size=run.eval_batch, fresh=run.fresh)
        return MethodRun([anchor], {"anchor": plan.line + (f", pre-pass {seconds:.1f} s" if plan.cached else "")})

    def dry_run_lines(self, prepared: Any) -> dict[str, str]:
        from .build import plan_anchor

        return {"anchor": plan_anchor(prepared.recipe, len(prepared.task.train),
                                      prepared.built.model.config.hidden_size).line}


register_method(EmbeddingAnchorMethod())
