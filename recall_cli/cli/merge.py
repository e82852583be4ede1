"""`recall merge`: thin like cli/__init__.py. Parse, call recall_cli.merge.run_merge, print the weight table
(and with --evaluate the individual-vs-merged scores), and let run_guarded turn known errors into one line.

The merge methods' options are not written here: each method declares its own (recall_cli/merge/), and
the command takes every one of them after --method."""

from __future__ import annotations

import inspect
import json
import keyword
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import ExitCode, exit_codes_help
from ..merge import Option, known_options
from ..plugins.merges import merges
from .common import JsonOpt, dumps_json, run_guarded

MERGE_EXIT_CODES = exit_codes_help({
    ExitCode.OK: "ok",
    ExitCode.FAILURE: "unexpected failure",
    ExitCode.USAGE: "bad usage: fewer than two models, a missing folder, models of different architectures, shapes or "
                    "vocabularies, an unreadable weights file, a missing or empty samples file, a number that is not "
                    "finite or out of range, settings that would write NaN/inf weights, an --out that exists, a failed "
                    "--evaluate (nothing is written)",
    ExitCode.ENVIRONMENT: "--out cannot be written (disk full, permission denied, read-only, a file or dangling link "
                          "in the way)",
    ExitCode.INTERRUPTED: "Ctrl-C",
    ExitCode.PREEMPTED: "SIGTERM (nothing is written)",
}, joiner={ExitCode.PREEMPTED: ", "})


def register(app: typer.Typer) -> None:
    app.command(epilog=MERGE_EXIT_CODES)(merge)


def merge(
    models: Annotated[list[str], typer.Argument(help="Run directories (their best/) or save_pretrained folders, oldest first; pkg:MODULE for a packaged model.", show_default=False)],
    out: Annotated[Path, typer.Option("--out", help="New folder: one model per input under it, plus merge.json.", show_default=False)],
    method: Annotated[str, typer.Option(help=f"{', '.join(list(merges(strict=False))[:-1])} or {list(merges(strict=False))[-1]}.")] = "recall",
    *,  # every method's options come here (_with_method_options)
    device: Annotated[str, typer.Option(help="RECALL representations and --evaluate: auto, cpu or cuda.")] = "auto",
    evaluate: Annotated[bool, typer.Option("--evaluate", help="Score every output and its source model on the source's task.")] = False,
    report_to: Annotated[list[str] | None, typer.Option("--report-to", help="Trackers that get the merge's settings and --evaluate's scores as one run: tensorboard, wandb or mlflow (repeat for more).")] = None,
    as_json: JsonOpt = False,
    **method_options: Any,
) -> None:
    """Merge models fine-tuned from one pretrained model into one encoder; every model keeps its head.

    RECALL (the default) weighs each layer by how close the models' representations are to the
    reference's on a few typical inputs; linear, task_arithmetic and ties are the usual baselines.
    """

    def go() -> None:
        from .. import merge as m

        given = {name: method_options[_parameter_name(name)] for name in known_options()}  # a broken plugin: its line
        merged = m.run_merge(models, out, method, given, device=device, evaluate=evaluate, report_to=report_to or ())
        scores = merged.scores
        if as_json:
            typer.echo(dumps_json({**merged.result.record, **({"scores": scores} if scores else {})}))
            return
        _print(merged.result, scores)

    def stopped() -> str:  # the outputs are renamed into place last: a stop before that leaves no --out
        return f"{out} was complete before the stop" if out.exists() else f"nothing was written to {out}; run the same command again"

    run_guarded(go, interrupted_hint=stopped, writes=out)


# --help lists the options in the order they had before the methods declared them; an option that a
# new method brings comes after these, in the registry's order.
_HELP_ORDER = ("reference", "samples", "task", "clusters", "pool", "temperature", "gamma", "base", "weights",
               "lambda", "density", "seed")


def _parameter_name(option: str) -> str:
    return option + "_" if keyword.iskeyword(option) else option  # lambda -> lambda_


def _parameter(option: Option) -> inspect.Parameter:
    """One option as typer reads a parameter. Not given, it is None (the method's default applies),
    except where the option's show_default makes the method's default the command line's. --help shows
    the default either way (as text where the parameter's own is None); one that several methods read
    with different defaults names them in its help instead."""
    kind = option.type if option.show_default else option.type | None
    shown: bool | str = option.show_default or (False if option.default is None else _shown_default(option.default))
    info = typer.Option(option.flag, help=option.help, show_default=shown, min=option.min)
    return inspect.Parameter(_parameter_name(option.name), inspect.Parameter.KEYWORD_ONLY,
                             default=option.default if option.show_default else None, annotation=Annotated[kind, info])


def _shown_default(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _with_method_options(command):
    """``command`` with every merge method's options after --method, in the signature typer reads."""
    signature = inspect.signature(command, eval_str=True)
    fixed = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    at = [p.name for p in fixed].index("method") + 1
    order = {name: i for i, name in enumerate(_HELP_ORDER)}
    # strict=False: a merge plugin that fails to load leaves recall's own options here; `recall merge` then
    # names the plugin in one line (known_options in the command raises it)
    shown = sorted(known_options(strict=False).values(), key=lambda o: order.get(o.name, len(order)))
    command.__signature__ = signature.replace(parameters=fixed[:at] + [_parameter(o) for o in shown] + fixed[at:])
    return command


_with_method_options(merge)


def _print(result, scores) -> None:
    from rich.table import Table

    from .console import out_console

    record = result.record
    names = [i["name"] for i in record["inputs"]]
    if "layers" in record:
        table = Table(title=f"RECALL weights (similarity) — reference {record['reference']}, "
                            f"tau {record['temperature']:g}, gamma {record['gamma_rule']}, {record['clusters']} samples")
        table.add_column("layer")
        for name in names:
            table.add_column(name, justify="right")
        last = len(record["layers"]) - 1
        for row in record["layers"]:
            label = "0 embeddings" if row["layer"] == 0 else f"{row['layer']}" + (" +pooler" if row["layer"] == last else "")
            table.add_row(label, *(f"{w:.3f} ({s:.3f})" for w, s in zip(row["weight"], row["similarity"])))
        out_console.print(table)
    else:
        settings = {k: record[k] for k in ("weights", "lambda", "density") if k in record}
        out_console.print(f"{record['method']} merge of {', '.join(names)} {json.dumps(settings) if settings else ''}".rstrip())
    if scores:
        table = Table(title="dev score (main metric): individual vs merged")
        for column in ("model", "task", "individual", "merged", "change"):
            table.add_column(column, justify="left" if column in ("model", "task") else "right")
        for row in scores:
            table.add_row(row["model"], row["task"], f"{row['individual']:.4f}", f"{row['merged']:.4f}",
                          f"{row['merged'] - row['individual']:+.4f}")
        mean_i = sum(r["individual"] for r in scores) / len(scores)
        mean_m = sum(r["merged"] for r in scores) / len(scores)
        table.add_row("average", "", f"{mean_i:.4f}", f"{mean_m:.4f}", f"{mean_m - mean_i:+.4f}")
        out_console.print(table)
    out_console.print(f"wrote {result.out}: " + ", ".join(f"{n}/" for n in result.outputs) + ", merge.json")
