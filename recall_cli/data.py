"""Task definitions, data loading and batching.

Three sources of examples feed the same :class:`Examples` container:

* a local GLUE task folder in the standard GLUE TSV layout (``task.data_dir``),
* the ``nyu-mll/glue`` dataset on the Hugging Face hub (``task.data_dir`` unset),
* the user's own CSV / TSV / JSONL files (``task.name == "custom"``).

Every problem with the user's data is reported as a :class:`DataError` whose message is a single
line naming the file, the line and what to do about it, so the CLI can print it without a traceback.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .errors import DataError
from .names import TASKS, Task, custom_task


# --------------------------------------------------------------------------------------------------
# Tasks
# --------------------------------------------------------------------------------------------------


# CoLA's TSV has no header: source, label, original mark, sentence.
_COLA_COLUMNS = 4
_COLA_LABEL_COL = 1
_COLA_TEXT_COL = 3

_HUB_SPLITS = {
    "train": "train",
    "dev": "validation",
    "dev_matched": "validation_matched",
    "dev_mismatched": "validation_mismatched",
}


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


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------


@dataclass
class Examples:
    """One split: texts (1 or 2 strings per example) and labels (class ids or regression targets)."""

    texts: list[tuple[str, ...]]
    labels: list[int] | list[float]
    source: str  # file path or hub id, for messages

    def __len__(self) -> int:
        return len(self.texts)


def load_split(task_cfg: Any, split: str, limit: int | None = None) -> Examples:
    """Load ``split`` ("train", "dev", or for MNLI "dev_matched" / "dev_mismatched") of a task;
    with ``limit``, only its first ``limit`` examples (task.max_train_examples / max_eval_examples)."""
    spec = task_spec(task_cfg)
    split = _normalise_split(spec, split)
    if spec.name == "custom":
        examples = _load_custom(task_cfg, spec, split)
    elif task_cfg.data_dir:
        examples = _load_glue_tsv(spec, Path(task_cfg.data_dir), split)
    else:
        examples = _load_glue_hub(spec, split)
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


class _Labels:
    """Turns label values into class ids or floats, with errors that point at the offending line."""

    def __init__(self, spec: Task, fix: str) -> None:
        self.spec = spec
        self.fix = fix  # what to tell the user when a class label is unknown
        self.ids = {name: i for i, name in enumerate(spec.label_names or ())}
        self.regression = spec.is_regression  # read once: parse runs per row

    def parse(self, value: str, where: str) -> int | float:
        value = value.strip()
        if self.regression:
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not math.isfinite(number):
                raise DataError(
                    f"{where}: label '{value}' is not a finite number: a regression task "
                    "(num_labels=1) needs a number in the label column"
                )
            return number
        if value not in self.ids:
            raise DataError(f"{where}: label '{value}' is not one of {', '.join(self.ids)}: {self.fix}")
        return self.ids[value]


def _read_text(path: Path, fix_missing: str) -> str:
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


def _delimited_rows(
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


def _column_indices(path: Path, header: list[str], wanted: Sequence[str], fix: str) -> list[int]:
    names = [h.strip() for h in header]
    indices = []
    for column in wanted:
        if column not in names:
            existing = ", ".join(repr(n) for n in names)
            raise DataError(f"{path} line 1: no column '{column}' (columns: {existing}): {fix}")
        indices.append(names.index(column))
    return indices


def _check_width(path: Path, line: int, row: list[str], width: int, what: str) -> None:
    if len(row) != width:
        raise DataError(
            f"{path} line {line}: expected {width} {what} fields, found {len(row)}: "
            "fix or remove the row (a stray delimiter or line break in the text?)"
        )


def _load_glue_tsv(spec: Task, data_dir: Path, split: str) -> Examples:
    path = data_dir / f"{split}.tsv"
    folder = spec.folder
    fix = f"set task.data_dir to the GLUE {folder} folder itself, e.g. task.data_dir=data/glue/{folder}"
    # GLUE TSVs are tab-separated with quoting off: MRPC, STS-B and RTE hold unpaired double quotes.
    rows = _delimited_rows(path, _read_text(path, fix), "\t", csv.QUOTE_NONE)
    labels = _Labels(spec, "fix or remove the row")

    if spec.name == "cola":
        width, text_cols, label_col = _COLA_COLUMNS, [_COLA_TEXT_COL], _COLA_LABEL_COL
    else:
        try:
            _, header = next(rows)
        except StopIteration:
            raise DataError(f"{path}: file is empty: expected a header row and examples; {fix}") from None
        spec_cols: Sequence[str] = spec.text_fields
        alternative = TASKS[spec.name].alt_text_fields
        names = [h.strip() for h in header]
        if alternative and spec_cols[0] not in names and alternative[0] in names:
            spec_cols = alternative
        width = len(header)
        *text_cols, label_col = _column_indices(path, header, [*spec_cols, spec.label_field], fix)

    texts: list[tuple[str, ...]] = []
    values: list = []
    for line, row in rows:
        _check_width(path, line, row, width, "tab-separated")
        texts.append(tuple(row[i] for i in text_cols))
        values.append(labels.parse(row[label_col], f"{path} line {line}"))
    return _non_empty(Examples(texts, values, str(path)))


def _load_glue_hub(spec: Task, split: str) -> Examples:
    source = f"nyu-mll/glue ({spec.name}, {_HUB_SPLITS[split]})"
    folder = spec.folder
    try:
        # Imported here: `datasets` is slow to import and only this path needs it.
        import datasets

        dataset = datasets.load_dataset("nyu-mll/glue", spec.name, split=_HUB_SPLITS[split])
        columns = {name: dataset[name] for name in (*TASKS[spec.name].hub_text_columns, "label")}
    except Exception as err:  # noqa: BLE001 - offline, missing package, hub errors: all mean "use local files"
        reason = " ".join(str(err).split())[:200] or type(err).__name__
        raise DataError(
            f"could not load GLUE {spec.name} from the Hugging Face hub ({reason}): set task.data_dir "
            f"to a local GLUE folder, e.g. task.data_dir=data/glue/{folder}"
        ) from None

    texts = list(zip(*(columns[c] for c in TASKS[spec.name].hub_text_columns)))
    if spec.is_regression:
        values: list = [float(v) for v in columns["label"]]
    else:
        values = [int(v) for v in columns["label"]]
        bad = [v for v in values if not 0 <= v < spec.num_labels]
        if bad:  # the hub marks unlabelled (test) rows with -1; train/validation should have none
            raise DataError(f"{source}: {len(bad)} rows have label {bad[0]}, outside 0..{spec.num_labels - 1}")
    return _non_empty(Examples(texts, values, source))


def _load_custom(task_cfg: Any, spec: Task, split: str) -> Examples:
    key = "train_file" if split == "train" else "dev_file"
    filename = getattr(task_cfg, key)
    if not filename:
        raise DataError(f"custom task: task.{key} is not set: point it at a .csv, .tsv or .jsonl file")
    path = Path(filename)
    fix_missing = f"check task.{key}={filename}"
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".tsv", ".jsonl"):
        raise DataError(f"{path}: unknown file type '{suffix}': use a .csv, .tsv or .jsonl file")

    text = _read_text(path, fix_missing)
    if spec.label_names is not None and task_cfg.label_names:
        label_fix = "fix the row, or list every label in task.label_names"
    elif spec.label_names is not None:
        label_fix = "fix the row, or set task.label_names to the labels your file uses"
    else:
        label_fix = ""
    labels = _Labels(spec, label_fix)
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
        values.append(labels.parse(fields[-1], f"{path} line {line}"))
    return _non_empty(Examples(texts, values, str(path)))


def _table_records(
    path: Path, text: str, suffix: str, columns: list[str], fix: str
) -> Iterator[tuple[int, list[str]]]:
    # CSV follows the csv module's (Excel's) quoting; TSV is read like GLUE's, with quoting off, so
    # GLUE-style text with unpaired quotes loads unchanged.
    if suffix == ".csv":
        rows = _delimited_rows(path, text, ",", csv.QUOTE_MINIMAL)
        what = "comma-separated"
    else:
        rows = _delimited_rows(path, text, "\t", csv.QUOTE_NONE)
        what = "tab-separated"
    try:
        _, header = next(rows)
    except StopIteration:
        raise DataError(f"{path}: file is empty: expected a header row naming the columns") from None
    indices = _column_indices(path, header, columns, fix)
    for line, row in rows:
        _check_width(path, line, row, len(header), what)
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
        if not isinstance(record, dict):
            raise DataError(f"{path} line {line}: expected a JSON object, found {type(record).__name__}")
        yield line, record


def _jsonl_records(path: Path, text: str, columns: list[str], fix: str) -> Iterator[tuple[int, list[str]]]:
    for line, record in jsonl_objects(path, text):
        fields = []
        for column in columns:
            if column not in record:
                existing = ", ".join(repr(k) for k in record)
                raise DataError(f"{path} line {line}: no field '{column}' (fields: {existing}): {fix}")
            fields.append(_json_scalar(record[column], path, line, column))
        yield line, fields


def _json_scalar(value: Any, path: Path, line: int, column: str) -> str:
    if value is None:
        return ""  # null reads as an empty field, like an empty CSV cell
    if isinstance(value, bool):
        return str(value).lower()  # JSON spelling, so label_names ["false", "true"] match
    if isinstance(value, (str, int, float)):
        return str(value)
    raise DataError(f"{path} line {line}: field '{column}' is a {type(value).__name__}, expected text or a number")


def _non_empty(examples: Examples) -> Examples:
    if not examples.texts:
        raise DataError(f"{examples.source}: no examples found: the split needs at least one row")
    return examples


# --------------------------------------------------------------------------------------------------
# Tokenization and batching
# --------------------------------------------------------------------------------------------------


@dataclass
class Features:
    """A tokenized split, unpadded: padding happens per batch in :func:`collate`."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None  # None for models without segment ids (e.g. RoBERTa)
    labels: list[int] | list[float]

    def __len__(self) -> int:
        return len(self.input_ids)


