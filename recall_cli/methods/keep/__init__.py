"""The embedding anchor (LwF, Li & Hoiem 2016; LDIFS, Mukhoti et al. 2023): a loss term keeping the
pooled sentence embedding of each training example, or of general sentences, near theta*'s.

    term.py    the term itself (EmbeddingAnchor on the task's rows, TextAnchor on texts of its own), its
               poolings, layers and distances; the library's too
    build.py   the run's anchor: theta*'s features of what the run draws, cached by a pre-pass, or a
               frozen theta* beside the student

Its texts (recall's general pool or a file, kept disjoint from the probes', and their draw order) are
methods/anchor_texts.py's, shared with the LM anchor (methods/lmkeep/). Its keys are the recipe's keep section (recipe/schema.py's KeepConfig): ``keep.embeddings`` turns it on.
"""

from __future__ import annotations

from typing import Any

from ...names import OPTIMIZERS
from ...plugins.methods import Family, Method, MethodRun, register_method
from ..anchor_texts import TASK, check_source, source_words


class EmbeddingAnchorMethod(Method):
    name = "keep"
    label = "embedding anchor"
    paper = "LwF (Li & Hoiem 2016); LDIFS (Mukhoti et al. 2023, arXiv 2308.13320)"
    switch = "keep.embeddings"
    keys = ("keep.embeddings", "keep.pooling", "keep.distance", "keep.schedule", "keep.texts", "keep.text_column",
            "keep.batch_size", "keep.layers")
    cell = "keep"
    short = "keep"
    family = Family("keep", "#E69F00", hue_rank=0, line_title="embedding anchor", line_style="--")

    def describe(self, recipe: Any) -> str:
        """"embedding anchor 1 (mean, cosine)"; what it reads and keeps beyond that only when set:
        "embedding anchor 1 (mean, cosine, hidden states 2, 4, 6, on the general pool)"."""
        k = recipe.keep
        parts = [k.pooling, k.distance]
        if k.layers != "last":
            parts.append("hidden states " + ", ".join(map(str, k.layers)))
        if k.texts != TASK:
            parts.append(f"on {source_words(k)}")
        schedule = "" if k.schedule == "constant" else ", following RecAdam's pull"
        return f"embedding anchor {k.embeddings:g} ({', '.join(parts)}{schedule})"

    def summary(self, recipe: Any) -> dict[str, Any]:
        """Its keys; the text source, batch and layers only when set off the defaults (task, the task's
        batch, the last layer), so that an anchor on the task's rows records what it always did."""
        k = recipe.keep
        kept = {key: getattr(k, key) for key in ("embeddings", "pooling", "distance", "schedule")}
        default = type(k)()  # the section at its defaults: config.yaml leaves these keys out there too
        kept.update({key: getattr(k, key) for key in ("texts", "text_column", "batch_size", "layers")
                     if getattr(k, key) != getattr(default, key)})
        return {"keep": kept}

    def check(self, recipe: Any) -> list[str]:
        k, problems = recipe.keep, []
        if k.embeddings < 0:
            problems.append(f"keep.embeddings: the anchor's weight must be >= 0 (0 = off), got {k.embeddings}")
        # RI only under RecAdam: an optimizer without recall terms sets model.init aside (recipe.advice.runnable).
        if k.embeddings > 0 and recipe.model.init == "random" and OPTIMIZERS[recipe.optimizer.name].anchored:
            problems.append("keep.embeddings: a random-init run has no pretrained function to keep "
                            "(set model.init=pretrained, or keep.embeddings=0)")
        problems += check_source(k)
        if k.batch_size is not None and k.batch_size < 0:
            problems.append(f"keep.batch_size: must be >= 0 (0 or null: train.batch_size), got {k.batch_size}")
        elif k.batch_size and k.texts == TASK:
            problems.append(f"keep.batch_size: only with keep.texts=pool or a file (on the task's rows the anchor "
                            f"reads each training batch itself), got {k.batch_size}: remove it, or set keep.texts")
        if k.layers != "last":
            if not k.layers:
                problems.append("keep.layers: last, or a list of hidden states (0: the embeddings' output, i: layer "
                                "i's), got []")
            elif min(k.layers) < 0 or len(set(k.layers)) < len(k.layers):
                problems.append(f"keep.layers: hidden states >= 0, each once (0: the embeddings' output, i: layer "
                                f"i's), got {k.layers}")
        return problems

    def check_inputs(self, recipe: Any, config: Any) -> list[str]:
        """The model has the layers asked for; the texts can be read and none is a text the probes score."""
        from ...errors import PreflightError
        from ..anchor_texts import probe_overlap, read_texts

        k, problems = recipe.keep, []
        depth = getattr(config, "num_hidden_layers", None)
        if k.layers != "last" and depth is not None and max(k.layers) > depth:
            problems.append(f"keep.layers: {max(k.layers)} is past the model's {depth} layers (hidden states 0..{depth}: "
                            f"0 the embeddings' output, {depth} the last layer's)")
        if k.texts != TASK:
            try:
                problems += [p for p in (probe_overlap(read_texts(k), recipe.probe),) if p]
            except PreflightError as exc:
                problems.append(str(exc))
        return problems

    def extra_bytes(self, run: Any) -> int:
        """theta*'s cached features of what the run draws, or past the cache's limit a frozen theta*."""
        from ...errors import RecallError
        from .build import anchor_bytes
        from ..anchor_texts import read_texts

        k = run.recipe.keep
        try:
            total = run.rows if k.texts == TASK else len(read_texts(k))
        except RecallError:
            return 0  # check_inputs names the file's problem
        hidden = getattr(run.config, "hidden_size", None) or getattr(run.config, "d_model", 0)
        return anchor_bytes(run.recipe, total, hidden, run.parameters, total_steps=run.total_steps,
                            world_size=run.world_size)

    def reads_recall_schedule(self, recipe: Any) -> bool:
        return recipe.keep.schedule == "recall"

    def start(self, run: Any) -> MethodRun:
        """The anchor's term, built before the run directory is written (the pre-pass is the slow part:
        a stop during it leaves nothing behind)."""
        from .build import AnchorRun, build_anchor

        what = "training examples" if run.recipe.keep.texts == TASK else "anchor texts"
        run.reporter.note(f"embedding anchor: computing theta*'s embeddings of the {what} the run draws…")
        anchor, plan, seconds = build_anchor(
            run.recipe, run.model, run.theta_star, run.train, total_steps=run.total_steps, device=run.device,
            autocast=run.autocast, pad_id=run.pad_id, batch_size=run.eval_batch, fresh=run.fresh,
            tokenizer=run.tokenizer, rank=run.rank, world_size=run.world_size, pull=run.plan.pull_at)
        return AnchorRun(anchor, {"anchor": plan.say(f", pre-pass {seconds:.1f} s" if plan.cached else "")})

    def dry_run_lines(self, prepared: Any) -> dict[str, str]:
        """What the run will compute of theta* (rows, bytes, the bound) and the pre-pass's time, from one batch timed."""
        from .build import dry_run_line

        return {"anchor": dry_run_line(prepared)}


register_method(EmbeddingAnchorMethod())
