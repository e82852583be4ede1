"""Where and how a run computes: device, precision, autocast, seeding.

A low room of its own: the training loop, `recall evaluate` and the probes all use these, so none of
them imports another for them (evaluate.py used to take them from train.py while train.py took
`score` from evaluate.py).
"""

from __future__ import annotations

import random
from contextlib import nullcontext

import numpy as np
import torch


class DeviceError(ValueError):
    """The recipe asks for a device or precision this machine does not have; the message says what to set."""


def resolve_device(name: str, local_rank: int | None = None) -> torch.device:
    """cpu, or cuda; under torchrun cuda:LOCAL_RANK among the devices CUDA_VISIBLE_DEVICES shows."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceError("train.device=cuda but no CUDA device is visible (check CUDA_VISIBLE_DEVICES, or use train.device=cpu)")
    if name == "cuda" and local_rank is not None:
        if local_rank >= torch.cuda.device_count():
            raise DeviceError(
                f"LOCAL_RANK={local_rank} but only {torch.cuda.device_count()} CUDA devices are visible: start at most "
                "that many processes per node (torchrun --nproc_per_node), or check CUDA_VISIBLE_DEVICES"
            )
        return torch.device("cuda", local_rank)
    return torch.device(name)


def resolve_precision(name: str, device: torch.device) -> str:
    if name == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return "fp32"
    if name == "fp16" and device.type != "cuda":
        raise DeviceError("train.precision=fp16 needs a CUDA device (on CPU use fp32 or bf16)")
    return name


def autocast_for(precision: str, device: torch.device):
    if precision == "fp32":
        return nullcontext()
    dtype = torch.float16 if precision == "fp16" else torch.bfloat16
    return torch.autocast(device.type, dtype=dtype)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
