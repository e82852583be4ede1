"""How the training loop talks to a person (rich progress on a TTY) or to a log file (one line per record)."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.table import Column
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from .progress import Reporter

err_console = Console(stderr=True, highlight=False)
out_console = Console(highlight=False)

# The live line keeps what a person watches; every field of a record goes into a log line above it.
_LIVE_FIELDS = (("loss", "loss"), ("lambda", "λ"), ("distance", "dist"))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_record(record: dict[str, Any]) -> str:
    fields = [f"step={record['step']}", f"split={record['split']}"]
    fields += [f"{k}={_fmt(v)}" for k, v in record.items() if k not in ("step", "split")]
    return " ".join(fields)


class PlainReporter(Reporter):
    """For pipes, CI and cluster logs: no redraws, one flushed line per record."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def start(self, total_steps, start_step, info):
        where = f"resuming at step {start_step}" if start_step else "starting"
        self._line(f"recall: {where}, {total_steps} steps, " + " ".join(f"{k}={v}" for k, v in info.items()))

    def warn(self, message):
        print(f"warning: {message}", file=sys.stderr, flush=True)

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
    columns; each train record's full set of fields and each eval are printed above it."""

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

    def start(self, total_steps, start_step, info):
        where = f"resuming at step {start_step}" if start_step else "starting"
        self.console.print(f"[bold]recall[/]: {where} — " + ", ".join(f"{k}={v}" for k, v in info.items()))
        self.progress.start()
        self.task_id = self.progress.add_task("finetune", total=total_steps, completed=start_step, status="")

    def warn(self, message):
        err_console.print(f"[yellow]warning:[/] {message}")

    def train(self, record):
        status = " ".join(f"{label}={_fmt(record[k])}" for k, label in _LIVE_FIELDS if record.get(k) is not None)
        self.progress.update(self.task_id, status=status)
        self.progress.console.print(f"[dim]{format_record(record)}[/]", soft_wrap=True)

    def eval(self, record):
        metrics = " ".join(f"{k}={_fmt(v)}" for k, v in record.items() if k not in ("step", "split"))
        self.progress.console.print(f"[cyan]{record.get('split', 'eval')}[/] step {record['step']}: {metrics}")

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


def make_reporter(plain: bool | None = None) -> Reporter:
    """Rich on a TTY, plain lines otherwise; under torchrun ranks other than 0 report nothing."""
    from .distributed import env_rank

    if env_rank() != 0:
        return Reporter()
    if plain is None:
        plain = not sys.stdout.isatty()
    return PlainReporter() if plain else RichReporter()
