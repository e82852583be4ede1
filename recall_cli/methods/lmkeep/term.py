"""The LM anchor's term: KL(theta* || theta) of the next-token distribution at every non-padding position of
general texts, averaged over positions, from a frozen theta* beside the student (methods/lmkeep/)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ...distributed import shard
from ...tasks.batches import pad_inputs
from ..anchor_texts import next_token_texts, read_texts, text_order, tokenize_texts
from ..teacher import frozen_copy


class NextTokenAnchor:
    name = "lm_keep"
    needs_hidden_states = False

    def __init__(self, weight: float, *, student: torch.nn.Module, theta_star: torch.nn.Module, texts: Any, draw,
                 pad_id: int, max_length: int):
        self._weight, self.student, self.theta_star, self.texts, self.draw = weight, student, theta_star, texts, draw
        self.pad_id, self.max_length = pad_id, max_length
        self.position: int | None = None

    def weight(self, step: int) -> float:
        return self._weight

    def at(self, position: int) -> None:
        self.position = position

    def __call__(self, outputs: Any, batch: dict[str, Tensor], indices: Tensor | None = None) -> Tensor:
        if self.position is None:
            raise ValueError("the LM anchor draws by the micro-batch's position: call anchor.at(position) first")
        device = batch["input_ids"].device
        inputs = {k: v.to(device) for k, v in pad_inputs(self.texts, self.draw(self.position), self.pad_id,
                                                           None, self.max_length).items()}
        student = F.log_softmax(self.student(**inputs).logits.float(), dim=-1)
        with torch.no_grad():
            star = F.log_softmax(self.theta_star(**inputs).logits.float(), dim=-1)
        per_token = (star.exp() * (star - student)).sum(dim=-1)  # KL(theta* || theta) at each position
        mask = inputs["attention_mask"].to(per_token.dtype)
        return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


def build_term(run: Any) -> tuple[NextTokenAnchor, str]:
    """The run's term (``run``: training/methods.py's RunView) and the start line's words on it."""
    recipe = run.recipe
    keep = next_token_texts(recipe.keep)
    texts = read_texts(keep)
    features = tokenize_texts(texts, run.tokenizer, recipe.task.max_seq_length)
    order = text_order(len(texts), recipe, run.world_size)

    def draw(position: int) -> list[int]:
        rows = order.batch(position)
        return shard(rows, run.rank, run.world_size) or rows[:1]

    frozen = frozen_copy(run.model, run.theta_star)
    term = NextTokenAnchor(recipe.keep.next_token, student=run.model, theta_star=frozen, texts=features, draw=draw,
                           pad_id=run.pad_id, max_length=recipe.task.max_seq_length)
    line = (f"a frozen theta* beside the student; each micro-batch adds {order.batch_size // run.world_size} of "
            f"{len(texts):,} general texts through both")
    return term, line
