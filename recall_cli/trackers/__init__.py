"""Experiment trackers (train.report_to): every record recall writes to metrics.jsonl, the resolved
recipe as hyper-parameters, the summary and the forgetting figure at the end, sent to TensorBoard,
W&B or MLflow.

    tensorboard_tracker.py  event files in <run_dir>/tensorboard/ (torch's SummaryWriter)
    mlflow_tracker.py       one MLflow run in the store MLFLOW_TRACKING_URI names, else MLflow's default
    wandb_tracker.py        one W&B run (WANDB_MODE=offline: local files that `wandb sync` uploads later)
    figures.py              this run's forgetting (and probe) figure as PNG files

The loop sees one object, :class:`Trackers`; each tracker lives in a module of its own and is imported
only when a recipe names it (they are optional extras). Every tracker gets the same names:

    <split>/<key>                 each number of a metrics.jsonl record, at the record's step: train/loss,
                                  train/lambda, train/distance, eval/main, probe/sts_retained (lists left out)
    hyper-parameters              the resolved recipe as dotted keys (optimizer.lr); W&B's config nested
    summary/<key>                 summary.json's numbers at the end, nested keys joined by "/" (summary/best/main)
    figures/forgetting, figures/probes   the figures, as images

A resumed run continues the tracker run it started: the ids are kept in <run_dir>/trackers.json.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..errors import MissingPackage, TrackerError
from ..names import RECADAM_ONLY_KEYS, is_vanilla, pip_extra
from ..plugins.trackers import trackers as registered
from ..rundir.layout import SWEEP_INDEX

STATE_FILE = "trackers.json"  # in the run directory: each tracker's run id, so that --resume continues it


def check_available(names: Sequence[str]) -> None:
    """Refuse a tracker whose package is missing, before anything is written (exit 2, pip named)."""
    known = registered()
    for name in dict.fromkeys(names):
        tracker = known.get(name)
        if tracker is None:  # the recipe checks its own names: this is merge's --report-to, or a library call
            raise TrackerError(f"report_to: unknown tracker {name!r} (choose from {', '.join(known)})")
        if tracker.requires is None:
            continue
        try:
            importlib.import_module(tracker.requires)
        except ImportError as exc:
            # An installed package that does not import (a protobuf clash, say) is named as such.
            missing = isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == tracker.requires
            what = "is not installed" if missing else f"cannot be imported ({type(exc).__name__}: {exc})"
            fix = pip_extra(tracker.extra) if tracker.extra else tracker.install or f"pip install {tracker.requires}"
            raise MissingPackage(f"report_to names {name}, but the {tracker.requires} package {what}: {fix}") from None


# ---- what the trackers are told ------------------------------------------------------------------


@dataclass(frozen=True)
class RunInfo:
    """The run a tracker reports: its names, its settings, and whether it continues an earlier one."""

    name: str  # the run directory's name (a sweep cell's name; merge: --out's name)
    folder: Path  # the run directory (merge: --out)
    params: dict[str, Any]  # dotted keys -> values: MLflow's params, TensorBoard's hparams
    config: dict[str, Any]  # the same, nested: W&B's config
    kind: str = "finetune"  # or "merge": W&B's job_type, an MLflow tag
    group: str | None = None  # the sweep's folder name, for a sweep's cells
    resumed: bool = False
    start_step: int = 0  # a resumed run logs only the steps after this one
    saved: dict[str, Any] = field(default_factory=dict)  # what this tracker kept in trackers.json last time


class Tracker(Protocol):
    """One tracker's run. ``state`` is what trackers.json keeps for a resume (a run id), or {}."""

    def state(self) -> dict[str, Any]: ...
    def log(self, metrics: dict[str, float], step: int) -> None: ...
    def log_summary(self, values: dict[str, Any], step: int) -> None: ...
    def log_image(self, name: str, png: Path, step: int) -> None: ...
    def close(self, finished: bool) -> None: ...


def record_metrics(record: dict[str, Any]) -> dict[str, float]:
    """A metrics.jsonl record as tracker names: {"train/loss": 0.69, ...}. Numbers only (lists such as
    cka_layers, and nulls such as fp16's all-skipped grad_norm, are left out)."""
    split = record["split"]
    return {f"{split}/{key}": float(value) for key, value in record.items()
            if key not in ("step", "split") and _is_number(value)}


