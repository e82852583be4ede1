"""`recall sweep`, `recall forgetting`, `recall compare`: many runs at once, and what to read from them.

Thin like cli/__init__.py: parse the arguments, call the sweep/ and report/ packages (tables, figures), and let
run_guarded turn known errors into one line. The library modules are imported inside the commands so that
`recall --help` does not pay for torch or matplotlib.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import ExitCode, ReportError, exit_codes_help
from .common import dumps_json, fail, run_guarded

SWEEP_EXIT_CODES = exit_codes_help({
    ExitCode.OK: 'every cell finished',
    ExitCode.FAILURE: "a cell failed (the failed cells are named; sweep.json records each cell's state and exit code)",
    ExitCode.USAGE: 'bad usage or recipe (nothing is created or run)',
    ExitCode.INTERRUPTED: 'interrupted by Ctrl-C',
    ExitCode.PREEMPTED: 'stopped by SIGTERM (running cells save last/ first; run the same command again to resume)',
}, joiner={ExitCode.PREEMPTED: ', '})
REPORT_EXIT_CODES = exit_codes_help({
    ExitCode.OK: 'ok (a summary.json or metrics.jsonl record that cannot be read is skipped with a warning naming it)',
    ExitCode.FAILURE: 'unexpected failure',
    ExitCode.USAGE: 'bad usage (no readable runs under the folders, unknown key, metric, preset or format)',
    ExitCode.INTERRUPTED: 'Ctrl-C',
    ExitCode.PREEMPTED: 'SIGTERM',
}, joiner={ExitCode.PREEMPTED: ', '})
# forgetting and tradeoff (probe.py) write a figure: what they print is built first, the figure last.
FIGURE_EXIT_CODES = exit_codes_help({
    ExitCode.OK: 'ok (a summary.json or metrics.jsonl record that cannot be read is skipped with a warning naming it)',
    ExitCode.FAILURE: 'unexpected failure',
    ExitCode.USAGE: 'bad usage (no run directories given, no readable runs under them, unknown key; no figure is written)',
    ExitCode.ENVIRONMENT: 'the figure cannot be written (disk full, permission denied, read-only, a file where its folder goes)',
    ExitCode.INTERRUPTED: 'Ctrl-C',
    ExitCode.PREEMPTED: 'SIGTERM',
}, joiner={ExitCode.PREEMPTED: ', '})


class Backend(str, Enum):
    """Where a sweep's cells run."""

    local = "local"
    ray = "ray"


def _guarded(fn, interrupted_hint: str | None = None) -> None:
    """run_guarded without the resume hint: Ctrl-C in compare or forgetting has nothing to resume."""
    run_guarded(fn, interrupted_hint)


def register(app: typer.Typer) -> None:
    app.command(epilog=SWEEP_EXIT_CODES)(sweep)
    app.command(epilog=FIGURE_EXIT_CODES)(forgetting)
    app.command(epilog=REPORT_EXIT_CODES)(compare)


# ---- sweep ---------------------------------------------------------------------------------------


