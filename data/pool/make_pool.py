"""Rebuild data/pool/general.txt, the embedding anchor's general pool (keep.texts=pool), from the
shipped STS-B train file (see data/pool/SOURCES.md).

    python data/pool/make_pool.py

The pool must never hold a text the probes score: every sentence that also occurs (whitespace- and
case-normalised, as recall compares them) in the STS-B dev file (the STS probe's pairs, every genre) or in
data/probe/texts.txt is left out, and `recall finetune` refuses an anchor file that overlaps them anyway.
"""

import csv
import hashlib
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent
# The genres data/probe/make_texts.py takes, for the same reason (data/glue/STS-B/LICENSE.txt): image captions
# (PASCAL VOC-2008, CC BY-SA), SNLI (track5.en-en, CC BY-SA 4.0; in the dev split only), EMM news headlines.
GENRES = ("images", "track5.en-en", "headlines")
SEED = 0


def normal(text: str) -> str:
    return " ".join(text.split()).lower()


def rows(path: Path) -> list[list[str]]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]


scored = {normal(text) for row in rows(DATA / "glue" / "STS-B" / "dev.tsv") for text in (row[7], row[8])}
scored |= {normal(line) for line in (DATA / "probe" / "texts.txt").read_text(encoding="utf-8").splitlines()}
kept: dict[str, str] = {}  # normalised -> the first spelling met
candidates = 0
for row in rows(DATA / "glue" / "STS-B" / "train.tsv"):
    if row[2] in GENRES:
        for text in (row[7], row[8]):
            text = " ".join(text.split())
            if text:
                candidates += 1
                if normal(text) not in scored:
                    kept.setdefault(normal(text), text)
texts = sorted(kept.values())
random.Random(SEED).shuffle(texts)  # any first N lines are a fair sample of the genres
body = "\n".join(texts) + "\n"
(HERE / "general.txt").write_text(body, encoding="utf-8")
print(f"{len(texts)} distinct sentences written (of {candidates} in the genres' train rows); "
      f"sha256 {hashlib.sha256(body.encode('utf-8')).hexdigest()}")
