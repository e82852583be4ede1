"""Reading a GLUE task: a local folder in the standard GLUE TSV layout (``task.data_dir``), or the
``nyu-mll/glue`` dataset on the Hugging Face hub (``task.data_dir`` unset)."""

from __future__ import annotations

import csv
import functools
from pathlib import Path

from ..errors import DataError
from .base import Examples, TaskType
from .files import check_width, column_indices, delimited_rows, non_empty, read_text

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


def load_glue_tsv(task: TaskType, data_dir: Path, split: str) -> Examples:
    spec = task.spec
    path = data_dir / f"{split}.tsv"
    folder = spec.folder
    fix = f"set task.data_dir to the GLUE {folder} folder itself, e.g. task.data_dir=data/glue/{folder}"
    columns = None if spec.name == "cola" else (tuple(spec.text_fields), tuple(spec.alt_text_fields or ()), spec.label_field)
    texts, labels, lines = _columns(read_text(path, fix), str(path), columns, fix)
    # Each distinct label is parsed once, at its first row: the same values and the same first error as row by row.
    parsed: dict[str, object] = {}
    values: list = []
    for line, label in zip(lines, labels):
        if label not in parsed:
            parsed[label] = task.parse_label(label, f"{path} line {line}", "fix or remove the row")
        values.append(parsed[label])
    return non_empty(Examples(list(texts), values, str(path)))


# A process reads one GLUE file many times (a sweep's preflight, each stage of a sequence scoring every task, the
# test suite), and SST-2's train split takes 0.3 s to split into columns. Kept by the file's whole text, so an edited
# file is read anew; a few files at most (SST-2's is 5 MB).
@functools.lru_cache(maxsize=8)
def _columns(text: str, where: str, columns: tuple | None, fix: str) -> tuple[tuple, tuple[str, ...], tuple[int, ...]]:
    path = Path(where)
    # GLUE TSVs are tab-separated with quoting off: MRPC, STS-B and RTE hold unpaired double quotes.
    rows = delimited_rows(path, text, "\t", csv.QUOTE_NONE)
    if columns is None:
        width, text_cols, label_col = _COLA_COLUMNS, [_COLA_TEXT_COL], _COLA_LABEL_COL
    else:
        try:
            _, header = next(rows)
        except StopIteration:
            raise DataError(f"{path}: file is empty: expected a header row and examples; {fix}") from None
        spec_cols, alternative, label_field = columns
        names = [h.strip() for h in header]
        if alternative and spec_cols[0] not in names and alternative[0] in names:
            spec_cols = alternative
        width = len(header)
        *text_cols, label_col = column_indices(path, header, [*spec_cols, label_field], fix)

    texts, labels, lines = [], [], []
    for line, row in rows:
        check_width(path, line, row, width, "tab-separated")
        texts.append(tuple(row[i] for i in text_cols))
        labels.append(row[label_col])
        lines.append(line)
    return tuple(texts), tuple(labels), tuple(lines)


def load_glue_hub(task: TaskType, split: str) -> Examples:
    spec = task.spec
    source = f"nyu-mll/glue ({spec.name}, {_HUB_SPLITS[split]})"
    folder = spec.folder
    try:
        # Imported here: `datasets` is slow to import and only this path needs it.
        import datasets

        dataset = datasets.load_dataset("nyu-mll/glue", spec.name, split=_HUB_SPLITS[split])
        columns = {name: dataset[name] for name in (*spec.hub_text_columns, "label")}
    except Exception as err:  # noqa: BLE001 - offline, missing package, hub errors: all mean "use local files"
        reason = " ".join(str(err).split())[:200] or type(err).__name__
        raise DataError(
            f"could not load GLUE {spec.name} from the Hugging Face hub ({reason}): set task.data_dir "
            f"to a local GLUE folder, e.g. task.data_dir=data/glue/{folder}"
        ) from None

    texts = list(zip(*(columns[c] for c in spec.hub_text_columns)))
    values = task.hub_labels(columns["label"], source)
    return non_empty(Examples(texts, values, source))
