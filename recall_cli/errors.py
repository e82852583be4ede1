"""Every error recall reports to a person, and the one table from error to exit code.

A library module raises one of these with a message that is one line: what is wrong, where, and the
fix. The CLI (cli/common.py: run_guarded) prints it and exits with the code the table gives; anything
else is a bug and exits 1 with its type named (RECALL_DEBUG=1 shows the traceback). Each class keeps
the builtin base it had before this module existed (ValueError or RuntimeError), so callers that
catch those still do.

Torch-free and import-free: every module may import it, and `recall --help` stays fast.
"""

from __future__ import annotations

from contextlib import contextmanager
from enum import IntEnum
from typing import Callable, Iterator

class ExitCode(IntEnum):
    """recall's exit codes: the one table that errors, the CLI, sweep, the DDP launcher and every
    command's help read."""

    OK = 0
    FAILURE = 1  # a bug: an error recall did not expect
    USAGE = 2  # bad usage, recipe, data, model, run directory or record: nothing was written
    DIVERGED = 3  # the loss became NaN/inf
    # The machine, not the input: disk full, permission denied, a read-only file system, a path that cannot be a folder.
    ENVIRONMENT = 4
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
    # 128 + SIGPIPE: the reader of stdout went away (`recall recipes | head -1`), as a shell reports for cat.
    PIPE_CLOSED = 141
    # 128 + SIGTERM, what a shell reports for a process killed by SIGTERM: schedulers read it as pre-empted.
    PREEMPTED = 143


# A stopped process: what finetune exits with after Ctrl-C, and after SIGTERM (it saves last/ first).
STOPPED = (ExitCode.INTERRUPTED, ExitCode.PREEMPTED)

def exit_codes_help(meanings: dict[ExitCode, str], joiner: dict[ExitCode, str] | None = None) -> str:
    """A command's --help epilog: each code it can exit with (numbers from ExitCode, words its own), in
    the table's order: "Exit codes: 0 ok; 1 unexpected failure; ... RECALL_DEBUG=1 shows tracebacks."
    ``joiner``: the separator before a code where it is not "; " (", " joins 130 and 143 in some)."""
    parts = []
    for code in sorted(meanings):
        parts.append(((joiner or {}).get(code, "; ") if parts else "") + f"{int(code)} {meanings[code]}")
    return "Exit codes: " + "".join(parts) + ". RECALL_DEBUG=1 shows tracebacks."


EXIT_CODES_HELP = exit_codes_help({
    ExitCode.OK: "ok",
    ExitCode.FAILURE: "unexpected failure",
    ExitCode.USAGE: "bad usage, recipe, data, model or output directory (nothing written)",
    ExitCode.DIVERGED: "training diverged (NaN/inf loss)",
    ExitCode.ENVIRONMENT: "environment: disk full, permission denied, read-only file system or an output path that "
                          "cannot be a folder (nothing half-written)",
    ExitCode.INTERRUPTED: "interrupted",
    ExitCode.PREEMPTED: "stopped by SIGTERM (finetune saves last/ first: continue with --resume)",
})


class RecallError(Exception):
    """A problem the user can fix. ``str(error)`` is the line printed after ``error:``."""

    exit_code = ExitCode.USAGE
    prefix = "error: "  # a pre-emption is not an error: it prints its own line

    def lines(self) -> list[str]:
        return [f"{self.prefix}{self}"]


class RecipeError(RecallError, ValueError):
    """A recipe that cannot run; ``problems`` holds one line per problem, all reported at once."""

    def __init__(self, source: str, problems: list[str], where: str = "in the recipe"):
        self.source = source
        self.problems = problems
        self.where = where  # "in the command line's overrides" when every problem is one of theirs
        super().__init__(f"{source}: " + "; ".join(problems))

    def lines(self) -> list[str]:
        count = len(self.problems)
        return [f"error: {self.source}: {count} problem{'s' if count > 1 else ''} {self.where}:",
                *(f"  - {p}" for p in self.problems)]


class DataError(RecallError, ValueError):
    """A problem with the user's data: the message names the file, the line and the fix."""


class ProbeError(DataError):
    """A probe file or probe request that cannot work; the message names the file or option and the fix."""


class ModelLoadError(RecallError, RuntimeError):
    """The model or tokenizer cannot be found or loaded; the message says how to fix it."""


class PreflightError(RecallError, ValueError):
    """A run that cannot work, found before its first step; the message names the problem and the fix."""


class DeviceError(RecallError, ValueError):
    """The recipe asks for a device or precision this machine does not have; the message says what to set."""


class PluginError(RecallError, RuntimeError):
    """An installed method plugin (entry-point group recall_cli.methods) that cannot be loaded or
    registered; the message names the plugin and its package (fix or uninstall it)."""


class CompileError(RecallError, RuntimeError):
    """train.compile=on where the step cannot be compiled (no compiler, an old torch, a failed
    compile); the message says why and offers train.compile=off or auto."""


class RunDirError(RecallError, RuntimeError):
    """A run directory, checkpoint or output folder that cannot be used as asked; the message says what to do."""


class RecordError(RecallError, ValueError):
    """A scored record that cannot be written as asked; the message says what to change."""


class MergeError(RecallError, ValueError):
    """The models cannot be merged as asked; the message says why and what to do."""


class ReportError(RecallError, ValueError):
    """Nothing to report as asked; the message says what to change."""


class SweepError(RecallError, ValueError):
    """A sweep that cannot start as asked; the message says what to change."""


