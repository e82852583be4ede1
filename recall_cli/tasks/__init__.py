"""Tasks: which task a recipe names, and reading its splits.

Three sources of examples feed the same :class:`~recall_cli.tasks.base.Examples` container:

* a local GLUE task folder in the standard GLUE TSV layout (``task.data_dir``),
* the ``nyu-mll/glue`` dataset on the Hugging Face hub (``task.data_dir`` unset),
* the user's own CSV / TSV / JSONL files (``task.name == "custom"``).

The rooms: base.py (the containers), files.py and glue.py (reading), batches.py (tokenizing and
padding, the batch order), metrics.py (scores), holdout.py (task.holdout's split).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import DataError
from ..names import TASKS, Task, custom_task
from .base import Examples, Features
from .files import load_custom
from .glue import load_glue_hub, load_glue_tsv


def task_spec(task_cfg: Any) -> Task:
    """The :class:`~recall_cli.names.Task` for a task config (a GLUE name, or ``custom`` described by the config)."""
    name = task_cfg.name
    if name in TASKS:
        return TASKS[name]
    if name != "custom":
        choices = ", ".join(TASKS)
        raise DataError(f"unknown task '{name}': set task.name to one of {choices}, or custom")
    return _custom_spec(task_cfg)


def _custom_spec(task_cfg: Any) -> Task:
    text_fields = tuple(task_cfg.text_fields or ())
    if len(text_fields) not in (1, 2):
        raise DataError(
            f"custom task: task.text_fields={list(text_fields)} must name 1 or 2 text columns, "
            "e.g. task.text_fields=[sentence] or [sentence1,sentence2]"
        )
    if not task_cfg.label_field:
        raise DataError("custom task: task.label_field is not set: name the column that holds the label")

    num_labels = task_cfg.num_labels
    label_names = tuple(str(n) for n in task_cfg.label_names) if task_cfg.label_names else None
    if num_labels is None:
        if label_names is None:
            raise DataError(
                "custom task: set task.num_labels (1 for regression, >= 2 for classification) "
                "or task.label_names"
            )
        num_labels = len(label_names)
    if num_labels < 1:
        raise DataError(f"custom task: task.num_labels={num_labels}: use 1 for regression, >= 2 for classes")

    if num_labels == 1:
        if label_names is not None:
            raise DataError(
                "custom task: task.num_labels=1 means regression, which takes no task.label_names: "
                "remove task.label_names or set task.num_labels to the number of classes"
            )
        return custom_task(text_fields, task_cfg.label_field, None)

    if label_names is None:
        # Without names the file is expected to hold the class ids themselves.
        label_names = tuple(str(i) for i in range(num_labels))
    if len(label_names) != num_labels:
        raise DataError(
            f"custom task: task.num_labels={num_labels} but task.label_names has {len(label_names)} "
            "names: make them agree"
        )
    if len(set(label_names)) != len(label_names):
        raise DataError(f"custom task: task.label_names={list(label_names)} has duplicates")
    return custom_task(text_fields, task_cfg.label_field, label_names)


def load_split(task_cfg: Any, split: str, limit: int | None = None) -> Examples:
    """Load ``split`` ("train", "dev", or for MNLI "dev_matched" / "dev_mismatched") of a task;
    with ``limit``, only its first ``limit`` examples (task.max_train_examples / max_eval_examples)."""
    spec = task_spec(task_cfg)
    split = _normalise_split(spec, split)
    if spec.name == "custom":
        examples = load_custom(task_cfg, spec, split)
    elif task_cfg.data_dir:
        examples = load_glue_tsv(spec, Path(task_cfg.data_dir), split)
    else:
        examples = load_glue_hub(spec, split)
    if limit is not None:
        examples = Examples(examples.texts[:limit], examples.labels[:limit], examples.source)
    return examples


def _normalise_split(spec: Task, split: str) -> str:
    if split == "dev" and "dev" not in spec.dev_splits:
        return spec.dev_splits[0]  # the headline one: MNLI's matched set
    allowed = ("train", *spec.dev_splits)
    if split not in allowed:
        raise DataError(f"task {spec.name} has no split '{split}': use one of {', '.join(allowed)}")
    return split
