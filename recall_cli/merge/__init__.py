"""`recall merge`: fine-tuned models of one pretrained model fused into one encoder, layer by layer.

    base.py            what a method is: the fusion interface, and Option (one setting a method reads)
    linear.py          weighted average (WiSE-FT with the pretrained model among the inputs)
    task_arithmetic.py theta* + lambda * sum of task vectors
    ties.py            trim, elect sign, disjoint mean
    recall.py          RECALL: per-layer weights from representation similarity (fusion = linear)
    samples.py         where RECALL's typical samples come from (a file, or a task's training inputs)
    io.py              lazy safetensors reads; parameter names -> layers; compatibility checks
    engine.py          the layer-by-layer loop and the output folders

A method is a class in its own file that declares its ``options`` and ``build``s itself from the
opened models and their values (base.MethodSpec) and registers itself (plugins/merges.py's register_merge);
``METHODS`` lists them, and `recall merge` shows every option they declare. Adding a method is its file (in
recall, or in a package of yours named in the entry-point group ``recall_cli.merge``).

``run_merge`` is the whole `recall merge` (the command and benchmarks/merge_memory.py call it).
Importing this package is torch-free (`recall --help` reads the options); the engine comes with
the first merge.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import DeviceError, ExitCode, MergeError
from .base import MergeMethod, MethodSpec, Option
from ..plugins.merges import merges

if TYPE_CHECKING:
    from .engine import MergeResult
    from .io import Source

__all__ = [
    "MERGE_RECORD", "METHODS", "MergeMethod", "MergeResult", "Merged", "MethodSpec", "Option",
    "Source", "known_options", "merge", "method_spec", "open_sources", "parse_options", "run_merge", "score_outputs",
]


def method_spec(name: str) -> type[MethodSpec]:
    known = merges()
    if name not in known:
        raise MergeError(f"--method {name}: use one of {', '.join(known)}")
    return known[name]


def known_options(strict: bool = True) -> dict[str, Option]:
    """Every method's options by name, once each, in the registry's order, as `recall merge` shows
    them: one that several methods read (--base, --lambda) names them all, and each one's default
    where their defaults differ (then the command line's default is None: each method takes its own)."""
    readers: dict[str, list[tuple[type[MethodSpec], Option]]] = {}
    for spec in merges(strict).values():
        for option in spec.options:
            readers.setdefault(option.name, []).append((spec, option))
    shown = {}
    for name, uses in readers.items():
        first = uses[0][1]
        if any((o.type, o.help, o.parse, o.min, o.excludes) != (first.type, first.help, first.parse, first.min, first.excludes)
               for _, o in uses):
            raise TypeError(f"the methods that read {first.flag} declare it differently: give them one declaration")
        if all(o.default == first.default for _, o in uses):
            shown[name] = replace(first, help=f"{'/'.join(s.label for s, _ in uses)}: {first.help}")
        else:
            defaults = " / ".join(f"{s.label} (default {_format(o.default)})" for s, o in uses)
            shown[name] = replace(first, help=f"{defaults}: {first.help}", default=None, show_default=False)
    return shown


def _format(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def parse_options(given: Mapping[str, Any]) -> dict[str, Any]:
    """The options given (a value of None is not given), checked whatever the method, as the
    command line always has: options that exclude each other first, then each value's min and parse."""
    known = known_options()
    for name in given:
        if name not in known:
            raise MergeError(f"unknown merge option {name}: use one of {', '.join(known)}")
    given = {name: value for name, value in given.items() if value is not None}
    for name in given:
        other = known[name].excludes
        if other is not None and other in given:
            raise MergeError(f"give {known[name].flag} or {known[other].flag}, not both")
    values = {}
    for name, option in known.items():
        if name not in given:
            continue
        value = given[name]
        if option.min is not None and value < option.min:
            raise MergeError(f"{option.flag} {value}: use a number >= {option.min}")
        values[name] = option.parse(value) if option.parse is not None else value
    return values


class Merged(NamedTuple):
    result: MergeResult  # the output folder, merge.json's record, one output folder per input
    sources: list[Source]  # the inputs as opened
    scores: list[dict[str, Any]] | None = None  # with evaluate: each input alone and merged


def run_merge(
    models: Sequence[str],
    out: Path | str,
    method: str = "recall",
    options: Mapping[str, Any] | None = None,
    *,
    device: str = "auto",
    evaluate: bool = False,
    report_to: Sequence[str] = (),
) -> Merged:
    """The whole `recall merge`: check the options, open and check the models, build the method
    (RECALL: choose the samples, as --samples, --task or the reference run's task says, and compute
    the weights), fuse, and write OUT/<name>/ per model plus OUT/merge.json.

    ``options`` maps names of ``known_options()`` to values as the command line gives them (a path for
    samples, "0.5,0.5" for weights); an option not given takes the method's default. ``device``
    (auto, cpu or cuda) is where RECALL computes representations. With ``evaluate``, each input with a
    task and a head is scored alone (before the merge) and merged (while the outputs are still staged,
    so that a failed evaluation leaves no OUT). ``report_to`` names trackers (train.report_to's names)
    that get the merge's settings and scores as one run, once OUT is written. Problems raise MergeError
    (or the resolver's, the device's and the environment's errors) with the line to print; nothing is
    written then."""
    check_inputs(models)  # first: one model, or a package typo, is one line before torch is imported
    from .. import trackers
    from ..rundir import output_lock

    trackers.check_available(report_to)  # a missing tracker package: refused before anything is written
    spec = method_spec(method)
    given = parse_options(options or {})
    if device not in ("auto", "cpu", "cuda"):
        raise DeviceError(f"--device {device}: choose auto, cpu or cuda")
    out = Path(out)
    with output_lock(out, "another recall merge", "--out"):
        return _run_merge(models, out, spec, given, device, evaluate=evaluate, report_to=report_to)


def check_inputs(models: Sequence[str]) -> None:
    """What needs no model read: two inputs at least, and every pkg: name an installed model package."""
    from ..model_source import package_problem

    if len(models) < 2:
        given = f" (got {len(models)}: {models[0]})" if models else ""
        raise MergeError(f"give at least two models to merge{given}: run directories, save_pretrained folders or "
                         "pkg:MODULE, oldest first")
    for arg in models:
        problem = package_problem(arg, "model")
        if problem:
            raise MergeError(problem)


def _run_merge(models: Sequence[str], out: Path, spec: type[MethodSpec], given: dict[str, Any], device: str, *,
               evaluate: bool, report_to: Sequence[str]) -> Merged:
    """run_merge's work, under the lock on OUT."""
    import json

    from .. import card, trackers
    from ..rundir import MERGE_RECORD
    from ..runtime import resolve_device
    from . import engine

    engine.check_out(out)
    torch_device = resolve_device(device, option="--device")
    sources = engine.open_sources(list(models))
    engine.check_room(out, sources)
    alone = _score_inputs(sources, out, device) if evaluate else None
    values = {option.name: given.get(option.name, option.default) for option in spec.options}
    fuser, record = spec.build(sources, values, device=torch_device)
    theta_star = engine.base_theta_star(sources, values.get("base")) if fuser.needs_base else None
    scores: list[dict[str, Any]] = []

    def score_staged(outputs: dict[str, Path]) -> None:
        scores.extend(_score_merged(alone or {}, outputs, out, device))
        record_now = json.loads((next(iter(outputs.values())).parent / MERGE_RECORD).read_text(encoding="utf-8"))
        for s in sources:  # the cards say what --evaluate measured on these very weights
            card.write_card(outputs[s.name], engine.output_card(out, s.name, record_now, s.recipe, scores))

    result = engine.merge(sources, fuser, out, theta_star=theta_star, record=record,
                          before_rename=score_staged if evaluate else None)
    if report_to:
        trackers.report_merge(report_to, result.out, result.record, scores if evaluate else None)
    return Merged(result, sources, scores if evaluate else None)


def _evaluating(out: Path, score):
    """``score()``; an error it raises says that OUT was not written, and how to merge without it."""
    from ..errors import RecallError

    try:
        return score()
    except RecallError as exc:
        if exc.exit_code != ExitCode.USAGE:
            raise
        raise MergeError(f"--evaluate: {exc} (nothing was written to {out}: fix this, or merge without --evaluate)") from exc


def _score_inputs(sources: list[Source], out: Path, device: str) -> dict[str, dict[str, Any]]:
    """Each input with a known task and a head, scored alone on its task's dev split."""
    from ..scoring.evaluate import evaluate_checkpoint

    return {s.name: _evaluating(out, lambda s=s: evaluate_checkpoint(s.run_dir or s.folder, device=device))
            for s in sources if s.task is not None and s.head}


def _score_merged(alone: Mapping[str, dict[str, Any]], outputs: Mapping[str, Path], out: Path,
                  device: str) -> list[dict[str, Any]]:
    from ..scoring.evaluate import evaluate_checkpoint

    rows = []
    for name, scored in alone.items():
        merged = _evaluating(out, lambda: evaluate_checkpoint(outputs[name], device=device))
        rows.append({"model": name, "task": scored["task"], "metric": "main",
                     "individual": scored["metrics"]["main"], "merged": merged["metrics"]["main"]})
    return rows


def score_outputs(merged: Merged, device: str = "auto") -> list[dict[str, Any]]:
    """Each input with a known task and a head scored alone and merged (the written outputs), on
    that task's dev split."""
    alone = _score_inputs(merged.sources, merged.result.out, device)
    return _score_merged(alone, merged.result.outputs, merged.result.out, device)


# The engine's names, imported on first use (they bring torch and safetensors).
_LAZY = {"MERGE_RECORD": "engine", "MergeResult": "engine", "merge": "engine", "open_sources": "engine",
         "Source": "io", "SOURCE_RECIPE_FILE": "io"}


def __getattr__(name: str) -> Any:
    if name == "METHODS":  # the registry's, read afresh (a plugin's method is in it)
        return merges()
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
