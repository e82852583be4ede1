"""A causal LM's probes, on its next-token logits (skipped, with a note, on any other model):

    lm       general prose's token loss under θ and θ*, as perplexities too, and the share kept (probes/lm.py)
    kl       KL(θ* ‖ θ) of the next-token distribution at each text's midpoint, and exp(-KL) (probes/lm.py)
    choice   multiple-choice accuracy by log-likelihood, θ*'s, chance, and the skill kept above chance
             (probes/choice.py)

lm and kl read one forward per batch, shared (``prober.shared``). Each is a registry entry (plugins/probes.py);
the measuring code is imported when a probe runs, so that listing the probes loads no torch.
"""

from __future__ import annotations

from typing import Any

from ..plugins.probes import Probe, register_probe


def _next_tokens(prober: Any, model: Any) -> dict[str, Any]:
    from .lm import lm_side
    from .runner import evaluating

    def compute() -> dict[str, Any]:
        with evaluating(model):
            return lm_side(model, prober.lm_texts, prober.device)

    return prober.shared("lm", compute)


def _lm_fields(prober: Any, mine: Any, ref: Any, name: str) -> dict[str, Any]:
    """One of lm/kl's fields, with a note naming the side whose outputs are NaN/inf when they are null (the note
    covers both probes that run, so lm's and kl's are the same line, shown once)."""
    from .lm import lm_note, lm_record

    record = lm_record(mine, ref, [name])
    note = lm_note(mine, ref, [p for p in ("lm", "kl") if p in prober.probes])
    return {**record, "notes": [note]} if note else record


class _NextTokenProbe(Probe):
    """lm and kl: one shared forward over the general prose (prober.shared), each probe its own fields of it."""

    reads, causal, cacheable = "lm_texts", True, True

    def side(self, prober: Any, model: Any) -> Any:
        return _next_tokens(prober, model)

    def record(self, prober: Any, mine: Any, ref: Any) -> dict[str, Any]:
        return _lm_fields(prober, mine, ref, self.name)


class Lm(_NextTokenProbe):
    name = "lm"
    measures = ("lm_loss", "lm_loss_ref", "lm_ppl", "lm_ppl_ref", "lm_kept")
    skill, skill_title = "lm_kept", "LM loss kept L(θ*)/L(θ) on general text"
    lower_is_better = ("lm_loss", "lm_ppl")
    raw = ("lm_loss", "lm_loss_ref", "lm_ppl", "lm_ppl_ref")


class Kl(_NextTokenProbe):
    name = "kl"
    measures = ("kl", "kl_kept")
    skill, skill_title = "kl_kept", "next-token agreement exp(−KL(θ*‖θ))"
    lower_is_better = ("kl",)
    raw = ("kl",)


class Choice(Probe):
    name, reads, causal, cacheable = "choice", "choices", True, True
    measures = ("choice_acc", "choice_acc_ref", "choice_kept")
    skill, skill_title = "choice_kept", "multiple-choice skill kept above chance"

    def side(self, prober: Any, model: Any) -> Any:
        from .choice import choice_side
        from .runner import evaluating

        with evaluating(model):
            return choice_side(model, prober.choices, prober.device)

    def record(self, prober: Any, mine: Any, ref: Any) -> dict[str, Any]:
        from .choice import choice_record

        return choice_record(mine, ref, prober.choices.items)


for _probe in (Lm(), Kl(), Choice()):
    register_probe(_probe)
