"""Planning a sweep: the grid and seeds, cell names, every cell's recipe checked, the index (sweep.json),
and what each backend shares about a cell's outcome.

A cell is one `recall finetune` run, or, where the sweep names several recipes (stage 1, 2, ...), one
`recall continual` sequence of them: its folder holds continual.json instead of config.yaml, and its score
is the sequence's ACC (the mean of the matrix's last row)."""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import STOPPED, RecipeError, SweepError
from ..plugins.methods import key_aliases
from ..names import CELL_PREFIXES
from ..rundir import CONFIG_FILE, CONTINUAL_FILE, is_run_dir, read_continual, read_summary, write_json_atomic
from ..rundir.layout import SWEEP_INDEX
from ..recipe import TrainConfig, apply_overrides, flatten, load_recipe, parse_override
from ..recipe.file import read_yaml
from ..recipe.schema import when_set_defaults


INDEX_FILE = SWEEP_INDEX
LOG_DIR = "logs"

PENDING, RUNNING, FINISHED, FAILED, INTERRUPTED = "pending", "running", "finished", "failed", "interrupted"


@dataclass(frozen=True)
class Axis:
    key: str
    values: tuple[str, ...]  # as the user wrote them: they go into overrides and cell names verbatim


@dataclass
class Cell:
    name: str
    settings: dict[str, str]  # dotted key -> value text, grid order, seed last
    path: Path
    state: str = PENDING
    resume: bool = False  # an interrupted run directory exists: continue it
    exit_code: int | None = None
    seconds: float | None = None
    main: float | None = None

    @property
    def overrides(self) -> list[str]:
        return [f"{key}={value}" for key, value in self.settings.items()]


@dataclass
class Sweep:
    recipe: Path
    overrides: list[str]
    axes: list[Axis]
    seeds: list[int] | None
    out: Path
    cells: list[Cell] = field(default_factory=list)
    stages: list[Path] = field(default_factory=list)  # a sweep of sequences: the stages after ``recipe`` (stage 1)

    @property
    def continual(self) -> bool:
        return bool(self.stages)

    @property
    def started_file(self) -> str:
        return started_file(self.continual)

    def command(self, cell: Cell, program: list[str]) -> list[str]:
        """The cell's command line; ``program`` is e.g. [python, -m, recall_cli] or [recall]."""
        if self.continual:
            if cell.resume:
                return [*program, "continual", "--resume", "--out", str(cell.path), "--plain"]
            return [*program, "continual", str(self.recipe), *map(str, self.stages), *self.overrides, *cell.overrides,
                    "--out", str(cell.path), "--plain"]
        if cell.resume:
            return [*program, "finetune", "--resume", str(cell.path), "--plain"]
        return [*program, "finetune", str(self.recipe), *self.overrides, *cell.overrides,
                f"output_dir={cell.path}", "--plain"]


# ---- parsing -------------------------------------------------------------------------------------


def split_values(text: str) -> list[str]:
    """'0.05,0.1' -> ['0.05', '0.1']; commas inside [...], {...} or quotes stay (betas=[0.9,0.98],[0.9,0.999])."""
    items, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    items.append(text[start:].strip())
    return items


def parse_grid(texts: list[str], seeds: list[int] | None) -> list[Axis]:
    axes: list[Axis] = []
    problems: list[str] = []
    for text in texts:
        key, sep, rest = text.partition("=")
        key = key.strip()
        if not sep or not key or not rest.strip():
            problems.append(f"--grid {text!r} is not KEY=V1,V2,... (e.g. --grid optimizer.anneal_k=0.05,0.1)")
            continue
        if key == "output_dir":
            problems.append("--grid output_dir: the sweep names each cell's directory; choose the parent with --out")
            continue
        if key == "train.seed" and seeds is not None:
            problems.append("give seeds either with --seeds or with --grid train.seed, not both")
            continue
        if any(axis.key == key for axis in axes):
            problems.append(f"--grid {key} is given twice: list all its values in one --grid {key}=V1,V2")
            continue
        values = split_values(rest)
        if any(not v for v in values):
            problems.append(f"--grid {text!r} has an empty value (two commas in a row, or a trailing comma)")
            continue
        parsed = [json.dumps(parse_override(f"{key}={v}")[1], sort_keys=True, default=str) for v in values]
        if len(set(parsed)) != len(parsed):
            problems.append(f"--grid {key} lists the same value twice: {rest}")
            continue
        axes.append(Axis(key, tuple(values)))
    if problems:
        raise SweepError("; ".join(problems))
    return axes


