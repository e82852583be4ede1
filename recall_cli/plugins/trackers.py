"""The experiment trackers' registry: the names train.report_to and `recall merge --report-to` take, each a
:class:`TrackerEntry` that a tracker's room registers once (recall_cli/trackers/wandb_tracker.py is one).

recall's own are the modules in :data:`BUILTIN`; a package adds one through the entry-point group
``recall_cli.trackers`` (a module that calls :func:`register_tracker`, or a TrackerEntry). A tracker gets every
metrics.jsonl record, the summary and the figures through the run it opens (recall_cli/trackers/__init__.py's
Tracker protocol and RunInfo). Standard library only: the ground floor (docs/layers.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .loader import Registry, admit_instance

GROUP = "recall_cli.trackers"
BUILTIN = ("recall_cli.trackers.tensorboard_tracker", "recall_cli.trackers.wandb_tracker",
           "recall_cli.trackers.mlflow_tracker")


@dataclass(frozen=True)
class TrackerEntry:
    """One tracker train.report_to names (the Hugging Face Trainer's names for recall's own)."""

    name: str
    open: Callable[[Any], Any]  # RunInfo -> the tracker's run (trackers/__init__.py's Tracker)
    requires: str | None = None  # the package that must import for it to work, checked before anything is written
    extra: str | None = None  # recall's extra that installs it: pip install 'recall-finetune[<extra>]'
    install: str | None = None  # else the command that installs it (a plugin's own package)
    # Starts a run on a server that may refuse it (a login): opened before the trackers that write locally,
    # so that a refusal leaves nothing of them behind.
    remote: bool = False


def _validate(entry: Any) -> None:
    if not isinstance(entry, TrackerEntry):
        raise TypeError(f"register_tracker takes a TrackerEntry, got {type(entry).__name__}")
    if not callable(entry.open):
        raise ValueError(f"tracker {entry.name}: open must be callable (RunInfo -> its run)")


_TRACKERS: Registry[TrackerEntry] = Registry("tracker", GROUP, BUILTIN, admit=admit_instance(TrackerEntry),
                                             validate=_validate, origin=lambda e: e.open.__module__)


def register_tracker(entry: TrackerEntry, *, replace: bool = False) -> TrackerEntry:
    return _TRACKERS.register(entry, replace=replace)


def unregister_tracker(name: str) -> None:
    _TRACKERS.unregister(name)


def trackers() -> dict[str, TrackerEntry]:
    """Every tracker by name: recall's in BUILTIN's order, then plugins'."""
    return {entry.name: entry for entry in _TRACKERS.values()}
