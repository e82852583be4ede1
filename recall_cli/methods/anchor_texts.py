"""What the text anchors (methods/keep/ and methods/lmkeep/, both of the keep section) read when it is not the
task's own rows, and the order every anchor draws in. Shared by both rooms, so it lives beside them, not in one.

    keep.texts: task                    each training batch's own rows (the default)
    keep.texts: pool                    recall's general pool, data/pool/general.txt (data/pool/SOURCES.md)
    keep.texts: FILE.txt                one sentence a line
    keep.texts: FILE.csv|.tsv|.jsonl    the column keep.text_column names (null: the file's only column,
                                        or else its "text" column)

A text set must not hold a text the probes score (the probe texts file, the STS pairs): an anchor on the
probe's own sentences would make the kept-skill number meaningless, so :func:`probe_overlap` counts them
and the run refuses any. Texts are compared as the probes' overlap check compares them (probes/sets.py):
whitespace-normalised, lower-cased.

The draw is BatchOrder's (tasks/batches.py): micro-batch i of the run is a function of (seed, i) alone,
so --resume draws on exactly where it stopped with nothing saved, and :func:`drawn` knows before step 1
which rows or texts the run will read (theta*'s features are computed for those only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import PreflightError

# Torch-free to import (describe and the recipe's checks read it): probes/ and tasks/batches.py load
# inside the functions that read files or draw.

TASK, POOL = "task", "pool"
LINES, COLUMNS = (".txt",), (".csv", ".tsv", ".jsonl")
# The anchor's order is its own (another permutation than the task's, whatever the two sizes).
ORDER_SALT = 7919


def pool_file() -> Path:
    """data/pool/general.txt, found as the probe texts are (probes/sets.py's DATA: beside the package)."""
    from ..probes.sets import DATA

    return DATA / "pool" / "general.txt"


def is_file_source(texts: str) -> bool:
    return texts not in (TASK, POOL)


def source_words(keep: Any) -> str:
    """How lines and labels name the texts: "the general pool", "sentences.txt"."""
    return "the general pool" if keep.texts == POOL else Path(keep.texts).name


def check_source(keep: Any) -> list[str]:
    """keep.texts and keep.text_column as written (no file read): each problem one line."""
    texts, problems = keep.texts, []
    if "\x00" in texts:
        return ["keep.texts: a path cannot hold a NUL byte (\\0): remove it"]
    if not texts or (is_file_source(texts) and Path(texts).suffix.lower() not in LINES + COLUMNS):
        problems.append(f"keep.texts: task, pool, or a file of sentences (.txt, one a line; .csv, .tsv or .jsonl with "
                        f"keep.text_column), got {texts!r}")
    elif keep.text_column is not None and Path(texts).suffix.lower() not in COLUMNS:
        problems.append(f"keep.text_column: only for a .csv, .tsv or .jsonl keep.texts file (keep.texts is {texts}): "
                        "remove it")
    if keep.text_column is not None and not keep.text_column.strip():
        problems.append("keep.text_column: a column name, or null, got ''")
    return problems


def next_token_texts(keep: Any) -> Any:
    """keep as the LM anchor (methods/lmkeep/) reads it: keep.texts=task (this anchor's default) means the pool."""
    from dataclasses import replace

    return replace(keep, texts=POOL) if keep.texts == TASK else keep


def read_texts(keep: Any) -> list[str]:
    """The anchor's texts, whitespace-normalised, blank ones left out. PreflightError (one line naming
    the key, the file and the fix) for a file that is missing, not UTF-8, without the column, or empty."""
    path = pool_file() if keep.texts == POOL else Path(keep.texts)
    if not path.is_file():
        if keep.texts == POOL:
            raise PreflightError(f"keep.texts: recall's general pool is not here ({path}): it ships in a checkout of "
                                 "the repository (data/pool), not in the wheel; name a file of sentences instead")
        raise PreflightError(f"keep.texts: file not found: {path} (a .txt file, one sentence a line; a .csv, .tsv or "
                             ".jsonl file with keep.text_column; or task, pool)")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PreflightError(f"keep.texts: {path} is not UTF-8 text (byte {exc.start}): save it as UTF-8") from None
    if path.suffix.lower() in LINES:
        values, where = text.splitlines(), "every line is blank"
    else:
        column, rows = _column(path, text, keep.text_column)
        values, where = [row.get(column) for row in rows], f"column {column!r} holds no text"
    texts = [" ".join(v.split()) for v in values if isinstance(v, str) and v.strip()]
    if not texts:
        raise PreflightError(f"keep.texts: {path} has no sentence to anchor on ({where}): put the sentences to keep "
                             "in it, or use keep.texts=pool")
    return texts


def _column(path: Path, text: str, wanted: str | None) -> tuple[str, list[dict]]:
    """(the column the texts are in, the file's rows as dicts), read by the task files' own reader (tasks/files.py):
    a line nested too deeply, a field past csv's size limit, a malformed row are refused as a task's file is."""
    from ..errors import DataError
    from ..tasks.files import jsonl_objects, table_records

    try:
        if path.suffix.lower() == ".jsonl":
            rows = [row for _, row in jsonl_objects(path, text)]
            columns = list(dict.fromkeys(key for row in rows for key in row))
        else:  # GLUE TSVs have quotes that do not pair up: a .tsv is split on tabs only, as the task's rows are
            columns, records = table_records(path, text, path.suffix.lower())
            rows = [row for _, row in records]
    except DataError as exc:
        raise PreflightError(f"keep.texts: {exc}") from None
    shown = ", ".join(map(str, columns)) or "none"
    if wanted is not None:
        if wanted not in columns:
            raise PreflightError(f"keep.text_column: {path} has no column {wanted!r} (its columns: {shown})")
        return wanted, rows
    if len(columns) == 1:
        return columns[0], rows
    if "text" in columns:
        return "text", rows
    raise PreflightError(f"keep.text_column: {path} has columns {shown}: name the one with the sentences "
                         "(keep.text_column=NAME)")


def probe_overlap(texts: list[str], probe: Any) -> str | None:
    """The refusal of a text set that holds texts the probes score, or None. Against the run's probe
    texts file and STS pairs file (or the shipped defaults), read whole whatever probe.num_texts and
    num_pairs sample and whether or not this run probes (`recall probe` reads them later). A probe file
    that cannot be read counts nothing here: the probe's own check names it."""
    from ..probes.sets import overlap

    scored = _scored(probe)
    found = [f"{count:,} in the {kind} of {path}" for kind, path, sentences in scored
             if (count := overlap(texts, sentences))]
    if not found:
        return None
    count = overlap(texts, [t for *_, sentences in scored for t in sentences])
    return (f"keep.texts: {count:,} of the anchor's {len(texts):,} texts are texts the probes score "
            f"({'; '.join(found)}): an anchor on them would make the kept-skill number meaningless; "
            "remove them from the file (or use keep.texts=pool, which holds none)")


def _scored(probe: Any) -> list[tuple[str, Path, list[str]]]:
    """(what, the file, its sentences) of each probe file that can be read."""
    from ..errors import ProbeError
    from ..probes.sets import DEFAULT_PAIRS, DEFAULT_TEXTS, load_pairs, load_texts

    out = []
    texts, pairs = Path(probe.texts_file or DEFAULT_TEXTS), Path(probe.pairs_file or DEFAULT_PAIRS)
    try:
        out.append(("probe texts", texts, load_texts(texts)))
    except ProbeError:
        pass
    try:
        sts = load_pairs(pairs)
        out.append(("STS pairs", pairs, sts.first + sts.second))
    except ProbeError:
        pass
    return out


def text_order(n: int, recipe: Any, world_size: int = 1) -> Any:
    """The order a run draws its n anchor texts in: keep.batch_size a micro-batch and process (0 or null:
    train.batch_size), every process's share of one global draw, as the task's batches are."""
    from ..tasks.batches import BatchOrder

    per_process = recipe.keep.batch_size or recipe.train.batch_size
    return BatchOrder(n, per_process * world_size, recipe.train.seed + ORDER_SALT)


def task_order(n: int, recipe: Any, world_size: int = 1) -> Any:
    """The training rows' order, as the loop makes it (training/setup.py)."""
    from ..tasks.batches import BatchOrder

    return BatchOrder(n, recipe.train.batch_size * world_size, recipe.train.seed)


def drawn(order: Any, micro_batches: int) -> list[int]:
    """Every row the first ``micro_batches`` micro-batches of ``order`` hold, ascending: all of them
    once the run reaches a second epoch (the first holds every row once)."""
    if micro_batches >= order.per_epoch:
        return list(range(order.n))
    return sorted({i for position in range(micro_batches) for i in order.batch(position)})


def tokenize_texts(texts: list[str], tokenizer: Any, max_seq_length: int) -> Any:
    """Anchor texts tokenized as the task's single sentences are (no labels to learn): tasks' Features,
    read by both anchors (the LM anchor's texts too)."""
    from ..tasks import Examples
    from ..tasks.batches import tokenize

    return tokenize(Examples([(t,) for t in texts], [0] * len(texts), "keep.texts"), tokenizer, max_seq_length)
