"""The run directory, recall's public on-disk format: its files, how a path resolves to weights, the
summary, the metrics log, and the one way anything in it is written (stage, then rename into place).

    RUN/config.yaml         the resolved recipe (a scored record adds a `record` section)
    RUN/metrics.jsonl       one JSON record per line: split "train", "eval" or "probe", each with its step
    RUN/summary.json        written once, at the end (Summary below; older layouts read as well)
    RUN/anchor.safetensors  theta*, by parameter name (training runs only)
    RUN/last/, RUN/best/    save_pretrained folders; last/ adds the training state for --resume
    RUN/checkpoints/step-N  copies of last/ kept by train.keep_last

Four kinds of folder hold weights, or name them, and every command resolves a path through
:func:`locate`: a training run (its best/, else last/), a scored record (`recall evaluate --record`:
no weights, it names the checkpoint it scored), a merge output (`recall merge`: DIR/<name>/ beside
DIR/merge.json) and a bare checkpoint (any save_pretrained folder, inside a run or not).

Everything here is torch-free; checkpoint.py writes the tensors into the folders this module stages.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import EnvironmentProblem, RunDirError

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
ANCHOR_FILE = "anchor.safetensors"
TRAINER_STATE_FILE = "trainer_state.json"  # in last/: its presence marks a complete checkpoint
OPTIMIZER_FILE = "optimizer.pt"
RNG_FILE = "rng_state.pt"
LP_DIR = "lp"  # LP-FT: the head fitted on the frozen encoder (train.linear_probe_steps)
MODEL_CONFIG_FILE = "config.json"  # what makes a folder a save_pretrained checkpoint
MERGE_RECORD = "merge.json"
# A checkpoint folder outside a run (e.g. a `recall merge` output) may carry the recipe its head was
# trained with, so that `recall evaluate FOLDER` knows the task.
SOURCE_RECIPE_FILE = "recall_recipe.yaml"
# A scored record (recall_cli/records.py) is a run directory whose config.yaml has this section.
RECORD_SECTION = "record"


def strict_json(data: Any) -> Any:
    """``data`` with every NaN or infinite float replaced by None (numpy numbers and arrays as Python's)."""
    if type(data).__module__ == "numpy" and hasattr(data, "tolist"):
        data = data.tolist()
    if isinstance(data, dict):
        return {key: strict_json(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [strict_json(value) for value in data]
    if isinstance(data, float) and not math.isfinite(data):
        return None
    return data


def dumps_strict(data: Any, **kwargs: Any) -> str:
    """Every JSON recall writes or prints: strict (an undefined number, NaN or infinite, is null; a
    reader in another language never meets NaN)."""
    return json.dumps(strict_json(data), allow_nan=False, **kwargs)


def is_run_dir(path: Path) -> bool:
    return (path / CONFIG_FILE).is_file() and (path / METRICS_FILE).exists()


# ---- resolving a path --------------------------------------------------------------------------


@dataclass(frozen=True)
class Located:
    """What a path names: ``folder`` holds the weights; ``run_dir`` is the run (or record) they belong to."""

    path: Path  # as given
    kind: str  # "run", "record", "merge" or "checkpoint"
    folder: Path  # the save_pretrained folder to load
    run_dir: Path | None = None
    merge: dict[str, Any] | None = None  # merge.json, for a merge output

    @property
    def recipe_file(self) -> Path | None:
        """The recipe the weights' head was trained with: the run's config.yaml, or the copy a merge left."""
        if self.run_dir is not None:
            return self.run_dir / CONFIG_FILE
        own = self.folder / SOURCE_RECIPE_FILE
        return own if own.is_file() else None


def locate(path: str | Path) -> Located:
    """A run directory (its best/, else last/), a checkpoint folder inside one, a merge output or any
    save_pretrained folder. Raises RunDirError, one message per case, for anything else (a scored
    record too: it holds no weights)."""
    path = Path(path)
    if not path.exists():
        raise RunDirError(f"{path}: no such run directory or checkpoint folder (check the path)")
    if (path / CONFIG_FILE).is_file():
        folder = find_checkpoint(path, "best") or find_checkpoint(path, "last")
        if folder is None:
            raise RunDirError(no_checkpoint_message(path))
        return Located(path, "run", folder, run_dir=path)
    if not (path / MODEL_CONFIG_FILE).is_file():
        raise RunDirError(f"{path}: not a run directory or checkpoint folder (no {CONFIG_FILE}, no {MODEL_CONFIG_FILE})")
    if (path.parent / CONFIG_FILE).is_file():
        return Located(path, "checkpoint", path, run_dir=path.parent)
    merge_file = path.parent / MERGE_RECORD
    if merge_file.is_file():
        try:
            merge = json.loads(merge_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise RunDirError(f"{merge_file} is not valid JSON ({exc.msg}, line {exc.lineno}): is the merge complete?") from None
        return Located(path, "merge", path, merge=merge if isinstance(merge, dict) else None)
    return Located(path, "checkpoint", path)


def find_checkpoint(run_dir: Path, name: str = "last") -> Path | None:
    """RUN/name, or RUN/name.old when a kill fell between the two renames of a save."""
    for candidate in (run_dir / name, _old(run_dir / name)):
        if (candidate / TRAINER_STATE_FILE).is_file() or (name != "last" and (candidate / MODEL_CONFIG_FILE).is_file()):
            return candidate
    return None


def scored_record(run_dir: Path) -> dict[str, Any] | None:
    """The `record` section of a scored record's config.yaml (recall evaluate --record); None for a run."""
    import yaml

    try:
        config = yaml.safe_load((run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    record = config.get(RECORD_SECTION) if isinstance(config, dict) else None
    return record if isinstance(record, dict) else None


def no_checkpoint_message(run_dir: Path) -> str:
    """Why a run directory has no checkpoint to load: not there yet, or a scored record, which keeps none."""
    record = scored_record(run_dir)
    if record is not None:
        return (f"{run_dir} is a scored record (recall evaluate --record) and holds no weights: "
                f"give the checkpoint it scored, {record.get('checkpoint')}")
    return f"{run_dir}: the run has no best/ or last/ checkpoint yet"


# ---- summary.json ------------------------------------------------------------------------------


@dataclass
class Summary:
    """summary.json: what a finished run (or a scored record) amounts to.

    Every layout written since 0.1 reads into this; keys a layout lacks are None. A training run
    writes the settings and timing fields, a scored record `record: true` and what it scored."""

    task: str | None = None
    optimizer: str | None = None
    init: str | None = None
    model: str | None = None  # training runs
    seed: int | None = None
    anneal_fun: str | None = None  # training runs: the schedule as run (t0 in steps)
    anneal_k: float | None = None
    anneal_t0: float | None = None
    pretrain_cof: float | None = None
    recall_floor: float | None = None  # None: a run made before the floor existed (it had none)
    lr: float | None = None
    steps: int = 0
    finished: bool = False
    best: dict[str, Any] | None = None  # the eval record (metrics + step) of the best step
    final: dict[str, Any] | None = None  # the last eval record
    final_distance: float | None = None  # ||theta - theta*|| at the end
    probe: dict[str, Any] | None = None  # the last probe record
    train_seconds: float | None = None  # training runs: timing, where and how
    samples_per_s: float | None = None
    device: str | None = None
    precision: str | None = None  # None in a 0.1 run
    # The step's compilation (train.compile): mode (null: eager), seconds (the steps that compiled,
    # their compute included), shapes (the padded lengths trained on), fallback (null, or why eager).
    # None in runs made before it existed.
    compile: dict[str, Any] | None = None
    versions: dict[str, str] | None = None
    world_size: int | None = None
    global_batch_size: int | None = None
    final_distance_by_rank: list[float] | None = None  # under torchrun
    # The methods the run turned on (methods.method_block): names, labels, settings, the anchor's
    # pre-pass; None (not written) for plain fine-tuning and for runs made before methods existed.
    method: dict[str, Any] | None = None
    record: bool = False  # scored records: what was scored, against which theta*
    checkpoint: str | None = None
    against: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # keys of a newer version, kept as read

    # Written even when empty (null): a reader tells "no eval" from "an older layout".
    _ALWAYS = ("task", "optimizer", "init", "seed", "steps", "finished", "best", "final", "final_distance", "probe")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Summary:
        """Raises ValueError naming the first key whose value has the wrong type (a number that is a
        string, a record that is not an object, finished that is not true or false): every reader
        downstream sees numbers where numbers go."""
        if not isinstance(data, dict):
            raise ValueError(f"it holds {_json_type(data)}, not a JSON object")  # noqa: TRY004 - read_summary_checked catches ValueError
        known = {f.name for f in fields(cls) if f.name != "extra"}
        for key, value in data.items():
            problem = _summary_type_problem(key, value)
            if problem is not None:
                raise ValueError(f"'{key}' {problem}")
        return cls(**{k: v for k, v in data.items() if k in known},
                   extra={k: v for k, v in data.items() if k not in known})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"record": True} if self.record else {}
        for f in fields(self):
            if f.name in ("record", "extra"):
                continue
            value = getattr(self, f.name)
            if value is not None or f.name in self._ALWAYS:
                out[f.name] = value
        return {**out, **self.extra}

    @property
    def final_main(self) -> float | None:
        return (self.final or {}).get("main")


def read_summary(run_dir: Path) -> Summary | None:
    """RUN/summary.json, or None while the run has none (it has not finished) or it cannot be read."""
    return read_summary_checked(run_dir)[0]


def read_summary_checked(run_dir: Path) -> tuple[Summary | None, str | None]:
    """(summary, None) for a readable RUN/summary.json, (None, None) while there is none (the run has
    not finished), (None, why) for one that cannot be read: not JSON, not an object, a value of the
    wrong type (Summary.from_dict)."""
    path = run_dir / SUMMARY_FILE
    if not path.exists():
        return None, None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        return None, exc.strerror or str(exc)
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg}, line {exc.lineno})"
    try:
        return Summary.from_dict(data), None
    except ValueError as exc:
        return None, str(exc)


_SUMMARY_TYPES: dict[str, str] = {
    **dict.fromkeys(("task", "optimizer", "init", "model", "anneal_fun", "device", "precision", "checkpoint",
                     "against"), "text"),
    **dict.fromkeys(("seed", "steps", "world_size", "global_batch_size"), "whole"),
    **dict.fromkeys(("anneal_k", "anneal_t0", "pretrain_cof", "recall_floor", "lr", "final_distance",
                     "train_seconds", "samples_per_s"), "number"),
    **dict.fromkeys(("finished", "record"), "bool"),
    **dict.fromkeys(("best", "final", "probe"), "record"),
    "versions": "versions",
    "final_distance_by_rank": "numbers",
    "compile": "object",
}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        shown = value if len(value) <= 20 else value[:17] + "..."
        return f"the text {shown!r}"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _summary_type_problem(key: str, value: Any) -> str | None:
    """Why ``value`` cannot be summary.json's ``key``, or None (null is every key's "not known")."""
    kind = _SUMMARY_TYPES.get(key)
    if kind is None or value is None:
        return None  # a newer version's key: kept as read
    if kind == "text" and not isinstance(value, str):
        return f"is {_json_type(value)}, not text"
    if kind == "whole" and not (isinstance(value, int) and not isinstance(value, bool)):
        return f"is {_json_type(value)}, not a whole number"
    if kind == "number" and not _is_number(value):
        return f"is {_json_type(value)}, not a number"
    if kind == "bool" and not isinstance(value, bool):
        return f"is {_json_type(value)}, not true or false"
    if kind == "numbers" and not (isinstance(value, list) and all(_is_number(v) for v in value)):
        return f"is {_json_type(value)}, not a list of numbers"
    if kind == "versions":
        if not isinstance(value, dict):
            return f"is {_json_type(value)}, not an object"
        bad = next((k for k, v in value.items() if not isinstance(v, str)), None)
        return None if bad is None else f"has '{bad}' {_json_type(value[bad])}, not text"
    if kind == "object" and not isinstance(value, dict):
        return f"is {_json_type(value)}, not an object"
    if kind == "record":
        if not isinstance(value, dict):
            return f"is {_json_type(value)}, not an object"
        problem = record_problem(value, need=())
        return None if problem is None else f"has {problem}"
    return None


def write_summary(run_dir: Path, summary: Summary) -> None:
    write_json_atomic(run_dir / SUMMARY_FILE, summary.to_dict())


# ---- metrics.jsonl -----------------------------------------------------------------------------


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a line cut by a kill: everything after it is not trustworthy
    return records


def read_metrics_checked(run_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """metrics.jsonl for a reader that must be able to trust every record (the reports): the records
    whose fields have the right types (record_problem), and one line per problem, each naming the line.
    A line that is not JSON ends the reading, as in read_metrics: the last line cut short by a kill
    (a crashed run) is read up to; one further up is named with the lines left after it."""
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return [], []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        return [], [f"not UTF-8 text (byte {exc.start}): nothing read"]
    numbered = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    records: list[dict[str, Any]] = []
    problems: list[str] = []
    for i, (n, line) in enumerate(numbered):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            after = len(numbered) - i - 1
            if after == 0:
                problems.append(f"line {n} is cut short (the run stopped while writing it?): read up to line {n - 1}")
            else:
                problems.append(f"line {n} is not valid JSON ({exc.msg}): read up to line {n - 1}, "
                                f"the {after} line{'s' if after > 1 else ''} after it left out")
            break
        problem = record_problem(record)
        if problem is None:
            records.append(record)
        else:
            problems.append(f"line {n}: {problem}: record skipped")
    return records, problems


def record_problem(record: Any, need: tuple[str, ...] = ("step", "split")) -> str | None:
    """Why a metrics record (or summary.json's best/final/probe) cannot be read, or None: ``step`` a
    whole number, ``split`` and ``data`` (which split an evaluation scored: "holdout", "dev") text,
    ``holdout`` and ``dev`` (summary.json's final under task.holdout) records of their own, every other
    value a number, null or a list of numbers (per layer)."""
    if not isinstance(record, dict):
        return f"it holds {_json_type(record)}, not a JSON object"
    for key in need:
        if key not in record:
            return f"no '{key}'"
    for key, value in record.items():
        if key == "step":
            if not (isinstance(value, int) and not isinstance(value, bool)):
                return f"'step' is {_json_type(value)}, not a whole number"
        elif key in ("split", "data"):
            if not isinstance(value, str):
                return f"'{key}' is {_json_type(value)}, not text"
        elif key in ("holdout", "dev") and isinstance(value, dict):
            problem = record_problem(value, need=())
            if problem is not None:
                return f"'{key}' has {problem}"
        elif isinstance(value, list):
            if not all(v is None or _is_number(v) for v in value):
                return f"'{key}' is a list with something other than numbers in it"
        elif value is not None and not _is_number(value):
            return f"'{key}' is {_json_type(value)}, not a number"
    return None


def write_metrics(run_dir: Path, records: list[dict[str, Any]]) -> None:
    """metrics.jsonl replaced as a whole (a record's, or a resumed run's cut back to its checkpoint)."""
    write_text_atomic(run_dir / METRICS_FILE, "".join(dumps_strict(r) + "\n" for r in records))


def truncate_metrics(run_dir: Path, last_step: int) -> None:
    """On resume, drop records written after the checkpoint: the resumed run writes them again.

    Read with the checked reader: a last line cut short by a kill is dropped (the resumed run writes it
    again), but a damaged line further up would lose every record after it, so it stops the resume
    with the line named (RunDirError, exit 2) instead of being rewritten away."""
    records, problems = read_metrics_checked(run_dir)
    damaged = [p for p in problems if "is cut short" not in p]
    if damaged:
        raise RunDirError(f"{run_dir / METRICS_FILE}: {damaged[0]}: fix or delete that line, then resume again "
                          "(resuming would rewrite the file without the records after it)")
    write_metrics(run_dir, [r for r in records if r["step"] <= last_step])


def keep_final(run_dir: Path) -> int:
    """train.save=final, at the end of a finished run: remove what only --resume and theta*-based
    merges read (last/'s optimizer and RNG state, anchor.safetensors, checkpoints/); returns the bytes
    freed. last/trainer_state.json stays: it is small, and says where the run ended."""
    freed = 0
    doomed = [run_dir / ANCHOR_FILE, *sorted((run_dir / "last").glob("rng_state*.pt")), run_dir / "last" / OPTIMIZER_FILE]
    for path in doomed:
        if path.is_file():
            freed += path.stat().st_size
            path.unlink()
    steps = run_dir / "checkpoints"
    if steps.is_dir():
        freed += sum(p.stat().st_size for p in steps.rglob("*") if p.is_file())
        shutil.rmtree(steps)
    return freed


def saved_before(run_dir: Path) -> str | None:
    """What shows that ``run_dir`` completed a save (a checkpoint, a summary, an evaluation): a run
    that --resume must not start over. None for a run stopped before its first save."""
    for name in ("best", "last", "lp"):
        if (run_dir / name).is_dir() or _old(run_dir / name).is_dir():
            return f"{name}/"
    if (run_dir / SUMMARY_FILE).is_file():
        return SUMMARY_FILE
    if (run_dir / "checkpoints").is_dir():
        return "checkpoints/"
    if any(r.get("split") == "eval" for r in read_metrics(run_dir)):
        return f"the evaluations in {METRICS_FILE}"
    return None


class MetricsWriter:
    """Appends one JSON record per line, flushed, so that other commands can read a live run."""

    def __init__(self, run_dir: Path, enabled: bool = True):
        # Ranks other than 0 get a writer that writes nothing: one record per step, not one per rank.
        self._file = open(run_dir / METRICS_FILE, "a", encoding="utf-8") if enabled else None

    def write(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.write(dumps_strict(record) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


# ---- writing: stage, then rename into place ----------------------------------------------------


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, dumps_strict(data, indent=2) + "\n")


def _old(dest: Path) -> Path:
    return dest.with_name(dest.name + ".old")


def swap_into_place(staging: Path, dest: Path) -> None:
    """Replace ``dest`` by ``staging`` with renames only. Between the two renames only ``dest.old``
    exists; ``find_checkpoint`` falls back to it."""
    old = _old(dest)
    if not dest.exists():
        # A kill between the two renames of the last save left only dest.old: put the new folder
        # in place before deleting it, so that a complete one exists at every moment.
        os.replace(staging, dest)
        shutil.rmtree(old, ignore_errors=True)
        return
    if old.exists():
        shutil.rmtree(old)
    os.replace(dest, old)
    os.replace(staging, dest)
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def staged_folder(dest: Path, check: Callable[[], None] | None = None) -> Iterator[Path]:
    """Yields an empty hidden folder beside ``dest`` to write into; when the block ends, ``check()``
    (if given: may ``dest`` be replaced now?) and the folder takes ``dest``'s place by renames. On
    any error, or an interruption, the staging folder is removed and ``dest`` is as it was: a reader
    sees the old folder or the complete new one, never a part."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        yield staging
        if check is not None:
            check()
        swap_into_place(staging, dest)
    except BaseException:
        with _signals_held():  # a second Ctrl-C or SIGTERM must not cut the clean-up short
            shutil.rmtree(staging, ignore_errors=True)
        raise


@contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait (delivered after the block), where the platform can hold them."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def check_writable(dest: Path, what: str, need_bytes: int | None = None) -> None:
    """Raise EnvironmentProblem (exit 4) unless a folder can be written at ``dest`` (by staged_folder
    or in place): not a file or a dangling symbolic link, and the nearest existing folder above it
    writable, on a writable file system, with ``need_bytes`` free. ``what`` names the option
    ("--out", "output_dir"). Touches nothing; called before the expensive work."""
    dest = Path(dest)
    shown = f"{what} {dest}"
    if dest.is_symlink() and not dest.exists():
        raise EnvironmentProblem(f"{shown} is a dangling symbolic link (to {os.readlink(dest)}): remove it, or choose another path")
    if dest.exists() and not dest.is_dir():
        raise EnvironmentProblem(f"{shown} is a file, not a folder: remove it, or choose another path")
    above = dest.parent
    while not above.exists() and above != above.parent:
        if above.is_symlink():
            raise EnvironmentProblem(f"{shown}: {above} is a dangling symbolic link (to {os.readlink(above)}): "
                                     "remove it, or choose another path")
        above = above.parent
    if above == Path("."):
        above = Path.cwd()  # named in the messages: "." would say little
    if not above.is_dir():
        raise EnvironmentProblem(f"{shown}: {above} is a file, not a folder: remove it, or choose another path")
    targets = [above] + ([dest] if dest.is_dir() else [])
    for folder in targets:
        if _read_only(folder):
            raise EnvironmentProblem(f"{shown}: {folder} is on a read-only file system: write to a folder on a writable one")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise EnvironmentProblem(f"{shown}: cannot write in {folder} (permission denied): give yourself write "
                                     "access (chmod/chown), or choose another folder")
    if need_bytes:
        free = shutil.disk_usage(above).free
        if free < need_bytes:
            raise EnvironmentProblem(f"{shown}: needs about {_mib(need_bytes)}, {above} has {_mib(free)} free: "
                                     "free space there, or choose another folder")


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs (Windows): os.access decides
        return False


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def remove_stale_staging(run_dir: Path) -> None:
    """Staging folders of saves that a kill interrupted (last/, best/, and the checkpoints/ copies)."""
    for path in [*run_dir.glob(".*.tmp-*"), *run_dir.glob("checkpoints/.*.tmp-*")]:
        shutil.rmtree(path, ignore_errors=True)


# ---- a new run directory -----------------------------------------------------------------------


def check_new_run_dir(run_dir: Path, overwrite: bool) -> None:
    """Refuse to clobber an existing directory unless asked, and never replace one that is not a run.
    Touches nothing: every rank of a distributed run checks this before the process group exists, so
    all of them fail alike (:class:`NewRunDir` applies it). A folder that cannot be written there
    (a file, a dangling link, a read-only or foreign parent) is an EnvironmentProblem."""
    if run_dir.is_dir() and any(run_dir.iterdir()):
        if not overwrite:
            raise RunDirError(
                f"output_dir {run_dir} already exists: continue it with --resume {run_dir}, "
                "replace it with --overwrite, or choose another output_dir"
            )
        if not is_run_dir(run_dir):
            raise RunDirError(
                f"output_dir {run_dir} exists and is not a recall run directory: --overwrite only replaces runs; "
                "choose another output_dir"
            )
    check_writable(run_dir, "output_dir")


LOCK_FILE = ".recall.lock"  # in a run directory while a process writes it (RunLock)


class RunLock:
    """One writer per run directory: an exclusive flock on RUN/.recall.lock for the writer's life, the
    file holding its pid for the message a second writer gets. The kernel drops the lock when the
    process dies (kill -9 too), so a lock file left behind is stale: the next writer takes it over."""

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd

    @classmethod
    def take(cls, run_dir: Path, warn: Callable[[str], None] | None = None) -> RunLock:
        import fcntl

        path = run_dir / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise RunDirError(f"{run_dir} is being written by process {holder} (another recall finetune): wait for it "
                              "to end or stop it, or choose another output_dir; two writers would mix their files") from None
        previous = os.read(fd, 64).decode(errors="replace").strip()
        if previous and previous != str(os.getpid()) and warn is not None:
            warn(f"{run_dir}: took over the lock of process {previous}, which is no longer running")
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        if self.fd < 0:
            return
        try:
            if self.path.is_file() and os.pread(self.fd, 64, 0).decode(errors="replace").strip() == str(os.getpid()):
                self.path.unlink()
        except OSError:
            pass
        os.close(self.fd)
        self.fd = -1


class NewRunDir:
    """A new run directory that exists for good only once the run has taken its first optimizer step.

    ``begin`` moves an old run (--overwrite) aside to a hidden sibling instead of deleting it;
    ``commit`` (after the first step) deletes that old run; ``rollback`` (a failure before it) deletes
    what the new run wrote and moves the old run back, so the directory is as it was before the
    command (a new run leaves none). A kill -9 in between leaves the old run in ``.NAME.replaced-PID``.
    """

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.aside: Path | None = None
        self.existed = False
        self.open = False
        self.locks: list[RunLock] = []

    def claim(self, warn: Callable[[str], None] | None = None) -> None:
        """Lock a run directory that holds something, before anything reads or moves it: a second writer
        (finetune --overwrite or --resume into a run still training) is refused in one line."""
        if self.run_dir.is_dir() and any(self.run_dir.iterdir()):
            self.locks.append(RunLock.take(self.run_dir, warn))

    def begin(self, overwrite: bool) -> None:
        check_new_run_dir(self.run_dir, overwrite)
        self.existed = self.run_dir.exists()
        if self.existed and any(p.name != LOCK_FILE for p in self.run_dir.iterdir()):
            self.aside = self.run_dir.with_name(f".{self.run_dir.name}.replaced-{os.getpid()}")
            os.replace(self.run_dir, self.aside)  # with its lock file, still ours
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if not (self.run_dir / LOCK_FILE).is_file():
            self.locks.append(RunLock.take(self.run_dir))
        self.open = True

    def release(self) -> None:
        """The end of the writer: its lock files go (the run directory is as the run left it)."""
        for lock in reversed(self.locks):
            lock.release()
        self.locks = []

    def commit(self) -> None:
        if not self.open:
            return
        self.open = False
        if self.aside is not None:
            shutil.rmtree(self.aside, ignore_errors=True)

    def rollback(self) -> None:
        if not self.open:
            return
        self.open = False
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if self.aside is not None:
            os.replace(self.aside, self.run_dir)
        elif self.existed:
            self.run_dir.mkdir(parents=True, exist_ok=True)  # it was an empty folder
