"""The Ray backend (`recall sweep --backend ray`): each cell one Ray task that runs the cell's `recall finetune`
as a child process, on this machine (``ray.init()``) or on a cluster (``--address``).

The cells, their folders, their logs, sweep.json and resuming are the local backend's: only where a
cell's process runs differs. Ray packs cells by the resources each asks for (``--gpus-per-cell 0.25``: four
cells share a GPU, Ray sets each one's CUDA_VISIBLE_DEVICES). On a cluster every node needs recall
installed and the sweep's folder at the same path (shared storage): a task runs its child in the
driver's working directory, so the recipe's relative paths (data/glue/...) mean the same on every node.

A node that leaves takes its tasks' worker processes with it; Ray runs such a task again elsewhere
(``max_retries``), and the task decides *when it starts* whether to start the cell or resume it: a run
directory with config.yaml is resumed from its last checkpoint. The child is tied to its worker
(PR_SET_PDEATHSIG on Linux): a worker that dies sends its child SIGTERM, on which finetune saves last/.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from ..errors import MissingPackage, SweepError, Terminated, signals_raise
from ..rundir import CONFIG_FILE, LOCK_FILE, read_summary
from .plan import FAILED, FINISHED, INTERRUPTED, LOG_DIR, PENDING, Cell, Sweep, begin, now, outcome_line, settle, write_index

# A task whose worker died (its node left, an out-of-memory kill) is run again this many times; a cell
# whose finetune *exits* non-zero is not retried: that is the cell failing, as in the local backend.
RETRIES = 3
# How long a resumed cell waits for the process it replaces (still writing last/ after its SIGTERM).
WRITER_WAIT_S = 180.0


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MissingPackage("--backend ray needs Ray: pip install 'recall-finetune[ray]' (or pip install ray), "
                          "or use the local backend") from None
    return ray


def check_resources(gpus_per_cell: float, cpus_per_cell: float) -> None:
    for name, value in (("--gpus-per-cell", gpus_per_cell), ("--cpus-per-cell", cpus_per_cell)):
        if not math.isfinite(value) or value < 0:
            raise SweepError(f"{name} must be a number >= 0, got {value}")
    if gpus_per_cell > 1 and gpus_per_cell != int(gpus_per_cell):
        raise SweepError(f"--gpus-per-cell {gpus_per_cell}: above 1 it must be a whole number of GPUs")


def run_sweep_ray(sweep: Sweep, address: str | None = None, gpus_per_cell: float = 0.0, cpus_per_cell: float = 1.0,
                  echo: Callable[[str], None] = print) -> list[Cell]:
    """Run every cell that is not finished as a Ray task; returns the cells that failed. Ctrl-C or SIGTERM
    cancels the tasks (each stops its child with SIGTERM, which saves last/) and marks them interrupted."""
    check_resources(gpus_per_cell, cpus_per_cell)
    ray = import_ray()
    todo = begin(sweep, echo)
    if not todo:
        return []
    (sweep.out / LOG_DIR).mkdir(parents=True, exist_ok=True)
    started_here = not ray.is_initialized()
    if started_here:  # a caller's own ray.init() (library use) is left as it is
        import logging

        # The cells' output goes to their logs, as in the local backend; Ray's own INFO lines are left out.
        quiet_token_warning(address)
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    try:
        return _run_tasks(ray, sweep, todo, gpus_per_cell, cpus_per_cell, echo)
    finally:
        if started_here:
            ray.shutdown()


def quiet_token_warning(address: str | None) -> None:
    """A local Ray (no --address) turns token authentication on by default and says so in a WARNING on
    every start. Naming that same mode explicitly (RAY_AUTH_MODE=token, Ray's own switch) keeps it and
    the token Ray makes, without the warning. A cluster's mode is the cluster's: left alone; so is a mode
    the user set, and RECALL_DEBUG=1 shows the warning."""
    if address is None and not os.environ.get("RECALL_DEBUG"):
        os.environ.setdefault("RAY_AUTH_MODE", "token")


def _run_tasks(ray: Any, sweep: Sweep, todo: list[Cell], gpus: float, cpus: float,
               echo: Callable[[str], None]) -> list[Cell]:
    task = ray.remote(run_cell).options(num_cpus=cpus, num_gpus=gpus, max_retries=RETRIES, retry_exceptions=False)
    program = ["python", "-m", "recall_cli"]  # the worker's own interpreter, found by run_cell
    cwd = os.getcwd()
    threads = str(max(1, int(cpus)))
    pending = {}
    for cell in todo:
        fresh = sweep.command(Cell(cell.name, cell.settings, cell.path), program)
        resume = sweep.command(Cell(cell.name, cell.settings, cell.path, resume=True), program)
        log = str(sweep.out / LOG_DIR / f"{cell.name}.log")
        pending[task.remote(fresh, resume, str(cell.path), log, cwd, threads)] = cell
    resources = ", ".join(f"{v:g} {k}" for k, v in (("CPU", cpus), ("GPU", gpus)) if v)
    cluster = ray.cluster_resources()
    echo(f"sweep: {len(todo)} cells sent to Ray ({resources or 'no resources'} each); "
         f"{cluster.get('CPU', 0):g} CPUs, {cluster.get('GPU', 0):g} GPUs in the cluster")
    done = len(sweep.cells) - len(todo)
    signals: list[int] = []
    with signals_raise(signals.append, sigint=False):
        try:
            while pending:
                # A short wait, in a loop: a signal's handler runs only between two calls into Ray.
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                if not ready:
                    continue
                cell = pending.pop(ready[0])
                try:
                    code, seconds = ray.get(ready[0])
                except ray.exceptions.RayError as error:  # the task itself failed past its retries
                    code, seconds = None, 0.0
                    echo(f"sweep: {cell.name}: Ray could not run it: {str(error).splitlines()[0][:300]}")
                if code is None:
                    cell.state, cell.exit_code, cell.seconds = FAILED, None, seconds
                else:
                    settle(cell, code, seconds)
                done += cell.state == FINISHED
                echo(outcome_line(cell, done, len(sweep.cells), sweep.out))
                write_index(sweep)
        except KeyboardInterrupt as stop:
            _cancel(ray, pending)
            write_index(sweep)
            if signals and not isinstance(stop, Terminated):
                raise Terminated from None  # Ray's wait re-raises the handler's Terminated as a plain KeyboardInterrupt
            raise
    return [c for c in sweep.cells if c.state in (FAILED, INTERRUPTED)]


def _cancel(ray: Any, pending: dict[Any, Cell]) -> None:
    """Cancel the tasks still out: a running one gets KeyboardInterrupt in run_cell, which stops its child
    with SIGTERM (last/ saved); a queued one never starts. A cell that made a run directory is marked
    interrupted (the next sweep resumes it), one that did not stays pending."""
    for ref in pending:
        ray.cancel(ref, force=False)
    ray.wait(list(pending), num_returns=len(pending), timeout=WRITER_WAIT_S)
    # A cancelled task reads as done at once, while its child may still be saving last/: wait for each
    # run directory's writer to let go before Ray (and the workers with it) shuts down.
    for cell in pending.values():
        if (cell.path / CONFIG_FILE).is_file():
            wait_for_writer(cell.path, WRITER_WAIT_S)
    for ref, cell in pending.items():
        try:
            code, seconds = ray.get(ref, timeout=0)
        except Exception:  # cancelled (TaskCancelledError), or not back in time
            code, seconds = None, 0.0
        if code is not None:
            settle(cell, code, seconds)
        else:
            started = (cell.path / CONFIG_FILE).is_file()
            cell.state, cell.resume = (INTERRUPTED, True) if started else (PENDING, False)


# ---- in the Ray task ---------------------------------------------------------------------------------


def run_cell(fresh: list[str], resume: list[str], path: str, log: str, cwd: str, threads: str) -> tuple[int, float]:
    """One cell, in a Ray worker: start it, or resume it if a run directory is there (an earlier attempt on
    a node that left, or an interrupted sweep); returns finetune's exit code and the seconds it ran."""
    run = Path(cwd) / path
    summary = read_summary(run) if (run / CONFIG_FILE).is_file() else None
    if summary is not None and summary.finished:
        return 0, 0.0  # an earlier attempt finished it before its node left
    command = resume if (run / CONFIG_FILE).is_file() else fresh
    if command is resume:
        wait_for_writer(run, WRITER_WAIT_S)
    command = [sys.executable, *command[1:]]
    # The task's CPU share, as the local backend gives each of --jobs children theirs.
    env = {**os.environ, "OMP_NUM_THREADS": threads}
    started = time.monotonic()
    with open(log, "a", encoding="utf-8") as out:
        devices = os.environ.get("CUDA_VISIBLE_DEVICES")
        pinned = f"CUDA_VISIBLE_DEVICES={devices} " if devices else ""
        out.write(f"# {now()} ray pid={os.getpid()} {pinned}{' '.join(command)}\n")
        out.flush()
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env=env, cwd=cwd, preexec_fn=_die_with_parent)
        try:
            code = _wait(child)
        except KeyboardInterrupt:  # ray.cancel: stop the cell as a scheduler would, so last/ is saved
            child.send_signal(signal.SIGTERM)
            try:
                code = child.wait(timeout=WRITER_WAIT_S)
            except subprocess.TimeoutExpired:
                child.kill()
                code = child.wait()
    return code, time.monotonic() - started


def _wait(child: subprocess.Popen) -> int:
    """The child's exit code, waited for in short slices: ray.cancel's KeyboardInterrupt reaches this thread
    only between two Python calls, never during one long blocking wait."""
    while True:
        try:
            return child.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            continue


def wait_for_writer(run: Path, timeout: float) -> None:
    """Wait until no process holds the run directory's lock (RunLock): the attempt this one replaces may
    still be saving last/ after its SIGTERM. Past ``timeout`` finetune's own refusal names the holder."""
    import fcntl

    try:
        fd = os.open(run / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return  # no lock file: no writer
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                return
            except OSError:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.5)
    finally:
        os.close(fd)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the Ray worker that started it dies (Linux; elsewhere a no-op)."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
