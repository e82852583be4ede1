"""The local backend: each cell a child process on this machine, ``jobs`` at a time (one GPU each
where several are visible)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import SweepError, signals_raise
from .plan import FAILED, FINISHED, INTERRUPTED, LOG_DIR, RUNNING, Cell, Sweep, begin, now, outcome_line, settle, write_index


def visible_gpus() -> list[str]:
    """The GPUs a child may be pinned to: CUDA_VISIBLE_DEVICES's entries, else every device torch sees."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def child_env(slot: int, jobs: int, gpus: list[str]) -> dict[str, str]:
    env = dict(os.environ)
    if jobs > 1:
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[slot % len(gpus)]
        if "OMP_NUM_THREADS" not in os.environ:
            # N CPU-bound processes each using every core run slower than N using their share.
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // jobs))
    return env


@dataclass
class _Running:
    cell: Cell
    slot: int
    process: subprocess.Popen
    started: float
    log: Any


def run_sweep(sweep: Sweep, jobs: int = 1, echo: Callable[[str], None] = print, poll_s: float = 0.2) -> list[Cell]:
    """Run every cell that is not finished, ``jobs`` at a time; returns the cells that failed.

    On Ctrl-C or SIGTERM to this process the children are stopped and the index marks them
    interrupted; re-running the sweep resumes them from their last checkpoint. SIGTERM makes each
    child save last/ before it exits; Ctrl-C stops them without a save, so they resume from their
    latest periodic checkpoint.
    """
    if jobs < 1:
        raise SweepError(f"--jobs must be >= 1, got {jobs}")
    todo = begin(sweep, echo)
    if not todo:
        return []
    done_before = len(sweep.cells) - len(todo)
    gpus = visible_gpus() if jobs > 1 else []
    program = [sys.executable, "-m", "recall_cli"]
    (sweep.out / LOG_DIR).mkdir(parents=True, exist_ok=True)
    free_slots = list(range(jobs))
    running: list[_Running] = []
    finished_count = done_before

    # A scheduler's pre-emption (SIGTERM) stops the sweep like Ctrl-C; SIGINT keeps its own handling.
    with signals_raise(sigint=False):
        try:
            while todo or running:
                while todo and free_slots:
                    cell = todo.pop(0)
                    slot = free_slots.pop(0)
                    log = open(sweep.out / LOG_DIR / f"{cell.name}.log", "a", encoding="utf-8")
                    command = sweep.command(cell, program)
                    env = child_env(slot, jobs, gpus)
                    pinned = f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']} " if gpus else ""
                    log.write(f"# {now()} {pinned}{shlex.join(command)}\n")
                    log.flush()
                    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
                    cell.state, cell.exit_code = RUNNING, None
                    running.append(_Running(cell, slot, process, time.monotonic(), log))
                    how = "resuming" if cell.resume else "starting"
                    echo(f"sweep: {how} {cell.name}" + (f" (CUDA_VISIBLE_DEVICES={gpus[slot % len(gpus)]})" if gpus else ""))
                    write_index(sweep)
                for job in list(running):
                    code = job.process.poll()
                    if code is None:
                        continue
                    running.remove(job)
                    free_slots.append(job.slot)
                    job.log.close()
                    settle(sweep, job.cell, code, time.monotonic() - job.started)
                    finished_count += job.cell.state == FINISHED
                    echo(outcome_line(sweep, job.cell, finished_count))
                    write_index(sweep)
                if running:
                    time.sleep(poll_s)
        except KeyboardInterrupt:
            _stop(running)
            for job in running:
                job.cell.state, job.cell.exit_code = INTERRUPTED, job.process.returncode
                job.log.close()
            write_index(sweep)
            raise
    return [c for c in sweep.cells if c.state in (FAILED, INTERRUPTED)]


def _stop(running: list[_Running]) -> None:
    """Children of a terminal's Ctrl-C already have SIGINT; the others get SIGTERM, on which finetune
    saves last/ at the end of the current step and exits 143; stragglers are killed."""
    deadline = time.monotonic() + 2
    for job in running:
        try:
            job.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            job.process.send_signal(signal.SIGTERM)
    for job in running:
        try:
            job.process.wait(timeout=120)  # time to finish the step and write the checkpoint
        except subprocess.TimeoutExpired:
            job.process.kill()
            job.process.wait()
