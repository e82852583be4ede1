"""Ways to forget less that are not optimizers, one room each; names.METHODS describes them.

    keep.py   the embedding anchor: a loss term keeping the pooled sentence embedding near theta*'s
    lpft.py   LP-FT: the head alone first (encoder frozen), then everything
    lora.py   low-rank adapters through peft, merged into plain checkpoints

The training loop builds them from the recipe (training/methods.py) and adds their terms to the task
loss in one function (training/loss.py); the library builds them from a model (api.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..names import METHODS

if TYPE_CHECKING:
    from ..recipe import Recipe


def active_methods(recipe: Recipe) -> list[str]:
    """The names.METHODS a recipe turns on, in the table's order."""
    on = {"keep": recipe.keep.embeddings > 0, "lp_ft": recipe.train.linear_probe_steps > 0,
          "lora": recipe.model.lora.r > 0}
    return [name for name in METHODS if on[name]]


def method_labels(recipe: Recipe) -> list[str]:
    """How the start line, summary.json and model cards name each method on: "embedding anchor 1 (mean, cosine)"."""
    labels = []
    for name in active_methods(recipe):
        if name == "keep":
            k = recipe.keep
            schedule = "" if k.schedule == "constant" else ", following RecAdam's pull"
            labels.append(f"embedding anchor {k.embeddings:g} ({k.pooling}, {k.distance}{schedule})")
        elif name == "lp_ft":
            labels.append(f"LP-FT {recipe.train.linear_probe_steps}")
        else:
            lora = recipe.model.lora
            labels.append(f"LoRA r={lora.r} alpha={lora.alpha:g}")
    return labels


def method_block(recipe: Recipe, **facts: Any) -> dict[str, Any] | None:
    """summary.json's "method": what was on and with which settings (None: plain fine-tuning)."""
    names = active_methods(recipe)
    if not names:
        return None
    block: dict[str, Any] = {"names": names, "labels": method_labels(recipe)}
    if "keep" in names:
        block["keep"] = {k: getattr(recipe.keep, k) for k in ("embeddings", "pooling", "distance", "schedule")}
    if "lp_ft" in names:
        block["linear_probe_steps"] = recipe.train.linear_probe_steps
    if "lora" in names:
        lora = recipe.model.lora
        block["lora"] = {"r": lora.r, "alpha": lora.alpha, "dropout": lora.dropout,
                         "target_modules": lora.target_modules}
    block.update({k: v for k, v in facts.items() if v is not None})
    return block