def sweep(
    recipe: Annotated[Path, typer.Argument(help="Recipe YAML file shared by every cell.", show_default=False)],
    overrides: Annotated[
        Optional[list[str]],
        typer.Argument(help="Dotted KEY=VALUE overrides for every cell, as in recall finetune. More recipe files "
                            "(STAGE2.yaml STAGE3.yaml, before the overrides) make each cell a `recall continual` "
                            "sequence of RECIPE then them, scored by its ACC.", show_default=False),
    ] = None,
    grid: Annotated[
        Optional[list[str]],
        typer.Option("--grid", help="KEY=V1,V2,... : one axis of the grid (repeat for more), e.g. "
                                    "--grid optimizer.anneal_k=0.05,0.1 --grid model.init=pretrained,random."),
    ] = None,
    seeds: Annotated[Optional[str], typer.Option(help="Seeds for every grid point, e.g. 1,2,3,4,5 (default: the recipe's train.seed).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Parent folder of the cells' run directories (default: runs/sweep_<recipe name>).")] = None,
    jobs: Annotated[int, typer.Option(min=1, help="Cells run at once, each in its own process; with several GPUs visible each gets one (CUDA_VISIBLE_DEVICES).")] = 1,
    print_commands: Annotated[bool, typer.Option("--print-commands", help="Print one `recall finetune` command per cell still to run, and run nothing (for SLURM arrays, CI matrices).")] = False,
    backend: Annotated[Backend, typer.Option(help="Where cells run: local (child processes, --jobs at a time) or ray (each cell a Ray task; needs recall-finetune[ray]).")] = Backend.local,
    address: Annotated[Optional[str], typer.Option(help="--backend ray: the cluster to join (e.g. ray://head:10001, or auto); default: start Ray on this machine.")] = None,
    gpus_per_cell: Annotated[float, typer.Option(help="--backend ray: GPUs each cell asks for; 0.25 packs four cells on a GPU.")] = 0.0,
    cpus_per_cell: Annotated[float, typer.Option(help="--backend ray: CPUs each cell asks for (its OMP_NUM_THREADS too).")] = 1.0,
) -> None:
    """Run a grid of recall finetune runs (or, given several recipes, of recall continual sequences) x seeds;
    re-running skips finished cells and resumes interrupted ones."""

    def go() -> None:
        from ..errors import Terminated
        from ..sweep import cause_in_log, parse_seeds, plan_sweep, preflight_first_cell, print_commands as commands, run_sweep

        target = out if out is not None else Path("runs") / f"sweep_{recipe.stem}"
        if backend is Backend.ray:  # before planning: a missing Ray or a bad share is one line in a second
            from ..sweep.on_ray import check_address, check_resources, import_ray

            check_resources(gpus_per_cell, cpus_per_cell)
            check_address(address)
            import_ray(address)
            if jobs != 1:
                fail("--jobs is the local backend's; with --backend ray, Ray runs as many cells at once as "
                     "--cpus-per-cell and --gpus-per-cell let fit", ExitCode.USAGE)
        elif address is not None or gpus_per_cell or cpus_per_cell != 1.0:
            fail("--address, --gpus-per-cell and --cpus-per-cell are for --backend ray: add it, or drop them", ExitCode.USAGE)
        stages = [Path(o) for o in overrides or [] if "=" not in o]  # a sweep of sequences, as recall continual reads them
        plan = plan_sweep(recipe, list(grid or []), parse_seeds(seeds), [o for o in overrides or [] if "=" in o], target,
                          stages=stages)
        if print_commands:
            lines = commands(plan)
            skipped = len(plan.cells) - len(lines)
            if skipped:
                typer.echo(f"# {skipped} finished cell{'s' if skipped > 1 else ''} left out", err=True)
            for line in lines:
                typer.echo(line)
            return
        preflight_first_cell(plan)  # a problem every cell shares: one line now, nothing made
        start = f"sweep: {len(plan.cells)} cells under {target} (index: {target / 'sweep.json'})"
        try:
            if backend is Backend.ray:  # said once Ray is up and the cells fit it: a refusal before is its line alone
                from ..sweep.on_ray import run_sweep_ray

                failed = run_sweep_ray(plan, address, gpus_per_cell, cpus_per_cell, echo=typer.echo, announce=start)
            else:
                typer.echo(start)
                failed = run_sweep(plan, jobs=jobs, echo=typer.echo)
        except KeyboardInterrupt as stop:
            typer.echo("interrupted: run the same recall sweep command again to resume", err=True)
            raise typer.Exit(ExitCode.PREEMPTED if isinstance(stop, Terminated) else ExitCode.INTERRUPTED)
        if failed:
            first = failed[0]
            log = target / "logs" / (first.name + ".log")
            cause = cause_in_log(log)
            more = f" and {len(failed) - 1} more (sweep.json names each)" if len(failed) > 1 else ""
            fail(f"{len(failed)} of {len(plan.cells)} cells failed: {first.name}{more}: exit {first.exit_code}"
                 + (f", {cause}" if cause else "") + f" (log {log})", ExitCode.FAILURE)
        typer.echo(f"sweep: all {len(plan.cells)} cells finished; compare them with: recall compare {target}")

    _guarded(go)


# ---- forgetting ----------------------------------------------------------------------------------


