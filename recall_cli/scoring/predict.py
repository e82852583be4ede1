"""Predictions from a trained checkpoint, as run_glue.py's --do_predict writes them: `recall predict`.

Three kinds of rows, one scoring loop (scoring.evaluate.predict: batched, sorted by length, under the run's
autocast, on CPU or CUDA):

* ``test`` (MNLI: ``test_matched``, ``test_mismatched``): the task's GLUE test split, from
  ``task.data_dir``/test.tsv (its ``index`` column, no labels) or the hub's copy;
* ``dev`` (MNLI: ``dev_matched``, ``dev_mismatched``): the rows `recall evaluate` scores (the run's
  ``task.max_eval_examples`` included), so that the file's accuracy is the evaluation's;
* a ``.csv``/``.tsv``/``.jsonl`` file of the user's, with the task's text columns; a label column is
  optional (a row may leave it empty).

Written as a GLUE-submission TSV (``index<TAB>prediction``, the class name: SST-2 "positive", a float
for STS-B) or as JSONL (``{"index", "prediction", "label", "probabilities"}``), chosen by the --out
suffix (.tsv / .jsonl), else by the split: TSV for test and dev, JSONL for a file. The file appears
complete or not at all (staged, then renamed into place).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import DataError, RunDirError
from ..tasks import TaskType

if TYPE_CHECKING:  # annotations only: numpy loads with the model
    import numpy as np

SPLITS = ("test", "dev", "test_matched", "test_mismatched", "dev_matched", "dev_mismatched")
FILE_SUFFIXES = (".csv", ".tsv", ".jsonl")
_INDEX_COLUMNS = ("index", "id", "idx")  # GLUE test.tsv: index (QQP: id); the hub's copy: idx
_HUB_TEST = {"test": "test", "test_matched": "test_matched", "test_mismatched": "test_mismatched"}


@dataclass
class Rows:
    """What to predict: texts (1 or 2 per row), each row's index as the output writes it, the labels
    when the source has them (None for a row without one)."""

    texts: list[tuple[str, ...]]
    index: list[str]
    labels: list[int | float | None] | None
    source: str

    def __len__(self) -> int:
        return len(self.texts)


# ---- the options, checked before anything is loaded ------------------------------------------------


def parse_split(split: str) -> str | Path:
    """A split name, or the Path of a user's file (.csv/.tsv/.jsonl). DataError for anything else."""
    if split in SPLITS:
        return split
    path = Path(split)
    if path.suffix.lower() in FILE_SUFFIXES:
        return path
    raise DataError(f"--split {split}: use test, dev (MNLI: test_matched, test_mismatched, dev_matched, "
                    "dev_mismatched) or a .csv, .tsv or .jsonl file of your own")


def output_format(out: Path, split: str | Path) -> str:
    """"jsonl" or "tsv": by --out's suffix, else TSV for a GLUE split and JSONL for a user's file."""
    suffix = out.suffix.lower()
    if suffix in (".jsonl", ".tsv"):
        return suffix[1:]
    return "jsonl" if isinstance(split, Path) else "tsv"


def check_out(out: Path, overwrite: bool) -> None:
    """--out can take the file: not a folder, and not an existing file unless --overwrite."""
    if out.is_dir():
        raise RunDirError(f"--out {out} is a folder: give a file name, e.g. --out {out / 'predictions.tsv'}")
    if (out.exists() or out.is_symlink()) and not overwrite:
        raise RunDirError(f"--out {out} already exists: replace it with --overwrite, or choose another file")


# ---- the rows ---------------------------------------------------------------------------------------


def load_rows(task_cfg: Any, split: str | Path) -> Rows:
    """The rows of ``split`` for the task ``task_cfg`` describes (see the module's docstring)."""
    from ..tasks import load_split, task_for

    task = task_for(task_cfg)
    spec = task.spec
    if isinstance(split, Path):
        return _user_file(task, split)
    if split.startswith("dev"):
        if split != "dev" and split not in spec.dev_splits:
            raise DataError(f"task {spec.name} has no split '{split}': use test, dev or a file of your own")
        examples = load_split(task_cfg, split, task_cfg.max_eval_examples)
        return Rows(examples.texts, [str(i) for i in range(len(examples))], list(examples.labels), examples.source)
    if not spec.folder:  # custom, custom_lm, a plugin type's files task
        raise DataError(f"a {spec.name} task has no test split: predict your own file with --split FILE (.csv, .tsv or .jsonl)")
    split = _test_split(spec, split)
    if task_cfg.data_dir:
        return _glue_test_tsv(spec, Path(task_cfg.data_dir), split)
    return _glue_test_hub(spec, split)


