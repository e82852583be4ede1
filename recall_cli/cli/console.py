"""How recall talks to a person (rich progress and tables on a TTY) or to a log file or pipe (one line per
record, markdown pipe tables).

Every record is printed in one format, ``step=N split=S key=value ...`` (format_record): a plain line in
a log, and above the live bar on a terminal, wrapped between fields, never inside a number (fit_fields).
Tables go through print_table: on a terminal a rich table whose cells fold rather than being cut, or the
pipe table when even that does not fit; elsewhere the pipe table (table_text), every column and every
name in full.
"""

from __future__ import annotations

import codecs
import sys
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.table import Column
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..training.progress import Reporter

class PipeConsole(Console):
    """rich's Console, except that a closed stdout (`| head`) raises BrokenPipeError, which run_guarded
    exits as ExitCode.PIPE_CLOSED, where rich's own handler exits 1 (recall's code for a bug)."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError(32, "the reader closed the pipe")


err_console = PipeConsole(stderr=True, highlight=False)
out_console = PipeConsole(highlight=False)

# The live line keeps what a person watches; every field of a record goes into a log line above it.
_LIVE_FIELDS = (("loss", "loss"), ("lambda", "λ"), ("distance", "dist"))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def record_fields(record: dict[str, Any]) -> list[str]:
    """``step=N``, ``split=S``, then every other field as ``key=value`` in the record's order."""
    fields = [f"step={record['step']}", f"split={record.get('split', 'eval')}"]
    fields += [f"{k}={_fmt(v)}" for k, v in record.items() if k not in ("step", "split")]
    return fields


def format_record(record: dict[str, Any]) -> str:
    """One record as one line: what a log gets, and what the terminal shows above the bar."""
    return " ".join(record_fields(record))


# Continuation lines of a wrapped record start with this, so that a record's first line stands out.
_INDENT = "    "


def fit_fields(fields: list[str], width: int) -> list[str]:
    """``fields`` joined by spaces into lines of at most ``width`` characters, broken only between
    fields (a field is never split: a number stays whole); continuation lines are indented. A field
    longer than a line gets a line of its own (the terminal wraps it)."""
    lines: list[str] = []
    line = ""
    for field in fields:
        if line and len(line) + 1 + len(field) > width:
            lines.append(line)
            line = _INDENT + field
        else:
            line = f"{line} {field}" if line else field
    if line:
        lines.append(line)
    return lines


class PlainReporter(Reporter):
    """For pipes, CI and cluster logs: no redraws, one flushed line per record."""

    # A set-up phase is said once it has taken this long (seconds): a quick one is not worth a line, and a slow
    # one (θ*'s side of a causal LM's probes on a loaded machine: minutes) must not leave the log silent.
    say_after = 3.0

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    @contextmanager
    def phase(self, what):
        import threading

        line = f"recall: {what}…"
        if self.say_after <= 0:
            self._line(line)
        timer = threading.Timer(self.say_after, self._line, args=(line,))
        timer.daemon = True
        if self.say_after > 0:
            timer.start()
        try:
            yield lambda done, total: None  # a log gets no redraws
        finally:
            timer.cancel()

    def start(self, total_steps, start_step, info):
        where = f"resuming at step {start_step}" if start_step else "starting"
        self._line(f"recall: {where}, {total_steps} steps, " + " ".join(f"{k}={v}" for k, v in info.items()))

    def warn(self, message):
        print(f"warning: {message}", file=sys.stderr, flush=True)

    def note(self, message):
        print(f"note: {message}", file=sys.stderr, flush=True)

    def train(self, record):
        self._line(format_record(record))

    def eval(self, record):
        self._line(format_record(record))

    def finish(self, summary):
        best = summary.get("best") or {}
        self._line(
            f"recall: done, {summary['steps']} steps in {summary['train_seconds']:.1f}s "
            f"({summary['samples_per_s']:.1f} samples/s); best main={_fmt(best.get('main'))} at step {best.get('step')}; "
            f"final distance={summary['final_distance']:.4g}"
        )


