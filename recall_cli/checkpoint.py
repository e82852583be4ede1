"""The run directory on disk: theta* once per run, atomic checkpoints, and everything exact resume needs.

    OUTPUT_DIR/config.yaml        the resolved recipe
    OUTPUT_DIR/metrics.jsonl      one JSON record per line (train and eval)
    OUTPUT_DIR/summary.json       written at the end of the run
    OUTPUT_DIR/anchor.safetensors theta*, by parameter name
    OUTPUT_DIR/last/, best/       save_pretrained folders (+ training state in last/)

Under torchrun only rank 0 writes here; every rank reads last/ on resume, so the directory must be
on a filesystem that every node sees. Each rank's RNG state is saved (rng_state.pt is rank 0's,
rng_state_rank<R>.pt the others') because dropout draws differ per rank.

A checkpoint is written to a temporary folder and renamed into place, so killing the process at
any moment leaves either the previous complete checkpoint or the new one, never a broken one.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from .errors import RunDirError  # noqa: F401 - raised here, importable from here

ANCHOR_FILE = "anchor.safetensors"
CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
TRAINER_STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.pt"
RNG_FILE = "rng_state.pt"
# A checkpoint folder outside a run (e.g. a `recall merge` output) may carry the recipe its head was
# trained with, so that `recall evaluate FOLDER` knows the task.
SOURCE_RECIPE_FILE = "recall_recipe.yaml"
# A scored record (recall_cli/records.py) is a run directory whose config.yaml has this section.
RECORD_SECTION = "record"



def is_run_dir(path: Path) -> bool:
    return (path / CONFIG_FILE).is_file() and (path / METRICS_FILE).exists()


def check_new_run_dir(run_dir: Path, overwrite: bool) -> None:
    """Refuse to clobber an existing directory unless asked, and never replace one that is not a run.
    Touches nothing: every rank of a distributed run checks this before the process group exists, so
    all of them fail alike (:class:`NewRunDir` applies it)."""
    if run_dir.exists() and any(run_dir.iterdir()):
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

    def begin(self, overwrite: bool) -> None:
        check_new_run_dir(self.run_dir, overwrite)
        self.existed = self.run_dir.exists()
        if self.existed and any(self.run_dir.iterdir()):
            self.aside = self.run_dir.with_name(f".{self.run_dir.name}.replaced-{os.getpid()}")
            os.replace(self.run_dir, self.aside)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.open = True

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


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# ---- theta* --------------------------------------------------------------------------------------


def save_anchors(run_dir: Path, anchors: dict[str, torch.Tensor]) -> None:
    tmp = run_dir / f".{ANCHOR_FILE}.tmp"
    save_file({name: t.detach().contiguous().cpu() for name, t in anchors.items()}, str(tmp))
    os.replace(tmp, run_dir / ANCHOR_FILE)


def load_anchors(run_dir: Path) -> dict[str, torch.Tensor]:
    path = run_dir / ANCHOR_FILE
    if not path.is_file():
        raise RunDirError(f"{path} is missing: this run cannot be resumed (start it again with --overwrite)")
    return load_file(str(path))


# ---- atomic folders ------------------------------------------------------------------------------


def _old(dest: Path) -> Path:
    return dest.with_name(dest.name + ".old")


def new_staging_dir(run_dir: Path, name: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=run_dir))


def swap_into_place(staging: Path, dest: Path) -> None:
    """Replace ``dest`` by ``staging`` with renames only. Between the two renames only ``dest.old``
    exists; ``find_checkpoint`` falls back to it."""
    old = _old(dest)
    if not dest.exists():
        # A kill between the two renames of the last save left only dest.old: put the new checkpoint
        # in place before deleting it, so that a complete one exists at every moment.
        os.replace(staging, dest)
        shutil.rmtree(old, ignore_errors=True)
        return
    if old.exists():
        shutil.rmtree(old)
    os.replace(dest, old)
    os.replace(staging, dest)
    shutil.rmtree(old, ignore_errors=True)


def find_checkpoint(run_dir: Path, name: str = "last") -> Path | None:
    for candidate in (run_dir / name, _old(run_dir / name)):
        if (candidate / TRAINER_STATE_FILE).is_file() or (name != "last" and (candidate / "config.json").is_file()):
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


def remove_stale_staging(run_dir: Path) -> None:
    """Staging folders of saves that a kill interrupted (last/, best/, and the checkpoints/ copies)."""
    for path in [*run_dir.glob(".*.tmp-*"), *run_dir.glob("checkpoints/.*.tmp-*")]:
        shutil.rmtree(path, ignore_errors=True)


# ---- training state ------------------------------------------------------------------------------


def capture_rng(device: torch.device | None = None) -> dict[str, Any]:
    """Every random stream the loop draws from. On CUDA, only the training device's: a resume may see
    another number of GPUs (a sweep re-run with --jobs pins each cell to one), and the other
    devices' streams are never used."""
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {"keys": torch.from_numpy(np_state[1].copy()), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "gauss": float(np_state[4])},
        "torch": torch.get_rng_state(),
    }
    if device is not None and device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def rng_file(rank: int) -> str:
    return RNG_FILE if rank == 0 else f"rng_state_rank{rank}.pt"