def summary_values(summary: dict[str, Any], prefix: str = "summary") -> dict[str, Any]:
    """summary.json flattened to summary/<key>, nested keys joined by "/": numbers, and text (what
    each tracker keeps of it is its own); lists are left out."""
    out: dict[str, Any] = {}
    for key, value in summary.items():
        name = f"{prefix}/{key}"
        if isinstance(value, dict):
            out.update(summary_values(value, name))
        elif _is_number(value) or isinstance(value, str):
            out[name] = value
    return out


def _is_number(value: Any) -> bool:
    # bool is an int to Python, but finished=true is not a curve.
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def numbers(values: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in values.items() if _is_number(v)}


# ---- the fan-out the loop holds ------------------------------------------------------------------


def warn_on_stderr(message: str) -> None:
    import sys

    print(f"warning: {message}", file=sys.stderr, flush=True)


class Trackers:
    """The trackers of one run (rank 0 only); with none named, every call does nothing.

    A tracker that fails once the run has started (a server gone, a full disk) is named in one
    warning and dropped, the others go on: hours of training are not lost to a dashboard, and
    metrics.jsonl keeps every record."""

    def __init__(self, opened: dict[str, Tracker] | None = None, warn: Callable[[str], None] = warn_on_stderr):
        self.opened = dict(opened or {})
        self.failed: dict[str, Tracker] = {}  # dropped after a failure; still ended at close
        self.warn = warn
        self.finished = False

    def __bool__(self) -> bool:
        return bool(self.opened)

    def log(self, record: dict[str, Any]) -> None:
        if not self.opened:
            return
        metrics, step = record_metrics(record), int(record["step"])
        self._each(lambda tracker: tracker.log(metrics, step))

    def finish(self, summary: dict[str, Any], run_dir: Path) -> None:
        """The summary, then this run's figures as images, at the run's last step."""
        if not self.opened:
            return
        step = int(summary.get("steps") or 0)
        values = summary_values(summary)
        self._each(lambda tracker: tracker.log_summary(values, step))
        from .figures import run_figures

        with run_figures(Path(run_dir)) as pngs:
            for name, png in pngs.items():
                self._each(lambda tracker, name=name, png=png: tracker.log_image(name, png, step))
        self.finished = True

    def close(self) -> None:
        """Ends each tracker's run (finished, or stopped before its end); a second call does nothing."""
        opened, failed, self.opened, self.failed = self.opened, self.failed, {}, {}
        for name, tracker in reversed(opened.items()):
            try:
                tracker.close(self.finished)
            except Exception as exc:  # noqa: BLE001 - see the class docstring
                self.warn(f"report_to {name}: could not end its run ({_first_line(exc)})")
        for tracker in failed.values():
            with contextlib.suppress(Exception):  # already named in a warning
                tracker.close(False)

    def _each(self, call: Callable[[Tracker], None]) -> None:
        for name, tracker in list(self.opened.items()):
            try:
                call(tracker)
            except Exception as exc:  # noqa: BLE001 - see the class docstring
                self.failed[name] = self.opened.pop(name)
                self.warn(f"report_to {name}: {_first_line(exc)}; not reporting to it for the rest of the run "
                          "(metrics.jsonl has every record)")


def open_run(recipe, run_dir: Path, *, resumed: bool, start_step: int,
             warn: Callable[[str], None] = warn_on_stderr) -> Trackers:
    """The trackers ``recipe.train.report_to`` names, opened for the run in ``run_dir``; a resumed run
    continues the same tracker run where the tracker allows it. A process other than rank 0 gets none.
    ``warn`` tells of a tracker that fails during the run (the loop can pass its reporter's warn)."""
    from ..recipe import flatten

    names = list(dict.fromkeys(recipe.train.report_to))
    if not names or not _is_rank_zero():
        return Trackers()
    run_dir = Path(run_dir)
    config = recipe.to_dict(as_written=True)
    if is_vanilla(recipe.optimizer.name):
        # AdamW never reads RecAdam's keys: a tracker that shows them invites comparing runs on settings
        # that did nothing (config.yaml still holds them, as the recipe wrote them).
        for key in RECADAM_ONLY_KEYS:
            config.get("optimizer", {}).pop(key.split(".")[1], None)
    sweep = run_dir.parent.name if (run_dir.parent / SWEEP_INDEX).is_file() else None
    info = RunInfo(name=run_dir.name, folder=run_dir, params=flatten(config), config=config, kind="finetune",
                   group=sweep, resumed=resumed, start_step=start_step)
    return _open(names, info, run_dir / STATE_FILE, warn)


