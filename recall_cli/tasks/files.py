"""Reading a task's files: the text, delimited and JSONL primitives every reader shares, and a user's own
task (``task.name == "custom"``: CSV / TSV / JSONL files named by the recipe).

Every problem with the user's data is reported as a :class:`DataError` whose message is a single
line naming the file, the line and what to do about it, so the CLI can print it without a traceback.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import DataError
from .base import Examples, TaskType


def read_text(path: Path, fix_missing: str) -> str:
    """The whole file as text; utf-8-sig so a byte-order mark (MRPC has one) does not leak into the header."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: file not found: {fix_missing}") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a folder, not a file: {fix_missing}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise DataError(f"{path} line {line}: not valid UTF-8 text: save the file as UTF-8") from None


def delimited_rows(
    path: Path, text: str, delimiter: str, quoting: int
) -> Iterator[tuple[int, list[str]]]:
    """Yield (1-based line number, fields) for every non-blank record of a delimited file."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting, strict=True)
    # A quoted CSV field may span lines, so a record starts on the line after the previous one ended.
    next_line = 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise DataError(f"{path} line {next_line}: malformed row ({err}): fix or remove the row") from None
        start, next_line = next_line, reader.line_num + 1
        if not row or row == [""]:
            continue  # a blank line, e.g. a trailing one at the end of the file
        yield start, row


def column_indices(path: Path, header: list[str], wanted: Sequence[str], fix: str) -> list[int]:
    names = [h.strip() for h in header]
    indices = []
    for column in wanted:
        if column not in names:
            existing = ", ".join(repr(n) for n in names)
            raise DataError(f"{path} line 1: no column '{column}' (columns: {existing}): {fix}")
        indices.append(names.index(column))
    return indices


def table_records(path: Path, text: str, suffix: str) -> tuple[list[str], Iterator[tuple[int, dict[str, str]]]]:
    """A .csv's or .tsv's header (names stripped) and its rows as (line, {column: value}), each row's width
    checked against the header's: what a reader that picks its columns by name after seeing them needs."""
    if suffix == ".tsv":
        rows, what = delimited_rows(path, text, "\t", csv.QUOTE_NONE), "tab-separated"
    else:
        rows, what = delimited_rows(path, text, ",", csv.QUOTE_MINIMAL), "comma-separated"
    try:
        _, header = next(rows)
    except StopIteration:
        raise DataError(f"{path}: file is empty: expected a header row naming the columns") from None
    names = [h.strip() for h in header]

    def records() -> Iterator[tuple[int, dict[str, str]]]:
        for line, row in rows:
            check_width(path, line, row, len(header), what)
            yield line, dict(zip(names, row))

    return names, records()


def header_of(path: Path) -> list[str] | None:
    """The column names of a .csv/.tsv's header or a .jsonl's first record, reading no more of the file
    than that (None for another suffix, or an empty file)."""
    suffix = path.suffix.lower()
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            if suffix == ".jsonl":
                first = next((line for line in handle if line.strip()), None)
                record = json.loads(first) if first is not None else None
                return list(record) if isinstance(record, dict) else None
            if suffix not in (".csv", ".tsv"):
                return None
            delimiter, quoting = ("\t", csv.QUOTE_NONE) if suffix == ".tsv" else (",", csv.QUOTE_MINIMAL)
            row = next(csv.reader(handle, delimiter=delimiter, quoting=quoting), None)
    except (OSError, UnicodeDecodeError, ValueError, csv.Error) as err:
        raise DataError(f"{path}: cannot read its header ({err})") from None
    return [h.strip() for h in row] if row else None


def check_width(path: Path, line: int, row: list[str], width: int, what: str) -> None:
    if len(row) != width:
        raise DataError(
            f"{path} line {line}: expected {width} {what} fields, found {len(row)}: "
            "fix or remove the row (a stray delimiter or line break in the text?)"
        )


def load_custom(task_cfg: Any, task: TaskType, split: str) -> Examples:
    """A custom task's train or dev file (task.train_file / task.dev_file): .csv, .tsv or .jsonl."""
    spec = task.spec
    key = "train_file" if split == "train" else "dev_file"
    filename = getattr(task_cfg, key)
    if not filename:
        raise DataError(f"custom task: task.{key} is not set: point it at a .csv, .tsv or .jsonl file")
    path = Path(filename)
    fix_missing = f"check task.{key}={filename}"
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".tsv", ".jsonl"):
        raise DataError(f"{path}: unknown file type '{suffix}': use a .csv, .tsv or .jsonl file")

    text = read_text(path, fix_missing)
    if spec.label_names is not None and task_cfg.label_names:
        label_fix = "fix the row, or list every label in task.label_names"
    elif spec.label_names is not None:
        label_fix = "fix the row, or set task.label_names to the labels your file uses"
    else:
        label_fix = ""
    columns = [*spec.text_fields, spec.label_field]
    column_fix = "set task.text_fields and task.label_field to columns of the file"

    if suffix == ".jsonl":
        records = _jsonl_records(path, text, columns, column_fix)
    else:
        records = _table_records(path, text, suffix, columns, column_fix)

    texts: list[tuple[str, ...]] = []
    values: list = []
    for line, fields in records:
        texts.append(tuple(fields[:-1]))
        values.append(task.parse_label(fields[-1], f"{path} line {line}", label_fix))
    return non_empty(Examples(texts, values, str(path)))


