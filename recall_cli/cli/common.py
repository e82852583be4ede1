"""What every `recall` command shares: exit codes, the one-line error boundary, common options.

Command groups live in their own modules (__init__.py: finetune/evaluate; runs.py: sweep/forgetting/
compare) and all report errors through ``run_guarded`` so that every command fails the same way.
"""

from __future__ import annotations

import os
import sys
import re
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from ..errors import ExitCode, EnvironmentProblem, Terminated, exit_code_of, signals_raise
from ..rundir import dumps_strict

# ---- --help ---------------------------------------------------------------------------------------


def help_paragraphs(text: str | None) -> str | None:
    """Help text as paragraphs: the line breaks of a docstring's source joined into spaces, blank lines
    kept (a paragraph starting with \\b keeps its lines, as click's convention says). typer joins the
    lines of a command's first paragraph only, so later ones broke mid-sentence where the source did."""
    if not text:
        return text
    import inspect

    paragraphs = re.split(r"\n\s*\n", inspect.cleandoc(text))
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs)


def _tidy_param(param: Any) -> None:
    """A flag takes no value: no <bool> after it. An argument is named in capitals (RECIPE, RUN_DIR...),
    as click names them, not {path}. Help text in paragraphs (help_paragraphs)."""
    if getattr(param, "param_type_name", "") == "option":
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""  # typer shows a metavar in place of the type, and an empty one as nothing
        if isinstance(getattr(param, "show_default", None), str):
            # A default shown as text (the option itself defaults to None: merge's method defaults) reads
            # [default: 16], not click's [default: (16)].
            shown = param.show_default
            param._get_default_string = lambda **_: shown
    elif getattr(param, "param_type_name", "") == "argument" and param.metavar is None:
        param.metavar = (param.name or "").upper() + ("..." if param.nargs != 1 else "")
    if getattr(param, "help", None):
        param.help = help_paragraphs(param.help)
    shown_type = getattr(param, "display_type_rich", None)
    if shown_type is not None:
        # typer prints a list's Python type (<list[Path]>); RUN_DIR... and "repeatable" say it is several.
        param.display_type_rich = lambda ctx, shown=shown_type: _element_type(shown(ctx))


def _element_type(shown: str | None) -> str | None:
    match = re.fullmatch(r"<list\[(\w+)\]>", shown or "")
    return f"<{match.group(1).lower()}>" if match else shown


class _TidyHelp:
    """What a command and the group share: help text in paragraphs, every parameter tidied
    (_tidy_param), --help included."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = help_paragraphs(self.help)
        self.epilog = help_paragraphs(self.epilog)
        for param in self.params:
            _tidy_param(param)

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)
        if option is not None:
            _tidy_param(option)
        return option


def override_hint(option: str, args: list[str]) -> str | None:
    """For run_glue's habit (``--max_steps 10``) on a command that takes overrides: the line saying that
    a recipe key is set as ``train.max_steps=10``; None when the option names no recipe key."""
    import difflib

    from ..recipe.schema import all_keys

    name, _, inline = option.lstrip("-").partition("=")
    name = name.replace("-", "_")
    keys = all_keys()
    leaves: dict[str, str] = {}
    for key in keys:
        leaves.setdefault(key.rsplit(".", 1)[-1], key)
    if name in keys:
        key = name
    elif name in leaves:
        key = leaves[name]
    else:
        close = difflib.get_close_matches(name, list(leaves), n=1, cutoff=0.85)
        if not close:
            return None
        key = leaves[close[0]]
    value = inline
    if not value:  # the value that followed the flag, when one did
        at = next((i for i, arg in enumerate(args) if arg.split("=", 1)[0] == option.split("=", 1)[0]), None)
        if at is not None and "=" in args[at]:  # --max_steps=10
            value = args[at].split("=", 1)[1]
        else:
            following = args[at + 1] if at is not None and at + 1 < len(args) else ""
            value = following if following and not following.startswith("-") else "VALUE"
    return (f"{option.split('=', 1)[0]} is not an option: recipe keys are overrides after the recipe, "
            f"KEY=VALUE: {key}={value}")


class RecallCommand(_TidyHelp, TyperCommand):
    """A recall command's --help: paragraphs unbroken, flags without a value, arguments in capitals,
    a usage line in click's style (``recall forgetting [OPTIONS] [RUN_DIR]...``)."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        given = list(args)  # click consumes the list it parses
        try:
            return super().parse_args(ctx, args)
        except Exception as exc:
            # Only a command that takes overrides, and only a flag that names a recipe key: click's
            # own "No such option" (with its did-you-mean among the options) for the rest. By name:
            # typer vendors its own click (typer._click) in newer releases, plain click in older.
            if type(exc).__name__ != "NoSuchOption" or not any(p.name == "overrides" for p in self.params):
                raise
            hint = override_hint(exc.option_name, given)
            if hint is None:
                raise
            typer.echo(f"error: {hint}", err=True)
            ctx.exit(ExitCode.USAGE)

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if getattr(param, "param_type_name", "") == "argument":
                name = param.metavar or param.name.upper()
                pieces.append(name if param.required else f"[{name}]")
        return pieces