class RichReporter(Reporter):
    """A live progress line (step, elapsed, remaining, loss, λ, distance) that stays readable at 100
    columns; every record (train, eval, probe) is printed above it in the plain lines' format, wrapped
    between fields to the terminal's width."""

    def __init__(self, console: Console | None = None):
        self.console = console or out_console

        def fixed(**kwargs) -> Column:  # never squeezed: the bar alone gives up width
            return Column(no_wrap=True, overflow="ignore", **kwargs)

        self.progress = Progress(
            TextColumn("[bold]finetune", table_column=fixed()),
            BarColumn(bar_width=None),
            MofNCompleteColumn(table_column=fixed()),
            TimeElapsedColumn(table_column=fixed()),
            TextColumn("<", table_column=fixed()),
            TimeRemainingColumn(table_column=fixed()),
            TextColumn("{task.fields[status]}", table_column=fixed()),
            console=self.console,
            expand=True,
        )
        self.task_id = None
        self.total_steps = 0

    @contextmanager
    def phase(self, what):
        from rich.markup import escape
        from rich.progress import SpinnerColumn

        # its own live line, gone when the phase ends (the run's bar starts at the start line)
        live = Progress(SpinnerColumn(), TextColumn(escape(what)), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=self.console, transient=True)
        task = live.add_task(what, total=None)
        with live:
            yield lambda done, total: live.update(task, completed=done, total=total)

    def start(self, total_steps, start_step, info):
        where = f"resuming at step {start_step}" if start_step else "starting"
        self.console.print(f"[bold]recall[/]: {where} — " + ", ".join(f"{k}={v}" for k, v in info.items()))
        self.progress.start()
        self.total_steps = total_steps
        self.task_id = self.progress.add_task("finetune", total=total_steps, completed=start_step, status="")

    def warn(self, message):
        from rich.text import Text

        err_console.print(Text.assemble(("warning:", "yellow"), " ", message))  # the message is text, not markup

    def note(self, message):
        self._print(f"note: {message}".split(" "), "dim")

    def _print(self, fields: list[str], style: str) -> None:
        from rich.text import Text

        console = self.progress.console
        for line in fit_fields(fields, console.width):
            console.print(Text(line, style=style), soft_wrap=True)

    def train(self, record):
        status = " ".join(f"{label}={_fmt(record[k])}" for k, label in _LIVE_FIELDS if record.get(k) is not None)
        # A record is written when its step is done: the bar counts it, and says what the last step does
        # next (its evaluation, probe and save) instead of sitting at N-1/N meanwhile.
        if record["step"] >= self.total_steps:
            status += " · final eval…"
        self.progress.update(self.task_id, completed=record["step"], status=status)
        self._print(record_fields(record), "dim")

    def eval(self, record):
        self.progress.update(self.task_id, completed=record["step"])
        self._print(record_fields(record), "cyan")

    def step(self, step):
        self.progress.update(self.task_id, completed=step)

    def finish(self, summary):
        self.progress.stop()
        best = summary.get("best") or {}
        self.console.print(
            f"[bold green]done[/]: {summary['steps']} steps in {summary['train_seconds']:.1f}s "
            f"({summary['samples_per_s']:.1f} samples/s); best main={_fmt(best.get('main'))} at step "
            f"{best.get('step')}; final distance={summary['final_distance']:.4g}"
        )

    def close(self):
        self.progress.stop()


# ---- tables --------------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    """A rich cell as markdown: its text, ``**text**`` when all of it is bold, pipes escaped."""
    from rich.text import Text

    text = Text.from_markup(value) if isinstance(value, str) else value if isinstance(value, Text) else Text(str(value))
    plain = " ".join(text.plain.split())
    whole = [span.style for span in text.spans if span.start == 0 and span.end >= len(text.plain)]
    if plain and any(_is_bold(style) for style in [text.style, *whole]):
        plain = f"**{plain}**"
    return plain.replace("|", "\\|")


