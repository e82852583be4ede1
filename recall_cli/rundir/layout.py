"""The run directory's file names, and how a path resolves to the weights it names (:func:`locate`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import RunDirError


CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
ANCHOR_FILE = "anchor.safetensors"  # theta* (`theta_star` in the code); the file name is public: older runs hold it
# The parameters theta* has no pretrained value for (a new head), as the run began: with theta*, the teacher a
# method distils from, the same after --resume (runs made before it have none: the teacher takes last/'s head).
START_FILE = "start.safetensors"
TRAINER_STATE_FILE = "trainer_state.json"  # in last/: its presence marks a complete checkpoint
OPTIMIZER_FILE = "optimizer.pt"
RNG_FILE = "rng_state.pt"
BEST_DIR = "best"  # the weights of the best dev evaluation
LAST_DIR = "last"  # the latest save: weights plus everything --resume reads
CHECKPOINTS_DIR = "checkpoints"  # step-N copies of last/ (train.keep_last)
LP_DIR = "lp"  # LP-FT: the head fitted on the frozen encoder (train.linear_probe_steps)
MODEL_CONFIG_FILE = "config.json"  # what makes a folder a save_pretrained checkpoint
MERGE_RECORD = "merge.json"
SWEEP_INDEX = "sweep.json"  # a sweep's index in its OUT: a run directory beside one is a sweep's cell
CONTINUAL_FILE = "continual.json"  # a `recall continual` sequence's record in its --out (continual.py reads it)
# A checkpoint folder outside a run (e.g. a `recall merge` output) may carry the recipe its head was
# trained with, so that `recall evaluate FOLDER` knows the task.
SOURCE_RECIPE_FILE = "recall_recipe.yaml"
# A scored record (recall_cli/scoring/records.py) is a run directory whose config.yaml has this section.
RECORD_SECTION = "record"


def is_run_dir(path: Path) -> bool:
    return (path / CONFIG_FILE).is_file() and (path / METRICS_FILE).exists()


@dataclass(frozen=True)
class Located:
    """What a path names: ``folder`` holds the weights; ``run_dir`` is the run (or record) they belong to."""

    path: Path  # as given
    kind: str  # "run", "record", "merge" or "checkpoint"
    folder: Path  # the save_pretrained folder to load
    run_dir: Path | None = None
    merge: dict[str, Any] | None = None  # merge.json, for a merge output

    @property
    def recipe_file(self) -> Path | None:
        """The recipe the weights' head was trained with: the run's config.yaml, or the copy a merge left."""
        if self.run_dir is not None:
            return self.run_dir / CONFIG_FILE
        own = self.folder / SOURCE_RECIPE_FILE
        return own if own.is_file() else None


def locate(path: str | Path) -> Located:
    """A run directory (its best/, else last/), a checkpoint folder inside one, a merge output or any
    save_pretrained folder. Raises RunDirError, one message per case, for anything else (a scored
    record too: it holds no weights)."""
    path = Path(path)
    if not path.exists():
        raise RunDirError(f"{path}: no such run directory or checkpoint folder (check the path)")
    if (path / CONFIG_FILE).is_file():
        folder = find_checkpoint(path, BEST_DIR) or find_checkpoint(path, LAST_DIR)
        if folder is None:
            raise RunDirError(no_checkpoint_message(path))
        return Located(path, "run", folder, run_dir=path)
    if not (path / MODEL_CONFIG_FILE).is_file():
        raise RunDirError(f"{path}: not a run directory or checkpoint folder (no {CONFIG_FILE}, no {MODEL_CONFIG_FILE})")
    if (path.parent / CONFIG_FILE).is_file():
        return Located(path, "checkpoint", path, run_dir=path.parent)
    merge_file = path.parent / MERGE_RECORD
    if merge_file.is_file():
        try:
            merge = json.loads(merge_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise RunDirError(f"{merge_file} is not valid JSON ({exc.msg}, line {exc.lineno}): is the merge complete?") from None
        return Located(path, "merge", path, merge=merge if isinstance(merge, dict) else None)
    return Located(path, "checkpoint", path)


def find_checkpoint(run_dir: Path, name: str = LAST_DIR) -> Path | None:
    """RUN/name, or RUN/name.old when a kill fell between the two renames of a save."""
    for candidate in (run_dir / name, _old(run_dir / name)):
        if (candidate / TRAINER_STATE_FILE).is_file() or (name != LAST_DIR and (candidate / MODEL_CONFIG_FILE).is_file()):
            return candidate
    return None


def read_config(run_dir: Path) -> Any:
    """A run directory's config.yaml as YAML reads it (OSError, yaml.YAMLError when it cannot be read). Through
    libyaml's parser where PyYAML was built with it (the safe loader all the same): a report reads hundreds of them,
    and the pure-Python parser took most of a comparison's time."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load((run_dir / CONFIG_FILE).read_text(encoding="utf-8"), Loader=loader)  # noqa: S506 - a safe loader


def scored_record(run_dir: Path) -> dict[str, Any] | None:
    """The `record` section of a scored record's config.yaml (recall evaluate --record); None for a run."""
    import yaml

    try:
        config = read_config(run_dir)
    except (OSError, yaml.YAMLError):
        return None
    record = config.get(RECORD_SECTION) if isinstance(config, dict) else None
    return record if isinstance(record, dict) else None


def no_checkpoint_message(run_dir: Path) -> str:
    """Why a run directory has no checkpoint to load: not there yet, or a scored record, which keeps none."""
    record = scored_record(run_dir)
    if record is not None:
        return (f"{run_dir} is a scored record (recall evaluate --record) and holds no weights: "
                f"give the checkpoint it scored, {record.get('checkpoint')}")
    return f"{run_dir}: the run has no best/ or last/ checkpoint yet"


def _old(dest: Path) -> Path:
    return dest.with_name(dest.name + ".old")