def restore_rng(state: dict[str, Any], device: torch.device | None = None) -> None:
    random.setstate(state["python"])
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy(), n["pos"], n["has_gauss"], n["gauss"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and device is not None and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)


def save_checkpoint(
    run_dir: Path,
    name: str,
    model: torch.nn.Module,
    tokenizer,
    trainer_state: dict[str, Any] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scaler: torch.amp.GradScaler | None = None,
    rng_states: list[dict[str, Any]] | None = None,
) -> Path:
    """A save_pretrained folder that `from_pretrained` opens as it is; with the training state when given.
    ``rng_states`` holds one state per rank (default: this process's)."""
    staging = new_staging_dir(run_dir, name)
    model.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    if trainer_state is not None:
        torch.save(
            {"optimizer": optimizer.state_dict() if optimizer else None, "scaler": scaler.state_dict() if scaler else None},
            staging / OPTIMIZER_FILE,
        )
        for rank, rng in enumerate(rng_states or [capture_rng()]):
            torch.save(rng, staging / rng_file(rank))
        # Written last: its presence marks a complete checkpoint.
        (staging / TRAINER_STATE_FILE).write_text(json.dumps(trainer_state, indent=2) + "\n", encoding="utf-8")
    dest = run_dir / name
    swap_into_place(staging, dest)
    return dest


def load_training_state(
    folder: Path, rank: int = 0, world_size: int = 1
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(trainer_state, optimizer+scaler state, ``rank``'s rng state); tensors only, never arbitrary pickles.
    A run resumes only with the world size it was trained with: the batch order and each rank's RNG
    stream depend on it."""
    trainer_state = json.loads((folder / TRAINER_STATE_FILE).read_text(encoding="utf-8"))
    saved_world = trainer_state.get("world_size", 1)
    if saved_world != world_size or not (folder / rng_file(rank)).is_file():
        how = f"--nproc {saved_world} (or torchrun --nproc_per_node {saved_world})" if saved_world > 1 else "in one process, without torchrun"
        raise RunDirError(
            f"{folder.parent} was trained with {saved_world} process{'es' if saved_world > 1 else ''} and this is "
            f"{world_size}: resume it with the same number (train.batch_size is per process): "
            f"recall finetune --resume {folder.parent} {how}"
        )
    optim_state = torch.load(folder / OPTIMIZER_FILE, map_location="cpu", weights_only=True)
    rng_state = torch.load(folder / rng_file(rank), map_location="cpu", weights_only=True)
    return trainer_state, optim_state, rng_state


def rotate_step_checkpoints(run_dir: Path, step: int, keep: int, source: Path) -> None:
    """Keep copies of the last ``keep`` checkpoints as checkpoints/step-N (for looking back, not resume)."""
    if keep <= 0:
        return
    folder = run_dir / "checkpoints"
    folder.mkdir(exist_ok=True)
    staging = new_staging_dir(folder, f"step-{step}")
    shutil.rmtree(staging)
    shutil.copytree(source, staging)
    os.replace(staging, folder / f"step-{step}")
    done = sorted(folder.glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
    for path in done[:-keep]:
        shutil.rmtree(path, ignore_errors=True)


# ---- metrics.jsonl -------------------------------------------------------------------------------


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


def truncate_metrics(run_dir: Path, last_step: int) -> None:
    """On resume, drop records written after the checkpoint: the resumed run writes them again."""
    records = [r for r in read_metrics(run_dir) if r["step"] <= last_step]
    path = run_dir / METRICS_FILE
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    os.replace(tmp, path)


class MetricsWriter:
    """Appends one JSON record per line, flushed, so that other commands can read a live run."""

    def __init__(self, run_dir: Path, enabled: bool = True):
        # Ranks other than 0 get a writer that writes nothing: one record per step, not one per rank.
        self._file = open(run_dir / METRICS_FILE, "a", encoding="utf-8") if enabled else None

    def write(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
