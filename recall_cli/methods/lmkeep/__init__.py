"""The LM anchor (LwF for causal LMs: Li & Hoiem 2016, on next-token distributions): a loss term that keeps a
causal LM's next-token distributions on general text near theta*'s, KL(theta* || theta) per token.

``keep.next_token`` turns it on and is its weight. It reads recall's general pool (data/pool/general.txt,
the embedding anchor's ``keep.texts: pool``) or the file ``keep.texts`` names, ``keep.batch_size`` texts a
micro-batch (0: train.batch_size), in the embedding anchor's seeded order, which --resume continues. A frozen
theta* runs beside the student: next-token distributions (a value per vocabulary entry and position) are too
large to cache. term.py holds the term; this module its registry entry.
"""

from __future__ import annotations

from typing import Any

from ..anchor_texts import TASK, check_source, next_token_texts, source_words
from ...plugins.methods import Family, Method, MethodRun, register_method


class NextTokenAnchorMethod(Method):
    name = "lm_keep"
    label = "LM anchor"
    paper = "LwF (Li & Hoiem 2016) on a causal LM's next-token distributions"
    switch = "keep.next_token"
    keys = ("keep.next_token",)
    reads = ("keep.texts", "keep.text_column", "keep.batch_size")  # the embedding anchor's (it documents them)
    cell = "lmkeep"
    short = "lm_keep"
    family = Family("lm_keep", "#CC79A7", hue_rank=3, line_title="LM anchor", line_style=":")

    def describe(self, recipe: Any) -> str:
        """"LM anchor 0.5 (next-token KL on the general pool)"."""
        return f"LM anchor {recipe.keep.next_token:g} (next-token KL on {source_words(next_token_texts(recipe.keep))})"

    def check(self, recipe: Any) -> list[str]:
        k = recipe.keep
        if k.next_token < 0:
            return [f"keep.next_token: the LM anchor's weight must be >= 0 (0 = off), got {k.next_token}"]
        if k.next_token > 0 and k.embeddings == 0 and k.texts != TASK:
            return check_source(k)  # the embedding anchor checks them when it is on
        return []

    def check_inputs(self, recipe: Any, config: Any) -> list[str]:
        from ...tasks import task_for

        from ...errors import PreflightError
        from ..anchor_texts import read_texts

        if task_for(recipe.task).num_labels:
            return [f"keep.next_token: the LM anchor keeps next-token distributions: it needs a causal-LM task "
                    f"(task.name sst2_lm or custom_lm), not {recipe.task.name}"]
        # The texts the run will read, read here: the dry run refuses the file (missing, empty, not UTF-8) the run
        # refuses. When the embedding anchor reads the same file, it names the file's problem (once).
        try:
            anchored = read_texts(next_token_texts(recipe.keep))
        except PreflightError as exc:
            return [] if recipe.keep.embeddings > 0 and recipe.keep.texts != TASK else [str(exc)]
        return _probe_overlap(recipe, anchored)

    def extra_bytes(self, run: Any) -> int:
        """The frozen theta* beside the student."""
        from ..teacher import copy_bytes

        return copy_bytes(run.parameters)

    def start(self, run: Any) -> MethodRun:
        from .term import build_term

        term, line = build_term(run)
        return LmAnchorRun(term, {"lm_keep": line})


class LmAnchorRun(MethodRun):
    def __init__(self, term: Any, info: dict[str, str]):
        super().__init__([term], info)
        self.term = term

    def before_micro_batch(self, position: int) -> None:
        self.term.at(position)


def _probe_overlap(recipe: Any, anchored: list[str]) -> list[str]:
    """An anchor on the texts the lm and kl probes score would make their kept share meaningless: refused whether or
    not this run probes (`recall probe` scores the same texts later), as the embedding anchor refuses its probes'."""
    from ...errors import RecallError
    from ...probes.sets import DEFAULT_LM_TEXTS, load_texts, overlap

    probe = recipe.probe
    try:
        scored = load_texts(probe.texts_file or DEFAULT_LM_TEXTS)
    except RecallError:
        return []  # the probes report their own file
    shared = overlap(anchored, scored)
    if not shared:
        return []
    return [f"keep.next_token: {shared} of the LM anchor's {len(anchored)} texts are texts the lm/kl probes score "
            f"({probe.texts_file or DEFAULT_LM_TEXTS}): the kept share would measure what the anchor optimizes; "
            "remove them from keep.texts (or use keep.texts=pool)"]


register_method(NextTokenAnchorMethod())
