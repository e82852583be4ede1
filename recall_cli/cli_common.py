"""What every `recall` command shares: exit codes, the one-line error boundary, common options.

Command groups live in their own modules (cli.py: finetune/evaluate; cli_runs.py: sweep/forgetting/
compare) and all report errors through ``run_guarded`` so that every command fails the same way.
"""

from __future__ import annotations

import os
import time
from typing import Annotated

import typer

from .errors import (  # noqa: F401 - the exit codes, re-exported for the command modules
    EXIT_CODES_HELP,
    EXIT_DIVERGED,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PREEMPTED,
    EXIT_USAGE,
    exit_code_of,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of a table.")]


def fail(message: str, code: int) -> None:
    """Print ``error: message`` on stderr and exit with ``code``."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


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
        code = exit_code_of(exc)
        if code is None:
            where = f"[rank {rank}] " if os.environ.get("WORLD_SIZE", "1") != "1" else ""
            fail(f"{where}{type(exc).__name__}: {exc} (set RECALL_DEBUG=1 for the traceback)", EXIT_FAILURE)
        if rank > 0:
            # Give rank 0, failing the same way, time to print before torchrun stops the other workers.
            time.sleep(1.0)
        else:
            typer.echo("\n".join(exc.lines()), err=True)
        raise typer.Exit(code)
