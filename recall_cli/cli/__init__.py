"""The `recall` command line. Thin: parse arguments, call the library, turn known errors into one line.

Exit codes: 0 success; 1 unexpected failure; 2 bad usage, recipe, data, model or run directory;
3 training diverged (NaN/inf loss); 4 the environment (disk full, permission denied, read-only);
130 interrupted (Ctrl-C); 143 SIGTERM. Set RECALL_DEBUG=1 for tracebacks.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
import yaml

from .. import __version__
from ..errors import EXIT_CODES_HELP, ExitCode
from .common import (
    JsonOpt,
    RecallGroup,
    check_device,
    check_device_name,
    dumps_json,
    fail,
    run_guarded,
    use_recall_commands,
)

app = typer.Typer(
    name="recall",
    cls=RecallGroup,
    help="Fine-tune pretrained language models with less forgetting (RecAdam, Chen et al. 2020).\n\n" + EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"recall {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
) -> None:
    """Fine-tune pretrained language models with less forgetting."""


# ---- finetune ------------------------------------------------------------------------------------

RecipeArg = Annotated[Optional[Path], typer.Argument(help="Recipe YAML file (omit with --resume).", show_default=False)]
OverridesArg = Annotated[
    Optional[list[str]],
    typer.Argument(help="Dotted KEY=VALUE overrides, e.g. optimizer.anneal_k=0.1 train.seed=3.", show_default=False),
]


@app.command(epilog=EXIT_CODES_HELP)
def finetune(
    recipe: RecipeArg = None,
    overrides: OverridesArg = None,
    resume: Annotated[Optional[Path], typer.Option(help="Continue the run in this output directory from last/.")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing run in output_dir.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate, print the resolved recipe and lambda(t) plan, exit.")] = False,
    plain: Annotated[Optional[bool], typer.Option("--plain/--rich", help="Plain log lines or a live progress bar (default: rich on a TTY).", show_default=False)] = None,
    nproc: Annotated[Optional[int], typer.Option("--nproc", min=1, help="Start N processes on this machine under torchrun (DDP: nccl on CUDA, gloo on CPU). train.batch_size is per process.", show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="With --dry-run: one JSON object (recipe, plan, preflight checks, memory estimate).")] = False,
    fsdp: Annotated[bool, typer.Option("--fsdp", help="Shard the model over the processes (FSDP2), as train.distributed=fsdp: with --nproc N or under torchrun.")] = False,
) -> None:
    """Fine-tune a model as a recipe says, writing a run directory (see docs/run-directory.md).

    For several devices: `recall finetune RECIPE --nproc 8`, or `torchrun --nproc_per_node 8 -m recall_cli
    finetune RECIPE` (and torchrun's --nnodes and rendezvous flags across machines). SIGTERM saves last/
    at the end of the current step and exits 143; --resume continues with the same number of processes.
    """

    def go() -> None:
        import os

        torchrun_world = int(os.environ.get("WORLD_SIZE", "1"))
        given = _with_fsdp(fsdp, nproc or torchrun_world, overrides, resume)
        loaded = _recipe_to_run(recipe, given, resume)
        if fsdp and loaded.train.distributed != "fsdp":  # --resume: the run's config.yaml decides how it shards
            fail(f"--fsdp: the run in {resume} trained with train.distributed={loaded.train.distributed}; it resumes "
                 "as it began: leave --fsdp out", ExitCode.USAGE)
        if nproc is not None and "WORLD_SIZE" in os.environ and nproc != torchrun_world:
            fail(f"--nproc {nproc} under torchrun with WORLD_SIZE={torchrun_world}: give one or the other", ExitCode.USAGE)
        if as_json and not dry_run:
            fail("--json goes with --dry-run (a run writes its records to metrics.jsonl)", ExitCode.USAGE)
        from ..model import check_hub

        # Offline, what the recipe needs from the hub is named now, in one line, instead of after five
        # retries a file; what the caches hold is read from them without asking the hub.
        check_hub(loaded.model.name_or_path, loaded.task.name, loaded.task.data_dir,
                  what=f"the run in {resume}" if resume is not None else str(recipe))
        if dry_run:
            _print_dry_run(loaded, nproc or torchrun_world, as_json, resume=resume is not None, overwrite=overwrite)
            return
        if nproc is not None and nproc > 1 and "WORLD_SIZE" not in os.environ:
            # The recipe is valid (checked above, once); the workers run this same command without --nproc.
            from ..distributed import launch

            args = ["finetune"]
            args += ["--resume", str(resume)] if resume is not None else [str(recipe), *given]
            args += ["--overwrite"] if overwrite else []
            args += [] if plain is None else ["--plain" if plain else "--rich"]
            raise typer.Exit(launch(nproc, args))
        from .console import make_reporter
        from ..training.loop import finetune as run

        reporter = make_reporter(plain)
        started.append(Path(loaded.output_dir))
        try:
            run(loaded, resume=resume is not None, overwrite=overwrite, reporter=reporter)
        finally:
            reporter.close()

    started: list[Path] = []  # the run directory, once the recipe is read
    began = time.time()

    def stopped() -> str:
        """What Ctrl-C or SIGTERM leaves, in the hint's words: a checkpoint to continue from (one this
        command saved, or the one --resume started from), or nothing."""
        from ..rundir import LAST_DIR, TRAINER_STATE_FILE, find_checkpoint

        last = find_checkpoint(started[0], LAST_DIR) if started else None
        if last is not None and (resume is not None or (last / TRAINER_STATE_FILE).stat().st_mtime >= began):
            return f"continue with `recall finetune --resume {started[0]}`"
        if started and started[0].is_dir() and resume is None and last is None:
            return f"{started[0]} holds no checkpoint yet: run the same command again with --overwrite"
        return "nothing was written; run the same command again"

    # SIGTERM before the first step (loading, theta*, the pre-passes) rolls the run directory back and
    # exits 143; from the first step on, the loop takes SIGTERM itself and saves last/ first
    # (distributed.SigtermFlag, installed over this handler for the loop's life). A full disk whose
    # error names no file is reported against the run directory.
    run_guarded(go, interrupted_hint=stopped, writes=lambda: started[0] if started else None)


def _with_fsdp(fsdp: bool, processes: int, overrides: list[str] | None, resume: Path | None) -> list[str]:
    """The overrides with --fsdp's train.distributed=fsdp (a resumed run keeps its config.yaml's); --fsdp on one
    process is refused in one line before anything is read."""
    if fsdp and processes <= 1:
        fail("--fsdp shards the model over processes, and this is one: add --nproc N (N >= 2), or start it under "
             "torchrun --nproc_per_node N -m recall_cli finetune", ExitCode.USAGE)
    return [*(overrides or []), *(["train.distributed=fsdp"] if fsdp and resume is None else [])]


def _recipe_to_run(recipe: Path | None, overrides: list[str] | None, resume: Path | None):
    """The recipe file with its overrides, or --resume's run directory's own config.yaml (a moved or
    copied run is where the user says it is now)."""
    from ..recipe import load_recipe, recipe_from_dict
    from ..recipe.file import read_yaml
    from ..rundir import CONFIG_FILE, no_checkpoint_message, scored_record

    if resume is None:
        if recipe is None:
            fail("give a recipe file (e.g. recall finetune recipes/quickstart.yaml) or --resume OUTPUT_DIR", ExitCode.USAGE)
        notes: list[str] = []
        loaded = load_recipe(recipe, list(overrides or []), notes)
        for note in notes:
            typer.echo(f"note: {note}", err=True)
        return loaded
    if recipe is not None or overrides:
        fail("--resume continues the recipe saved in the run directory: give no recipe or overrides", ExitCode.USAGE)
    config = resume / CONFIG_FILE
    if not config.is_file():
        fail(f"{resume} is not a recall run directory (no config.yaml): check the path", ExitCode.USAGE)
    if scored_record(resume) is not None:
        fail(no_checkpoint_message(resume) + "; a record cannot be resumed", ExitCode.USAGE)
    raw = read_yaml(config)
    if isinstance(raw, dict) and isinstance(raw.get("train"), dict):
        raw["train"].setdefault("save", "all")  # written before train.save existed: it kept everything, and still does
    loaded = recipe_from_dict(raw, str(config))
    if Path(loaded.output_dir).resolve() != resume.resolve():
        loaded = dataclasses.replace(loaded, output_dir=str(resume))
    return loaded


def _print_dry_run(recipe, world_size: int = 1, as_json: bool = False, *, resume: bool = False,
                   overwrite: bool = False) -> None:
    from ..distributed import Distributed
    from ..names import OPTIMIZERS
    from ..recipe.advice import schedule_warnings
    from ..training.methods import dry_run_lines
    from ..training.progress import Reporter
    from ..training.setup import Start, prepare

    tc, oc = recipe.train, recipe.optimizer
    # The run's own set-up, stopped before anything is written (under --nproc, rank 0's view).
    prepared = prepare(recipe, Distributed(world_size=world_size), Start.of(resume=resume, overwrite=overwrite),
                       Reporter(), dry_run=True)
    checks = prepared.checks
    run_plan = prepared.plan  # the run's own plan: its schedule on the encoder's clock (after LP-FT's head phase)
    n_train, total, t0 = len(prepared.task.train), run_plan.total_steps, run_plan.anneal_t0
    lambdas, pulls = {}, {}
    if OPTIMIZERS[oc.name].anchored:  # lambda(t) weighs the recall terms: vanilla runs have none
        points = sorted({1, max(1, round(t0 / 2)), max(1, round(t0)), min(total, round(t0 + 2 / oc.anneal_k)),
                         min(total, round(t0 + 4 / oc.anneal_k)), max(1, total // 2), total})
        lambdas = {t: run_plan.lam_at(t) for t in points}
        pulls = {t: run_plan.pull_at(t) for t in points}
    warnings = schedule_warnings(recipe, total)
    methods = dry_run_lines(prepared)
    if not as_json:
        # λ(t)'s midpoint only where something reads it (RecAdam, or a method on its clock): an adamw run has none
        read = OPTIMIZERS[oc.name].anchored or any(m.reads_recall_schedule(recipe) for m in run_plan.methods)
        _print_plan(recipe, world_size, total, t0 if read else None, lambdas, pulls, warnings)
        for key, line in methods.items():
            typer.echo(f"# {key}: {line}")
    if as_json:
        plan = {"total_steps": total, "anneal_t0": t0, "train_examples": n_train, "processes": world_size,
                "global_batch": tc.batch_size * world_size * tc.grad_accum,
                "lambda": [{"step": t, "lambda": v} for t, v in lambdas.items()], **methods}
        if lambdas:  # the penalty's weight at the same steps: anneal_w - lambda, never below the floor
            plan["recall_floor"] = oc.recall_floor
            plan["penalty_weight"] = [{"step": t, "weight": v} for t, v in pulls.items()]
        typer.echo(dumps_json({"recipe": recipe.to_dict(as_written=True), "plan": plan, "warnings": warnings, **checks.to_dict()}))
    else:
        _print_checks(checks)
    checks.raise_on_failure()


def _print_plan(recipe, world_size, total, t0, lambdas, pulls, warnings) -> None:
    tc = recipe.train
    typer.echo(yaml.safe_dump(recipe.to_dict(as_written=True), sort_keys=False).rstrip())
    typer.echo(f"# plan: {total} optimizer steps" + (f"; anneal_t0 = {t0:g} steps" if t0 is not None else ""))
    if world_size > 1:
        typer.echo(f"# {world_size} processes: global batch = {tc.batch_size} per process x {world_size} x "
                   f"grad_accum {tc.grad_accum} = {tc.batch_size * world_size * tc.grad_accum} examples per step")
    if lambdas:
        oc = recipe.optimizer
        typer.echo("# lambda(t): " + ", ".join(f"t={t}: {v:.3f}" for t, v in lambdas.items()))
        if oc.recall_floor > 0:
            typer.echo(f"# recall penalty weight max({oc.anneal_w:g} - lambda, floor {oc.recall_floor:g}): "
                       + ", ".join(f"t={t}: {v:.3f}" for t, v in pulls.items()))
    for message in warnings:
        typer.echo(f"warning: {message}", err=True)


def _print_checks(checks) -> None:
    from rich.table import Table

    from .console import out_console
    from ..training.preflight import gib

    style = {"ok": "green", "warn": "yellow", "fail": "bold red"}
    table = Table(title="preflight", title_justify="left", show_header=True, box=None, pad_edge=False)
    table.add_column("check")
    table.add_column("", no_wrap=True)
    table.add_column("finding", overflow="fold")
    for check in checks.checks:
        table.add_row(check.name, f"[{style[check.status]}]{check.status}[/]", check.message)
    out_console.print(table)
    if checks.memory is not None:
        parts = ", ".join(f"{name} {gib(n)}" for name, n in checks.memory.parts.items())
        out_console.print(f"# memory estimate per process: {parts}", soft_wrap=True)
        state = " + ".join(f"{name} {n / max(1, checks.memory.parameters):.0f}" for name, n in checks.memory.state_parts.items() if n)
        out_console.print(f"# bytes per parameter: {checks.memory.bytes_per_parameter:.1f} ({state})", soft_wrap=True)


# ---- evaluate ------------------------------------------------------------------------------------


@app.command(epilog=EXIT_CODES_HELP)
def evaluate(
    path: Annotated[Path, typer.Argument(help="A run directory (its best/ checkpoint is scored) or a checkpoint folder.")],
    task: Annotated[Optional[str], typer.Option(help="Task name (default: the run's).")] = None,
    data_dir: Annotated[Optional[Path], typer.Option(help="Local GLUE task folder (default: the run's).")] = None,
    split: Annotated[Optional[str], typer.Option(help="Split to score: dev (default), or dev_matched/dev_mismatched for MNLI.")] = None,
    batch_size: Annotated[Optional[int], typer.Option(min=1, help="Eval batch size (default: the run's).")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    record: Annotated[Optional[Path], typer.Option(help="Also write a scored record here (config.yaml, metrics.jsonl, summary.json; no weights): the dev metrics, ||theta - theta*|| and the probes, for compare / tradeoff beside training runs. For merge outputs and WiSE-FT points.", show_default=False)] = None,
    against: Annotated[Optional[str], typer.Option(help="With --record: theta* for the distance and the probes (default: the source run's model.name_or_path).", show_default=False)] = None,
    probe: Annotated[bool, typer.Option("--probe/--no-probe", help="With --record: run the recipe's probes (CKA, drift, STS).")] = True,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="With --record: replace an existing record.")] = False,
    holdout: Annotated[bool, typer.Option("--holdout", help="Also score the rows the run held out of its training split to choose best/ on (task.holdout, task.max_holdout_examples: the same rows).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Score a checkpoint on a task's dev split and print its metrics (--holdout: and on the run's holdout)."""

    def go() -> None:
        from ..rundir import locate

        locate(path)  # a wrong path, option or task is one line in a second, before torch and the model load
        check_device_name(device)
        if record is not None and (task is not None or data_dir is not None or split is not None or batch_size is not None):
            fail("--record scores the checkpoint as its own run did: leave out --task, --data-dir, --split and --batch-size", ExitCode.USAGE)
        if record is None and (against is not None or overwrite or not probe):
            fail("--against, --overwrite and --no-probe go with --record DIR", ExitCode.USAGE)
        if holdout and (record is not None or task is not None or split is not None):
            fail("--holdout scores the rows the run held out, with the run's own task: leave out --record, --task and --split",
                 ExitCode.USAGE)
        from ..scoring.scored import check_holdout, checkpoint_task

        scored = checkpoint_task(path, task, data_dir)  # the task and the checkpoint's label count agree
        if holdout:
            check_holdout(scored, path)
        from ..scoring.evaluate import evaluate_checkpoint

        check_device(device)
        if record is not None:
            from ..scoring.records import write_record

            summary = write_record(path, record, against=against, probe=probe, device=device, overwrite=overwrite)
            if as_json:
                typer.echo(dumps_json(summary))
                return
            final, measured = summary["final"], summary.get("probe") or {}
            shown = [f"{k}={final[k]:.4g}" for k in final if k not in ("step", "holdout", "dev")]
            shown += [f"holdout_main={final['holdout']['main']:.4g}"] if "holdout" in final else []
            shown += [f"{k}={measured[k]:.4g}" for k in ("sts_retained", "cka", "drift") if k in measured]
            typer.echo(f"{summary['task']} {summary['checkpoint']}: " + " ".join(shown))
            typer.echo(f"record: {record}")
            return
        result = evaluate_checkpoint(path, task=task, data_dir=data_dir, split=split, batch_size=batch_size, device=device,
                                     holdout=holdout)
        if as_json:
            typer.echo(dumps_json(result))
        else:
            _print_scores(result)

    def written() -> float | None:
        summary = record / "summary.json" if record is not None else None
        return summary.stat().st_mtime if summary is not None and summary.is_file() else None

    def stopped() -> str | None:  # a record is renamed into place last: a stop before that leaves it as it was
        if record is None:
            return None
        if written() != before:
            return f"the record {record} was complete before the stop"
        return f"no record was written to {record}; run the same command again"

    before = written()
    run_guarded(go, interrupted_hint=stopped, writes=record)


def _print_scores(result: dict) -> None:
    """evaluate's table: the dev metrics, then (--holdout) the metrics of the rows best/ was chosen on."""
    from rich.markup import escape
    from rich.table import Table

    from .console import print_table

    table = Table(title=f"{result['task']} — {escape(str(result['checkpoint']))}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in result["metrics"].items():
        table.add_row(name, f"{value:.4f}")
    for name, value in result.get("holdout_metrics", {}).items():
        table.add_row(f"holdout {name}", f"{value:.4f}")
    print_table(table)


# ---- sweep / forgetting / compare ------------------------------------------------------------------

from .runs import register  # noqa: E402 - the sweep/forgetting/compare group

register(app)
from .probe import register as register_probe  # noqa: E402 - probe/tradeoff

register_probe(app)

from .merge import register as register_merge  # noqa: E402 - recall merge

register_merge(app)

from .predict import register as register_predict  # noqa: E402 - recall predict, recall recipes

register_predict(app)

from .continual import register as register_continual  # noqa: E402 - recall continual

register_continual(app)
use_recall_commands(app)  # every command's --help in one style (common.RecallCommand)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
