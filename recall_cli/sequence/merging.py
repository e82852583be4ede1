"""Merge after each stage (``continual.merge``): RECALL's sequential scenario. After stage i trains, its
model is merged with the previous stage's merged model, stage i+1 starts from the merged weights, and
the matrix row of stage i is read on the merged model.

Stage 1 is not merged: there is no earlier task model to merge it with (the pretrained model holds no
task, and merging it in would halve what stage 1 learned before anything is at stake). From stage 2 on
the two inputs are, in this order, the previous merged model (stage 1's own weights for stage 2) and the
weights stage i just trained, the newest: RECALL's reference, whose task gives the typical samples.

The merge is `recall merge`'s own (merge.run_merge: the same checks, fusion, outputs and merge.json), into
``DIR/stages/NN-TASK/merged/``; ``merged/NN-TASK/`` is the merged encoder with stage i's head, a plain
folder that `recall evaluate` and `probe` open. A finished merge (its merge.json) is never redone; one
interrupted leaves only a hidden staging folder beside ``merged/``, which the next run removes before it
merges again from the same inputs.

The merge's own options are ``continual.merge.NAME=VALUE``, NAME one of the chosen method's `recall merge`
options (``continual.merge.weights=0.3,0.7``: previous, then new). TIES needs theta*: by default the
original pretrained model (stage 1's ``model.name_or_path``), else ``continual.merge.base``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MERGED_DIR = "merged"
OPTION_PREFIX = "merge."
METHODS = ("recall", "linear", "ties")  # what continual.merge offers besides none (plan.MERGES)
NOT_HERE = {"reference": "the reference is always the stage just trained"}


def check_options(method: str, given: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(the options as the merge reads them from the command line's text, one line per problem). Every
    option is refused that the method does not read, whose value is not its type, or that `recall merge`
    itself would refuse."""
    if not given:
        return {}, []
    keys = ", ".join(f"continual.merge.{n}" for n in given)
    if method == "none":
        return {}, [f"{keys}: no merge after each stage (continual.merge=none): set continual.merge to one of "
                    f"{', '.join(METHODS)}, or drop {keys}"]
    from ..errors import MergeError
    from ..merge import method_spec, parse_options

    spec = method_spec(method)
    readable = {o.name: o for o in spec.options if o.name not in NOT_HERE}
    problems, values = [], {}
    for name, value in given.items():
        key = f"continual.merge.{name}"
        if name in NOT_HERE:
            problems.append(f"{key}: {NOT_HERE[name]} (drop it)")
            continue
        if name not in readable:
            known = ", ".join(f"continual.merge.{n}" for n in readable) or "none"
            problems.append(f"{key}: the {spec.label} merge has no option {name} (its options: {known})")
            continue
        option = readable[name]
        kind = str if option.type is Path else option.type
        if isinstance(value, bool) or value is None or (kind is int and isinstance(value, float)):
            problems.append(f"{key}: give {'an integer' if kind is int else 'a number' if kind is float else 'a value'}, got {value!r}")
            continue
        try:
            values[name] = kind(value)
        except (TypeError, ValueError):
            problems.append(f"{key}: give {'an integer' if kind is int else 'a number'}, got {value!r}")
    if problems:
        return {}, problems
    try:
        parsed = parse_options(values)
    except MergeError as exc:
        return {}, [f"continual.merge: {exc} (given as continual.merge.NAME=VALUE)"]
    if "base" in values:  # opened now (names and shapes only), not after stage 2 has trained
        from ..errors import RecallError
        from ..merge.io import open_source

        try:
            open_source(values["base"])
        except RecallError as exc:
            problems.append(f"continual.merge.base: {exc}")
    if "weights" in parsed and len(parsed["weights"]) != 2:
        problems.append(f"continual.merge.weights: {len(parsed['weights'])} values; give 2: the previous merged model's "
                        "and the stage's (e.g. 0.5,0.5)")
    return values, problems


def merged_folder(stage_dir: Path) -> Path | None:
    """The merged model of a stage whose merge finished (its merge.json names the trained input's output),
    else None."""
    from ..rundir import MERGE_RECORD

    record_file = Path(stage_dir) / MERGED_DIR / MERGE_RECORD
    if not record_file.is_file():
        return None
    record = json.loads(record_file.read_text(encoding="utf-8"))
    inputs = record.get("inputs") or []
    # the stage's own weights are the second input (merge_stage's order), however its path was written
    return Path(stage_dir) / MERGED_DIR / inputs[-1]["name"] if len(inputs) == 2 else None


def merge_stage(method: str, options: dict[str, Any], stage_dir: Path, previous: Path, trained: Path,
                original: str, device: str) -> tuple[Path, bool]:
    """(stage i's merged model, whether it was merged now): ``previous`` (the previous merged model) and
    ``trained`` (stage i's weights) merged by `recall merge`'s run_merge into stage_dir/merged/."""
    done = merged_folder(stage_dir)
    if done is not None:
        return done, False
    from ..merge import method_spec, run_merge

    given = dict(options)
    if any(o.name == "base" for o in method_spec(method).options) and "base" not in given:
        given["base"] = original  # theta* for task vectors: the model the sequence started from
    run_merge([str(previous), str(trained)], Path(stage_dir) / MERGED_DIR, method, given,
              device=device if device in ("auto", "cpu", "cuda") else "auto")
    folder = merged_folder(stage_dir)
    assert folder is not None, "run_merge wrote no output for the stage's own weights"
    return folder, True


def original_model(recipe: Any) -> str:
    """Where the sequence's starting model is (stage 1's model), as `recall merge` opens it."""
    cfg = recipe.model
    return str(Path(cfg.name_or_path) / cfg.gguf_file) if cfg.gguf_file else cfg.name_or_path
