"""SmolLM2 on sst2_lm (issue 43): what each method costs in exact match and keeps of θ*, from the committed records.

    python docs/study/lm.py report      # tables, figures and docs/lm.md's summaries from docs/study/runs/lm_sst2*/

The records (config.yaml, metrics.jsonl, summary.json; no weights) are those of the commands on
docs/lm.md: "Three seeds, 40 steps" (lm_sst2/: per seed, vanilla (`adamw`), RecAdam with its floor, LoRA
r = 8, the LM anchor, and WiSE-FT and RECALL merges of each vanilla run with θ*) and "100 steps"
(lm_sst2_100/: vanilla and the LM anchor). Every number here comes from
`recall compare` and `recall tradeoff` on those folders; nothing is chosen on the scored rows (each
family runs at one setting, named in the table), so the table carries no pick.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STUDIES = ("lm_sst2", "lm_sst2_100")  # folders under docs/study/runs/, each a table on docs/lm.md
TABLES = Path("docs/study/tables")
FIGURES = Path("docs/figures")
PAGE = Path("docs/lm.md")
# The kept shares, each against θ*: the prose's loss, the next-token KL, the multiple-choice skill above chance.
KEPT = ("lm_kept", "kl_kept", "choice_kept")
# Rows in this order, by the name's first part (the setting before any ", lr=..."); others after, by name.
ORDER = ("vanilla fine-tuning", "RecAdam floor 0.005", "LoRA r=8", "LM anchor 1", "WiSE-FT α=0.75", "WiSE-FT α=0.5",
         "WiSE-FT α=0.25", "RECALL with θ*")


def compare(runs: Path, metric: str, fmt: str, env: dict[str, str]) -> str:
    command = ["recall", "compare", str(runs), "--metric", metric, "--against", "vanilla", "--stats", "median,mean",
               "--format", fmt]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(command)}: {done.stderr.strip()}")
    return (f"<!-- {' '.join(command)} -->\n" if fmt == "markdown" else "") + done.stdout


def figure(study: str, kept: str, env: dict[str, str]) -> None:
    out = FIGURES / f"{study}_tradeoff_{kept}.png"
    command = ["recall", "tradeoff", str(Path("docs/study/runs") / study), "--x", "exact_match", "--y", kept, "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(command)}: {done.stderr.strip()}")
    print(f"wrote {out}")


def interval(d: dict | None, scale: float = 100, digits: int = 1) -> str:
    if d is None:
        return "–"
    if d.get("low") is None:
        return f"{scale * d['difference']:+.{digits}f} (n = {d['n']})"
    return (f"{scale * d['difference']:+.{digits}f} [{scale * d['low']:+.{digits}f}, "
            f"{scale * d['high']:+.{digits}f}]")


def summary(runs: Path, env: dict[str, str]) -> str:
    groups: dict[str, dict] = {}
    for metric in ("exact_match", "kl", *KEPT, "choice_acc"):
        for g in json.loads(compare(runs, metric, "json", env)):
            groups.setdefault(g["name"], {"n": g["n"]})[metric] = g
    first = lambda name: name.split(", ")[0]  # noqa: E731
    names = sorted(groups, key=lambda name: (ORDER.index(first(name)) if first(name) in ORDER else len(ORDER), name))
    kinds = {d.get("kind", "bootstrap") for g in groups.values() for m in ("exact_match", "kl", "choice_kept")
             for d in [(g[m].get("against") or {}).get(m)] if isinstance(d, dict) and d.get("low") is not None}
    # Fewer than 5 paired seeds: the interval is the seeds' range, and is named so (report/intervals.py).
    band = "range" if kinds == {"range"} else "95 % CI or range" if "range" in kinds else "95 % CI"
    lines = [f"| setting | n | exact match ×100 | Δ [{band}] | `kl` ×1000 | Δ `kl` [{band}] | `lm_kept` ×100 | "
             f"`choice_acc` ×100 | `choice_kept` ×100 | Δ `choice_kept` [{band}] |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in names:
        g = groups[name]
        em, kl, choice = g["exact_match"], g["kl"], g["choice_kept"]
        against = lambda m: None if g[m]["against"].get("reference") else g[m]["against"].get(m)  # noqa: E731
        lines.append(f"| {name} | {g['n']} | {100 * em['mean']:.1f} ± {100 * em['std']:.1f} | {interval(against('exact_match'))} | "
                     f"{1000 * kl['mean']:.2f} | {interval(against('kl'), 1000, 2)} | {100 * g['lm_kept']['mean']:.2f} | "
                     f"{100 * g['choice_acc']['mean']:.1f} | {100 * choice['mean']:.1f} | {interval(against('choice_kept'))} |")
    return "\n".join(lines) + "\n"


def report() -> int:
    env = {**os.environ, "COLUMNS": "200"}
    os.chdir(REPO)
    TABLES.mkdir(parents=True, exist_ok=True)
    body = PAGE.read_text(encoding="utf-8")
    for study in STUDIES:
        runs = Path("docs/study/runs") / study
        if not runs.is_dir():
            print(f"skipped {study}: no records", file=sys.stderr)
            continue
        for metric in ("exact_match", "kl", *KEPT):
            out = TABLES / f"{study}_{metric}.md"
            out.write_text(compare(runs, metric, "markdown", env), encoding="utf-8")
            print(f"wrote {out}")
        for kept in ("kl_kept", "choice_kept"):
            figure(study, kept, env)
        text = summary(runs, env)
        (TABLES / f"{study}_summary.md").write_text(text, encoding="utf-8")
        start, end = f"<!-- {study}_summary: start (python docs/study/lm.py report writes this part) -->", f"<!-- {study}_summary: end -->"
        if start not in body or end not in body:
            print(f"error: {PAGE} has no {start} ... {end} markers", file=sys.stderr)
            return 1
        head, rest = body.split(start, 1)
        body = f"{head}{start}\n{text}{end}{rest.split(end, 1)[1]}"
    PAGE.write_text(body, encoding="utf-8")
    print(f"wrote the summaries into {PAGE}")
    return 0


def main() -> int:
    if sys.argv[1:] != ["report"]:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    return report()


if __name__ == "__main__":
    sys.exit(main())
