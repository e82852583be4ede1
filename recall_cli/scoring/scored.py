"""Which checkpoint a scoring command reads and the task it scores it on: torch-free, so that a wrong path,
task or file is one line in a second, before torch and the model load (evaluate and predict alike)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DataError
from ..recipe import TaskConfig, recipe_from_dict
from ..recipe.file import read_yaml
from ..rundir import locate
from ..tasks import task_for


@dataclass
class Scored:
    """What a command that scores a checkpoint reads: its weights' folder, the run's recipe (None for a
    folder outside a run), and the task as the run (or --task / --data-dir) says."""

    folder: Path
    run_dir: Path | None
    recipe: Any
    task: Any  # recipe.TaskConfig


def checkpoint_task(path: Path, task: str | None = None, data_dir: Path | None = None) -> Scored:
    """The checkpoint at ``path`` and the task to score it on (evaluate and predict alike). A --task
    whose label count is not the checkpoint's is refused now, not after minutes of scoring."""
    located = locate(path)
    folder, config = located.folder, located.recipe_file
    recipe = recipe_from_dict(read_yaml(config), str(config), check_files=False) if config is not None and config.is_file() else None
    if recipe is None and task is None:
        raise DataError(f"{folder} is not inside a recall run directory: say which task with --task (and --data-dir)")
    task_cfg = recipe.task if recipe else TaskConfig(name=task)
    if task is not None and task != task_cfg.name:
        task_cfg = TaskConfig(name=task)
    if data_dir is not None:
        task_cfg = dataclasses.replace(task_cfg, data_dir=str(data_dir))
    wanted = task_for(task_cfg).num_labels
    labels = head_size(folder) if wanted else None  # 0: no head (a causal LM)
    if labels is not None and labels != wanted:
        raise DataError(f"{folder} predicts {labels} label{'s' if labels != 1 else ''} and {task_cfg.name} has "
                             f"{wanted}: score it on the task it was trained for (--task)")
    return Scored(folder, located.run_dir, recipe, task_cfg)


def head_size(folder: Path) -> int | None:
    """The checkpoint's label count as config.json says it (transformers' num_labels: the length of
    id2label), read as JSON; None where the file does not say (the model's own load reports a bad one)."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    if isinstance(config.get("id2label"), dict):
        return len(config["id2label"])
    return config["num_labels"] if isinstance(config.get("num_labels"), int) else None


def check_holdout(scored: Scored, path: Path) -> None:
    """`evaluate --holdout`: the run held rows out of its training split (task.holdout) to choose best/ on;
    one without is refused (it chose on dev: there is nothing else to score)."""
    if scored.recipe is None:
        raise DataError(f"{path}: --holdout scores the rows a run held out, and {scored.folder} is not inside a recall "
                        "run directory: give the run's folder, or drop --holdout")
    if not scored.task.holdout > 0:
        raise DataError(f"{path}: its run trained without task.holdout (best/ was chosen on dev), so there are no "
                        "held-out rows to score: drop --holdout")
