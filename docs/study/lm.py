"""SmolLM2 on sst2_lm (issue 43): what each method costs in exact match and keeps of θ*, from the committed records.

    python docs/study/lm.py report      # tables, figures and docs/lm.md's summary from docs/study/runs/lm_sst2/

The records (config.yaml, metrics.jsonl, summary.json; no weights) are those of the commands on
docs/lm.md ("Three seeds, 40 steps"): per seed, vanilla (`adamw`), RecAdam with its floor, LoRA r = 8,
the LM anchor, and WiSE-FT 0.5 and RECALL merges of each vanilla run with θ*. Every number here comes from
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
RUNS = Path("docs/study/runs/lm_sst2")
TABLES = Path("docs/study/tables")
FIGURES = Path("docs/figures")
PAGE = Path("docs/lm.md")
START = "<!-- lm_sst2_summary: start (python docs/study/lm.py report writes this part) -->"
END = "<!-- lm_sst2_summary: end -->"
# The kept shares, each against θ*: the prose's loss, the next-token KL, the multiple-choice skill above chance.
KEPT = ("lm_kept", "kl_kept", "choice_kept")
ORDER = ("vanilla fine-tuning", "RecAdam floor 0.005", "LoRA r=8", "LM anchor 1", "WiSE-FT α=0.5", "RECALL")


def compare(metric: str, fmt: str, env: dict[str, str]) -> str:
    command = ["recall", "compare", str(RUNS), "--metric", metric, "--against", "vanilla", "--stats", "median,mean",
               "--format", fmt]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(command)}: {done.stderr.strip()}")
    return (f"<!-- {' '.join(command)} -->\n" if fmt == "markdown" else "") + done.stdout


def figure(kept: str, env: dict[str, str]) -> None:
    out = FIGURES / f"lm_sst2_tradeoff_{kept}.png"
    command = ["recall", "tradeoff", str(RUNS), "--x", "exact_match", "--y", kept, "--out", str(out)]
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


def summary(env: dict[str, str]) -> str:
    groups: dict[str, dict] = {}
    for metric in ("exact_match", "kl", *KEPT, "choice_acc"):
        for g in json.loads(compare(metric, "json", env)):
            groups.setdefault(g["name"], {"n": g["n"]})[metric] = g
    names = sorted(groups, key=lambda name: (ORDER.index(name) if name in ORDER else len(ORDER), name))
    lines = ["| setting (n = 3) | exact match ×100 | Δ [95 % CI] | `kl` ×1000 | Δ `kl` [95 % CI] | `lm_kept` ×100 | "
             "`choice_acc` ×100 | `choice_kept` ×100 | Δ `choice_kept` [95 % CI] |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in names:
        g = groups[name]
        em, kl, choice = g["exact_match"], g["kl"], g["choice_kept"]
        against = lambda m: None if g[m]["against"].get("reference") else g[m]["against"].get(m)  # noqa: E731
        lines.append(f"| {name} | {100 * em['mean']:.1f} ± {100 * em['std']:.1f} | {interval(against('exact_match'))} | "
                     f"{1000 * kl['mean']:.2f} | {interval(against('kl'), 1000, 2)} | {100 * g['lm_kept']['mean']:.2f} | "
                     f"{100 * g['choice_acc']['mean']:.1f} | {100 * choice['mean']:.1f} | {interval(against('choice_kept'))} |")
    return "\n".join(lines) + "\n"


def report() -> int:
    env = {**os.environ, "COLUMNS": "200"}
    os.chdir(REPO)
    TABLES.mkdir(parents=True, exist_ok=True)
    for metric in ("exact_match", "kl", *KEPT):
        out = TABLES / f"lm_sst2_{metric}.md"
        out.write_text(compare(metric, "markdown", env), encoding="utf-8")
        print(f"wrote {out}")
    for kept in ("kl_kept", "choice_kept"):
        figure(kept, env)
    text = summary(env)
    (TABLES / "lm_sst2_summary.md").write_text(text, encoding="utf-8")
    body = PAGE.read_text(encoding="utf-8")
    if START not in body or END not in body:
        print(f"error: {PAGE} has no {START} ... {END} markers", file=sys.stderr)
        return 1
    head, rest = body.split(START, 1)
    PAGE.write_text(f"{head}{START}\n{text}{END}{rest.split(END, 1)[1]}", encoding="utf-8")
    print(f"wrote the summary into {PAGE}")
    return 0


def main() -> int:
    if sys.argv[1:] != ["report"]:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    return report()


if __name__ == "__main__":
    sys.exit(main())
