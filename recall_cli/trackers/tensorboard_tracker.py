"""TensorBoard: event files in <run_dir>/tensorboard/ (merge: <out>/tensorboard/), so that
`tensorboard --logdir runs/` shows every run beside the others, a sweep's cells included.

Written with torch's SummaryWriter rather than tensorboardX: torch is already here, and the
`tensorboard` package it needs is the one that shows the files (the tests read them back with its
EventAccumulator). A resumed run writes into the same folder with purge_step = the resumed step + 1:
TensorBoard then hides what a crashed run logged after its last checkpoint instead of showing two
values at those steps.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..plugins.trackers import TrackerEntry, register_tracker
from . import RunInfo

FOLDER = "tensorboard"
# The HParams dashboard's columns: the curves a setting is judged by.
HPARAM_METRICS = ("eval/main", "train/distance", "probe/sts_retained", "summary/best/main")


def open_tracker(info: RunInfo) -> TensorBoardTracker:
    _quiet_writer_threads()
    return TensorBoardTracker(info)


def _quiet_writer_threads() -> None:
    """TensorBoard writes events from a thread of its own: a failure there (a full disk) printed that
    thread's traceback in the middle of the run. Its next write raises the same error in the run's own
    thread, where the trackers name it in one warning and stop reporting to it: the traceback is noise."""
    import threading

    previous = threading.excepthook
    if getattr(previous, "recall_quiet", False):
        return

    def hook(args) -> None:
        if type(args.thread).__name__ == "_AsyncWriterThread":
            return
        previous(args)

    hook.recall_quiet = True
    threading.excepthook = hook


def hparam_value(value: Any) -> Any:
    """What the HParams plugin takes (a number, text or bool); lists and nulls as their JSON text."""
    return value if isinstance(value, (bool, int, float, str)) else json.dumps(value)


class TensorBoardTracker:
    def __init__(self, info: RunInfo):
        from torch.utils.tensorboard import SummaryWriter

        self.folder = info.folder / FOLDER
        self.writer = SummaryWriter(log_dir=str(self.folder), purge_step=info.start_step + 1 if info.resumed else None)
        if not info.resumed:  # the first session wrote them; a second copy would list the run twice
            self._hparams({key: hparam_value(value) for key, value in info.params.items()})

    def _hparams(self, params: dict[str, Any]) -> None:
        # summary.hparams into this writer's own folder: add_hparams would start a second run beside it.
        from torch.utils.tensorboard.summary import hparams

        for event in hparams(params, dict.fromkeys(HPARAM_METRICS, 0.0)):
            self.writer.file_writer.add_summary(event)

    def state(self) -> dict[str, Any]:
        return {}  # the folder is the run: nothing to keep

    def log(self, metrics: dict[str, float], step: int) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, step)

    def log_summary(self, values: dict[str, Any], step: int) -> None:
        for name, value in values.items():
            if not isinstance(value, str):
                self.writer.add_scalar(name, value, step)
        self.writer.add_text("summary", "```\n" + json.dumps(values, indent=1) + "\n```", step)

    def log_image(self, name: str, png: Path, step: int) -> None:
        import matplotlib.image

        self.writer.add_image(name, matplotlib.image.imread(png), step, dataformats="HWC")

    def close(self, finished: bool) -> None:
        self.writer.close()


register_tracker(TrackerEntry("tensorboard", open_tracker, requires="tensorboard", extra="tensorboard"))
