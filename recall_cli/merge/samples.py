"""Where RECALL's typical samples come from: a user's file, or a task's training inputs (by default
the reference model's own task, as its run recorded it). Labels are never read."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import MergeError

if TYPE_CHECKING:
    from .io import Source


def read_samples_file(path: Path) -> list[tuple[str, ...]]:
    """One input per line; a tab separates the two texts of a sentence pair. Blank lines are skipped."""
    path = Path(path)
    if not path.is_file():
        raise MergeError(f"--samples {path}: file not found: give a text file with one input per line")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise MergeError(f"--samples {path}: not UTF-8 text: save it as UTF-8") from None
    rows = [tuple(part.strip() for part in line.split("\t")[:2]) for line in lines if line.strip()]
    if not rows:
        raise MergeError(f"--samples {path}: the file is empty: write one input per line")
    return rows


def samples_option(path: Path | str) -> tuple[list[tuple[str, ...]], str]:
    """--samples FILE: its inputs, and where they came from (merge.json's samples_source)."""
    return read_samples_file(Path(path)), str(path)


def choose(given: tuple[list[tuple[str, ...]], str] | None, task: str | None,
           reference: Source) -> tuple[list[tuple[str, ...]], str, int]:
    """RECALL's inputs, where they came from and their max_seq_length: --samples's (at the reference
    run's max_seq_length), else ``task``'s training inputs (by default the reference run's task)."""
    if given is None:
        return task_samples(task, reference)
    texts, source = given
    return texts, source, int(((reference.recipe or {}).get("task") or {}).get("max_seq_length", 128))


def _task_config(task: str, recipe: dict[str, Any] | None):
    from ..names import TASKS
    from ..recipe import TaskConfig

    recorded = (recipe or {}).get("task") or {}
    if recorded.get("name") == task:
        known = {k: v for k, v in recorded.items() if k in TaskConfig.__dataclass_fields__}
        return TaskConfig(**known)
    shipped = Path("data") / "glue" / (TASKS[task].folder if task in TASKS else task)
    return TaskConfig(name=task, data_dir=str(shipped) if shipped.is_dir() else None)


def task_samples(task: str | None, reference: Source) -> tuple[list[tuple[str, ...]], str, int]:
    """(inputs, where they came from, max_seq_length) of ``task``'s training split; with no task,
    the reference run's task."""
    from ..tasks import load_split
    from ..errors import DataError

    if task is None:
        task = reference.task
        if task is None:
            raise MergeError(f"{reference.arg} is not a recall run, so its task is unknown: give --samples FILE or --task NAME")
    cfg = _task_config(task, reference.recipe)
    try:
        examples = load_split(cfg, "train")
    except DataError as exc:
        raise MergeError(f"--task {task}: {exc}") from None
    return list(examples.texts), f"{task} train ({examples.source})", cfg.max_seq_length
