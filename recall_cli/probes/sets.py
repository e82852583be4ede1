"""Probe sets: the general-domain sentences and the STS-style pairs the probes read.

Defaults ship with the project: data/probe/texts.txt (512 sentences from the STS-B dev file's image
caption, SNLI and news headline genres; data/probe/SOURCES.md) and the STS-B dev pairs
(data/glue/STS-B/dev.tsv). A user's files: texts as .txt (one sentence a line), pairs as a .tsv or
.csv with sentence1, sentence2 and score columns (GLUE's STS-B layout is one), or .jsonl with those keys.
"""

from __future__ import annotations

import csv
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ProbeError

DATA = Path(__file__).resolve().parents[2] / "data"
DEFAULT_TEXTS = DATA / "probe" / "texts.txt"
DEFAULT_PAIRS = DATA / "glue" / "STS-B" / "dev.tsv"
DEFAULT_LM_TEXTS = DATA / "probe" / "lm_text.txt"  # a causal LM's probes: general prose (data/probe/SOURCES.md)
SAMPLE_SEED = 0  # which pairs a sample of n takes: fixed, so every run of a study reads the same ones



@dataclass(frozen=True)
class PairSet:
    first: list[str]
    second: list[str]
    gold: np.ndarray
    source: str

    def __len__(self) -> int:
        return len(self.first)


def read_lines(path: Path, what: str, key_fix: str, save_as: str) -> list[str]:
    """A probe file's lines; a missing file or one not in UTF-8 is one ProbeError naming it and the fix."""
    if not path.is_file():
        raise ProbeError(f"{what} not found: {path} ({key_fix})")
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise ProbeError(f"{path}: not UTF-8 text (byte {exc.start}): save {save_as}") from None


def load_texts(path: str | Path | None, limit: int | None = None) -> list[str]:
    """The first ``limit`` non-blank lines of a UTF-8 text file (the default file is shuffled, so
    any first N lines are a fair sample)."""
    path = Path(path) if path else DEFAULT_TEXTS
    lines = read_lines(path, "probe texts file", "probe.texts_file: a .txt file, one sentence a line",
                       "the probe texts as UTF-8, one sentence a line")
    texts = [" ".join(line.split()) for line in lines if line.strip()]
    if len(texts) < 4:
        raise ProbeError(f"{path}: {len(texts)} sentences; the probes need at least 4 (a few hundred is usual)")
    return texts[:limit] if limit else texts


def load_pairs(path: str | Path | None, limit: int | None = None) -> PairSet:
    """STS-style pairs with a gold similarity score; a seeded sample of ``limit`` pairs if given."""
    path = Path(path) if path else DEFAULT_PAIRS
    if not path.is_file():
        raise ProbeError(f"probe pairs file not found: {path} (probe.pairs_file: a .tsv/.csv/.jsonl with "
                         "sentence1, sentence2 and score)")
    rows = _read_rows(path)
    if not rows:
        raise ProbeError(f"{path}: no rows (need a header and sentence1, sentence2, score columns)")
    columns = set(rows[0])
    score = "score" if "score" in columns else "label" if "label" in columns else None
    missing = [c for c in ("sentence1", "sentence2") if c not in columns] + ([] if score else ["score"])
    if missing:
        raise ProbeError(f"{path}: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                         f"(found {', '.join(sorted(map(str, columns)))}); a pair file needs sentence1, sentence2, score")
    first, second, gold = [], [], []
    for i, row in enumerate(rows, start=2):
        try:
            value = float(row[score])
        except (TypeError, ValueError):
            raise ProbeError(f"{path}: row {i}: score {row.get(score)!r} is not a number") from None
        if not math.isfinite(value):
            raise ProbeError(f"{path}: row {i}: score {row.get(score)!r} is not a finite number: give every pair a real score")
        first.append(str(row["sentence1"]))
        second.append(str(row["sentence2"]))
        gold.append(value)
    if len(gold) < 3:
        raise ProbeError(f"{path}: {len(gold)} pairs; a Spearman correlation needs at least 3 (a few hundred is usual)")
    if min(gold) == max(gold):
        raise ProbeError(f"{path}: all {len(gold)} pairs score {gold[0]:g}: a Spearman correlation needs scores that "
                         "differ (is the score column the right one?)")
    order = list(range(len(gold)))
    if limit and limit < len(order):
        order = sorted(random.Random(SAMPLE_SEED).sample(order, limit))
    return PairSet([first[i] for i in order], [second[i] for i in order], np.array([gold[i] for i in order]), str(path))


def _read_rows(path: Path) -> list[dict]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ProbeError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    if path.suffix.lower() == ".jsonl":
        rows = []
        for i, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    raise ProbeError(f"{path}: line {i} is not JSON (a .jsonl pair file has one object a line)") from None
                if not isinstance(row, dict):
                    raise ProbeError(f"{path}: line {i} is not a JSON object")
                rows.append(row)
        return rows
    # GLUE TSVs have quotes that do not pair up: split on the delimiter only.
    delimiter = "," if path.suffix.lower() == ".csv" else "\t"
    quoting = csv.QUOTE_MINIMAL if delimiter == "," else csv.QUOTE_NONE
    reader = csv.DictReader(text.splitlines(), delimiter=delimiter, quoting=quoting)
    return [row for row in reader if any(v for v in row.values() if isinstance(v, str) and v.strip())]


def overlap(texts: list[str], training_texts: list[str]) -> int:
    """How many probe sentences also occur in the target task's training data (whitespace-normalised)."""
    seen = {" ".join(t.split()).lower() for t in training_texts}
    return sum(" ".join(t.split()).lower() in seen for t in texts)