def parse_seeds(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        seeds = [int(v) for v in split_values(text)]
    except ValueError:
        raise SweepError(f"--seeds {text!r}: expected integers separated by commas, e.g. --seeds 1,2,3,4,5") from None
    if len(set(seeds)) != len(seeds):
        raise SweepError(f"--seeds {text!r} lists a seed twice")
    return seeds


# ---- cell names ----------------------------------------------------------------------------------


def _clean(text: str) -> str:
    if "/" in text:  # a path: its last component names it
        text = text.rstrip("/").rsplit("/", 1)[-1]
    cleaned = re.sub(r"[^A-Za-z0-9.+-]+", "-", text)
    if not re.fullmatch(r"[-+]?[0-9.]+(e[-+]?[0-9]+)?", text):  # keep the sign of -1, 1e-5
        cleaned = cleaned.strip("-.")
    return cleaned or "x"


def name_part(key: str, value: str) -> str:
    """One setting's piece of a cell name: k0.1, t0250, random, s3, lr2e-5, grad_accum2.

    The prefix is the key's short name in names.KEY_ALIASES (the paper's grid is anneal_k x anneal_t0
    x init x 5 seeds); keys whose values read well on their own ("random", "adamw", "mrpc") have none."""
    if key == "model.name_or_path":
        value = value.removeprefix("pkg:")
    prefix = {**CELL_PREFIXES, **key_aliases()[1]}.get(key, key.rsplit(".", 1)[-1])
    return prefix + _clean(value)


def cell_names(settings: list[dict[str, str]]) -> list[str]:
    names, seen = [], set()
    for values in settings:
        base = "_".join(name_part(k, v) for k, v in values.items()) or "run"
        name, n = base, 1
        while name in seen:  # two values that clean to the same text (paths, mostly)
            n += 1
            name = f"{base}-{n}"
        seen.add(name)
        names.append(name)
    return names


# ---- planning ------------------------------------------------------------------------------------


def _recipe_seed(recipe: Path, overrides: list[str]) -> Any:
    raw = read_yaml(recipe)
    apply_overrides(raw, overrides)
    train = raw.get("train")
    default = TrainConfig().seed
    return train.get("seed", default) if isinstance(train, dict) else default


def plan_sweep(recipe: Path, grid: list[str], seeds: list[int] | None, overrides: list[str], out: Path,
               stages: list[Path] | None = None) -> Sweep:
    """Expand the grid, validate every cell's recipe and look at what OUT already holds. With ``stages``,
    each cell is a `recall continual` sequence: ``recipe``, then ``stages``, every one checked per cell.

    Raises RecipeError (every problem of every cell at once) or SweepError; creates nothing.
    """
    if any(parse_override(o)[0] == "output_dir" for o in overrides if "=" in o):
        raise SweepError("output_dir is set per cell by the sweep: choose the parent folder with --out")
    axes = parse_grid(grid, seeds)
    if seeds is None:
        seeds_axis = [str(_recipe_seed(recipe, overrides))] if not any(a.key == "train.seed" for a in axes) else []
    else:
        seeds_axis = [str(s) for s in seeds]
    settings = []
    for combo in itertools.product(*(axis.values for axis in axes)):
        values = dict(zip((axis.key for axis in axes), combo))
        for seed in seeds_axis or [None]:
            cell = dict(values)
            if seed is not None:
                cell["train.seed"] = seed
            settings.append(cell)
    sweep = Sweep(recipe, list(overrides), axes, seeds, out, stages=list(stages or []))
    sweep.cells = [Cell(name, values, out / name) for name, values in zip(cell_names(settings), settings)]

    # Validate every cell; a problem shared by all cells (a typo in the recipe) is reported once.
    problems: dict[str, list[str]] = {}
    existing: list[str] = []  # OUT already holds something else where a cell would go
    source = str(recipe)
    for cell in sweep.cells:
        try:
            if sweep.continual:
                problem = _check_sequence(sweep, cell)
            else:
                resolved = load_recipe(recipe, [*overrides, *cell.overrides, f"output_dir={cell.path}"])
                problem = _check_existing(cell, resolved.to_dict())
        except RecipeError as exc:
            source = exc.source
            for problem in exc.problems:
                problems.setdefault(problem, []).append(cell.name)
            continue
        if problem:
            existing.append(problem)
    if problems:
        lines = []
        for problem, names in problems.items():
            if len(names) == len(sweep.cells):
                lines.append(problem)
            else:
                lines.append(f"cell{'s' if len(names) > 1 else ''} {', '.join(names)}: {problem}")
        raise RecipeError(source, lines)
    if existing:
        more = f" (and {len(existing) - 1} more cell{'s' if len(existing) > 2 else ''} like it)" if len(existing) > 1 else ""
        raise SweepError(existing[0] + more)
    return sweep


def _check_sequence(sweep: Sweep, cell: Cell) -> str | None:
    """A sequence cell's stages built and checked as `recall continual` checks them (RecipeError), and its
    state from its folder; a problem if the folder holds something else."""
    from ..sequence.plan import build_plan

    plan = build_plan([sweep.recipe, *sweep.stages], [*sweep.overrides, *cell.overrides], cell.path, None)
    path = cell.path
    if not path.exists() or (path.is_dir() and not any(path.iterdir())):
        return None
    record = read_continual(path) if path.is_dir() else None
    if record is None:
        return f"{path} exists and holds no {CONTINUAL_FILE}: move it away or choose another --out"
    wanted, saved = plan.command(), record.get("command", {})
    differ = [k for k in sorted(set(wanted) | set(saved)) if wanted.get(k) != saved.get(k)]
    if differ:
        shown = ", ".join(f"{k}: {saved.get(k)!r} there, {wanted.get(k)!r} now" for k in differ[:3])
        return (f"{path} holds a sequence with other settings ({shown}): choose another --out, "
                "or delete the folder to run the cell again")
    if record.get("finished"):
        cell.state, cell.main = FINISHED, record.get("acc")
    else:
        cell.resume = True
    return None


def preflight_first_cell(sweep: Sweep) -> None:
    """The first cell still to start, checked as `recall finetune --dry-run` checks a run (the hub, the
    data, the model, the output folder), before any cell starts or OUT is made: a problem the cells
    share (the hub offline, a missing data folder) is one line and exit 2 in seconds, not one failure
    a cell. Raises that check's own error."""
    fresh = [c for c in sweep.cells if c.state == PENDING and not c.resume]
    if not fresh:
        return
    from ..distributed import Distributed
    from ..model import check_hub
    from ..training.progress import Reporter
    from ..training.setup import Start, prepare

    cell = fresh[0]
    if sweep.continual:  # stage 1 as `recall continual` runs it; the later stages start from its weights
        from ..sequence.plan import build_plan

        recipe = build_plan([sweep.recipe, *sweep.stages], [*sweep.overrides, *cell.overrides], cell.path, None).stages[0].recipe
    else:
        recipe = load_recipe(sweep.recipe, [*sweep.overrides, *cell.overrides, f"output_dir={cell.path}"])
    check_hub(recipe.model.name_or_path, recipe.task.name, recipe.task.data_dir, what=f"the sweep's cell {cell.name}")
    checks = prepare(recipe, Distributed(), Start.NEW, Reporter(), dry_run=True).checks
    checks.raise_on_failure()


def cause_in_log(log: Path) -> str | None:
    """The last `error:` line a failed cell printed (its cause, for the sweep's own error line)."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    errors = [line for line in lines if line.startswith("error:")]
    return errors[-1].removeprefix("error:").strip()[:300] if errors else None


# Keys a cell may differ in from its directory and still be that cell (resumed, or left as finished):
# where it is written and bookkeeping that does not touch training (what a finished run keeps, which
# changed its default from all to final, where records also go, how often a train record is written).
BOOKKEEPING = ("output_dir", "train.save", "train.report_to", "train.log_every")


def _check_existing(cell: Cell, wanted: dict[str, Any]) -> str | None:
    """Set the cell's state from its directory; a problem if the directory holds something else."""
    path = cell.path
    if not path.exists() or (path.is_dir() and not any(path.iterdir())):
        return None
    if not is_run_dir(path):
        return f"{path} exists and is not a recall run directory: move it away or choose another --out"
    # A WHEN_SET key (keep.texts, model.lora.init, ...) that config.yaml lacks ran at its default.
    saved = {**when_set_defaults(), **flatten(read_yaml(path / CONFIG_FILE))}
    wanted_flat = {**when_set_defaults(), **flatten(wanted)}  # either side may be as config.yaml writes it
    # Any other key the saved config lacks did not exist when the run was made (e.g. probe.* before probes):
    # not a difference, or every old sweep would refuse to resume after an upgrade.
    differ = [k for k in sorted(set(saved) | set(wanted_flat))
              if k not in BOOKKEEPING and k in saved and saved.get(k) != wanted_flat.get(k)]
    if differ:
        shown = ", ".join(f"{k}: {saved.get(k)!r} there, {wanted_flat.get(k)!r} now" for k in differ[:3])
        return (f"{path} holds a run with other settings ({shown}): choose another --out, "
                "or delete the directory to run the cell again")
    summary = read_summary(path)
    if summary is not None and summary.finished:
        cell.state = FINISHED
        cell.main = summary.final_main
    else:
        cell.resume = True
    return None


# ---- the index -----------------------------------------------------------------------------------


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def write_index(sweep: Sweep, extra: dict[str, dict[str, Any]] | None = None) -> None:
    """OUT/sweep.json, replaced atomically; only the parent process writes it."""
    extra = extra or {}
    index = {
        "recipe": str(sweep.recipe),
        **({"stages": [str(sweep.recipe), *map(str, sweep.stages)]} if sweep.continual else {}),
        "overrides": sweep.overrides,
        "grid": {axis.key: list(axis.values) for axis in sweep.axes},
        "seeds": sweep.seeds,
        "updated": now(),
        "counts": {state: sum(c.state == state for c in sweep.cells)
                   for state in (PENDING, RUNNING, FINISHED, FAILED, INTERRUPTED)},
        "cells": [
            {
                "name": c.name,
                "dir": str(c.path),
                "settings": {k: parse_override(f"{k}={v}")[1] for k, v in c.settings.items()},
                "state": c.state,
                "exit_code": c.exit_code,
                "seconds": None if c.seconds is None else round(c.seconds, 2),
                "main": c.main,
                "log": str(sweep.out / LOG_DIR / f"{c.name}.log"),
                **extra.get(c.name, {}),
            }
            for c in sweep.cells
        ],
    }
    sweep.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(sweep.out / INDEX_FILE, index)


def read_index(out: Path) -> dict[str, Any] | None:
    path = out / INDEX_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def print_commands(sweep: Sweep, program: list[str] | None = None) -> list[str]:
    """One shell line per cell still to run (fresh, or --resume for an interrupted one)."""
    program = program or ["recall"]
    return [shlex.join(sweep.command(c, program)) for c in sweep.cells if c.state != FINISHED]


def started_file(continual: bool) -> str:
    """The file whose presence in a cell's folder means the cell began (it resumes, not restarts)."""
    return CONTINUAL_FILE if continual else CONFIG_FILE


def finished(path: Path, continual: bool) -> tuple[bool, float | None]:
    """(whether the cell in ``path`` finished, its score: a run's final main score, a sequence's ACC)."""
    if continual:
        record = read_continual(path)
        return bool(record and record.get("finished")), (record or {}).get("acc")
    summary = read_summary(path) if (path / CONFIG_FILE).is_file() else None
    return bool(summary and summary.finished), summary.final_main if summary is not None else None


def settle(sweep: Sweep, cell: Cell, code: int, seconds: float) -> None:
    """A cell's process ended with ``code``: its state, time and score (either backend)."""
    cell.exit_code, cell.seconds = code, seconds
    cell.main = finished(cell.path, sweep.continual)[1] if code == 0 else None
    cell.state = FINISHED if code == 0 else (INTERRUPTED if code in STOPPED else FAILED)
    cell.resume = cell.state != FINISHED and (cell.path / sweep.started_file).is_file()


def outcome_line(sweep: Sweep, cell: Cell, done: int) -> str:
    log = sweep.out / LOG_DIR / f"{cell.name}.log"
    score = "acc" if sweep.continual else "main"
    result = f"{score}={cell.main:.4f}" if isinstance(cell.main, float) else f"exit {cell.exit_code}, see {log}"
    return f"sweep: [{done}/{len(sweep.cells)}] {cell.name} {cell.state} in {cell.seconds or 0:.1f}s ({result})"


def begin(sweep: Sweep, echo: Callable[[str], None]) -> list[Cell]:
    """The cells still to run; the index written, what earlier invocations finished kept and said."""
    todo = [c for c in sweep.cells if c.state != FINISHED]
    done_before = len(sweep.cells) - len(todo)
    _restore_finished(sweep)
    if done_before:
        echo(f"sweep: {done_before} of {len(sweep.cells)} cells already finished, skipped")
    write_index(sweep)
    return todo


def _restore_finished(sweep: Sweep) -> None:
    """Keep what the index knew about cells finished by an earlier invocation (exit code, seconds)."""
    previous = {c.get("name"): c for c in (read_index(sweep.out) or {}).get("cells", [])}
    for cell in sweep.cells:
        if cell.state == FINISHED and cell.name in previous:
            cell.exit_code = previous[cell.name].get("exit_code", 0)
            cell.seconds = previous[cell.name].get("seconds")


