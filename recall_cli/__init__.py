"""recall: fine-tune pretrained language models with less forgetting (RecAdam).

The public API is what ``__all__`` lists (README: "RecAdam in your own training loop"); every other
module and name is private and may change. Names load on first use, so ``import recall_cli`` (and
``recall --help``) does not import torch or transformers.

    recadam_for(model, pretrained, ...)   RecAdam for a transformers model, θ* read from its checkpoint by name
    anchor_distance(optimizer)            ‖θ − θ*‖ over the parameters RecAdam pulls toward θ*
    RecAdamCallback(trainer)              logs λ(t), the penalty weight and the distance through the HF Trainer's log
    probe(model, tokenizer, against=...)  what a model in memory still knows of θ*: `recall probe`'s measures
    RecAdam                               the optimizer itself, for parameter groups you build
    embedding_anchor(model, pretrained)   the embedding anchor as a loss term (README "Methods in your own training loop")
    loss_step(model, batch, terms, step)  the task loss plus each term, as `recall finetune`'s step makes it
    freeze_encoder / unfreeze_encoder     LP-FT's two phases in a plain loop
    add_loss_terms(trainer, *terms)       the same terms in the Hugging Face Trainer's loss, logged
    LinearProbeCallback(steps)            LP-FT in the Hugging Face Trainer
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .names import VERSION as __version__

__all__ = ["LinearProbeCallback", "RecAdam", "RecAdamCallback", "__version__", "add_loss_terms", "anchor_distance",
           "embedding_anchor", "freeze_encoder", "loss_step", "probe", "recadam_for", "unfreeze_encoder"]

_HOMES = {
    "RecAdam": "recall_cli.optim",
    "RecAdamCallback": "recall_cli.hf_trainer",
    "anchor_distance": "recall_cli.api",
    "probe": "recall_cli.api",
    "recadam_for": "recall_cli.api",
    "embedding_anchor": "recall_cli.api",
    "freeze_encoder": "recall_cli.api",
    "unfreeze_encoder": "recall_cli.api",
    "loss_step": "recall_cli.training.loss",
    "add_loss_terms": "recall_cli.hf_trainer",
    "LinearProbeCallback": "recall_cli.hf_trainer",
}

if TYPE_CHECKING:  # for editors and type checkers; at run time each name loads on first use
    from .api import anchor_distance, embedding_anchor, freeze_encoder, probe, recadam_for, unfreeze_encoder
    from .hf_trainer import LinearProbeCallback, RecAdamCallback, add_loss_terms
    from .optim import RecAdam
    from .training.loss import loss_step


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'recall_cli' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