def forgetting(
    run_dirs: Annotated[Optional[list[Path]], typer.Argument(metavar="RUN_DIR...", help="Run directories, or folders of them (searched recursively); several are read as one set.", show_default=False)] = None,
    run_dir: Annotated[Optional[list[Path]], typer.Option("--run-dir", metavar="DIR", help="The same as a RUN_DIR argument (repeatable), as compare and tradeoff take them.", show_default=False)] = None,
    out: Annotated[Path, typer.Option(help="Figure file: .png (default), .svg or .pdf.")] = Path("forgetting.png"),
    label: Annotated[Optional[str], typer.Option(help="Recipe key that labels the curves (default: optimizer.anneal_k if it differs, else every differing key).")] = None,
    dpi: Annotated[int, typer.Option(min=30, max=600, help="Resolution of a PNG (the figure is 13 x 4 inches).")] = 150,
    as_json: Annotated[bool, typer.Option("--json", help="Print the per-run table as JSON.")] = False,
) -> None:
    """Figure 2 of the paper: distance to theta* and training loss against step, plus lambda(t), per setting.

    Runs with probe records also get OUT_probes.png: retained skill and last-layer CKA against the step
    beside the distance, and CKA per layer at the last probe. The per-run tables print as compare's: up to
    100 columns, plain text fitted to the width, the same on a terminal and in a pipe."""

    def go() -> None:

        from .. import report
        from ..report import probe_tables
        from ..report.plots import forgetting_figure
        from ..report.probe_plots import probe_figure

        folders = [*(run_dirs or []), *(run_dir or [])]
        if not folders:
            fail("give the runs: recall forgetting RUN_DIR... (run directories or folders of them; --run-dir DIR "
                 "is the same)", ExitCode.USAGE)
        runs = report.load_runs(folders, warn=_warn)
        groups = report.forgetting_groups(runs, label)
        # Runs with probe records get a second figure beside the first: forgetting in function space.
        probes_out = out.with_name(f"{out.stem}_probes{out.suffix}") if probe_tables.has_probes(runs) else None
        # Every table first: what can fail on the runs' data fails before a figure is written.
        rows = report.forgetting_rows(runs, groups)
        probe_rows = probe_tables.probe_rows(groups)
        forgetting_figure(groups, out, dpi=dpi)
        if probes_out is not None:
            probe_figure(groups, probes_out, dpi=dpi)
        if as_json:
            by_run = {r["run"]: r for r in probe_rows}
            for row in rows:
                if row["run"] in by_run:
                    row["probe"] = {k: v for k, v in by_run[row["run"]].items() if k not in ("run", "name", "label", "setting", "seed")}
            typer.echo(dumps_json(rows))
        else:
            show_table(report.forgetting_plain(rows), lambda: report.forgetting_table(rows))
            if probe_rows:
                show_table(probe_tables.probe_rows_plain(probe_rows), lambda: probe_tables.probe_rows_table(probe_rows))
        typer.echo(f"figure: {out}", err=as_json)
        if probes_out is not None:
            typer.echo(f"figure: {probes_out}", err=as_json)

    _guarded(go)


# ---- compare -------------------------------------------------------------------------------------