def _plain(value: Any) -> str:
    from rich.text import Text

    return Text.from_markup(value).plain if isinstance(value, str) else getattr(value, "plain", str(value))


def _is_bold(style: Any) -> bool:
    from rich.style import Style

    try:
        return bool(Style.parse(style).bold) if isinstance(style, str) else bool(getattr(style, "bold", False))
    except Exception:  # noqa: BLE001 - a style rich itself would reject: not bold
        return False


def table_text(table) -> str:
    """A rich Table as a markdown pipe table (its title on the line above, when it has one): every
    column, every cell in full, padded so that it also reads as text; numbers right-aligned."""
    columns = list(table.columns)
    header = [_cell(c.header) for c in columns]
    cells = [[_cell(v) for v in c.cells] for c in columns]
    rows = [list(row) for row in zip(*cells)] if cells else []
    widths = [max([3, len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    right = [c.justify == "right" for c in columns]

    def line(values: list[str]) -> str:
        return "| " + " | ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right)) + " |"

    out = [_plain(table.title)] if table.title else []
    out.append(line(header))
    out.append("|" + "|".join("-" * (w + 1) + ":" if r else "-" * (w + 2) for w, r in zip(widths, right)) + "|")
    out += [line(r) for r in rows]
    return "\n".join(out)


def print_table(table, console: Console | None = None) -> None:
    """A table as a person or a script should get it. Not a terminal (a pipe, a file, a log): the pipe
    table of table_text. A terminal: the rich table when it fits as rich lays it out (cells wrapped
    between words); when it does not (a name cut short or folded mid-word, columns cropped on the
    right), the pipe table, which the terminal may wrap but never cuts."""
    console = console or out_console
    if console.is_terminal and _fits(table, console):
        console.print(table)
        return
    console.print(table_text(table), markup=False, highlight=False, emoji=False, soft_wrap=True)


def _fits(table, console: Console) -> bool:
    """Whether rich lays ``table`` out within the terminal's width with every word of every cell whole."""
    from rich.segment import Segment

    lines = list(Segment.split_lines(console.render(table, console.options)))
    if any(Segment.get_line_length(line) > console.width for line in lines):
        return False
    shown = "\n".join("".join(segment.text for segment in line) for line in lines)
    words = {w for column in table.columns for cell in [column.header, *column.cells] for w in _plain(cell).split()}
    return all(word in shown for word in words)


# ---- streams that cannot print every character ---------------------------------------------------

# What recall prints beyond ASCII, spelled in ASCII for a stdout or stderr that cannot encode it.
_ASCII = {"θ": "theta", "λ": "lambda", "γ": "gamma", "τ": "tau", "α": "alpha", "ρ": "rho", "–": "-", "—": "-",
          "−": "-", "±": "+-", "×": "x", "‖": "||", "…": "...", "·": "-", "≈": "~", "≤": "<=", "≥": ">=", "→": "->",
          "✓": "ok", "✗": "x"}


def _ascii_replace(error: UnicodeEncodeError) -> tuple[str, int]:
    bad = error.object[error.start:error.end]
    return "".join(_ASCII.get(ch, "?") for ch in bad), error.end


codecs.register_error("recall_ascii", _ascii_replace)


def printable_streams() -> None:
    """On a stdout or stderr whose encoding is not Unicode (LANG=C on an old system, PYTHONIOENCODING=
    ascii), characters it cannot encode are written in ASCII (θ as theta, λ as lambda, – as -) instead
    of stopping the command with a UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if encoding and not encoding.startswith("utf") and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="recall_ascii")
            except (ValueError, OSError):  # a closed or detached stream: nothing to print to
                pass


def make_reporter(plain: bool | None = None) -> Reporter:
    """Rich on a TTY, plain lines otherwise; under torchrun ranks other than 0 report nothing."""
    from ..distributed import env_rank

    if env_rank() != 0:
        return Reporter()
    if plain is None:
        plain = not sys.stdout.isatty()
    return PlainReporter() if plain else RichReporter()
