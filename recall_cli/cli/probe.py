"""`recall probe`: what a fine-tuned model still knows, and `recall tradeoff`: task score against it.

Thin like cli/__init__.py: parse, call recall_cli.probes (measurement) or report/probe_tables, probe_plots
(reading and drawing run directories), print. Library imports stay inside the commands for a fast --help.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import ExitCode, ReportError, exit_codes_help
from ..names import DEFAULT_PROBES, PROBE_BATCH_SIZE, PROBE_MAX_LENGTH, PROBE_NUM_TEXTS
from ..plugins.probes import probe_names
from .common import JsonOpt, check_device_name, dumps_json, run_guarded

PROBE_EXIT_CODES = exit_codes_help({
    ExitCode.OK: 'ok',
    ExitCode.FAILURE: 'unexpected failure',
    ExitCode.USAGE: 'bad usage, probe file, model or run directory (nothing is written)',
    ExitCode.INTERRUPTED: 'Ctrl-C',
    ExitCode.PREEMPTED: 'SIGTERM',
}, joiner={ExitCode.PREEMPTED: ', '})
TRADEOFF_EXIT_CODES = exit_codes_help({
    ExitCode.OK: 'ok (a summary.json or metrics.jsonl record that cannot be read is skipped with a warning naming it, and so is a run whose --x or --y is NaN or inf)',
    ExitCode.FAILURE: 'unexpected failure',
    ExitCode.USAGE: 'bad usage: no readable runs under the folders, none that records both --x and --y, an unknown --x or --y, a --within that is negative or not finite, --select-on holdout with a run that has no holdout score (no figure is written)',
    ExitCode.ENVIRONMENT: 'the figure cannot be written (disk full, permission denied, read-only, a file where its folder goes)',
    ExitCode.INTERRUPTED: 'Ctrl-C',
    ExitCode.PREEMPTED: 'SIGTERM',
}, joiner={ExitCode.PREEMPTED: ', '})


def register(app: typer.Typer) -> None:
    app.command(epilog=PROBE_EXIT_CODES)(probe)
    app.command(epilog=TRADEOFF_EXIT_CODES)(tradeoff)


def probe(
    targets: Annotated[list[str], typer.Argument(help="Run directories (their best/), checkpoint folders or model names (pkg:, hub id, folder).", show_default=False)],
    against: Annotated[Optional[str], typer.Option(help="theta*, the pretrained model to compare with (default: a run's model.name_or_path; a model name is its own).")] = None,
    probes: Annotated[Optional[str], typer.Option(help=f"Comma-separated probes: {', '.join(probe_names(strict=False))} (lm, kl and choice: a causal LM's; default: {','.join(DEFAULT_PROBES)}).", show_default=False)] = None,
    texts: Annotated[Optional[Path], typer.Option(help="Probe sentences, one a line (default: data/probe/texts.txt).")] = None,
    pairs: Annotated[Optional[Path], typer.Option(help="STS pairs: .tsv/.csv/.jsonl with sentence1, sentence2, score (default: data/glue/STS-B/dev.tsv).")] = None,
    choices: Annotated[Optional[Path], typer.Option(help="The choice probe's items: JSONL of prompt, choices, answer (default: data/probe/lm_choice.jsonl).")] = None,
    num_texts: Annotated[Optional[int], typer.Option(min=0, help=f"First N probe sentences, 0: all (default: {PROBE_NUM_TEXTS}, a run's own).", show_default=False)] = None,
    num_pairs: Annotated[Optional[int], typer.Option(min=0, help="A fixed seeded sample of N pairs, 0: all (default: all, a run's own).", show_default=False)] = None,
    max_length: Annotated[Optional[int], typer.Option(min=8, help=f"Tokens per sentence (default: {PROBE_MAX_LENGTH}, a run's own).", show_default=False)] = None,
    batch_size: Annotated[int, typer.Option(min=1)] = PROBE_BATCH_SIZE,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    dtype: Annotated[str, typer.Option(help="The models' weights and forward passes in fp32, bf16 or fp16 (half the memory); the numbers are computed in fp32.")] = "fp32",
    as_json: JsonOpt = False,
) -> None:
    """Probe models against theta*: per-layer CKA, drift, zero-shot STS (Spearman, retained ratio), MLM loss ratio.

    When every target is in a run directory and their recipes agree, what is not given here is taken from their
    probe section (probes, files, sentences, pairs, tokens), so the numbers are their in-run probe's; a note says so.

    The table prints as compare's: up to 100 columns, plain text fitted to the width (long targets lose
    their start), the same on a terminal and in a pipe; --json for scripts."""

    def go() -> None:
        from ..probes.targets import probe_targets

        names = None if probes is None else [p.strip() for p in probes.split(",") if p.strip()]
        check_device_name(device)  # cuda where none is visible: probe_targets, after the names (no torch before)
        rows = probe_targets(list(targets), against=against, probes=names, texts_file=texts, pairs_file=pairs,
                             choices_file=choices, num_texts=num_texts, num_pairs=num_pairs, max_length=max_length,
                             batch_size=batch_size, device=device, from_runs=True, dtype=dtype)
        if as_json:
            typer.echo(dumps_json(rows))
            return
        from ..report.probe_tables import probe_plain, probe_table
        from .runs import show_table

        show_table(probe_plain(rows), lambda: probe_table(rows))
        for note in dict.fromkeys(n for r in rows for n in r["notes"]):
            typer.echo(f"note: {note}")

    run_guarded(go, interrupted_hint=None)


def tradeoff(
    run_dir: Annotated[list[Path], typer.Argument(help="Folders of run directories (searched recursively), e.g. a sweep's --out; several are read as one set. Folders of recall continual sequences: one point per sequence, by method (--x/--y: acc, bwt, fwt, forgetting, last, kept).", show_default=False)],
    out: Annotated[Path, typer.Option(help="Figure file: .png, .svg or .pdf.")] = Path("tradeoff.png"),
    x: Annotated[str, typer.Option(help="Task score on the x-axis: an eval metric (main, accuracy, mcc, ...).")] = "main",
    y: Annotated[str, typer.Option(help="Retained skill on the y-axis: a probe measure (sts_retained, mlm_ratio, cka, cka_debiased, drift, sts).")] = "sts_retained",
    by: Annotated[Optional[list[str]], typer.Option(help="Recipe key(s) that make a setting (default: every key that differs).")] = None,
    within: Annotated[Optional[float], typer.Option(help="Per task, name the setting that keeps the most skill (median --y) among those whose median --x is within W points (x100) of the best setting's, and mark it.", show_default=False)] = None,
    select_on: Annotated[str, typer.Option("--select-on", help="What --within chooses on: dev (the median dev scores, as reported) or holdout (the median holdout scores of runs trained with task.holdout; dev is reported, with the pick's paired interval against vanilla and whether it is non-inferior at margin W).")] = "dev",
    ci: Annotated[float, typer.Option(help="Level of the pick's interval against vanilla (--select-on holdout), in (0, 1).")] = 0.95,
    as_json: JsonOpt = False,
    mixed_devices: Annotated[bool, typer.Option("--mixed-devices", help="Plot and pair runs of one task that computed on different devices or precisions (refused by default: summary.json's device, device_name, precision).")] = False,
) -> None:
    """Task score against retained skill, one point per run (final eval and final probe), median per setting marked.

    Families of settings (RecAdam floors, WiSE-FT alpha, RECALL tau) are drawn as lines from the weakest to the
    strongest. --within W picks, per task, the setting that keeps the most skill at a cost of at most W
    points of task score, says why, and marks it; with --json it prints one object per task. With
    --select-on holdout it picks on the holdout scores and reports dev, with the pick's paired bootstrap
    interval against vanilla fine-tuning and "non-inferior at margin W" only when the interval's lower end
    is above -W."""

    def go() -> None:
        from .. import report
        from ..report.probe_plots import tradeoff_figure
        from ..report.probe_tables import tradeoff_points
        from ..report.intervals import check_level
        from ..report.runs import check_one_device
        from ..report.tradeoff import SELECT_ON, check_within, choice_line, choose_within, holdout_lines

        if within is not None:
            check_within(within)
        if select_on not in SELECT_ON:
            raise ReportError(f"unknown --select-on {select_on!r}: choose dev (the default) or holdout")
        if select_on == "holdout" and within is None:
            raise ReportError("--select-on holdout chooses with --within W: give the margin, e.g. --within 1.0")
        check_level(ci)
        warn = lambda m: typer.echo(f"warning: {m}", err=True)
        from ..report import continual

        if continual.has_sequences(run_dir):  # recall continual's folders: a point per sequence, by method
            given = {"--by": by, "--within": within, "--select-on": None if select_on == "dev" else select_on,
                     "--mixed-devices": mixed_devices or None}
            _tradeoff_sequences(run_dir, x, y, out, as_json, [flag for flag, value in given.items() if value], warn)
            return
        runs = report.load_runs(run_dir, warn=warn)
        if not mixed_devices:
            check_one_device(runs, "tradeoff")
        settings = tradeoff_points(runs, x, y, list(by or []), warn=warn)
        choices = choose_within(runs, settings, x, y, within, select_on, ci) if within is not None else None
        tradeoff_figure(settings, x, y, out, runs=runs, choices=choices)
        if as_json:
            typer.echo(dumps_json(choices if choices is not None else settings))
        elif choices is not None:
            for choice in choices:
                for line in (holdout_lines(choice, x, y) if select_on == "holdout" else [choice_line(choice, x, y)]):
                    typer.echo(line)
        else:
            from ..report.tradeoff import names_of

            for task in dict.fromkeys(s["task"] for s in settings):  # each task's settings named as compare names them
                members = [s for s in settings if s["task"] == task]
                for s, described in zip(members, names_of(members, runs)):
                    mx, my = s["median"]
                    typer.echo(f"{task} / {described.name}: n={len(s['points'])} median {x}={_num(mx)} {y}={_num(my)}")
        typer.echo(f"figure: {out}", err=as_json)

    run_guarded(go, interrupted_hint=None)


def _tradeoff_sequences(roots: list[Path], x: str, y: str, out: Path, as_json: bool, unused: list[str], warn) -> None:
    """tradeoff of continual sequences (report/continual.py): a sequence's measures on the axes (--x main and
    --y sts_retained read as ACC and STS kept), one point per sequence, the median per method."""
    from ..report import continual

    if unused:
        raise ReportError(f"{', '.join(unused)}: not read for continual sequences (tradeoff plots one point per "
                          "sequence, by method): drop them")
    kx, ky = continual.tradeoff_axis(x, "--x"), continual.tradeoff_axis(y, "--y")
    methods = continual.tradeoff_points(continual.methods_under(roots, warn=warn), kx, ky)
    continual.tradeoff_figure(methods, kx, ky, out)
    if as_json:
        typer.echo(dumps_json(methods))
    else:
        for m in methods:
            mx, my = m["median"]
            typer.echo(f"{m['method']}: n={len(m['points'])} median {kx}={_num(mx)} {ky}={_num(my)}")
    typer.echo(f"figure: {out}", err=as_json)


def _num(value) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"

