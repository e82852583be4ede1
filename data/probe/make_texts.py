"""Rebuild data/probe/texts.txt from the shipped STS-B dev file (see data/probe/SOURCES.md).

    python data/probe/make_texts.py
"""

import csv
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Genres whose text licence allows redistribution with attribution (data/glue/STS-B/LICENSE.txt):
# image captions (PASCAL VOC-2008, CC BY-SA), SNLI (track5.en-en, CC BY-SA 4.0), EMM news headlines.
GENRES = ("images", "track5.en-en", "headlines")
COUNT = 512

with open(HERE.parent / "glue" / "STS-B" / "dev.tsv", encoding="utf-8", newline="") as f:
    rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
seen: dict[str, None] = {}
for row in rows:
    if row[2] in GENRES:
        for text in (row[7], row[8]):
            text = " ".join(text.split())
            if text:
                seen.setdefault(text, None)
texts = sorted(seen)
random.Random(0).shuffle(texts)  # any first N lines are a fair sample of the three genres
(HERE / "texts.txt").write_text("\n".join(texts[:COUNT]) + "\n", encoding="utf-8")
print(f"{min(COUNT, len(texts))} of {len(texts)} distinct sentences written")
