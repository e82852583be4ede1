"""Reading run directories back: find them, read each run's recipe, metrics and summary, pick runs.

A run directory holds config.yaml, metrics.jsonl and summary.json (docs/run-directory.md). A
``Run`` is one of them read back, its recipe flattened to dotted keys; ``read_run`` is the one place
that reads a run, ``load_runs`` finds every run under a folder. ``differing_keys`` names the settings
that take two or more values among runs of one task: what comparison.py groups by.
"""

from __future__ import annotations

import copy
import difflib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence
from typing import Any, Callable

import yaml

from ..errors import ReportError
from ..plugins.methods import inert_keys
from ..names import RECADAM_ONLY_KEYS, SHORT_KEYS, is_vanilla
from ..rundir import (CONFIG_FILE, METRICS_FILE, SUMMARY_FILE, Summary, is_run_dir, read_config, read_metrics_checked,
                      read_summary_checked)
from ..scoring.records import RECORD_PATH_KEYS


# Keys that never make a setting (issue 32): two runs that differ only in these are two seeds of one
# setting, in compare, forgetting and tradeoff alike. Each changes bookkeeping, cadence or hardware, not
# what is learned nor what the report's number measures. `--by KEY` still groups by any of them.
NOT_SETTING_REASONS = {
    "output_dir": "where the run is written",
    "train.seed": "the seed: what the runs of one setting differ in (the report aggregates over it)",
    "train.report_to": "experiment trackers: where the records are also sent",
    "train.log_every": "how often a training record is written",
    "train.eval_every": "how often the dev set (the holdout, under task.holdout) is scored: the final score is "
                        "the same; --at best reads the best of these evaluations",
    "train.save_every": "checkpoint cadence",
    "train.keep_last": "how many step checkpoints are kept",
    "train.save": "what a finished run keeps on disk",
    "train.eval_batch_size": "evaluation batching",
    "train.device": "the hardware: CPU and CUDA differ in float rounding, as two GPUs do (with train.precision "
                    "auto the device also picks the precision: set train.precision, or --by train.device)",
    "train.compile": "torch.compile of the step: the same arithmetic, fused (rounding only)",
    "task.pad_to_multiple_of": "padding up to a multiple: padded positions are masked out (rounding only)",
    "model.trust_remote_code": "permission to run a model's own code",
    **{key: "a scored record's file names: they differ per seed" for key in RECORD_PATH_KEYS},
}
# Every key under these prefixes, for the same reason.
NOT_SETTING_PREFIXES = {
    "probe.": "what is measured and how often, not what is learned (a kept skill measured on other pairs "
              "or texts is on another scale: --by probe.num_pairs splits them)",
}
NOT_SETTINGS = set(NOT_SETTING_REASONS)
# Which keys a run that lacks them (made before they existed) reads at today's default: every recipe key
# but train.precision (before it existed, runs trained in fp32, which is not today's auto). New keys
# default to the old behaviour (a floor of 0, no anchor, no LoRA, no holdout), so an old run and a new
# one that leaves the key alone are one setting.
NO_DEFAULT_FILL = ("train.precision",)
# A run's methods that no installed package provides (a plugin uninstalled since), comma-joined in its
# settings under this key: reports name them (families.py), never as vanilla fine-tuning.
NOT_INSTALLED = "method.not_installed"
# Short names (names.KEY_ALIASES): --by k resolves to optimizer.anneal_k, and a group label reads k=0.1.
# The methods' switches have theirs in the registry: short_keys() and label_names() hold both.
LABEL_NAMES = {v: k for k, v in SHORT_KEYS.items()}


def short_keys() -> dict[str, str]:
    from ..plugins.methods import key_aliases

    return {**SHORT_KEYS, **key_aliases()[0]}


def label_names() -> dict[str, str]:
    return {v: k for k, v in short_keys().items()}


def is_setting_key(key: str) -> bool:
    """Whether ``key`` can make a setting (NOT_SETTING_REASONS, NOT_SETTING_PREFIXES; task.name is the column)."""
    return key not in NOT_SETTINGS and key != "task.name" and not key.startswith(tuple(NOT_SETTING_PREFIXES))


