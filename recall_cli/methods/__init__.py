"""Ways to forget less that are not optimizers, one room each; names.METHODS describes them.

    keep.py   the embedding anchor: a loss term keeping the pooled sentence embedding near theta*'s
    lpft.py   LP-FT: the head alone first (encoder frozen), then everything
    lora.py   low-rank adapters through peft, merged into plain checkpoints

The training loop builds them from the recipe (training/methods.py) and adds their terms to the task
loss in one function (training/loss.py); the library builds them from a model (api.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..names import METHODS, OPTIMIZERS

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


def check_methods(recipe: Recipe) -> list[str]:
    """The methods' keys (names.METHODS): each alone, and the combinations that mean nothing."""
    problems: list[str] = []
    k, lora, tr, o = recipe.keep, recipe.model.lora, recipe.train, recipe.optimizer
    if k.embeddings < 0:
        problems.append(f"keep.embeddings: the anchor's weight must be >= 0 (0 = off), got {k.embeddings}")
    # RI only under RecAdam: an optimizer without recall terms sets model.init aside (recipe.advice.runnable).
    random_init = recipe.model.init == "random" and OPTIMIZERS[o.name].anchored
    if k.embeddings > 0 and random_init:
        problems.append("keep.embeddings: a random-init run has no pretrained function to keep "
                        "(set model.init=pretrained, or keep.embeddings=0)")
    if tr.linear_probe_lr is not None and tr.linear_probe_lr <= 0:
        problems.append(f"train.linear_probe_lr: must be > 0, or null for optimizer.lr, got {tr.linear_probe_lr}")
    if tr.linear_probe_steps < 0:
        problems.append(f"train.linear_probe_steps: must be >= 0 (0 = off), got {tr.linear_probe_steps}")
    elif tr.max_steps is not None and tr.linear_probe_steps >= tr.max_steps:
        problems.append(f"train.linear_probe_steps: {tr.linear_probe_steps} head-only steps leave none of the run's "
                        f"{tr.max_steps} to fine-tune (set it below train.max_steps)")
    if lora.r < 0:
        problems.append(f"model.lora.r: the adapters' rank must be >= 0 (0 = full fine-tuning), got {lora.r}")
    if lora.alpha <= 0:
        problems.append(f"model.lora.alpha: must be > 0, got {lora.alpha}")
    if not 0 <= lora.dropout < 1:
        problems.append(f"model.lora.dropout: must be in [0, 1), got {lora.dropout}")
    if lora.target_modules is not None and not [m for m in lora.target_modules if m.strip()]:
        problems.append("model.lora.target_modules: name at least one module, or null for every linear layer")
    if lora.r > 0:
        if OPTIMIZERS[o.name].anchored:
            problems.append(f"model.lora.r: {o.name}'s pull toward theta* has nothing to act on under LoRA (the "
                            "pretrained weights stay frozen and the adapters start at zero): use optimizer.name=adamw")
        if random_init:
            problems.append("model.lora.r: adapters on a random-init model train a random encoder's few weights "
                            "(set model.init=pretrained, or model.lora.r=0)")
        if tr.linear_probe_steps > 0:
            problems.append("train.linear_probe_steps: LP-FT with LoRA is not supported yet "
                            "(set train.linear_probe_steps=0, or model.lora.r=0)")
    return problems
