"""`recall predict` (predictions for a GLUE test or dev split, or a file of your own) and `recall recipes`
(the shipped recipes: list, show, copy). Thin like cli/__init__.py: parse, call recall_cli.scoring.predict, print
one line.

The shipped recipes travel in the wheel as package data: recall_cli/recipes is a link to the repository's
recipes/ folder, which the build copies into the wheel and sdist (pyproject's package-data), so that
importlib.resources finds them in an installed package and in a clone alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import DataError, ExitCode, RunDirError, exit_codes_help
from ..recipe.file import recipes_folder  # the recipe layer's: read_yaml's did-you-mean reads it too
from .common import check_device_name, dumps_json, fail, run_guarded

PREDICT_EXIT_CODES = exit_codes_help({
    ExitCode.OK: "ok",
    ExitCode.FAILURE: "unexpected failure",
    ExitCode.USAGE: "bad usage: an unknown --split, a missing file (a GLUE folder without test.tsv), a file without "
                    "the task's text columns, a --batch-size below 1, an --out that exists (without --overwrite) or "
                    "is a folder, a path that is no run or checkpoint (nothing is written)",
    ExitCode.ENVIRONMENT: "--out cannot be written (disk full, permission denied, read-only)",
    ExitCode.INTERRUPTED: "Ctrl-C",
    ExitCode.PREEMPTED: "SIGTERM (nothing is written)",
}, joiner={ExitCode.PREEMPTED: ", "})
RECIPES_EXIT_CODES = (
    "Exit codes: 0 ok; 2 an unknown recipe, or a --copy destination that exists (without --overwrite); 4 the copy "
    "cannot be written (disk full, permission denied, read-only)."
)


PredictJson = Annotated[bool, typer.Option("--json", help="Print what was written (rows, file, device, precision) as JSON.")]
RecipesJson = Annotated[bool, typer.Option("--json", help="Print the list (or the recipe) as JSON.")]


def register(app: typer.Typer) -> None:
    app.command(epilog=PREDICT_EXIT_CODES)(predict)
    app.command(epilog=RECIPES_EXIT_CODES)(recipes)


# ---- predict --------------------------------------------------------------------------------------


def predict(
    path: Annotated[Path, typer.Argument(help="A run directory (its best/ checkpoint predicts) or a checkpoint folder.", show_default=False)],
    split: Annotated[str, typer.Option(help="test (GLUE's test split from the task's data_dir: test.tsv; MNLI test_matched, test_mismatched), dev (the rows `recall evaluate` scores), or a .csv/.tsv/.jsonl file with the task's text columns (a label column is optional).", show_default=False)],
    out: Annotated[Path, typer.Option(help="File to write: .tsv is GLUE's submission format (index, prediction: the label as the task's files write it, e.g. 0/1 for MRPC, or a float for STS-B), .jsonl one object per row (index, prediction and label when known, both in the TSV's form, probabilities); other names take TSV for test/dev and JSONL for a file.", show_default=False)],
    batch_size: Annotated[Optional[int], typer.Option(help="Examples per forward pass (default: the run's eval batch size).", show_default=False)] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing --out.")] = False,
    task: Annotated[Optional[str], typer.Option(help="Task name (default: the run's); needed for a checkpoint outside a run.", show_default=False)] = None,
    data_dir: Annotated[Optional[Path], typer.Option(help="Local GLUE task folder (default: the run's task.data_dir), e.g. one holding GLUE's test.tsv.", show_default=False)] = None,
    max_new_tokens: Annotated[Optional[int], typer.Option(help="A causal LM's task: the longest greedy completion, in tokens (default 64); it stops earlier at the end-of-sequence token.", show_default=False)] = None,
    as_json: PredictJson = False,
) -> None:
    """Write a checkpoint's predictions for a GLUE test or dev split, or for a file of your own, as run_glue.py's
    --do_predict does: batched, on CPU or CUDA, in the run's precision. The file appears complete or not at all."""

    def go() -> None:
        from ..rundir import locate
        from ..scoring.predict import predict_to_file

        locate(path)  # a wrong path is one line in a second, before torch and the model load
        check_device_name(device)  # CUDA's presence is checked once the rows are read, before the model loads
        result = predict_to_file(path, split, out, batch_size=batch_size, device=device, overwrite=overwrite,
                                 task=task, data_dir=data_dir, max_new_tokens=max_new_tokens)
        if as_json:
            typer.echo(dumps_json(result))
            return
        typer.echo(f"{result['examples']} predictions for {result['task']} {result['split']} "
                   f"({result['checkpoint']}, {result['device']}, {result['precision']}): {result['out']}")

    run_guarded(go, interrupted_hint="nothing was written; run the same command again", writes=out)