def open_merge_run(names: Sequence[str], out: Path, settings: dict[str, Any],
                   warn: Callable[[str], None] = warn_on_stderr) -> Trackers:
    """One tracker run for a `recall merge`: its settings as hyper-parameters; the caller logs the scores."""
    from ..recipe import flatten

    names = list(dict.fromkeys(names))
    if not names or not _is_rank_zero():
        return Trackers()
    out = Path(out)
    info = RunInfo(name=out.name, folder=out, params=flatten(settings), config=settings, kind="merge")
    return _open(names, info, None, warn)


def _open(names: list[str], info: RunInfo, state_file: Path | None, warn: Callable[[str], None]) -> Trackers:
    """Each tracker's run started (a failure here is an error: the run has not begun, and its
    directory is rolled back), and their ids kept in trackers.json. The remote trackers start first,
    and a failure discards what the others had started (MLflow's run, and its local store when this
    call created it), so that a refused W&B login leaves no KILLED run in ./mlflow.db."""
    saved = _read_state(state_file) if state_file is not None and info.resumed else {}
    opened: dict[str, Tracker] = {}
    try:
        known = registered()
        for name in sorted(names, key=lambda n: not known[n].remote):
            opened[name] = known[name].open(_with_saved(info, saved.get(name, {})))
    except BaseException:
        for tracker in opened.values():
            with contextlib.suppress(Exception):
                discard = getattr(tracker, "discard", None)
                discard() if discard is not None and not info.resumed else tracker.close(False)
        raise
    if state_file is not None:
        state = {name: tracker.state() for name, tracker in opened.items() if tracker.state()}
        if state:
            from ..rundir import write_json_atomic

            write_json_atomic(state_file, {**saved, **state})
    return Trackers(opened, warn)


def _with_saved(info: RunInfo, saved: dict[str, Any]) -> RunInfo:
    from dataclasses import replace

    return replace(info, saved=saved)


def _read_state(path: Path) -> dict[str, Any]:
    """trackers.json, or {} (no file, or one that cannot be read: the trackers start new runs)."""
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _is_rank_zero() -> bool:
    # The loop opens trackers on rank 0 alone; this guards a library caller on another rank too.
    return os.environ.get("RANK", "0") in ("", "0")


def start_failed(name: str, exc: BaseException, fix: str) -> TrackerError:
    """The one line for a tracker that cannot start its run."""
    return TrackerError(f"report_to {name}: cannot start a run ({_first_line(exc)}): {fix}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# ---- recall merge --------------------------------------------------------------------------------

# merge.json's keys that are not settings: where things are, and RECALL's per-layer table
MERGE_RECORD_SKIPPED = ("inputs", "outputs", "layers", "theta_star")


def report_merge(names: Sequence[str], out: Path, record: dict[str, Any], scores: list[dict[str, Any]] | None) -> None:
    """A `recall merge` as one tracker run: merge.json's settings (and the inputs' names) as
    hyper-parameters; with --evaluate, each input's dev score alone and merged, and their averages,
    as merge/<model>/individual, merge/<model>/merged, merge/average/... at step 0. OUT is written by
    then: a tracker that cannot start is a warning, not a failed merge."""
    settings = {key: value for key, value in record.items() if key not in MERGE_RECORD_SKIPPED}
    settings["inputs"] = [item["name"] for item in record.get("inputs", [])]
    try:
        trackers = open_merge_run(names, out, settings)
    except Exception as exc:  # noqa: BLE001 - a login, an unreachable server: whatever the tracker raises
        warn_on_stderr(f"{out} is written, but --report-to could not report it: {type(exc).__name__}: "
                       f"{_first_line(exc)[:200]} (the scores are in the output and merge.json)")
        return
    try:
        metrics: dict[str, float] = {}
        for row in scores or []:
            metrics[f"merge/{row['model']}/individual"] = float(row["individual"])
            metrics[f"merge/{row['model']}/merged"] = float(row["merged"])
        if scores:
            for column in ("individual", "merged"):
                metrics[f"merge/average/{column}"] = sum(float(r[column]) for r in scores) / len(scores)
        trackers._each(lambda tracker: tracker.log(metrics, 0))
        trackers.finished = True
    finally:
        trackers.close()
