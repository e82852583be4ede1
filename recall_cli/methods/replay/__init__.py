"""Replay (experience replay, e.g. Chaudhry et al. 2019, arXiv 1902.10486; Rolnick et al. 2019): keep a small
buffer of each earlier task's training rows and mix some of them into every batch, each through its own
task's head.

    buffer.py   the buffer (replay.rows per earlier task, drawn by the seed), the rows each micro-batch
                replays (drawn by the micro-batch's position, so --resume continues the draw with nothing
                saved), and the loss term

Each micro-batch of B task rows gets k = round(ratio * B / (1 - ratio)) replayed rows (at least 1), so that
replayed rows are ``replay.ratio`` of the mixed batch; the step's loss is the task rows' mean plus k/B times
the replayed rows' mean (the mixed batch's mean, times (B + k)/B). An earlier task's head is the one its own
stage trained, frozen: replay trains the shared encoder to keep serving it (task-incremental).

Keys: ``replay.rows`` (turns it on), ``replay.ratio``, ``replay.previous`` (the earlier stages' run
directories, which `recall continual` sets). The stage's summary.json says how many rows it replayed
(method.replay_rows).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..registry import Family, Method, MethodRun, register_method


@dataclass(frozen=True)
class ReplayConfig:
    rows: int = 0  # buffer rows per earlier task; 0 = off
    ratio: float = 0.25  # the replayed share of each mixed micro-batch
    previous: list[str] | None = None  # the earlier stages' run directories (recall continual sets them)


class Replay(Method):
    name = "replay"
    label = "replay"
    paper = "Chaudhry et al. 2019, arXiv 1902.10486"
    switch = "replay.rows"
    keys = ("replay.rows", "replay.ratio", "replay.previous")
    cell = "replay"
    short = "replay"
    family = Family("replay", "#56B4E9", hue_rank=5)
    section = "replay"
    config = ReplayConfig

    def describe(self, recipe: Any) -> str:
        r = self.settings(recipe)
        return f"replay {r.rows} rows a task (ratio {r.ratio:g})"

    def check(self, recipe: Any) -> list[str]:
        r, problems = self.settings(recipe), []
        if r.rows < 0:
            problems.append(f"replay.rows: buffer rows per earlier task, >= 0 (0 = off), got {r.rows}")
        if not 0 < r.ratio < 1:
            problems.append(f"replay.ratio: the replayed share of each batch, in (0, 1), got {r.ratio}")
        return problems

    def check_inputs(self, recipe: Any, config: Any) -> list[str]:
        from ..stages import problem

        r = self.settings(recipe)
        if not r.previous:
            return ["replay.previous: replay mixes in rows of earlier tasks: run it as a later stage of `recall "
                    "continual`, or set replay.previous=[RUN_DIR, ...]"]
        return [p for p in (problem("replay.previous", d) for d in r.previous) if p]

    def continual_overrides(self, earlier: list[Any]) -> list[str]:
        """What `recall continual` adds to a stage: every earlier stage's run directory (stage 1 has none: off)."""
        return [f"replay.previous={json.dumps([str(d) for d in earlier])}"] if earlier else ["replay.rows=0"]

    def start(self, run: Any) -> MethodRun:
        from .buffer import ReplayRun, build_buffer

        r = self.settings(run.recipe)
        tc = run.recipe.train
        buffer = build_buffer(r, run.tokenizer, run.device, tc.seed, tc.batch_size)
        term = buffer.term(run.model, run.pad_id)
        seen = run.total_steps * tc.grad_accum * buffer.k
        return ReplayRun(term, {"replay": f"{len(buffer.rows)} buffer rows of {len(buffer.tasks)} earlier task(s), "
                                          f"{buffer.k} a micro-batch", "replay_rows": str(seen)})


register_method(Replay())
