"""The task types' registry: how a task is read, batched, headed, scored and predicted (recall_cli/tasks/base.py's
TaskType), each type a class in a room of its own that registers itself once.

recall's own are the modules in :data:`BUILTIN`; a package adds one through the entry-point group
``recall_cli.tasks`` (a module that calls :func:`register_task_type`, or the class itself). A plugin's type
names the ``task.name`` by which a user's own files are its task (:attr:`TaskType.files_task`), as ``custom``
and ``custom_lm`` name recall's. Standard library only: the ground floor (docs/layers.md).
"""

from __future__ import annotations

from typing import Any

from .loader import Registry, admit_class

GROUP = "recall_cli.tasks"
BUILTIN = ("recall_cli.tasks.classification", "recall_cli.tasks.regression", "recall_cli.tasks.causal_lm")
REQUIRED = ("name", "read", "parse_label", "tokenize", "collate", "head_config", "metrics", "predictions")
# task.name values recall reads itself: a plugin's own-files task cannot take one
RESERVED_TASK_NAMES = ("custom", "custom_lm")


def _validate(task_type: Any) -> None:
    if not isinstance(task_type, type):
        raise TypeError(f"register_task_type takes a class (tasks/base.py's TaskType), got {type(task_type).__name__}")
    missing = [attr for attr in REQUIRED if not hasattr(task_type, attr)]
    if missing:
        raise ValueError(f"task type {task_type.__name__}: it has no {', '.join(missing)} (tasks/base.py's TaskType)")
    files = getattr(task_type, "files_task", None)
    if files is not None and files in RESERVED_TASK_NAMES:
        raise ValueError(f"task type {task_type.name}: files_task {files!r} is recall's own: name another")


_TASK_TYPES: Registry[Any] = Registry("task type", GROUP, BUILTIN, admit=admit_class(REQUIRED, "task type"),
                                      validate=_validate, origin=lambda cls: cls.__module__)


def register_task_type(task_type: type, *, replace: bool = False) -> type:
    """Add a task type (its class); returns it, so that it may decorate the class."""
    return _TASK_TYPES.register(task_type, replace=replace)


def unregister_task_type(name: str) -> None:
    _TASK_TYPES.unregister(name)


def task_types() -> dict[str, Any]:
    """Every task type by name: recall's in BUILTIN's order, then plugins'."""
    return {cls.name: cls for cls in _TASK_TYPES.values()}


def files_tasks() -> dict[str, Any]:
    """task.name -> the plugin task type whose own-files task it names."""
    return {cls.files_task: cls for cls in _TASK_TYPES.values() if getattr(cls, "files_task", None)}
