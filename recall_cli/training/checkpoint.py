"""Tensors in the run directory: theta* once per run, atomic checkpoints, and everything exact resume needs.

The folder layout and file names belong to rundir.py; this module writes and reads what is in them.
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
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from ..card import write_card
from ..errors import RunDirError
from ..rundir import (
    ANCHOR_FILE,
    OPTIMIZER_FILE,
    RNG_FILE,
    TRAINER_STATE_FILE,
    staged_folder,
)


# ---- theta* --------------------------------------------------------------------------------------


def save_anchors(run_dir: Path, anchors: dict[str, torch.Tensor]) -> None:
    tmp = run_dir / f".{ANCHOR_FILE}.tmp"
    save_file({name: t.detach().contiguous().cpu() for name, t in anchors.items()}, str(tmp))
    tmp.replace(run_dir / ANCHOR_FILE)


def load_anchors(run_dir: Path) -> dict[str, torch.Tensor]:
    path = run_dir / ANCHOR_FILE
    if not path.is_file():
        raise RunDirError(f"{path} is missing: this run cannot be resumed (start it again with --overwrite)")
    return load_file(str(path))


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
        if adapter is not None:  # LoRA: the adapters in peft's own format, beside the merged weights
            from ..methods.lora import save_adapter

            save_adapter(adapter, staging)
        if trainer_state is not None:
            torch.save(
                {"optimizer": optimizer.state_dict() if optimizer else None, "scaler": scaler.state_dict() if scaler else None},
                staging / OPTIMIZER_FILE,
            )
            for rank, rng in enumerate(rng_states or [capture_rng()]):
                torch.save(rng, staging / rng_file(rank))
            # Written last: its presence marks a complete checkpoint.
            (staging / TRAINER_STATE_FILE).write_text(json.dumps(trainer_state, indent=2) + "\n", encoding="utf-8")
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
    with staged_folder(folder / f"step-{step}") as staging:
        shutil.copytree(source, staging, dirs_exist_ok=True)
    done = sorted(folder.glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
    for path in done[:-keep]:
        shutil.rmtree(path, ignore_errors=True)
