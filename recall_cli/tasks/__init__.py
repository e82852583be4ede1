"""Tasks: which task a recipe names, its type, and reading its splits.

A task (names.TASKS, or a custom one the recipe describes) names its *type*, one entry of the task
types' registry (plugins/tasks.py; :data:`TASK_TYPES` here reads it); every stage asks the type
(:class:`~recall_cli.tasks.base.TaskType`) how to read, batch, head, score and predict the task, never
whether it has classes. Adding a task type (a token classifier, a causal LM) is one room that registers
itself (register_task_type), in recall beside classification.py or in a package of yours named in the
entry-point group ``recall_cli.tasks``; a user's own files are its task when task.name is its ``files_task``.

    __init__.py        task_spec / task_for (the task a recipe names); load_split
    base.py            the interface (TaskType) and the containers rows travel in
    sequence.py        what the two sequence types share: text(s) in, one label out, read from GLUE or files
    classification.py  regression.py   the two sequence types
    causal_lm.py       a causal LM: prompt in, completion generated (generation.py: its loss, greedy decoding)
    files.py, glue.py  reading a user's files, GLUE's folders and the hub's copy of GLUE
    batches.py         tokenizing and padding (torch), the order batches come in
    metrics.py         the scores (scikit-learn, SciPy)
    holdout.py         task.holdout's stratified split

Torch-free to import (the card and the reports read the registry); batches.py and metrics.py load
when a type tokenizes, batches or scores.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import DataError
from ..names import LM_TASKS, TASKS, Task, custom_lm_task, custom_task
from ..plugins.tasks import files_tasks, task_types
from .base import Examples, Features, Prediction, TaskType
from .causal_lm import CausalLM
from .classification import Classification
from .regression import Regression

__all__ = ["TASK_TYPES", "CausalLM", "Classification", "Examples", "Features", "Prediction", "Regression", "TaskType", "load_split",
           "task_for", "task_spec", "task_type_for"]



def __getattr__(name: str) -> Any:
    if name == "TASK_TYPES":  # name -> TaskType class, the registry's, read afresh (a plugin's type is in it)
        return task_types()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def task_type_for(spec: Task) -> TaskType:
    """The type of ``spec`` (names.Task.task_type), bound to it."""
    known = task_types()
    if spec.task_type not in known:
        raise DataError(f"task {spec.name}: its task type {spec.task_type!r} is not installed (installed: "
                        f"{', '.join(known)})")
    return known[spec.task_type](spec)


def task_for(task_cfg: Any) -> TaskType:
    """The type of the task a recipe's task section names, bound to it."""
    return task_type_for(task_spec(task_cfg))


def task_spec(task_cfg: Any) -> Task:
    """The :class:`~recall_cli.names.Task` for a task config (a GLUE name, or ``custom`` described by the config)."""
    name = task_cfg.name
    if name in TASKS:
        return TASKS[name]
    if name in LM_TASKS:
        return LM_TASKS[name]
    if name == "custom_lm":
        return custom_lm_task(*(task_cfg.text_fields or ["prompt"])[:1], task_cfg.label_field or "completion")
    plugin = files_tasks().get(name)
    if plugin is not None:  # a plugin task type's own files: described as custom's are, unless it says otherwise
        own = getattr(plugin, "files_spec", None)
        return replace(own(task_cfg) if own is not None else _custom_spec(task_cfg), name=name, task_type=plugin.name)
    if name != "custom":
        choices = ", ".join([*TASKS, *LM_TASKS])
        raise DataError(f"unknown task '{name}': set task.name to one of {choices}, or custom (custom_lm for a causal LM)")
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
    task = task_for(task_cfg)
    examples = task.read(task_cfg, _normalise_split(task.spec, split))
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