def recipe_defaults() -> dict[str, Any]:
    """Every recipe key that has a default, dotted, at its default (required keys have none)."""
    global _DEFAULTS
    if _DEFAULTS is None:
        import dataclasses
        import typing

        from ..recipe import Recipe, all_sections

        def walk(prefix: str, cls: type) -> dict[str, Any]:
            hints, out = typing.get_type_hints(cls), {}
            for f in dataclasses.fields(cls):
                key = f"{prefix}{f.name}"
                if dataclasses.is_dataclass(hints[f.name]):
                    out.update(walk(key + ".", hints[f.name]))
                elif f.default is not dataclasses.MISSING:
                    out[key] = f.default
                elif f.default_factory is not dataclasses.MISSING:
                    out[key] = f.default_factory()
            return out

        _DEFAULTS = {"output_dir": Recipe.__dataclass_fields__["output_dir"].default}
        for section, cls in all_sections().items():
            _DEFAULTS.update(walk(section + ".", cls))
    return _DEFAULTS


_DEFAULTS: dict[str, Any] | None = None


@dataclass
class Run:
    path: Path
    name: str  # path relative to the folder searched
    settings: dict[str, Any]  # the recipe as dotted keys; RecAdam-only keys None for adamw
    summary: Summary | None  # None: the run has not finished (or its summary.json cannot be read)
    records: list[dict[str, Any]]  # metrics.jsonl's records whose fields have the right types
    summary_problem: str | None = None  # why summary.json cannot be read (None: it can, or there is none)
    inert: frozenset[str] = frozenset()  # keys only methods it left off read (None in settings): not its setting

    @property
    def task(self) -> str:
        return str(self.settings.get("task.name"))

    @property
    def finished(self) -> bool:
        return bool(self.summary and self.summary.finished)

    @property
    def train(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("split") == "train"]

    @property
    def evals(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("split") == "eval"]

    @property
    def probes(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("split") == "probe"]

    @property
    def tests(self) -> list[dict[str, Any]]:
        """task.holdout: the dev split's one scoring, on the final weights (``split: "test"``)."""
        return [r for r in self.records if r.get("split") == "test"]

    @property
    def seed(self) -> Any:
        return self.settings.get("train.seed")

    def holdout_final(self) -> dict[str, Any] | None:
        """Under task.holdout, the last evaluation (the holdout's, on the final weights: summary.json's
        final.holdout); None for a run without a holdout."""
        evals = self.evals
        return evals[-1] if evals and evals[-1].get("data") == "holdout" else None

    def eval_at(self, at: str) -> dict[str, Any] | None:
        """The final or best eval record, with the scalar probe measures taken at the same step, the
        distance to theta* logged at that step (a record's eval carries its own) and the run's training time.

        Under task.holdout the final record is the dev split's (scored once at the end: the number a
        report gives, summary.json's final); the evaluations during training scored the holdout, so the
        best record is the holdout's (no dev score exists for best/)."""
        evals = self.evals
        if not evals:
            return None
        if at == "best":
            finite = [r for r in evals if _finite(r.get("main"))]
            record = max(finite, key=lambda r: r["main"]) if finite else evals[-1]
        else:
            record = evals[-1]
            if record.get("data") == "holdout":
                record = next((r for r in reversed(self.tests) if r["step"] == record["step"]), record)
        extra: dict[str, Any] = {}
        logged = [r for r in self.train if r["step"] <= record["step"] and _finite(r.get("distance"))]
        if logged:
            extra["distance"] = logged[-1]["distance"]
        if self.summary and _finite(self.summary.final_distance) and record["step"] == evals[-1]["step"] and self.finished:
            extra["distance"] = self.summary.final_distance
        if self.summary and _finite(self.summary.train_seconds):
            extra["train_seconds"] = self.summary.train_seconds
        probe = next((p for p in self.probes if p["step"] == record["step"]), None)
        if probe is not None:
            extra.update({k: v for k, v in probe.items() if not isinstance(v, list)})
        return {**extra, **record}


