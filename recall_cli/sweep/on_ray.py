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
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

from ..errors import MissingPackage, SweepError, Terminated, signals_raise
from ..rundir import LOCK_FILE, output_lock_path
from .plan import (FAILED, FINISHED, INTERRUPTED, LOG_DIR, PENDING, Cell, Sweep, begin, finished, now, outcome_line, settle,
                   started_file, write_index)

# A task whose worker died (its node left, an out-of-memory kill) is run again this many times; a cell
# whose finetune *exits* non-zero is not retried: that is the cell failing, as in the local backend.
RETRIES = 3
# How long a resumed cell waits for the process it replaces (still writing last/ after its SIGTERM).
WRITER_WAIT_S = 180.0


def import_ray(address: str | None = None) -> Any:
    """Ray, imported with a local start's token mode named first (quiet_token_warning): Ray reads the mode once,
    at import, so naming it after would leave its GCS (a new process, reading it afresh) and this driver
    disagreeing on the token, and a local Ray that never starts."""
    if "ray" not in sys.modules:
        quiet_token_warning(address)
    try:
        import ray
    except ImportError:
        raise MissingPackage("--backend ray needs Ray: pip install 'recall-finetune[ray]' (or pip install ray), "
                          "or use the local backend") from None
    return ray


# Ray's unit of a fractional resource (ray._raylet.RESOURCE_UNIT_SCALING is 10,000): a positive share below it is a
# ValueError from .options(), raised once the sweep's index is written were it not checked here.
RESOURCE_STEP = 0.0001


def check_resources(gpus_per_cell: float, cpus_per_cell: float) -> None:
    """The cells' shares as Ray would take them, asked of nothing (no Ray started): SweepError for one it refuses."""
    for name, value in (("--gpus-per-cell", gpus_per_cell), ("--cpus-per-cell", cpus_per_cell)):
        if not math.isfinite(value) or value < 0:
            raise SweepError(f"{name} must be a number >= 0, got {value}")
    if cpus_per_cell == 0:  # Ray would start every cell at once, each child with one thread and no CPU of its own
        raise SweepError("--cpus-per-cell must be more than 0 (each cell's finetune uses at least one CPU), got 0")
    for name, value in (("--gpus-per-cell", gpus_per_cell), ("--cpus-per-cell", cpus_per_cell)):
        if 0 < value < RESOURCE_STEP:  # Ray counts in steps of 0.0001 and refuses a share that rounds to none
            raise SweepError(f"{name} {value:g}: Ray counts a share in steps of {RESOURCE_STEP:g}, so this one would be "
                             f"none: give at least {RESOURCE_STEP:g}" + (" (or 0 for no GPU)" if "gpus" in name else ""))
    if gpus_per_cell > 1 and gpus_per_cell != int(gpus_per_cell):
        raise SweepError(f"--gpus-per-cell {gpus_per_cell}: above 1 it must be a whole number of GPUs")


# How long the driver waits for a cluster's head before it says it cannot, in seconds (RECALL_RAY_CONNECT_TIMEOUT sets
# it): a TCP connection, then the first gRPC call Ray itself makes there. Ray's own retries went on for minutes, and
# forever at a port that takes connections but is not Ray's, with a warning a second.
CONNECT_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_ENV = "RECALL_RAY_CONNECT_TIMEOUT"
_ADDRESS_FIX = ("give auto (the cluster this machine's `ray start` joined), HOST:PORT (the head's GCS port, 6379 by "
                "default) or ray://HOST:PORT (Ray Client, 10001), or leave --address out to start Ray on this machine")


def joined_address(address: str | None) -> tuple[str | None, str]:
    """The address ray.init joins, and the name a message gives it: --address; or, with none or auto, Ray's own
    RAY_ADDRESS, which ray.init reads then (a Ray job sets it); None: Ray is started on this machine."""
    if address in (None, "auto") and os.environ.get("RAY_ADDRESS"):  # as ray.init reads it: any value but empty
        return os.environ["RAY_ADDRESS"], "RAY_ADDRESS"
    return address, "--address"


def _named(address: str, source: str, quoted: bool = False) -> str:
    shown = repr(address) if quoted else address
    return f"RAY_ADDRESS={shown}" if source == "RAY_ADDRESS" else f"--address {shown}"


