"""`recall continual`: thin like cli/__init__.py. Parse, call recall_cli.sequence's runner, print the
matrix table and one summary line; run_guarded turns known errors into one line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import ExitCode, exit_codes_help
from .common import JsonOpt, dumps_json, run_guarded

CONTINUAL_EXIT_CODES = exit_codes_help({
    ExitCode.OK: "ok",
    ExitCode.FAILURE: "unexpected failure",
    ExitCode.USAGE: "bad usage: a stage recipe that does not build (unknown key, missing file), a wrong continual.* key "
                    "or merge option, a stage whose model "
                    "family, width or tokenizer differs from stage 1's, an --out that holds a sequence (without "
                    "--resume or --overwrite), or another recall continual writing it (nothing is written)",
    ExitCode.DIVERGED: "a stage diverged (NaN/inf loss)",
    ExitCode.ENVIRONMENT: "--out cannot be written (disk full, permission denied, read-only)",
    ExitCode.INTERRUPTED: "Ctrl-C",
    ExitCode.PREEMPTED: "SIGTERM (the stage saved last/; --resume continues)",
}, joiner={ExitCode.PREEMPTED: ", "})


def register(app: typer.Typer) -> None:
    app.command(epilog=CONTINUAL_EXIT_CODES)(continual)


def continual(
    stages: Annotated[Optional[list[str]], typer.Argument(help="Stage recipes in order, then dotted KEY=VALUE overrides for every stage (continual.weights=best, continual.probe=true, continual.merge=recall, continual.merge.NAME=VALUE, continual.theta_star=original: the sequence's own).", show_default=False)] = None,
    out: Annotated[Path, typer.Option("--out", help="The sequence's folder: stages/NN-TASK/ run directories, continual.json, matrix.png.", show_default=False)] = Path("runs/continual"),
    resume: Annotated[bool, typer.Option("--resume", help="Finish the sequence in --out (the command continual.json recorded).")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace a sequence in --out.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Build and check every stage's recipe, print the plan, exit.")] = False,
    plain: Annotated[Optional[bool], typer.Option("--plain/--rich", help="Plain log lines or a live progress bar (default: rich on a TTY).", show_default=False)] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="train.seed of every stage.", show_default=False)] = None,
    as_json: JsonOpt = False,
) -> None:
    """Fine-tune one model on task after task: each stage starts from the previous stage's weights, and after
    each stage every task seen so far is scored (the continual-learning matrix, ACC, BWT, FWT, forgetting)."""

    files = [Path(s) for s in (stages or []) if "=" not in s]
    overrides = [s for s in (stages or []) if "=" in s]

    def go() -> None:
        from ..sequence.runner import plan_for, run_continual
        from ..sequence.show import summary_line, table

        if resume and overwrite:
            from .common import fail

            fail("--resume and --overwrite: give one", ExitCode.USAGE)
        if dry_run:
            plan = plan_for(files, overrides, out, seed=seed, resume=resume)
            lines = {f"stage {s.index}": f"{s.file} ({s.task}) -> {s.run_dir}" for s in plan.stages}
            if as_json:
                typer.echo(dumps_json({"stages": lines, **plan.command()}))
                return
            for k, v in lines.items():
                typer.echo(f"{k}: {v}")
            merge = plan.settings.merge + "".join(f" {k}={v}" for k, v in plan.settings.merge_options.items())
            typer.echo(f"continual: weights={plan.settings.weights} probe={plan.settings.probe} merge={merge} "
                       f"theta_star={plan.settings.theta_star}; every stage's recipe checked (nothing written)")
            return
        from .console import make_reporter, print_table

        from ..errors import Preempted

        try:
            record = run_continual(files, overrides, out, resume=resume, overwrite=overwrite, seed=seed,
                                   reporter_for=lambda stage: make_reporter(plain), note=lambda t: typer.echo(t, err=True))
        except Preempted as stop:  # the stage's own words name finetune; the sequence resumes as a whole
            stop.args = (f"stopped by SIGTERM after step {stop.step} of {stop.run_dir}; its last/ holds a complete "
                         f"checkpoint: continue with recall continual --resume --out {out}",)
            raise
        if as_json:
            typer.echo(dumps_json(record))
            return
        print_table(table(record))
        typer.echo(summary_line(record, out))

    def stopped() -> str:
        return f"continue with `recall continual --resume --out {out}`"

    run_guarded(go, interrupted_hint=stopped, writes=out)