def read_run(path: Path, name: str, warn: Callable[[str], None] = lambda message: None) -> Run:
    """One run directory read back. config.yaml must be readable (ValueError, OSError, YAMLError
    otherwise); a summary.json or metrics.jsonl records that cannot be read are named in ``warn``:
    the run then reads as unfinished, the records are skipped, a line cut short ends the reading."""
    from ..recipe import flatten

    config = read_config(path)
    if not isinstance(config, dict):
        raise ValueError("config.yaml is not a mapping")
    settings = flatten(config)
    for key, value in recipe_defaults().items():  # a key the run predates: the default, which it ran at
        if key not in settings and key not in NO_DEFAULT_FILL:
            settings[key] = copy.deepcopy(value)
    if is_vanilla(settings.get("optimizer.name")):
        settings.update(dict.fromkeys(RECADAM_ONLY_KEYS))
    else:
        # Runs made before the floor existed ran without one: they group with recall_floor=0 runs.
        settings.setdefault("optimizer.recall_floor", 0.0)
    inert = frozenset(inert_keys(settings) & set(settings))  # keys only methods it left off read
    settings.update(dict.fromkeys(inert))
    summary, problem = read_summary_checked(path)
    if problem is not None:
        warn(f"{path / SUMMARY_FILE} cannot be read: {problem}: the run is read as unfinished")
    records, problems = read_metrics_checked(path)
    missing = not_installed(summary, records)
    if missing:
        settings[NOT_INSTALLED] = ",".join(missing)
    # The line a reading stopped at (a crash cut it short) comes last: always shown, after a few skipped records.
    stop = problems[-1:] if problems and "read up to" in problems[-1] else []
    skipped = problems[:len(problems) - len(stop)]
    for line in skipped[:MAX_WARNINGS]:
        warn(f"{path / METRICS_FILE}: {line}")
    if len(skipped) > MAX_WARNINGS:
        more = len(skipped) - MAX_WARNINGS
        warn(f"{path / METRICS_FILE}: {more} more record{'s' if more > 1 else ''} skipped")
    for line in stop:
        warn(f"{path / METRICS_FILE}: {line}")
    if summary is None and not records and (problem or problems):
        raise ValueError(f"nothing in it can be read: no readable {SUMMARY_FILE}, no readable record in {METRICS_FILE}")
    return Run(path, name, settings, summary, records, problem, inert)


MAX_WARNINGS = 3  # per metrics.jsonl: then a count


def not_installed(summary: Summary | None, records: list[dict[str, Any]]) -> list[str]:
    """The methods a run turned on that the registry does not hold now: those summary.json's method block
    names, or for a run without one (unfinished) those whose loss term its training records log."""
    from ..plugins.methods import methods

    if summary is not None:
        on = list((summary.method or {}).get("names") or [])
    else:
        first = next((r for r in records if r.get("split") == "train"), {})
        on = [key[len("loss_"):] for key in first if key.startswith("loss_") and key != "loss_task"]
    known = {m.name for m in methods()}
    return [name for name in on if name not in known]


def load_runs(root: Path | Sequence[Path], warn: Callable[[str], None] = lambda message: None) -> list[Run]:
    """Every run directory at or under ``root`` (or under each of several roots, read as one set); other
    folders are named in a warning and skipped."""
    roots = [Path(root)] if isinstance(root, (str, Path)) else list(dict.fromkeys(Path(r) for r in root))
    runs: list[Run] = []
    found = 0
    for r in roots:
        read, seen = _runs_under(r, warn)
        runs += read
        found += seen
    where = ", ".join(map(str, roots))
    if found and not runs:
        raise ReportError(f"none of the {found} run directories under {where} can be read (the warnings above say why)"
                          if found > 1 else f"the one run directory under {where} cannot be read (the warning above says why)")
    if not runs:
        raise ReportError(f"no recall run directories under {where} (a run directory holds config.yaml and "
                          "metrics.jsonl, as recall finetune writes them)")
    if len(roots) == 1:
        return runs
    return list({run.path.resolve(): run for run in runs}.values())  # a run under two roots counts once


def _runs_under(root: Path, warn: Callable[[str], None]) -> tuple[list[Run], int]:
    """The runs read under ``root``, and how many run directories were found there (read or not)."""
    if not root.is_dir():
        raise ReportError(f"{root} is not a folder: give a run directory or a folder of run directories")
    found: list[Path] = []

    def walk(folder: Path) -> bool:
        any_run = False
        for child in sorted(p for p in folder.iterdir() if p.is_dir()):
            if child.name.startswith("."):
                continue  # staging folders, hidden tool folders
            if is_run_dir(child):
                found.append(child)
                any_run = True
            elif walk(child):
                any_run = True
            elif not (child.name == "logs" and (folder / "sweep.json").is_file()):
                warn(f"{child} is not a recall run directory (no config.yaml and metrics.jsonl): skipped")
        return any_run

    if is_run_dir(root):
        found.append(root)
    else:
        walk(root)
    runs = []
    for path in found:
        name = path.name if path == root else str(path.relative_to(root))
        try:
            runs.append(read_run(path, name, warn))
        except (OSError, ValueError, yaml.YAMLError) as exc:
            warn(f"{path}: cannot read the run ({exc}): skipped")
    return runs, len(found)