# ---- recipes --------------------------------------------------------------------------------------

def shipped_recipes() -> dict[str, Path]:
    """Name (quickstart.yaml, study/sst2.yaml) -> file, sorted by name."""
    folder = recipes_folder()
    found = sorted(p for p in folder.rglob("*.yaml") if p.is_file()) if folder.is_dir() else []
    return {p.relative_to(folder).as_posix(): p for p in found}


def header_line(path: Path) -> str:
    """The first sentence of the recipe's header comment (its opening paragraph's lines joined), without
    the '#': a description cut at the first line's end would stop mid-sentence."""
    import re

    paragraph: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not paragraph and not stripped:
            continue
        if not stripped.startswith("#") or not stripped.lstrip("#").strip():
            break  # the paragraph ends at a blank comment line or the first key
        paragraph.append(stripped.lstrip("#").strip())
    text = " ".join(paragraph)
    # A sentence ends at a full stop before a space, except in "et al.", "e.g." and "i.e."; or at the end.
    end = re.search(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)[.!?](?=\s)", text)
    return text[: end.end()] if end else text


def find_recipe(name: str, available: dict[str, Path]) -> tuple[str, Path]:
    """A recipe by name, with or without .yaml (quickstart, study/sst2.yaml). DataError for an unknown one."""
    import difflib

    key = name if name.endswith((".yaml", ".yml")) else f"{name}.yaml"
    if key in available:
        return key, available[key]
    close = difflib.get_close_matches(key, list(available), n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise DataError(f"no shipped recipe '{name}': {hint}`recall recipes` lists them")


def recipes(
    name: Annotated[Optional[str], typer.Argument(help="A recipe to print or copy, e.g. quickstart (omit to list them).", show_default=False)] = None,
    copy: Annotated[Optional[Path], typer.Option("--copy", help="Copy the recipe to this file (or into this folder).", show_default=False)] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="With --copy: replace an existing file.")] = False,
    as_json: RecipesJson = False,
) -> None:
    """List the recipes shipped with recall (each with the first line of its header comment), print one
    (recall recipes quickstart), or copy one to edit (recall recipes quickstart --copy my.yaml)."""

    def go() -> None:
        available = shipped_recipes()
        if name is None:
            if copy is not None or overwrite:
                fail("--copy and --overwrite go with a recipe's name, e.g. recall recipes quickstart --copy my.yaml", ExitCode.USAGE)
            rows = [{"name": key, "description": header_line(p), "path": str(p)} for key, p in available.items()]
            if as_json:
                typer.echo(dumps_json(rows))
                return
            if not rows:
                fail(f"no recipes found in {recipes_folder()}: reinstall recall", ExitCode.USAGE)
            width = max(len(r["name"]) for r in rows)
            for r in rows:
                typer.echo(f"{r['name']:<{width}}  {r['description']}".rstrip())
            typer.echo(f"\n{len(rows)} recipes in {recipes_folder()}; copy one with: recall recipes NAME --copy FILE")
            return
        key, source = find_recipe(name, available)
        text = source.read_text(encoding="utf-8")
        if copy is None:
            if overwrite:
                fail("--overwrite goes with --copy FILE", ExitCode.USAGE)
            if as_json:
                typer.echo(dumps_json({"name": key, "description": header_line(source), "path": str(source), "text": text}))
            else:
                typer.echo(text, nl=False)
            return
        dest = copy / Path(key).name if copy.is_dir() else copy
        if (dest.exists() or dest.is_symlink()) and not overwrite:
            raise RunDirError(f"{dest} already exists: replace it with --overwrite, or choose another file")
        from ..scoring.predict import write_atomic

        write_atomic(dest, text)
        if as_json:
            typer.echo(dumps_json({"name": key, "copied_to": str(dest)}))
        else:
            typer.echo(f"copied {key} to {dest}")

    run_guarded(go, interrupted_hint=None, writes=copy)