def _test_split(spec: Any, split: str) -> str:
    tests = tuple(s.replace("dev", "test") for s in spec.dev_splits)
    if split == "test":
        return tests[0]  # MNLI: the matched set, as "dev" is
    if split not in tests:
        raise DataError(f"task {spec.name} has no split '{split}': use test, dev or a file of your own")
    return split


def _text_column_choices(spec: Any) -> list[tuple[str, ...]]:
    """The header styles a task's text columns come in: the GLUE TSV's, the other one in circulation,
    the hub's (what a user exporting the hub's dataset has)."""
    from ..names import TASKS

    choices = [tuple(spec.text_fields)]
    task = TASKS.get(spec.name)
    if task is not None:
        choices += [c for c in (task.alt_text_fields, task.hub_text_columns) if c]
    return list(dict.fromkeys(choices))


def _pick_text_columns(source: Path | str, names: list[str], spec: Any, where: str) -> tuple[str, ...]:
    choices = _text_column_choices(spec)
    for choice in choices:
        if all(c in names for c in choice):
            return choice
    wanted = " or ".join("+".join(repr(c) for c in choice) for choice in choices)
    existing = ", ".join(repr(n) for n in names) or "none"
    raise DataError(f"{source} {where}: no text column{'s' if len(choices[0]) > 1 else ''} {wanted} for task "
                    f"{spec.name} (columns: {existing}): rename the file's text columns to {wanted}")


def _glue_test_tsv(spec: Any, data_dir: Path, split: str) -> Rows:
    from ..tasks.files import check_width, delimited_rows, read_text

    path = data_dir / f"{split}.tsv"
    folder = spec.folder
    if not path.is_file():
        raise DataError(
            f"{path}: no such file: the GLUE {folder} folder has no {split} split (the copies in data/glue/ "
            f"ship none): put GLUE's {folder}/{split}.tsv there, or point --data-dir at a folder that has it, "
            "or predict a file of your own with --split FILE")
    rows = delimited_rows(path, read_text(path, "check --data-dir"), "\t", csv.QUOTE_NONE)
    try:
        _, header = next(rows)
    except StopIteration:
        raise DataError(f"{path}: file is empty: expected GLUE's header row (index and the text columns) and rows") from None
    names = [h.strip() for h in header]
    columns = _pick_text_columns(path, names, spec, "line 1")
    text_cols = [names.index(c) for c in columns]
    index_col = next((names.index(c) for c in _INDEX_COLUMNS if c in names), None)
    texts: list[tuple[str, ...]] = []
    index: list[str] = []
    for line, row in rows:
        check_width(path, line, row, len(header), "tab-separated")
        texts.append(tuple(row[i] for i in text_cols))
        index.append(row[index_col].strip() if index_col is not None else str(len(index)))
    if not texts:
        raise DataError(f"{path}: no examples found: the split needs at least one row")
    return Rows(texts, index, None, str(path))


def _glue_test_hub(spec: Any, split: str) -> Rows:
    folder = spec.folder
    columns = spec.hub_text_columns
    try:
        import datasets

        dataset = datasets.load_dataset("nyu-mll/glue", spec.name, split=_HUB_TEST[split])
        texts = list(zip(*(dataset[c] for c in columns)))
        index = [str(i) for i in dataset["idx"]] if "idx" in dataset.column_names else [str(i) for i in range(len(texts))]
    except Exception as err:  # noqa: BLE001 - offline, missing package, hub errors: all mean "use local files"
        reason = " ".join(str(err).split())[:200] or type(err).__name__
        raise DataError(
            f"could not load GLUE {spec.name} {split} from the Hugging Face hub ({reason}): point --data-dir at "
            f"a GLUE {folder} folder with {split}.tsv, or predict a file of your own with --split FILE") from None
    if not texts:
        raise DataError(f"nyu-mll/glue ({spec.name}, {split}): no examples found")
    return Rows([tuple(t) for t in texts], index, None, f"nyu-mll/glue ({spec.name}, {split})")