def resolve_key(key: str) -> str:
    """'k' -> 'optimizer.anneal_k'; a dotted recipe key stays; anything else is an error with a hint."""
    from ..recipe import all_keys

    shorts = short_keys()
    key = shorts.get(key, key)
    valid = all_keys()
    if key not in valid and not key.startswith("record."):  # a scored record's settings (scoring/records.py)
        close = difflib.get_close_matches(key, valid + list(shorts), n=1, cutoff=0.6)
        hint = f" (did you mean '{close[0]}'?)" if close else " (a dotted recipe key such as optimizer.anneal_k, or k, t0, init, optimizer, lr)"
        raise ReportError(f"unknown key '{key}'{hint}")
    return key


def filter_runs(runs: list[Run], where: list[str]) -> list[Run]:
    from ..recipe import parse_override

    for text in where:
        try:
            key, value = parse_override(text)
        except ValueError:
            raise ReportError(f"--where {text!r} is not KEY=VALUE (e.g. --where model.init=pretrained)") from None
        key = resolve_key(key)
        runs = [r for r in runs if _same(r.settings.get(key), value)]
        if not runs:
            raise ReportError(f"no runs with {key}={value}")
    return runs


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
    return a == b


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def differing_keys(runs: list[Run]) -> list[str]:
    """Settings that take two or more values among the runs of one task (the task's own data paths
    and per-task hyperparameters are not settings to compare), in recipe order."""
    by_task: dict[str, list[Run]] = {}
    for run in runs:
        by_task.setdefault(run.task, []).append(run)
    keys: list[str] = []
    seen: set[str] = set()  # each key asked once: asking again for every run made a report quadratic in its runs
    for run in runs:
        for key in run.settings:
            if key in seen or not is_setting_key(key):
                continue
            seen.add(key)
            if any(len(_values(group, key)) > 1 for group in by_task.values()):
                keys.append(key)
    return keys


def _values(runs: list[Run], key: str) -> set[str]:
    # adamw's blank RecAdam-only keys are not a second value: vanilla runs do not split a k sweep.
    # A method's keys in a run that leaves the method off (a vanilla run's model.lora.alpha) are no value either.
    return {_key(r.settings.get(key)) for r in runs
            if not (key in RECADAM_ONLY_KEYS and is_vanilla(r.settings.get("optimizer.name"))) and key not in r.inert}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)



# ---- one device per comparison ---------------------------------------------------------------------


def computed_on(run: Run) -> tuple[str, str, str | None] | None:
    """(device kind, precision, device model) a training run computed on, from its summary.json; None for
    a scored record (evaluate --record: it trained nowhere), an unfinished run, or a run made before
    devices were recorded. The model is None in runs made before it was recorded."""
    s = run.summary
    if s is None or s.record or not s.device:
        return None
    return s.device.split(":")[0], s.precision or "fp32", s.device_name  # a 0.1 run had no precision key: fp32


def check_one_device(runs: list[Run], command: str) -> None:
    """A comparison pairs seeds and takes medians: its runs of one task must have computed on one kind of
    device in one precision (and, where recorded, one device model). Raises ReportError naming what differs."""
    by_task: dict[str, dict[tuple[str, str], list[Run]]] = {}
    models: dict[str, dict[str, list[Run]]] = {}
    for run in runs:
        where = computed_on(run)
        if where is None:
            continue
        kind, precision, model = where
        by_task.setdefault(run.task, {}).setdefault((kind, precision), []).append(run)
        if model:
            models.setdefault(run.task, {}).setdefault(model, []).append(run)
    for task, groups in sorted(by_task.items()):
        named = models.get(task, {})
        if len(groups) > 1 or len(named) > 1:
            parts = ([f"{kind} {precision} ({len(rs)} runs, e.g. {rs[0].name})" for (kind, precision), rs in sorted(groups.items())]
                     if len(groups) > 1 else [f"{model} ({len(rs)} runs, e.g. {rs[0].name})" for model, rs in sorted(named.items())])
            raise ReportError(f"{task}: the runs computed on different devices or precisions: {'; '.join(parts)}. "
                              f"Compare one device's runs (--where train.device=..., or another folder), or pass "
                              f"--mixed-devices to {command} to pair them anyway")
