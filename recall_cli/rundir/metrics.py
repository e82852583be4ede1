"""metrics.jsonl: the records a run writes as it goes, read back checked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import RunDirError
from .layout import METRICS_FILE
from .writing import dumps_strict, write_text_atomic


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        shown = value if len(value) <= 20 else value[:17] + "..."
        return f"the text {shown!r}"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a line cut by a kill: everything after it is not trustworthy
    return records


def read_metrics_checked(run_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """metrics.jsonl for a reader that must be able to trust every record (the reports): the records
    whose fields have the right types (record_problem), and one line per problem, each naming the line.
    A line that is not JSON ends the reading, as in read_metrics: the last line cut short by a kill
    (a crashed run) is read up to; one further up is named with the lines left after it."""
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return [], []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        return [], [f"not UTF-8 text (byte {exc.start}): nothing read"]
    numbered = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    records: list[dict[str, Any]] = []
    problems: list[str] = []
    for i, (n, line) in enumerate(numbered):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            after = len(numbered) - i - 1
            if after == 0:
                problems.append(f"line {n} is cut short (the run stopped while writing it?): read up to line {n - 1}")
            else:
                problems.append(f"line {n} is not valid JSON ({exc.msg}): read up to line {n - 1}, "
                                f"the {after} line{'s' if after > 1 else ''} after it left out")
            break
        problem = record_problem(record)
        if problem is None:
            records.append(record)
        else:
            problems.append(f"line {n}: {problem}: record skipped")
    return records, problems


def record_problem(record: Any, need: tuple[str, ...] = ("step", "split")) -> str | None:
    """Why a metrics record (or summary.json's best/final/probe) cannot be read, or None: ``step`` a
    whole number, ``split`` and ``data`` (which split an evaluation scored: "holdout", "dev") text,
    ``holdout`` and ``dev`` (summary.json's final under task.holdout) records of their own, every other
    value a number, null or a list of numbers (per layer)."""
    if not isinstance(record, dict):
        return f"it holds {_json_type(record)}, not a JSON object"
    for key in need:
        if key not in record:
            return f"no '{key}'"
    for key, value in record.items():
        if key == "step":
            if not (isinstance(value, int) and not isinstance(value, bool)):
                return f"'step' is {_json_type(value)}, not a whole number"
        elif key in ("split", "data"):
            if not isinstance(value, str):
                return f"'{key}' is {_json_type(value)}, not text"
        elif key in ("holdout", "dev") and isinstance(value, dict):
            problem = record_problem(value, need=())
            if problem is not None:
                return f"'{key}' has {problem}"
        elif isinstance(value, list):
            if not all(v is None or _is_number(v) for v in value):
                return f"'{key}' is a list with something other than numbers in it"
        elif value is not None and not _is_number(value):
            return f"'{key}' is {_json_type(value)}, not a number"
    return None


def write_metrics(run_dir: Path, records: list[dict[str, Any]]) -> None:
    """metrics.jsonl replaced as a whole (a record's, or a resumed run's cut back to its checkpoint)."""
    write_text_atomic(run_dir / METRICS_FILE, "".join(dumps_strict(r) + "\n" for r in records))


def truncate_metrics(run_dir: Path, last_step: int) -> None:
    """On resume, drop records written after the checkpoint: the resumed run writes them again.

    Read with the checked reader: a last line cut short by a kill is dropped (the resumed run writes it
    again), but a damaged line further up would lose every record after it, so it stops the resume
    with the line named (RunDirError, exit 2) instead of being rewritten away."""
    records, problems = read_metrics_checked(run_dir)
    damaged = [p for p in problems if "is cut short" not in p]
    if damaged:
        raise RunDirError(f"{run_dir / METRICS_FILE}: {damaged[0]}: fix or delete that line, then resume again "
                          "(resuming would rewrite the file without the records after it)")
    write_metrics(run_dir, [r for r in records if r["step"] <= last_step])


class MetricsWriter:
    """Appends one JSON record per line, flushed, so that other commands can read a live run."""

    def __init__(self, run_dir: Path, enabled: bool = True):
        # Ranks other than 0 get a writer that writes nothing: one record per step, not one per rank.
        self._file = open(run_dir / METRICS_FILE, "a", encoding="utf-8") if enabled else None

    def write(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.write(dumps_strict(record) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