def check_address(address: str | None) -> tuple[str, int] | None:
    """The address joined (joined_address) as written, nothing asked of the network: (host, port) of a head to reach,
    None for auto or none. SweepError for an address Ray could not use (empty, no port, another scheme)."""
    import re

    address, source = joined_address(address)
    if address is None or address in ("auto", "local"):
        return None
    found = re.fullmatch(r"(?:ray://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?):(\d{1,5})", address)
    if found is None or not 0 < int(found.group(2)) < 65536:
        fix = _ADDRESS_FIX if source == "--address" else _ADDRESS_FIX.replace("leave --address out", "unset RAY_ADDRESS")
        raise SweepError(f"{_named(address, source, quoted=True)}: not an address of a Ray cluster: {fix}")
    return found.group(1).strip("[]"), int(found.group(2))


def connect_timeout() -> float:
    """The seconds _reach waits for a head: $RECALL_RAY_CONNECT_TIMEOUT, else CONNECT_TIMEOUT_S."""
    raw = os.environ.get(CONNECT_TIMEOUT_ENV, "").strip()
    if not raw:
        return CONNECT_TIMEOUT_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise SweepError(f"{CONNECT_TIMEOUT_ENV}={raw!r}: give the seconds to wait for a Ray cluster's head, a number "
                         f"above 0 (unset: {CONNECT_TIMEOUT_S:g})")
    return seconds


def _reach(address: str, head: tuple[str, int], source: str = "--address") -> None:
    """The head answers as Ray, within connect_timeout() seconds, or one line (exit 2) before anything is made: first
    one TCP connection (an unknown host, a refused or silent port), then the call Ray's own client makes first (a
    port that takes connections but speaks another protocol, or nothing: ray.init waited there forever)."""
    import socket

    limit = connect_timeout()
    deadline = time.monotonic() + limit
    try:
        socket.create_connection(head, timeout=limit).close()
    except OSError as exc:  # socket.gaierror (unknown host), refused, timed out, unreachable
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise SweepError(f"{_named(address, source)}: no Ray cluster answers there ({reason}, tried for at most "
                         f"{limit:g} s): start it (ray start --head) or check the address; nothing was started or "
                         "written") from None
    _handshake(address, head, deadline - time.monotonic(), limit, source)


def _handshake(address: str, head: tuple[str, int], seconds: float, limit: float, source: str = "--address") -> None:
    """One gRPC call with a deadline, made as Ray makes it (its channel: RAY_USE_TLS, the token when token
    authentication is on): a GCS (HOST:PORT) is asked its cluster id, Ray's client's first question; Ray Client's
    server (ray://) is pinged, as Ray Client does. Any answer but a reply is refused: Ray would not get further."""
    import grpc

    client = address.startswith("ray://")
    try:  # Ray's generated messages: internal to Ray, so a Ray that moved them is asked without this check
        if client:
            from ray.core.generated.ray_client_pb2 import ClusterInfoRequest, ClusterInfoType

            method, request = "/ray.rpc.RayletDriver/ClusterInfo", ClusterInfoRequest(type=ClusterInfoType.PING)
            what, fix = "a Ray Client server", "give ray://HEAD:10001 (the head's Ray Client port)"
        else:
            from ray.core.generated.gcs_service_pb2 import GetClusterIdRequest

            method, request = "/ray.rpc.NodeInfoGcsService/GetClusterId", GetClusterIdRequest()
            what, fix = "a Ray cluster's GCS", "give HEAD:6379 (the head's GCS port)"
    except ImportError:
        return
    host, port = head
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        from ray._private.grpc_utils import init_grpc_channel
    except ImportError:  # another Ray's layout: a plain channel (no TLS, no token) still tells a GCS from another server
        channel = grpc.insecure_channel(target)
    else:
        channel = init_grpc_channel(target)
    try:
        channel.unary_unary(method)(request.SerializeToString(), timeout=max(seconds, 0.01))
        return
    except grpc.RpcError as exc:
        code, details = exc.code(), " ".join(str(exc.details() or "").split())
    finally:
        channel.close()
    reason = details.rsplit(f":{port}: ", 1)[-1][:200]  # gRPC's last error, after "... ipv4:HOST:PORT: "
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        said = (f"the port takes connections, but nothing there answered as {what} within {limit:g} s "
                f"({CONNECT_TIMEOUT_ENV} sets the wait)")
    elif code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):  # Ray's token authentication
        raise SweepError(f"{_named(address, source)}: the cluster refused this driver's token (gRPC {code.name}): "
                         "set RAY_AUTH_MODE=token and give the cluster's token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or "
                         "~/.ray/auth_token); nothing was started or written")
    else:
        said = f"the server there is not {what} (gRPC {code.name}{': ' + reason if reason else ''})"
    raise SweepError(f"{_named(address, source)}: {said}: {fix}, or start the cluster (ray start --head); nothing was "
                     "started or written")


