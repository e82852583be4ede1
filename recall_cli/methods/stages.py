"""What a method reads of an earlier stage of a sequence (`recall continual`): its recipe, its task's
training rows tokenized for this run, and its checkpoint. EWC (methods/ewc) and replay (methods/replay)
read earlier stages through here; the sequence's runner hands them the run directories in the recipe
(ewc.previous, replay.previous), so a stage's config.yaml says where its past is.

Imports torch and the task code only when called."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class EarlierStage:
    run_dir: Path
    recipe: Any
    kind: Any  # the task type
    checkpoint: Path  # the weights the next stage started from (last/, or best/ under continual.weights=best)


def problem(key: str, path: str) -> str | None:
    """One line when ``path`` is not a finished stage's run directory (before anything is written)."""
    from ..rundir import CONFIG_FILE, LAST_DIR, find_checkpoint

    run_dir = Path(path)
    if not (run_dir / CONFIG_FILE).is_file():
        return f"{key}: {path} is not a run directory (no config.yaml): give an earlier stage's run directory"
    if find_checkpoint(run_dir, LAST_DIR) is None:
        return f"{key}: {path} has no last/ checkpoint: finish that stage first"
    return None


def read(path: str | Path, checkpoint: str | Path | None = None) -> EarlierStage:
    from ..recipe import recipe_from_dict
    from ..recipe.file import read_yaml
    from ..rundir import CONFIG_FILE, LAST_DIR, find_checkpoint
    from ..tasks import task_spec, task_type_for

    run_dir = Path(path)
    recipe = recipe_from_dict(read_yaml(run_dir / CONFIG_FILE), str(run_dir / CONFIG_FILE))
    folder = Path(checkpoint) if checkpoint is not None else find_checkpoint(run_dir, LAST_DIR)
    return EarlierStage(run_dir, recipe, task_type_for(task_spec(recipe.task)), folder)


def training_rows(stage: EarlierStage, tokenizer: Any) -> Any:
    """The earlier stage's training rows (its recipe's max_train_examples), tokenized as it tokenized them."""
    from ..tasks import load_split

    cfg = stage.recipe.task
    return stage.kind.tokenize(load_split(cfg, "train", cfg.max_train_examples), tokenizer, cfg.max_seq_length)


def task_loss(kind: Any, logits: Any, labels: Any) -> Any:
    """The task's loss from a head's logits (what its model computes with labels given): cross-entropy, or
    mean squared error for a one-output regression head."""
    import torch.nn.functional as F

    if kind.head_config().get("problem_type") == "regression":
        return F.mse_loss(logits.squeeze(-1).float(), labels.float())
    return F.cross_entropy(logits.float(), labels)