def _table_records(
    path: Path, text: str, suffix: str, columns: list[str], fix: str
) -> Iterator[tuple[int, list[str]]]:
    # CSV follows the csv module's (Excel's) quoting; TSV is read like GLUE's, with quoting off, so
    # GLUE-style text with unpaired quotes loads unchanged.
    if suffix == ".csv":
        rows = delimited_rows(path, text, ",", csv.QUOTE_MINIMAL)
        what = "comma-separated"
    else:
        rows = delimited_rows(path, text, "\t", csv.QUOTE_NONE)
        what = "tab-separated"
    try:
        _, header = next(rows)
    except StopIteration:
        raise DataError(f"{path}: file is empty: expected a header row naming the columns") from None
    indices = column_indices(path, header, columns, fix)
    for line, row in rows:
        check_width(path, line, row, len(header), what)
        yield line, [row[i] for i in indices]


def jsonl_objects(path: Path, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-empty line of a JSONL file; one DataError naming the line
    for a line that is not a JSON object."""
    # Split on "\n" only: str.splitlines would also break on characters such as U+2028 inside strings.
    for line, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as err:
            raise DataError(f"{path} line {line}: invalid JSON ({err.msg}): write one JSON object per line") from None
        except RecursionError:  # nesting deeper than the parser goes
            raise DataError(f"{path} line {line}: nested too deeply to read: write one flat JSON object per line") from None
        except ValueError:  # an integer past Python's limit on digits (4,300): json raises it as a plain ValueError
            raise DataError(f"{path} line {line}: a number with more digits than can be read (over 4,300): write it "
                            "as text or shorten it") from None
        if not isinstance(record, dict):
            raise DataError(f"{path} line {line}: expected a JSON object, found {type(record).__name__}")
        if "\\ud" in raw.lower() and not _is_text(record):
            raise DataError(f"{path} line {line}: holds a lone UTF-16 surrogate (an escape from \\ud800 to \\udfff "
                            "without its pair), which is no character: fix the text or remove the row")
        yield line, record


def _is_text(record: dict[str, Any]) -> bool:
    """Whether every string in ``record`` is text UTF-8 can write: json reads a lone surrogate escape ("\\ud800")
    into a string that the tokenizer and every file writer then refuse with a bare error."""
    try:
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _jsonl_records(path: Path, text: str, columns: list[str], fix: str) -> Iterator[tuple[int, list[str]]]:
    for line, record in jsonl_objects(path, text):
        fields = []
        for column in columns:
            if column not in record:
                existing = ", ".join(repr(k) for k in record)
                raise DataError(f"{path} line {line}: no field '{column}' (fields: {existing}): {fix}")
            fields.append(json_scalar(record[column], path, line, column))
        yield line, fields


def json_scalar(value: Any, path: Path, line: int, column: str, *, text_only: bool = False) -> str:
    """A JSONL field as the text a CSV cell would hold. NaN and Infinity (which Python's json reads) are refused: no
    text or label is "nan". ``text_only`` (a causal LM's prompt and completion, learnt as written): true/false too."""
    import math

    if value is None:
        return ""  # null reads as an empty field, like an empty CSV cell
    if isinstance(value, float) and not math.isfinite(value):
        raise DataError(f"{path} line {line}: field '{column}' is {value!r} (JSON's NaN or Infinity), not a value: "
                        "write the text (in quotes) or the number it should be")
    if isinstance(value, bool):
        if text_only:
            raise DataError(f"{path} line {line}: field '{column}' is {str(value).lower()} (a JSON boolean), not text: "
                            f'write it in quotes ("{str(value).lower()}") if that is the text to learn')
        return str(value).lower()  # JSON spelling, so label_names ["false", "true"] match
    if isinstance(value, (str, int, float)):
        return str(value)
    raise DataError(f"{path} line {line}: field '{column}' is a {type(value).__name__}, expected text or a number")


def non_empty(examples: Examples) -> Examples:
    if not examples.texts:
        raise DataError(f"{examples.source}: no examples found: the split needs at least one row")
    return examples