# The longest socket path a local Ray makes under its temp dir: "/session_<date>_<time>_<usec>_<pid>/sockets/
# plasma_store" and a suffix; a Unix socket's path holds at most 107 bytes on Linux (103 on macOS).
_SOCKET_TAIL = len("/session_2026-01-01_00-00-00_000000_4194304/sockets/plasma_store.99")
_SOCKET_LIMIT = 103 if sys.platform == "darwin" else 107


def local_temp_dir() -> str | None:
    """Where a local Ray keeps its files: None (Ray's own choice, $RAY_TMPDIR or $TMPDIR /ray) when its socket paths
    fit there; else /tmp/ray, Ray's default without TMPDIR. SweepError, naming the variable, when neither fits."""
    variable = "RAY_TMPDIR" if "RAY_TMPDIR" in os.environ else "TMPDIR" if "TMPDIR" in os.environ else None
    if sys.platform == "win32" or variable is None:
        return None
    chosen = os.environ[variable] if variable == "RAY_TMPDIR" else os.path.join(os.environ["TMPDIR"], "ray")
    if len(chosen.encode()) + _SOCKET_TAIL <= _SOCKET_LIMIT:
        return None
    short = "/tmp/ray"
    if os.path.isdir("/tmp") and os.access("/tmp", os.W_OK | os.X_OK) and len(short) + _SOCKET_TAIL <= _SOCKET_LIMIT:
        return short
    raise SweepError(f"{variable}={os.environ[variable]} is {len(os.environ[variable])} characters: the Unix socket paths "
                     f"a local Ray makes under it would pass {_SOCKET_LIMIT} bytes, and /tmp cannot be written: set "
                     f"{variable} to a shorter folder (at most {_SOCKET_LIMIT - _SOCKET_TAIL - 4} characters)")


def run_sweep_ray(sweep: Sweep, address: str | None = None, gpus_per_cell: float = 0.0, cpus_per_cell: float = 1.0,
                  echo: Callable[[str], None] = print, announce: str | None = None) -> list[Cell]:
    """Run every cell that is not finished as a Ray task; returns the cells that failed. Ctrl-C or SIGTERM
    cancels the tasks (each stops its child with SIGTERM, which saves last/) and marks them interrupted.
    Ray is started (or joined) and the cells' shares checked against the cluster's total before sweep.json or
    logs/ is written: a refusal leaves nothing, and shuts down the Ray it started."""
    check_resources(gpus_per_cell, cpus_per_cell)
    head = check_address(address)
    address, source = joined_address(address)  # ray.init would read RAY_ADDRESS itself; named here, it is checked
    ray = import_ray(address)
    if all(c.state == FINISHED for c in sweep.cells):
        if announce:
            echo(announce)
        begin(sweep, echo)  # says so; nothing is sent to Ray
        return []
    started_here = not ray.is_initialized()
    if started_here:  # a caller's own ray.init() (library use) is left as it is
        _start(ray, address, head, source)
    try:
        _check_cluster_fits(ray, gpus_per_cell, cpus_per_cell)
        task = _cell_task(ray, gpus_per_cell, cpus_per_cell)
        if announce:
            echo(announce)
        todo = begin(sweep, echo)
        (sweep.out / LOG_DIR).mkdir(parents=True, exist_ok=True)
        return _run_tasks(ray, task, sweep, todo, gpus_per_cell, cpus_per_cell, echo)
    finally:
        if started_here:
            ray.shutdown()


