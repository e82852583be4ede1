"""What every `recall` command shares: exit codes, the one-line error boundary, common options.

Command groups live in their own modules (cli.py: finetune/evaluate; cli_runs.py: sweep/forgetting/
compare) and all report errors through ``run_guarded`` so that every command fails the same way.
"""

from __future__ import annotations

import os
import time
from typing import Annotated

import typer

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_DIVERGED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
# 128 + SIGTERM, what a shell reports for a process killed by SIGTERM: schedulers read it as pre-empted.
EXIT_PREEMPTED = 143

EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 unexpected failure; 2 bad usage, recipe, data, model or output directory; "
    "3 training diverged (NaN/inf loss); 130 interrupted; 143 stopped by SIGTERM after saving last/ "
    "(continue with --resume). RECALL_DEBUG=1 shows tracebacks."
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of a table.")]


def fail(message: str, code: int) -> None:
    """Print ``error: message`` on stderr and exit with ``code``."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _known_errors():
    """(exception type, exit code) pairs, most specific first; imported lazily to keep --help fast."""
    from .checkpoint import RunDirError
    from .data import DataError
    from .model import ModelLoadError
    from .preflight import PreflightError
    from .recipe import RecipeError
    from .records import RecordError
    from .runtime import DeviceError
    from .train import Preempted, TrainingDiverged

    return [
        (Preempted, EXIT_PREEMPTED),
        (RecipeError, EXIT_USAGE),
        (DataError, EXIT_USAGE),
        (ModelLoadError, EXIT_USAGE),
        (PreflightError, EXIT_USAGE),
        (RunDirError, EXIT_USAGE),
        (RecordError, EXIT_USAGE),
        (DeviceError, EXIT_USAGE),
        (TrainingDiverged, EXIT_DIVERGED),
    ]


def _rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


RESUME_HINT = "continue with `recall finetune --resume OUTPUT_DIR`"


def run_guarded(fn, interrupted_hint: str | None = RESUME_HINT) -> None:
    """Call ``fn``; map known errors to one line and an exit code, unknown ones to exit 1.

    Under torchrun the known errors are decided alike on every rank (the same recipe and files, or a
    decision all ranks agreed on), so rank 0 alone prints the line; unknown ones print on every rank,
    prefixed with it."""
    debug = bool(os.environ.get("RECALL_DEBUG"))
    rank = _rank()
    try:
        fn()
    except typer.Exit:
        raise
    except KeyboardInterrupt:
        typer.echo("interrupted" + (f": {interrupted_hint}" if interrupted_hint else ""), err=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    except Exception as exc:  # noqa: BLE001 - the CLI boundary
        if debug:
            raise
        from .recipe import RecipeError

        known = isinstance(exc, RecipeError) or any(isinstance(exc, kind) for kind, _ in _known_errors())
        if rank > 0 and known:
            # Give rank 0, failing the same way, time to print before torchrun stops the other workers.
            time.sleep(1.0)
            code = EXIT_USAGE if isinstance(exc, RecipeError) else next(c for k, c in _known_errors() if isinstance(exc, k))
            raise typer.Exit(code)
        if isinstance(exc, RecipeError):
            count = len(exc.problems)
            lines = [f"error: {exc.source}: {count} problem{'s' if count > 1 else ''} in the recipe:"]
            lines += [f"  - {p}" for p in exc.problems]
            typer.echo("\n".join(lines), err=True)
            raise typer.Exit(EXIT_USAGE)
        from .train import Preempted

        if isinstance(exc, Preempted):
            typer.echo(str(exc), err=True)
            raise typer.Exit(EXIT_PREEMPTED)
        for kind, code in _known_errors():
            if isinstance(exc, kind):
                fail(str(exc), code)
        where = f"[rank {rank}] " if os.environ.get("WORLD_SIZE", "1") != "1" else ""
        fail(f"{where}{type(exc).__name__}: {exc} (set RECALL_DEBUG=1 for the traceback)", EXIT_FAILURE)
