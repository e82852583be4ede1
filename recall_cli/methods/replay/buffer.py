"""Replay's buffer, its draw and its loss term."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..registry import MethodRun


@dataclass
class Task:
    kind: Any
    features: Any
    head: dict[str, Tensor]  # the head its own stage trained, frozen
    max_length: int


@dataclass
class Buffer:
    tasks: list[Task]
    rows: list[tuple[int, int]]  # (task, row in that task's training split): everything a micro-batch may replay
    k: int  # rows replayed per micro-batch
    seed: int
    ratio_weight: float  # k / B

    def draw(self, position: int) -> list[tuple[int, int]]:
        """The rows micro-batch ``position`` replays: k of the buffer, drawn by (seed, position) alone."""
        rng = np.random.default_rng([self.seed, position, 104_729])
        picks = rng.choice(len(self.rows), size=min(self.k, len(self.rows)), replace=False)
        return [self.rows[i] for i in picks]

    def term(self, model: torch.nn.Module, pad_id: int) -> ReplayTerm:
        return ReplayTerm(self, model, pad_id)


def build_buffer(cfg: Any, tokenizer: Any, device: torch.device, seed: int, batch_size: int) -> Buffer:
    """replay.rows rows of each earlier stage's training split, drawn by (seed, the task's place)."""
    from ...model import head_parameter_names, load_checkpoint_model
    from .. import stages

    tasks, rows = [], []
    for t, path in enumerate(cfg.previous or []):
        stage = stages.read(path)
        features = stages.training_rows(stage, tokenizer)
        model = load_checkpoint_model(stage.checkpoint, stage.kind)
        head = {n: p.detach().to(device) for n, p in model.named_parameters() if n in head_parameter_names(model)}
        tasks.append(Task(stage.kind, features, head, stage.recipe.task.max_seq_length))
        n = len(features.labels)
        chosen = np.random.default_rng([seed, t, 15_485_863]).choice(n, size=min(cfg.rows, n), replace=False)
        rows += [(t, int(i)) for i in sorted(chosen)]
    k = max(1, round(cfg.ratio * batch_size / (1 - cfg.ratio)))
    return Buffer(tasks, rows, k, seed, k / batch_size)


class ReplayTerm:
    """The replayed rows' mean task loss, each row through its own task's frozen head."""

    name = "replay"
    needs_hidden_states = False

    def __init__(self, buffer: Buffer, model: torch.nn.Module, pad_id: int):
        self.buffer, self.model, self.pad_id = buffer, model, pad_id
        self.position = 0
        self.drawn: list[tuple[int, int]] = []  # the last micro-batch's rows (tests read it)

    def weight(self, step: int) -> float:
        return self.buffer.ratio_weight

    def __call__(self, outputs: Any, batch: dict[str, Tensor], indices: Tensor | None = None) -> Tensor:
        from torch.func import functional_call

        from ..stages import task_loss

        device = batch["input_ids"].device
        self.drawn = self.buffer.draw(self.position)
        total, count = None, 0
        for t, task in enumerate(self.buffer.tasks):
            mine = [row for tt, row in self.drawn if tt == t]
            if not mine:
                continue
            inputs = {k: v.to(device) for k, v in task.kind.collate(task.features, mine, self.pad_id, None, task.max_length).items()}
            labels = inputs.pop("labels")
            logits = functional_call(self.model, task.head, args=(), kwargs=inputs, strict=False).logits
            loss = task_loss(task.kind, logits, labels) * len(mine)
            total = loss if total is None else total + loss
            count += len(mine)
        return total / count if total is not None else torch.zeros((), device=device)


class ReplayRun(MethodRun):
    def __init__(self, term: ReplayTerm, info: dict[str, str]):
        super().__init__([term], info)
        self.term = term

    def before_micro_batch(self, position: int) -> None:
        self.term.position = position