def _start(ray: Any, address: str | None, head: tuple[str, int] | None, source: str = "--address") -> None:
    import logging

    if head is not None:
        _reach(address, head, source)
    local = address in (None, "local")
    temp_dir = local_temp_dir() if local else None
    try:
        # The cells' output goes to their logs, as in the local backend; Ray's own INFO lines are left out.
        with _worker_niceness(local):
            ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
                     **({"_temp_dir": temp_dir} if temp_dir else {}))
    except (ConnectionError, TimeoutError, RuntimeError, ValueError, OSError) as exc:
        if ray.is_initialized():
            ray.shutdown()
        first = " ".join(str(exc).split())[:240] or type(exc).__name__
        where = _named(address, source) if address else "a local Ray"
        raise SweepError(f"{where}: Ray did not start ({first}): start the cluster (ray start --head) or check the "
                         "address; nothing was written") from None


@contextmanager
def _worker_niceness(local: bool):
    """A local Ray's raylet, started inside, runs its workers at the driver's niceness, not 15 above it (Ray's
    default; RAY_worker_niceness, read by the raylet when it starts, is added to the raylet's own, which is the
    driver's): on a shared machine a sweep at nice 15 ran 5x slower than --jobs. A value the user set is kept;
    a cluster's raylets were started by `ray start` (run_cell resets each cell there)."""
    if not local or "RAY_worker_niceness" in os.environ:
        yield
        return
    os.environ["RAY_worker_niceness"] = "0"
    try:
        yield
    finally:
        del os.environ["RAY_worker_niceness"]  # this process's own environment as it was


def _check_cluster_fits(ray: Any, gpus: float, cpus: float) -> None:
    """A cell asking for more than the whole cluster has would wait forever, unannounced: refused."""
    cluster = ray.cluster_resources()
    for option, wanted, kind in (("--gpus-per-cell", gpus, "GPU"), ("--cpus-per-cell", cpus, "CPU")):
        total = cluster.get(kind, 0)
        if wanted > total:
            raise SweepError(f"{option} {wanted:g}: the Ray cluster has {total:g} {kind}s in all, so no cell could ever "
                             f"start: ask for at most {total:g}" + (" (or run on a cluster with GPUs)" if kind == "GPU"
                                                                    and not total else "") + "; nothing was written")


def quiet_token_warning(address: str | None) -> None:
    """A local Ray (no --address) turns token authentication on by default and says so in a WARNING on
    every start. Naming that same mode explicitly (RAY_AUTH_MODE=token, Ray's own switch) keeps it and
    the token Ray makes, without the warning. A cluster's mode is the cluster's: left alone; so is a mode
    the user set, and RECALL_DEBUG=1 shows the warning. Only before Ray's import (import_ray): a Ray already
    imported (a caller's, a test's) keeps the mode it read, and warns."""
    if joined_address(address)[0] is None and not os.environ.get("RECALL_DEBUG"):
        os.environ.setdefault("RAY_AUTH_MODE", "token")


def _cell_task(ray: Any, gpus: float, cpus: float) -> Any:
    """run_cell as a Ray task with the cells' shares, made before sweep.json is written: Ray checks the options here,
    and one it refuses (check_resources knows its rules, another Ray may have more) is one line with nothing made."""
    try:
        return ray.remote(run_cell).options(num_cpus=cpus, num_gpus=gpus, max_retries=RETRIES, retry_exceptions=False)
    except (ValueError, TypeError) as exc:
        raise SweepError(f"Ray refused the cells' shares (--cpus-per-cell {cpus:g}, --gpus-per-cell {gpus:g}): "
                         f"{' '.join(str(exc).split())[:240]}; nothing was written") from None


def _run_tasks(ray: Any, task: Any, sweep: Sweep, todo: list[Cell], gpus: float, cpus: float,
               echo: Callable[[str], None]) -> list[Cell]:
    program = ["python", "-m", "recall_cli"]  # the worker's own interpreter, found by run_cell
    cwd = os.getcwd()
    threads = str(max(1, int(cpus)))
    niceness = os.nice(0)  # each cell runs at the caller's priority, not its Ray worker's (run_cell)
    pending = {}
    for cell in todo:
        fresh = sweep.command(Cell(cell.name, cell.settings, cell.path), program)
        resume = sweep.command(Cell(cell.name, cell.settings, cell.path, resume=True), program)
        log = str(sweep.out / LOG_DIR / f"{cell.name}.log")
        pending[task.remote(fresh, resume, str(cell.path), log, cwd, threads, niceness, sweep.continual)] = cell
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
                    settle(sweep, cell, code, seconds)
                done += cell.state == FINISHED
                echo(outcome_line(sweep, cell, done))
                write_index(sweep)
        except KeyboardInterrupt as stop:
            _cancel(ray, sweep, pending)
            write_index(sweep)
            if signals and not isinstance(stop, Terminated):
                raise Terminated from None  # Ray's wait re-raises the handler's Terminated as a plain KeyboardInterrupt
            raise
    return [c for c in sweep.cells if c.state in (FAILED, INTERRUPTED)]


