"""Weights & Biases: one W&B run per recall run, in the project WANDB_PROJECT names, else "recall".

With WANDB_MODE=offline (a cluster without internet) W&B writes its files under ./wandb/ (or
WANDB_DIR) and `wandb sync` uploads them later. A sweep's cells share a group (the sweep's folder
name); a resumed run continues the W&B run whose id trackers.json keeps (resume="allow").
reinit="create_new": a run the caller already has open in this process is left alone, not reused.
The console is not captured (recall's output is in metrics.jsonl already) unless WANDB_CONSOLE says so.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..plugins.trackers import TrackerEntry, register_tracker
from . import RunInfo, start_failed

PROJECT = "recall"


def open_tracker(info: RunInfo) -> WandbTracker:
    return WandbTracker(info)


class WandbTracker:
    def __init__(self, info: RunInfo):
        import wandb

        saved_id = info.saved.get("id") if info.resumed else None
        settings = wandb.Settings(console="off") if "WANDB_CONSOLE" not in os.environ else None
        try:
            self.run = wandb.init(project=os.environ.get("WANDB_PROJECT") or PROJECT, id=saved_id,
                                  resume="allow" if saved_id else None, name=info.name, group=info.group,
                                  job_type=info.kind, config=info.config, reinit="create_new", settings=settings)
        except Exception as exc:
            raise start_failed("wandb", exc, "run `wandb login`, or set WANDB_MODE=offline and "
                                             "`wandb sync` the files later") from exc
        # Online, a resumed run's step counter continues from the server's: W&B drops an earlier step
        # with a warning each, so the steps it already holds are not sent again.
        self.first_step = self.run.step if saved_id else 0

    def state(self) -> dict[str, Any]:
        return {"id": self.run.id, "project": self.run.project}

    def log(self, metrics: dict[str, float], step: int) -> None:
        if step >= self.first_step:
            self.run.log(metrics, step=step)

    def log_summary(self, values: dict[str, Any], step: int) -> None:
        self.run.summary.update(values)

    def log_image(self, name: str, png: Path, step: int) -> None:
        import wandb

        self.run.log({name: wandb.Image(str(png))}, step=max(step, self.first_step))

    def close(self, finished: bool) -> None:
        self.run.finish(exit_code=0 if finished else 1)


register_tracker(TrackerEntry("wandb", open_tracker, requires="wandb", extra="wandb", remote=True))