class RecallGroup(_TidyHelp, TyperGroup):
    """The `recall` group: its own --help tidied like the commands', and output that a stdout which is
    not Unicode can print (console.printable_streams) before any command runs."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        from .console import printable_streams

        printable_streams()
        try:
            return super().main(*args, **kwargs)
        except SystemExit as stop:
            # click meets a closed stdout (`recall compare runs | head -1`) by exiting 1, recall's code for a
            # bug; it is the pipe's reader leaving, which run_guarded exits as PIPE_CLOSED too.
            if stop.code == 1 and type(sys.stdout).__name__ == "PacifyFlushWrapper":
                raise SystemExit(ExitCode.PIPE_CLOSED) from None
            raise


def use_recall_commands(app: typer.Typer) -> None:
    """Every command registered on ``app`` so far gets RecallCommand's --help (one place for all groups)."""
    for info in app.registered_commands:
        if info.cls is None or info.cls is TyperCommand:  # typer's default, by version: None or TyperCommand
            info.cls = RecallCommand


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


# The signal that stopped the command, once one arrived: an exception raised inside library code
# (torch turns a KeyboardInterrupt raised mid-conversion into a ValueError) is then the stop, not a bug.
_stopped_by: list[int] = []


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While active, SIGTERM raises Terminated (a KeyboardInterrupt) in the main thread, as Ctrl-C
    raises KeyboardInterrupt: staging folders are removed on the way out (rundir.staged_folder holds
    further signals while it cleans up) and run_guarded exits 143. Both are remembered (_stopped_by)."""
    with signals_raise(_stopped_by.append):
        yield


def run_guarded(fn, interrupted_hint: str | Callable[[], str | None] | None = RESUME_HINT, *,
                sigterm: bool = True, writes: object = None) -> None:
    """Call ``fn``; map known errors to one line and an exit code, unknown ones to exit 1.

    Ctrl-C exits 130 and SIGTERM 143 (with ``sigterm``; finetune handles SIGTERM itself, saving last/
    first), each with one line and ``interrupted_hint`` (or what it returns, asked then). An OSError of
    the environment (disk full, permission denied, read-only, a path that cannot be a folder) is an
    EnvironmentProblem naming its path, else ``writes`` (exit 4; a callable: asked then).

    Under torchrun the known errors are decided alike on every rank (the same recipe and files, or a
    decision all ranks agreed on), so rank 0 alone prints the line; unknown ones print on every rank,
    prefixed with it."""
    debug = bool(os.environ.get("RECALL_DEBUG"))
    rank = _rank()
    _stopped_by.clear()

    def stopped(stop: BaseException) -> typer.Exit:
        hint = interrupted_hint() if callable(interrupted_hint) else interrupted_hint
        what, code = ("stopped by SIGTERM", ExitCode.PREEMPTED) if isinstance(stop, Terminated) else ("interrupted", ExitCode.INTERRUPTED)
        if getattr(stop, "recall_where", None):  # it arrived while a plugin was imported (plugins.loader.plugin_code)
            what += f" {stop.recall_where}"
        typer.echo(what + (f": {hint}" if hint else ""), err=True)
        return typer.Exit(code)

    try:
        if sigterm:
            with sigterm_as_interrupt():
                fn()
        else:
            fn()
    except typer.Exit:
        raise
    except KeyboardInterrupt as stop:
        raise stopped(stop) from None
    except BrokenPipeError:
        # The reader closed the pipe (`| head`): nothing is wrong and there is no one to tell. stdout goes to
        # /dev/null so that the interpreter's own flush at exit does not raise the same error again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(ExitCode.PIPE_CLOSED) from None
    except Exception as exc:  # noqa: BLE001 - the CLI boundary
        if _stopped_by and not debug:  # a signal arrived and library code reported it as its own error
            raise stopped(Terminated() if _stopped_by[-1] == signal.SIGTERM else KeyboardInterrupt()) from None
        if debug:
            raise
        if exit_code_of(exc) is None:
            exc = EnvironmentProblem.from_os_error(exc, writes() if callable(writes) else writes) or exc
        code = exit_code_of(exc)
        if code is None:
            where = f"[rank {rank}] " if os.environ.get("WORLD_SIZE", "1") != "1" else ""
            fail(f"{where}{type(exc).__name__}: {exc} (set RECALL_DEBUG=1 for the traceback)", ExitCode.FAILURE)
        if rank > 0:
            # Give rank 0, failing the same way, time to print before torchrun stops the other workers.
            time.sleep(1.0)
        else:
            typer.echo("\n".join(exc.lines()), err=True)
        raise typer.Exit(code)


def check_device_name(device: str) -> None:
    """--device is auto, cpu or cuda (DeviceError, exit 2): the part of check_device that needs no torch."""
    from ..errors import DeviceError

    if device not in ("auto", "cpu", "cuda"):
        raise DeviceError(f"--device {device}: choose auto, cpu or cuda")


def check_device(device: str) -> None:
    """--device: auto, cpu or cuda, and cuda only where a CUDA device is visible (DeviceError, exit 2)."""
    check_device_name(device)
    from ..runtime import resolve_device

    resolve_device(device, option="--device")


def dumps_json(data: Any) -> str:
    """What every --json prints: strict JSON (null for a missing or undefined number, never NaN)."""
    return dumps_strict(data, indent=2)