class MissingPackage(RecallError, RuntimeError):
    """An optional package the command needs is not installed (or does not import); the message names
    the pip command. RuntimeError, not ImportError: an ``except ImportError`` fallback must not swallow it."""


class TrackerError(RecallError, RuntimeError):
    """An experiment tracker that train.report_to names cannot start (no login, a store it cannot
    reach); the message names the tracker and what to set."""


class EnvironmentProblem(RecallError, RuntimeError):
    """The machine stops a write: disk full, permission denied, a read-only file system, a path that is a
    file or a dangling link where a folder must go. The message names the path and what to free or change;
    the writers stage and rename (rundir.staged_folder), so nothing is left half-written."""

    exit_code = ExitCode.ENVIRONMENT

    @classmethod
    def from_os_error(cls, error: BaseException, path: object = None) -> "EnvironmentProblem | None":
        """The line for an OSError that a read or write raised, naming its path (else ``path``, what
        the command writes); None for an errno that is not the environment's (a bug: exit 1). Rust
        libraries (safetensors) report the errno in their message, "... (os error 28)": read as one."""
        import errno
        import re

        if not isinstance(error, OSError):
            found = re.search(r"\(os error (\d+)\)", str(error))
            if found is None:
                return None
            error = OSError(int(found.group(1)), str(error))
        where = error.filename2 or error.filename or path
        # A staging folder (.OUT.tmp-x1y2, see rundir.staged_folder) is removed by now: name OUT.
        where = re.sub(r"(^|/)\.([^/]+)\.tmp-[^/]+", r"\1\2", str(where)) if where is not None else None
        advice = {
            errno.ENOSPC: "no space left on the device: free space there, or write somewhere else",
            errno.EDQUOT: "disk quota exceeded: free space in your quota, or write somewhere else",
            errno.EACCES: "permission denied: give yourself access (chmod/chown), or use another path",
            errno.EPERM: "operation not permitted: give yourself access (chmod/chown), or use another path",
            errno.EROFS: "read-only file system: write to a folder on a writable one",
            errno.ENOTDIR: "a part of the path is a file or a dangling symbolic link, not a folder: "
                           "remove it, or choose another path",
            errno.EEXIST: "already exists, as a file where a folder must go: remove it, or choose another path",
            errno.EISDIR: "is a folder where a file must go: remove it, or choose another path",
            errno.ENAMETOOLONG: "the name is too long for the file system: choose a shorter path",
        }.get(error.errno)
        if advice is None:
            return None
        return cls(f"{where}: {advice}" if where is not None else advice)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C (:func:`signals_raise` installs the handler), so that every
    ``except BaseException`` cleanup (rundir.staged_folder's staging folder) runs; exit 143."""


@contextmanager
def signals_raise(on_signal: Callable[[int], object] | None = None, *, sigint: bool = True) -> Iterator[None]:
    """While active in the main thread, SIGTERM raises Terminated (and, with ``sigint``, SIGINT raises
    KeyboardInterrupt, as Ctrl-C does), after ``on_signal(signum)``: the one place a stop signal becomes
    an exception (the DDP loop's distributed.SigtermFlag only sets a flag, so that every rank stops at the
    same step). In another thread (a library caller's worker) signals stay as they are."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):  # noqa: ARG001 - signal handler signature
        if on_signal is not None:
            on_signal(signum)
        raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt

    caught = (signal.SIGTERM, signal.SIGINT) if sigint else (signal.SIGTERM,)
    previous = {s: signal.signal(s, stop) for s in caught}
    try:
        yield
    finally:
        for s, handler in previous.items():  # None: a handler installed from C, which Python cannot restore
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


class TrainingDiverged(RecallError, RuntimeError):
    exit_code = ExitCode.DIVERGED

    def __init__(self, step: int, loss: float):
        self.step, self.loss = step, loss
        super().__init__(
            f"training diverged: the loss became {loss} at step {step} (lower optimizer.lr, "
            "use train.precision=fp32 or bf16, or check the data)"
        )


class NonFiniteWeights(RecallError, RuntimeError):
    """Weights (a checkpoint about to be written, or a model's outputs) hold NaN/inf: what a diverged
    run leaves. Nothing is written from them."""

    exit_code = ExitCode.DIVERGED

    @classmethod
    def in_outputs(cls, bad: int, rows: int, first: int) -> "NonFiniteWeights":
        """The one refusal of a model whose outputs (a classifier's logits, a causal LM's next-token logits
        while scoring or generating) are NaN/inf: scoring.evaluate.predict and tasks.generation raise it."""
        error = cls(f"the model's outputs are NaN/inf on {bad} of {rows} rows (the first: row {first}): its weights "
                    "diverged; nothing was written (score a checkpoint from before the divergence)")
        error.rows = (bad, rows, first)  # a share of the rows scored under torchrun: scoring.evaluate adds them up
        return error


class Preempted(RecallError, RuntimeError):
    """SIGTERM arrived: the run saved a complete last/ at the end of an optimizer step and stopped."""

    exit_code = ExitCode.PREEMPTED
    prefix = ""

    def __init__(self, step: int, run_dir):
        self.step, self.run_dir = step, run_dir
        super().__init__(
            f"stopped by SIGTERM after step {step}; last/ holds a complete checkpoint: continue with "
            f"recall finetune --resume {run_dir}"
        )


def exit_code_of(error: BaseException) -> int | None:
    """The exit code of an error recall knows, or None for a bug."""
    return error.exit_code if isinstance(error, RecallError) else None
