"""The continual study (docs/continual.md): all-MiniLM-L6-v2 on SST-2 -> MRPC -> CoLA, one `recall continual`
sequence per method and seed, and the tables docs/continual.md shows, rebuilt from the committed records.

    python docs/study/continual.py run [--methods a,b] [--seeds 1,2,3]   train (runs/continual_study/, weights
                                                                          stay there) and copy the records
    python docs/study/continual.py report                                 rebuild docs/continual.md's tables

Records: docs/study/runs/continual_seq/METHOD/sN/ (continual.json; each stage's config.yaml, metrics.jsonl,
summary.json; never weights).
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGES = [ROOT / "docs/study/continual" / f"{t}.yaml" for t in ("sst2", "mrpc", "cola")]
RUNS = ROOT / "runs/continual_study"
RECORDS = ROOT / "docs/study/runs/continual_seq"
DOC = ROOT / "docs/continual.md"
PROBE = ["continual.probe=true"]
# Each method's overrides on every stage (theta* = the previous stage's weights: each stage starts there).
METHODS: dict[str, list[str]] = {
    "sequential": [],
    # RecAdam's anneal at the paper's t0 (250) keeps λ(t) near 0 for a whole 150-step stage, so nothing but the pull
    # trains (recall's own warning: "try optimizer.anneal_t0=67 or less"): t0=50, set from that warning, not tuned
    "recadam": ["optimizer.name=recadam", "optimizer.anneal_t0=50"],
    "anchor": ["keep.embeddings=1.0"],
    "ewc_1e6": ["ewc.weight=1e6", "ewc.samples=64"],
    "ewc_1e8": ["ewc.weight=1e8", "ewc.samples=64"],
    "replay": ["replay.rows=200", "replay.ratio=0.25"],
    # RECALL's baselines and its own scenario (issue 49): a fresh LoRA adapter a stage, merged in at its end; each
    # stage merged with the previous merge; and RecAdam held to the original model instead of the previous stage
    "lora": ["model.lora.r=8", "optimizer.lr=1e-3"],
    "recall_merge": ["continual.merge=recall"],
    "recadam_original": ["optimizer.name=recadam", "optimizer.anneal_t0=50", "continual.theta_star=original"],
}
LABELS = {"sequential": "sequential", "recadam": "RecAdam t0=50 (θ* previous)", "anchor": "embedding anchor 1 (θ* previous)",
          "ewc_1e6": "EWC λ=1e6", "ewc_1e8": "EWC λ=1e8", "replay": "replay 200 rows/task, ratio 0.25",
          "lora": "LoRA per stage r=8, lr 1e-3", "recall_merge": "RECALL merge after each stage",
          "recadam_original": "RecAdam t0=50 (θ* original)"}
BEGIN, END = "<!-- continual-study:begin -->", "<!-- continual-study:end -->"


def run(methods: list[str], seeds: list[int]) -> None:
    for seed in seeds:
        for method in methods:
            out = RUNS / method / f"s{seed}"
            record = out / "continual.json"
            done = record.is_file() and json.loads(record.read_text()).get("finished")
            if not done:
                args = [sys.executable, "-m", "recall_cli", "continual", "--out", str(out), "--plain"]
                args += ["--resume"] if record.is_file() else [*map(str, STAGES), *METHODS[method], *PROBE, "--seed", str(seed),
                                                               *(["--overwrite"] if out.exists() else [])]
                print("$ " + " ".join(args), flush=True)
                if subprocess.run(args, cwd=ROOT).returncode != 0:
                    print(f"{method} s{seed}: failed; going on", flush=True)
                    continue
            copy_records(out, RECORDS / method / f"s{seed}")


def copy_records(out: Path, dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    shutil.copy(out / "continual.json", dest / "continual.json")
    for stage in sorted((out / "stages").iterdir()):
        (dest / "stages" / stage.name).mkdir(parents=True)
        for name in ("config.yaml", "metrics.jsonl", "summary.json"):
            shutil.copy(stage / name, dest / "stages" / stage.name / name)


# ---- the report ---------------------------------------------------------------------------------


def load() -> dict[str, dict[int, dict]]:
    found: dict[str, dict[int, dict]] = {}
    for method in METHODS:
        for path in sorted((RECORDS / method).glob("s*/continual.json")):
            record = json.loads(path.read_text(encoding="utf-8"))
            if record.get("finished"):
                found.setdefault(method, {})[int(path.parent.name[1:])] = record
    return found


def kept(record: dict) -> float | None:
    return (record["stages"][-1].get("probe") or {}).get("sts_retained")


def pct(v: float | None, signed: bool = False) -> str:
    return "—" if v is None else (f"{v * 100:+.1f}" if signed else f"{v * 100:.1f}")


def paired(method: dict[int, dict], base: dict[int, dict], get) -> str:
    """The median over the seeds both have of (method - sequential), with the seeds' range: n = 3 is too few
    for a bootstrap interval to mean much, so the range is what is shown (every seed's difference lies in it)."""
    seeds = sorted(set(method) & set(base))
    diffs = [get(method[s]) - get(base[s]) for s in seeds if get(method[s]) is not None and get(base[s]) is not None]
    if not diffs:
        return "—"
    mid = statistics.median(diffs)
    return f"{mid * 100:+.1f} [{min(diffs) * 100:+.1f}, {max(diffs) * 100:+.1f}] (n={len(diffs)})"


def tables(found: dict[str, dict[int, dict]]) -> str:
    if not found:
        return ("No sequence of the study has finished and been committed yet (see \"Status of the study\" below);\n"
                "this part is rebuilt from docs/study/runs/continual_seq/ when one has.\n")
    lines = []
    base = found.get("sequential", {})
    tasks = next(iter(next(iter(found.values())).values()))["tasks"] if found else []
    lines += ["| method | seeds | ACC | BWT | forgetting (mean) | last task (" + (tasks[-1] if tasks else "") + ") | STS kept after the last stage |",
              "|---|---|---|---|---|---|---|"]
    for method, by_seed in found.items():
        rs = list(by_seed.values())
        med = lambda get: statistics.median([get(r) for r in rs if get(r) is not None]) if any(get(r) is not None for r in rs) else None  # noqa: E731
        lines.append(f"| {LABELS[method]} | {len(rs)} | {pct(med(lambda r: r['acc']))} | {pct(med(lambda r: r['bwt']), True)} | "
                     f"{pct(med(lambda r: r['forgetting_mean']))} | {pct(med(lambda r: r['matrix'][-1][-1]))} | {pct(med(kept))} |")
    lines += ["", "Each against sequential, paired by seed: median difference [the seeds' range] (n = seeds both have), points:", "",
              "| method | ΔACC | ΔBWT | Δ last task | Δ STS kept |", "|---|---|---|---|---|"]
    for method, by_seed in found.items():
        if method == "sequential":
            continue
        lines.append(f"| {LABELS[method]} | {paired(by_seed, base, lambda r: r['acc'])} | {paired(by_seed, base, lambda r: r['bwt'])} | "
                     f"{paired(by_seed, base, lambda r: r['matrix'][-1][-1])} | {paired(by_seed, base, kept)} |")
    lines += ["", "The matrices (seed 1; `R[i][j]` x 100, row i: after stage i, column j: task j under its own head):", ""]
    for method, by_seed in found.items():
        r = by_seed.get(min(by_seed))
        lines += [f"**{LABELS[method]}** (seed {min(by_seed)})", "", "| after | " + " | ".join(r["tasks"]) + " |",
                  "|---" * (len(r["tasks"]) + 1) + "|"]
        for i, row in enumerate(r["matrix"][1:], 1):
            lines.append(f"| {i}: {r['tasks'][i - 1]} | " + " | ".join(pct(v) for v in row) + " |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def report() -> None:
    text = DOC.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(head + BEGIN + "\n" + tables(load()) + END + tail, encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "report":
        report()
    elif len(sys.argv) >= 2 and sys.argv[1] == "run":
        opts = dict(zip(sys.argv[2::2], sys.argv[3::2]))
        run(opts.get("--methods", ",".join(METHODS)).split(","), [int(s) for s in opts.get("--seeds", "1,2,3").split(",")])
    else:
        sys.exit(__doc__)