def _user_file(task: TaskType, path: Path) -> Rows:
    """A user's .csv/.tsv/.jsonl: the task's text columns (any header style of _text_column_choices)
    and, optionally, its label column (the task's label field, or "label"), read by the task type's
    parse_label (a label as the task's files write it, "1", or as its class is called, "positive")."""
    spec = task.spec
    from ..tasks.files import json_scalar, jsonl_objects, read_text, table_records

    suffix = path.suffix.lower()
    text = read_text(path, "check the --split path")
    records: list[tuple[int, dict[str, str]]] = []
    if suffix == ".jsonl":
        for line, record in jsonl_objects(path, text):
            records.append((line, {k: json_scalar(v, path, line, k) for k, v in record.items()
                                   if not isinstance(v, (list, dict))}))
        if not records:
            raise DataError(f"{path}: no examples found: write one JSON object per line")
        columns = _pick_text_columns(path, list(records[0][1]), spec, f"line {records[0][0]}")
    else:
        names, rows = table_records(path, text, suffix)
        columns = _pick_text_columns(path, names, spec, "line 1")
        records.extend(rows)
        if not records:
            raise DataError(f"{path}: no examples found: the file needs at least one row under its header")
    # A JSONL row may leave its label out: the label field is the one any row has.
    label_field = next((c for c in (spec.label_field, "label") if any(c in record for _, record in records)), None)
    texts: list[tuple[str, ...]] = []
    labels: list[int | float | None] = []
    for line, record in records:
        missing = [c for c in columns if c not in record]
        if missing:
            existing = ", ".join(repr(k) for k in record)
            raise DataError(f"{path} line {line}: no field '{missing[0]}' (fields: {existing}): every row needs the "
                            f"text column{'s' if len(columns) > 1 else ''} {', '.join(columns)}")
        texts.append(tuple(record[c] for c in columns))
        if label_field is not None:
            labels.append(task.parse_label(record.get(label_field, ""), f"{path} line {line}", predicting=True))
    has_labels = label_field is not None and any(label is not None for label in labels)
    return Rows(texts, [str(i) for i in range(len(texts))], labels if has_labels else None, str(path))


# ---- scoring and writing --------------------------------------------------------------------------


def run_precision(recipe: Any, run_dir: Path | None, folder: Path, device: Any) -> str:
    """The precision the run computed in: the recipe's when it names one, else what `auto` chose
    (summary.json, else the checkpoint's trainer_state.json), else fp32. fp16 is CUDA's only: fp32
    elsewhere, as `recall evaluate` does; bf16 on a GPU without it: fp32."""
    import torch

    from ..rundir import LAST_DIR, TRAINER_STATE_FILE, read_summary

    precision = recipe.train.precision if recipe is not None else "auto"
    if precision == "auto":
        precision = None
        summary = read_summary(run_dir) if run_dir is not None else None
        if summary is not None and summary.precision:
            precision = summary.precision
        for state in (folder / TRAINER_STATE_FILE, *((run_dir / LAST_DIR / TRAINER_STATE_FILE,) if run_dir else ())):
            if precision is None and state.is_file():
                try:
                    precision = json.loads(state.read_text(encoding="utf-8")).get("precision")
                except (OSError, ValueError, AttributeError):
                    precision = None
    if precision not in ("fp32", "bf16", "fp16"):
        return "fp32"
    if precision == "fp16" and device.type != "cuda":
        return "fp32"
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return "fp32"
    return precision


