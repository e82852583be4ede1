"""Experiment trackers (train.report_to): every record recall writes to metrics.jsonl, the resolved
recipe as hyper-parameters and the summary at the end, sent to TensorBoard, W&B or MLflow.

The loop sees one object, :class:`Trackers`; each tracker lives in a module of its own and is imported
only when a recipe names it (they are optional extras).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def check_available(names: list[str]) -> None:
    """Refuse a tracker whose package is missing, before anything is written (exit 2, pip named)."""
    # Filled in by the trackers work (issue 23): the registry is names.TRACKERS.


class Trackers:
    """The trackers of one run (rank 0 only); with none named, every call does nothing."""

    def log(self, record: dict[str, Any]) -> None: ...
    def finish(self, summary: dict[str, Any], run_dir: Path) -> None: ...
    def close(self) -> None: ...


def open_run(recipe, run_dir: Path, *, resumed: bool, start_step: int) -> Trackers:
    """The trackers ``recipe.train.report_to`` names, opened for the run in ``run_dir``; a resumed run
    continues the same tracker run where the tracker allows it."""
    return Trackers()