def tokenize(examples: Examples, tokenizer: Any, max_seq_length: int) -> Features:
    """Tokenize every example in one batched call, truncating to ``max_seq_length`` tokens."""
    first = [t[0] for t in examples.texts]
    pairs = len(examples.texts[0]) == 2 if examples.texts else False
    second = [t[1] for t in examples.texts] if pairs else None
    encoded = tokenizer(
        first,
        second,
        truncation="longest_first",  # for pairs: trim the longer text first, one token at a time
        max_length=max_seq_length,
        padding=False,
        return_attention_mask=False,  # rebuilt per batch in collate, where padding is known
    )
    token_type_ids = encoded.get("token_type_ids")
    return Features(
        input_ids=list(encoded["input_ids"]),
        token_type_ids=list(token_type_ids) if token_type_ids is not None else None,
        labels=list(examples.labels),
    )


def padded_length(longest: int, pad_to_multiple_of: int | None, max_length: int | None = None) -> int:
    """The width of a batch whose longest row has ``longest`` tokens: itself (dynamic padding), or the
    next multiple of ``pad_to_multiple_of`` (a length bucket), never above ``max_length``."""
    if not pad_to_multiple_of:
        return longest
    width = -(-longest // pad_to_multiple_of) * pad_to_multiple_of
    return min(width, max_length) if max_length else width


def collate(features: Features, indices: Sequence[int], pad_token_id: int, pad_to_multiple_of: int | None = None,
            max_length: int | None = None) -> dict[str, torch.Tensor]:
    """One batch of ``indices``, right-padded to the longest sequence in the batch (not the split), or
    up to its length bucket (:func:`padded_length`) so that a compiled step sees a few shapes."""
    if len(indices) == 0:
        raise ValueError("collate needs at least one index")
    rows = [features.input_ids[i] for i in indices]
    width = padded_length(max(len(r) for r in rows), pad_to_multiple_of, max_length)

    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, ids in enumerate(rows):
        input_ids[b, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[b, : len(ids)] = 1
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}

    if features.token_type_ids is not None:
        token_type_ids = torch.zeros((len(rows), width), dtype=torch.long)
        for b, i in enumerate(indices):
            segments = features.token_type_ids[i]
            token_type_ids[b, : len(segments)] = torch.tensor(segments, dtype=torch.long)
        batch["token_type_ids"] = token_type_ids

    labels = [features.labels[i] for i in indices]
    # Regression targets are floats (MSE loss); class ids are ints (cross-entropy wants long).
    regression = isinstance(labels[0], float)
    batch["labels"] = torch.tensor(labels, dtype=torch.float32 if regression else torch.long)
    return batch


class BatchOrder:
    """Micro-batch i of the run, reproducible from (seed, i) alone: that index is the data position."""

    def __init__(self, n: int, batch_size: int, seed: int):
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.per_epoch = math.ceil(n / batch_size)
        self._epoch, self._perm = -1, torch.empty(0, dtype=torch.long)

    def batch(self, i: int) -> list[int]:
        epoch, j = divmod(i, self.per_epoch)
        if epoch != self._epoch:
            generator = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
            self._epoch, self._perm = epoch, torch.randperm(self.n, generator=generator)
        return self._perm[j * self.batch_size : (j + 1) * self.batch_size].tolist()


def subset(features: Features, indices: Sequence[int]) -> Features:
    return Features(
        input_ids=[features.input_ids[i] for i in indices],
        token_type_ids=[features.token_type_ids[i] for i in indices] if features.token_type_ids is not None else None,
        labels=[features.labels[i] for i in indices],
    )