def format_predictions(task: TaskType, rows: Rows, outputs: np.ndarray, fmt: str) -> str:
    """The file's text: a GLUE TSV (index, prediction: the label as the task's files write it, which GLUE's
    server reads) or JSONL (index, prediction: the class's name, label, probabilities), a score for STS-B."""
    from ..rundir import dumps_strict

    if fmt == "tsv":  # the labels as the task's files write them: GLUE's submission format
        return "index\tprediction\n" + "".join(f"{i}\t{label}\n" for i, label in zip(rows.index, task.submission(outputs)))
    predicted = task.predictions(outputs)
    lines = []
    for n, prediction in enumerate(predicted):
        record: dict[str, Any] = {"index": int(rows.index[n]) if rows.index[n].lstrip("-").isdigit() else rows.index[n],
                                  "prediction": prediction.value}
        if rows.labels is not None and rows.labels[n] is not None:
            record["label"] = rows.labels[n]
        if prediction.probabilities is not None:
            record["probabilities"] = prediction.probabilities
        lines.append(dumps_strict(record) + "\n")
    return "".join(lines)


def write_atomic(out: Path, text: str) -> None:
    """``out`` complete or not at all: staged beside it and renamed into place (rundir.write_text_atomic);
    a stop while staging removes the staged file."""
    from ..rundir import write_text_atomic

    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        write_text_atomic(out, text)
    except BaseException:
        out.with_name(f".{out.name}.tmp").unlink(missing_ok=True)  # write_text_atomic's staging file
        raise


def predict_to_file(
    path: Path,
    split: str,
    out: Path,
    *,
    batch_size: int | None = None,
    device: str = "auto",
    overwrite: bool = False,
    task: str | None = None,
    data_dir: Path | None = None,
    max_new_tokens: int | None = None,
) -> dict[str, Any]:
    """Predict ``split`` (a name or a file) with the checkpoint ``path`` names (rundir.locate) and write
    ``out``. Cheap checks first (options, --out, the rows), then the model. Returns what was written.
    ``max_new_tokens``: a causal LM's longest greedy completion (default 64)."""
    if batch_size is not None and batch_size < 1:
        raise DataError(f"--batch-size {batch_size}: give a batch size of at least 1")
    if max_new_tokens is not None and max_new_tokens < 1:
        raise DataError(f"--max-new-tokens {max_new_tokens}: give at least 1")
    which = parse_split(split)
    out = Path(out)
    if isinstance(which, Path) and out.resolve() == which.resolve():
        raise DataError(f"--out {out} is the file being predicted: write the predictions to another file")
    check_out(out, overwrite)
    from ..tasks import Examples, task_for
    from .scored import checkpoint_task

    # The path, the task (its label count) and the rows, each a line in a second, before torch loads.
    scored = checkpoint_task(Path(path), task, data_dir)
    folder, recipe, task_cfg = scored.folder, scored.recipe, scored.task
    kind = task_for(task_cfg)
    rows = load_rows(task_cfg, which)
    from ..model import load_checkpoint_model, load_tokenizer
    from ..runtime import autocast_for, resolve_device
    from .evaluate import predict

    dev_device = resolve_device(device, option="--device")

    model = load_checkpoint_model(folder, kind)
    tokenizer = load_tokenizer(str(folder))
    unlabelled = [0] * len(rows)  # never read: predict pads the inputs alone
    features = kind.tokenize(Examples(rows.texts, unlabelled, rows.source), tokenizer, task_cfg.max_seq_length)
    precision = run_precision(recipe, scored.run_dir, folder, dev_device)
    if batch_size is None:
        batch_size = (recipe.train.eval_batch_size or 2 * recipe.train.batch_size) if recipe else 64
    model.to(dev_device)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    autocast = autocast_for(precision, dev_device)
    outputs = kind.outputs(model, features, batch_size, dev_device, pad_id, autocast, tokenizer=tokenizer,
                           max_new_tokens=max_new_tokens)  # a causal LM's generated texts
    if outputs is None:
        outputs = predict(model, features, batch_size, dev_device, pad_id, autocast)
    fmt = output_format(out, which)
    from ..rundir import output_lock

    # One writer of --out (a second predict to it is refused in one line); taking the lock also removes
    # what a predict killed while writing left beside it.
    with output_lock(out, "another recall predict", "--out"):
        check_out(out, overwrite)  # still free: nothing took the name while the model ran
        write_atomic(out, format_predictions(kind, rows, outputs, fmt))
    return {"checkpoint": str(folder), "task": kind.spec.name, "split": str(which), "source": rows.source,
            "examples": len(rows), "out": str(out), "format": fmt, "device": str(dev_device),
            "precision": precision, "batch_size": batch_size}
