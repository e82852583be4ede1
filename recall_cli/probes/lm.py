"""What a causal LM still knows of general text, against θ* (the `lm` and `kl` probes):

    lm_loss, lm_loss_ref, lm_kept   mean token NLL of the texts under θ and θ*, and L(θ*)/L(θ): 1 kept all
    lm_ppl, lm_ppl_ref              the same as perplexities, exp(loss)
    kl, kl_kept                     KL(θ* ‖ θ) of the next-token distribution after each text's first half,
                                    averaged over texts, and exp(-KL): 1 where θ predicts as θ* did

The texts are data/probe/lm_text.txt (60 passages of general prose written for recall, disjoint from the
bundled tasks) or a user's file. One forward per batch gives both: the logits at every position for the
loss, and at each text's midpoint for the divergence (a causal model's logits there see only the prefix).
θ*'s side keeps its loss and its midpoint log-probabilities ([texts, vocabulary] on the CPU), once.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F


def has_lm_head(model: torch.nn.Module) -> bool:
    """A model whose forward gives next-token logits (a *ForCausalLM; peft's PeftModelForCausalLM too)."""
    return type(model).__name__.endswith("ForCausalLM")


@torch.no_grad()
def lm_side(model: torch.nn.Module, batches: Any, device: torch.device) -> dict[str, Any]:
    """{"nll": summed token NLL, "tokens": how many, "midpoints": [texts, vocab] log-probabilities (CPU)}
    over ``batches`` (runner._Batches: right-padded rows, their indices in file order)."""
    nll, tokens, midpoints = 0.0, 0, None
    for idx, ids, mask in batches.batches:
        ids, mask = ids.to(device), mask.to(device)
        logits = model(input_ids=ids, attention_mask=mask).logits.float()
        targets = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
        nll += float(F.cross_entropy(logits[:, :-1].transpose(1, 2), targets, ignore_index=-100, reduction="sum"))
        tokens += int((targets != -100).sum())
        lengths = mask.sum(dim=1)
        at = (lengths // 2 - 1).clamp(min=0)  # the last token of each text's first half
        chosen = F.log_softmax(logits[torch.arange(len(idx), device=device), at], dim=-1).cpu()
        if midpoints is None:
            midpoints = torch.empty((batches.n, chosen.shape[-1]), dtype=torch.float32)
        midpoints[idx] = chosen
    return {"nll": nll, "tokens": tokens, "midpoints": midpoints}


def lm_record(mine: dict[str, Any], ref: dict[str, Any], probes: list[str]) -> dict[str, float]:
    """The probes' fields of θ's side ``mine`` against θ*'s ``ref``."""
    record: dict[str, float] = {}
    if "lm" in probes:
        loss, loss_ref = mine["nll"] / max(mine["tokens"], 1), ref["nll"] / max(ref["tokens"], 1)
        record.update(lm_loss=loss, lm_loss_ref=loss_ref, lm_ppl=_exp(loss), lm_ppl_ref=_exp(loss_ref),
                      lm_kept=loss_ref / loss if loss > 0 else math.nan)
    if "kl" in probes:
        star, theta = ref["midpoints"].double(), mine["midpoints"].double()
        kl = float((star.exp() * (star - theta)).sum(dim=-1).clamp(min=0).mean())
        record.update(kl=kl, kl_kept=math.exp(-kl))
    return record


def lm_note(mine: dict[str, Any], ref: dict[str, Any], probes: list[str]) -> str | None:
    """Why the lm/kl fields are null when they are: a side whose next-token outputs hold NaN/inf (diverged
    weights), named, so that a null is never read as "nothing to say"."""
    def finite(side: dict[str, Any]) -> bool:
        return math.isfinite(side["nll"]) and (side["midpoints"] is None or bool(torch.isfinite(side["midpoints"]).all()))

    sides = [name for name, side in (("the model's", mine), ("θ*'s", ref)) if not finite(side)]
    if not sides:
        return None
    shown = [p for p in ("lm", "kl") if p in probes]
    fields = " and ".join({"lm": "lm_kept", "kl": "kl"}[p] for p in shown)
    return (f"{', '.join(shown)}: {' and '.join(sides)} next-token outputs are NaN/inf (diverged weights), so "
            f"{fields} {'are' if len(shown) > 1 else 'is'} null: probe a checkpoint from before the divergence")


def _exp(loss: float) -> float:
    return math.exp(loss) if loss < 700 else math.inf