def compare(
    run_dir: Annotated[list[Path], typer.Argument(help="Folders of run directories (searched recursively), e.g. a sweep's --out; several are read as one set. Folders holding recall continual sequences (continual.json) are compared by method: ACC, BWT, FWT, forgetting, last task, STS kept.", show_default=False)],
    by: Annotated[Optional[list[str]], typer.Option(help="Recipe key(s) to group by (default: every key that differs between runs of a task), e.g. optimizer.anneal_k or k.")] = None,
    metric: Annotated[str, typer.Option(help="Eval metric: main (the paper's per-task metric), accuracy, f1, mcc, pearson, spearman; a probe measure (sts_retained, cka, drift, ...); distance (||theta - theta*||) or train_seconds.")] = "main",
    table: Annotated[Optional[str], typer.Option(help="Paper preset: init (Table 2: vanilla / RecAdam + PI / + RI), k (one row per k), main (Table 1: vanilla vs RecAdam, median and max; per task the setting with the best median on dev, as the paper selects t0 and k).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table, markdown, csv or json (json: one object per group and task).")] = "table",
    at: Annotated[str, typer.Option(help="Which eval of each run: final (the end of training) or best (the best dev score).")] = "final",
    where: Annotated[Optional[list[str]], typer.Option(help="Keep only runs with KEY=VALUE (repeatable), e.g. model.init=pretrained.")] = None,
    stats: Annotated[Optional[str], typer.Option(help="Rows per group, comma-separated: median, min, max, mean (default: median,max,mean; median,max with --table).")] = None,
    against: Annotated[Optional[str], typer.Option(metavar="SETTING", help="Reference setting, by its name or label (e.g. vanilla): per setting and task, the paired bootstrap interval of its difference from SETTING over the seeds both ran, for --metric and for the kept skill (sts_retained; a causal LM's lm_kept, else kl_kept); rows Δ and CI in the table, 'against' in JSON.", show_default=False)] = None,
    ci: Annotated[float, typer.Option(help="Level of --against's intervals, in (0, 1).")] = 0.95,
    labels: Annotated[Optional[str], typer.Option(help="How rows name a setting: names (the legends' words: 'WiSE-FT α=0.75') or keys (the grouping keys: 'vanilla fine-tuning, merge=linear, ...'). Default: names in the table, keys in markdown; json and csv carry both (name, group).", show_default=False)] = None,
    mixed_devices: Annotated[bool, typer.Option("--mixed-devices", help="Aggregate and pair runs of one task that computed on different devices or precisions (refused by default: summary.json's device, device_name, precision).")] = False,
) -> None:
    """Aggregate runs over seeds (median, max, mean +- std, n), tasks as columns, with the paper's task averages.

    The table is one format on a terminal and in a pipe: up to 100 columns wide (the terminal's width, else
    COLUMNS, else 80) it is plain text fitted to the width (the task averages are left out first, then
    names cut with …); wider, the markdown table when it fits. --format says otherwise."""

    def go() -> None:
        from .. import report
        from ..report.comparison import add_against
        from ..report.intervals import check_level
        from ..report.runs import check_one_device

        if fmt not in report.FORMATS:
            raise ReportError(f"unknown --format {fmt!r}: choose {', '.join(report.FORMATS)}")
        if labels is not None and labels not in LABEL_CHOICES:
            raise ReportError(f"unknown --labels {labels!r}: choose names (the legends' words for a setting) "
                              "or keys (the grouping keys spelled out)")
        check_level(ci)
        if ci != 0.95 and against is None:
            raise ReportError("--ci sets the level of --against's intervals: give --against SETTING too")
        from ..report.continual import has_sequences

        if has_sequences(run_dir):  # recall continual's folders: one row per method, ACC and BWT over seeds
            given = {"--table": table, "--by": by, "--where": where, "--stats": stats,
                     "--at": None if at == "final" else at, "--metric": None if metric == "main" else metric}
            _compare_sequences(run_dir, fmt, against, ci, [flag for flag, value in given.items() if value])
            return
        runs = report.load_runs(run_dir, warn=_warn)
        runs = report.filter_runs(runs, list(where or []))
        if not mixed_devices:
            check_one_device(runs, "compare")
        chosen = [item.strip() for item in stats.split(",") if item.strip()] if stats else None
        result = report.compare(runs, by=list(by or []), metric=metric, preset=table, at=at, stats=chosen)
        if against is not None:
            add_against(result, runs, against, ci)
        if fmt != "table":
            typer.echo(report.render(result, fmt, labels or "keys"), nl=False)
            return
        from ..report.tables import plain_table

        show_table(plain_table(result, labels or "names"), lambda: report.rich_table(result, labels or "names"))
        for line in report.notes(result, labels or "names"):
            typer.echo(line)

    _guarded(go)


LABEL_CHOICES = ("names", "keys")


def _compare_sequences(roots: list[Path], fmt: str, against: str | None, ci: float, unused: list[str]) -> None:
    """compare of continual sequences (report/continual.py): its measures are the sequence's, so the options
    that choose a run's metric, eval or grouping do not apply and are refused."""
    from ..report import continual

    if unused:
        raise ReportError(f"{', '.join(unused)}: not read for continual sequences (compare groups them by method and "
                          "reports ACC, BWT, FWT, forgetting, the last task and STS kept): drop them")
    result = continual.comparison(continual.methods_under(roots, warn=_warn), against, ci)
    if fmt == "json":
        typer.echo(dumps_json(result))
    else:
        typer.echo(continual.csv_text(result) if fmt == "csv" else continual.markdown(result), nl=False)


def show_table(plain, rich_table, console=None) -> None:
    """compare, forgetting, probe: one format on a terminal and in a pipe, chosen by the width alone (the
    terminal's; else COLUMNS; else 80). At 100 columns or fewer, the plain table fitted to the width
    (report/text.py: columns left out and names cut, said under it; bold on a terminal only, no markup).
    Wider, the markdown pipe table with every column and name in full (bold as **) when it fits the
    width, else the fitted table. ``rich_table`` builds the full table (called only when wide)."""
    from ..report.text import FIT_WIDTH, lines
    from .console import PipeConsole, table_text

    console = console or PipeConsole(highlight=False)  # made now: COLUMNS as it is now
    width = console.width
    if width > FIT_WIDTH:
        text = table_text(rich_table())
        if max(len(line) for line in text.splitlines()) <= width:
            console.print(text, markup=False, highlight=False, emoji=False, soft_wrap=True)
            return
    for line in lines(plain, width):
        console.print(line, markup=False, highlight=False, emoji=False, soft_wrap=True)


def _warn(message: str) -> None:
    typer.echo(f"warning: {message}", err=True)
