"""Tensors in the run directory: theta* once per run, atomic checkpoints, and everything exact resume needs.

The folder layout and file names belong to rundir/layout.py; this module writes and reads what is in them.
Under torchrun only rank 0 writes; every rank reads last/ on resume, so the directory must be on a
filesystem that every node sees. Each rank's RNG state is saved (rng_state.pt is rank 0's,
rng_state_rank<R>.pt the others') because dropout draws differ per rank.

A checkpoint is staged and renamed into place (rundir.staged_folder), so killing the process at any
moment leaves either the previous complete checkpoint or the new one, never a broken one.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from ..card import write_card
from ..errors import RunDirError
from ..rundir import (
    ANCHOR_FILE,
    START_FILE,
    CHECKPOINTS_DIR,
    LAST_DIR,
    OPTIMIZER_FILE,
    RNG_FILE,
    TRAINER_STATE_FILE,
    staged_folder,
)
from .progress import empty_window


# ---- theta* --------------------------------------------------------------------------------------


def save_theta_star(run_dir: Path, theta_star: dict[str, torch.Tensor]) -> None:
    _write_tensors(run_dir / ANCHOR_FILE, theta_star)


def load_theta_star(run_dir: Path) -> dict[str, torch.Tensor]:
    path = run_dir / ANCHOR_FILE
    if not path.is_file():
        raise RunDirError(f"{path} is missing: this run cannot be resumed (start it again with --overwrite)")
    return _read_tensors(path)


def save_start(run_dir: Path, start: dict[str, torch.Tensor]) -> None:
    """The parameters theta* leaves out (a new head), as the run begins; nothing when there are none."""
    if start:
        _write_tensors(run_dir / START_FILE, start)


def load_start(run_dir: Path) -> dict[str, torch.Tensor] | None:
    """What :func:`save_start` kept; None for a run made before it (or one with nothing to keep)."""
    path = run_dir / START_FILE
    return _read_tensors(path) if path.is_file() else None


def _write_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    save_file({name: t.detach().contiguous().cpu() for name, t in tensors.items()}, str(tmp))
    tmp.replace(path)


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError

    try:
        return load_file(str(path))
    except SafetensorError as exc:
        raise RunDirError(_damaged(path, f"is not a readable safetensors file ({' '.join(str(exc).split())[:100]})")) from None


# ---- training state ------------------------------------------------------------------------------


@dataclass
class TrainerState:
    """What last/trainer_state.json holds: where the run stands, for an exact resume."""

    step: int = 0
    micro_step: int = 0
    best_main: float | None = None
    best_step: int | None = None
    train_seconds: float = 0.0
    samples: int = 0
    world_size: int = 1  # a run resumes only with the number of processes it was trained with
    precision: str | None = None  # what `auto` chose: a resumed run keeps it (None: a 0.1 checkpoint)
    compile_shapes: list[int] = field(default_factory=list)  # summary.json's compile.shapes and .seconds
    compile_seconds: float = 0.0  # so far, over every process of the run
    # How the step ran ("eager" or torch.compile's mode) and why a compile was given up: a resumed run
    # under `auto` keeps both instead of deciding anew (None: a checkpoint that predates them).
    compile_mode: str | None = None
    compile_reason: str | None = None
    compile_fallback: str | None = None
    # Running sums since the last train record (progress.WINDOW_KEYS).
    window: dict[str, float] = field(default_factory=empty_window)

    def __post_init__(self) -> None:
        # A checkpoint saved by version 0.1 lacks the skip counters: every step in its window had its norm added.
        self.window.setdefault("stepped", self.window.get("steps", 0.0))
        self.window.setdefault("skipped", 0.0)


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


def first_non_finite(model: torch.nn.Module) -> str | None:
    """The name of the first floating-point parameter holding NaN/inf, or None (one device sync)."""
    params = [(n, p) for n, p in model.named_parameters() if p.is_floating_point()]
    if not params or bool(torch.stack([torch.isfinite(p.detach()).all() for _, p in params]).all()):
        return None
    return next(n for n, p in params if not bool(torch.isfinite(p.detach()).all()))


def refuse_non_finite(model: torch.nn.Module, run_dir: Path, name: str, step: int) -> None:
    """NonFiniteWeights (exit 3) when ``model`` holds NaN/inf: the folder ``name`` is not written, and keeps
    what it held."""
    from ..errors import NonFiniteWeights

    bad = first_non_finite(model)
    if bad is not None:
        kept = "last/ keeps its earlier checkpoint" if (run_dir / LAST_DIR).is_dir() else "nothing was saved"
        raise NonFiniteWeights(f"training diverged: {bad} holds NaN/inf at step {step}, so {name}/ was not written "
                               f"({kept}): lower optimizer.lr (or train.linear_probe_lr), or use train.precision=fp32")


def save_checkpoint(
    run_dir: Path,
    name: str,
    model: torch.nn.Module,
    tokenizer,
    trainer_state: dict[str, Any] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scaler: torch.amp.GradScaler | None = None,
    rng_states: list[dict[str, Any]] | None = None,
    card: str | None = None,
    adapter: Any = None,
) -> Path:
    """A save_pretrained folder that `from_pretrained` opens as it is; with the training state when given.
    ``rng_states`` holds one state per rank (default: this process's). ``card``: the folder's README.md
    (card.model_card), written with the weights so that it always describes them."""
    dest = run_dir / name
    with staged_folder(dest) as staging:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        if card is not None:
            write_card(staging, card, previous=dest if dest.is_dir() else None)
        if adapter is not None:  # an adapter's own files (LoRA's in peft's format), beside the merged weights
            adapter.save(staging)
        if trainer_state is not None:
            _save(
                {"optimizer": optimizer.state_dict() if optimizer else None, "scaler": scaler.state_dict() if scaler else None},
                staging / OPTIMIZER_FILE,
            )
            for rank, rng in enumerate(rng_states or [capture_rng()]):
                _save(rng, staging / rng_file(rank))
            # Written last: its presence marks a complete checkpoint.
            (staging / TRAINER_STATE_FILE).write_text(json.dumps(trainer_state, indent=2) + "\n", encoding="utf-8")
    return dest


def _save(obj: Any, path: Path) -> None:
    """torch.save, with a write that failed for want of room reported as the OSError it is: torch's
    zip writer raises a RuntimeError ("[enforce fail at inline_container.cc] unexpected pos ...")
    that names neither the cause nor the file."""
    try:
        torch.save(obj, path)
    except RuntimeError as exc:
        import errno
        import shutil

        if shutil.disk_usage(path.parent).free < 64 * 2**20:
            raise OSError(errno.ENOSPC, f"no space left writing {path.name}", str(path)) from exc
        raise


@dataclass
class Saved:
    """What last/ holds for an exact resume (one rank's share of it)."""

    state: TrainerState
    optimizer: dict[str, Any]  # {"optimizer": its state_dict, "scaler": the GradScaler's or None}
    rng: dict[str, Any]  # this rank's random streams (capture_rng)


def load_training_state(folder: Path, rank: int = 0, world_size: int = 1) -> Saved:
    """The trainer state, optimizer+scaler state and ``rank``'s rng state; tensors only, never arbitrary pickles.
    A run resumes only with the world size it was trained with: the batch order and each rank's RNG
    stream depend on it. Anything damaged or missing in last/ is one RunDirError naming the file."""
    trainer_state = _trainer_state(folder / TRAINER_STATE_FILE)
    saved_world = trainer_state.get("world_size", 1)
    if saved_world == world_size and not (folder / rng_file(rank)).is_file():
        raise RunDirError(_damaged(folder / rng_file(rank), "is missing"))
    if saved_world != world_size:
        how = f"--nproc {saved_world} (or torchrun --nproc_per_node {saved_world})" if saved_world > 1 else "in one process, without torchrun"
        raise RunDirError(
            f"{folder.parent} was trained with {saved_world} process{'es' if saved_world > 1 else ''} and this is "
            f"{world_size}: resume it with the same number (train.batch_size is per process): "
            f"recall finetune --resume {folder.parent} {how}"
        )
    optim_state = _tensors(folder / OPTIMIZER_FILE)
    if not isinstance(optim_state, dict) or "optimizer" not in optim_state:
        raise RunDirError(_damaged(folder / OPTIMIZER_FILE, "is not the optimizer state recall saves"))
    return Saved(TrainerState(**trainer_state), optim_state, _tensors(folder / rng_file(rank)))


def _damaged(path: Path, what: str) -> str:
    return (f"{path} {what}: this checkpoint cannot be resumed exactly (put the file back, or start the run "
            "again with --overwrite)")


def _trainer_state(path: Path) -> dict[str, Any]:
    """last/trainer_state.json, checked: a JSON object whose keys a TrainerState knows."""
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise RunDirError(_damaged(path, f"is not valid JSON ({type(exc).__name__})")) from None
    if not isinstance(state, dict):
        raise RunDirError(_damaged(path, "is not a JSON object"))
    unknown = sorted(set(state) - {f.name for f in fields(TrainerState)})
    if unknown:
        raise RunDirError(_damaged(path, f"has keys recall does not write ({', '.join(unknown[:3])})"))
    return state


def _tensors(path: Path) -> Any:
    """A torch.save file of tensors and plain containers; never an arbitrary pickle (weights_only)."""
    import pickle

    if not path.is_file():
        raise RunDirError(_damaged(path, "is missing"))
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise RunDirError(_damaged(path, "holds Python objects other than tensors: refused unread (recall loads "
                                         "with weights_only, never an arbitrary pickle)")) from None
    except (RuntimeError, EOFError, ValueError) as exc:
        reason = " ".join(str(exc).split())[:120]
        raise RunDirError(_damaged(path, f"cannot be read as tensors ({reason})")) from None


def rotate_step_checkpoints(run_dir: Path, step: int, keep: int, source: Path) -> None:
    """Keep copies of the last ``keep`` checkpoints as checkpoints/step-N (for looking back, not resume)."""
    if keep <= 0:
        return
    folder = run_dir / CHECKPOINTS_DIR
    folder.mkdir(exist_ok=True)
    with staged_folder(folder / f"step-{step}") as staging:
        shutil.copytree(source, staging, dirs_exist_ok=True)
    done = sorted(folder.glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
    for path in done[:-keep]:
        shutil.rmtree(path, ignore_errors=True)