def _cancel(ray: Any, sweep: Sweep, pending: dict[Any, Cell]) -> None:
    """Cancel the tasks still out: a running one gets KeyboardInterrupt in run_cell, which stops its child
    with SIGTERM (last/ saved); a queued one never starts. A cell that made a run directory is marked
    interrupted (the next sweep resumes it), one that did not stays pending."""
    for ref in pending:
        ray.cancel(ref, force=False)
    ray.wait(list(pending), num_returns=len(pending), timeout=WRITER_WAIT_S)
    # A cancelled task reads as done at once, while its child may still be saving last/: wait for each
    # run directory's writer to let go before Ray (and the workers with it) shuts down.
    for cell in pending.values():
        if (cell.path / sweep.started_file).is_file():
            wait_for_writer(cell.path, WRITER_WAIT_S, sweep.continual)
    for ref, cell in pending.items():
        try:
            code, seconds = ray.get(ref, timeout=0)
        except Exception:  # cancelled (TaskCancelledError), or not back in time
            code, seconds = None, 0.0
        if code is not None:
            settle(sweep, cell, code, seconds)
        else:
            started = (cell.path / sweep.started_file).is_file()
            cell.state, cell.resume = (INTERRUPTED, True) if started else (PENDING, False)


# ---- in the Ray task ---------------------------------------------------------------------------------


def run_cell(fresh: list[str], resume: list[str], path: str, log: str, cwd: str, threads: str,
             niceness: int | None = None, continual: bool = False) -> tuple[int, float]:
    """One cell, in a Ray worker: start it, or resume it if a run directory is there (an earlier attempt on
    a node that left, or an interrupted sweep); returns finetune's exit code and the seconds it ran.
    ``niceness``: the driver's, which the child takes in place of its worker's (Ray starts workers at nice
    15 unless told); where lowering it needs a privilege this node does not give, the log says so."""
    run = Path(cwd) / path
    if finished(run, continual)[0]:
        return 0, 0.0  # an earlier attempt finished it before its node left
    command = resume if (run / started_file(continual)).is_file() else fresh
    if command is resume:
        wait_for_writer(run, WRITER_WAIT_S, continual)
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
                                 env=env, cwd=cwd, preexec_fn=lambda: _in_child(niceness))
        _say_niceness(out, child.pid, niceness)
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


def wait_for_writer(run: Path, timeout: float, continual: bool = False) -> None:
    """Wait until no process holds the run directory's lock (RunLock; a sequence's, output_lock's): the attempt
    this one replaces may still be saving last/ after its SIGTERM. Past ``timeout`` the command's own refusal
    names the holder."""
    import fcntl

    lock = output_lock_path(run) if continual else run / LOCK_FILE
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW)
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


def _in_child(niceness: int | None) -> None:
    """In the child before exec: the driver's niceness (an unprivileged process may raise its own niceness but
    not lower it: then it keeps its worker's, and _say_niceness writes so), and tied to its worker."""
    if niceness is not None and hasattr(os, "setpriority"):
        try:
            os.setpriority(os.PRIO_PROCESS, 0, niceness)
        except OSError:
            pass
    _die_with_parent()


def _say_niceness(out: Any, pid: int, wanted: int | None) -> None:
    """One line in the cell's log when the child could not take the driver's niceness."""
    if wanted is None or not hasattr(os, "getpriority"):
        return
    try:
        got = os.getpriority(os.PRIO_PROCESS, pid)
    except OSError:
        return  # gone already
    if got != wanted:
        out.write(f"# nice {got}, not the driver's {wanted}: lowering a niceness needs a privilege (CAP_SYS_NICE) this "
                  "node does not give; start the node's Ray with RAY_worker_niceness=0 (docs/clusters.md)\n")
        out.flush()


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the Ray worker that started it dies (Linux; elsewhere a no-op)."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
