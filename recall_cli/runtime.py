"""Where and how a run computes: device, precision, autocast, seeding.

A low room of its own: the training loop, `recall evaluate` and the probes all use these, so none of
them imports another for them (scoring/evaluate.py used to take them from the training loop while the
loop took `score` from it).
"""

from __future__ import annotations

import random
from pathlib import Path
from contextlib import nullcontext

import numpy as np
import torch

from .errors import DeviceError

# The dtype names recall's options take (model.dtype, recall probe/merge --dtype) -> torch dtypes.
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_device(name: str, local_rank: int | None = None, *, option: str = "train.device") -> torch.device:
    """cpu, or cuda; under torchrun cuda:LOCAL_RANK among the devices CUDA_VISIBLE_DEVICES shows.
    ``option`` is where the user set it, for the message: a recipe key, or a flag such as --device."""
    def setting(value: str) -> str:
        return f"{option} {value}" if option.startswith("--") else f"{option}={value}"

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceError(f"{setting('cuda')} but no CUDA device is visible (check CUDA_VISIBLE_DEVICES, or use {setting('cpu')})")
    if name == "cuda" and local_rank is not None:
        if local_rank >= torch.cuda.device_count():
            raise DeviceError(
                f"LOCAL_RANK={local_rank} but only {torch.cuda.device_count()} CUDA devices are visible: start at most "
                "that many processes per node (torchrun --nproc_per_node), or check CUDA_VISIBLE_DEVICES"
            )
        return torch.device("cuda", local_rank)
    return torch.device(name)


def device_name(device: torch.device) -> str:
    """The hardware a run computed on, for its record: the GPU's model (torch's name for it), or the
    CPU's (torch.cpu's capabilities, where this torch has them; else the platform's processor)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    get_capabilities = getattr(torch.cpu, "get_capabilities", None)
    name = str(get_capabilities().get("cpu_name") or "") if get_capabilities is not None else ""
    if not name:
        import platform

        name = platform.processor() or platform.machine()
    return name or "cpu"


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX-BF16), where oneDNN's bf16 matmuls
    beat fp32. Elsewhere bf16 is emulated and autocast slows training down, so `auto` keeps fp32."""
    if not torch.backends.mkldnn.is_available():
        return False
    get_capabilities = getattr(torch.cpu, "get_capabilities", None)  # recent torch: the CPU features it dispatches on
    if get_capabilities is not None:
        caps = get_capabilities()
        return bool(caps.get("avx512_bf16") or caps.get("amx_bf16"))
    try:  # older torch on Linux: the kernel's flags
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def cpu_auto_precision() -> tuple[str, str]:
    """`auto` on a CPU: bf16 where the CPU computes it natively, else fp32; and why.

    Measured (../shared/FINDINGS.md, benchmarks/bf16_cpu.py): on an EPYC with AVX512-BF16 a MiniLM
    step under bf16 autocast takes 0.43x the fp32 time, and the quick start's dev accuracy in bf16
    is within the fp32 spread over seeds; where bf16 is emulated (AVX2 only) autocast is ~7x slower."""
    if cpu_has_native_bf16():
        return "bf16", "auto: this CPU has native bf16, ~2x faster than fp32 at equal accuracy"
    return "fp32", "auto: fp32 on CPU; no native bf16 here, bf16 would be slower"


def cuda_auto_precision(compiled: bool) -> tuple[str, str]:
    """`auto` on a GPU. Compiled (CUDA graphs): bf16, where the casts cost no launches. Eager: fp32,
    measured 2.6x faster than bf16 on the MiniLM quick start on an H100, where autocast's extra
    kernel launches cost more than its faster matmuls save (benchmarks/gpu_check.py measures it)."""
    if compiled:
        if torch.cuda.is_bf16_supported():
            return "bf16", "auto: bf16 for the compiled step on this GPU"
        return "fp16", "auto: fp16 for the compiled step (this GPU lacks bf16)"
    return "fp32", "auto: fp32 for an eager GPU step, launch-bound at BERT sizes (docs/speed.md)"


def choose_precision(name: str, device: torch.device, recorded: str | None = None, *, compiled: bool = False) -> tuple[str, str]:
    """The precision a run computes in, and why (the start line says both). ``compiled``: whether
    the training step runs under torch.compile (train.compile), which changes what is fastest on CUDA.

    `recorded` is the precision a resumed run started with: `auto` keeps it, so that a run resumes
    exactly whatever this machine or a later version of recall would pick today."""
    if name == "auto" and recorded is not None:
        if recorded == "fp16" and device.type != "cuda":
            raise DeviceError("the run started in fp16 on CUDA: resume it on a CUDA device")
        return recorded, "auto, as the run started"
    if name == "auto":
        if device.type == "cuda":
            return cuda_auto_precision(compiled)
        return cpu_auto_precision()
    if name == "fp16" and device.type != "cuda":
        raise DeviceError("train.precision=fp16 needs a CUDA device (on CPU use fp32 or bf16)")
    return name, "set in the recipe"


def precision_of_saved_run(recorded: str | None, device: torch.device) -> str | None:
    """What a checkpoint's run computed in. Checkpoints of recall 0.1 do not record it: their `auto`
    chose fp32 on every CPU (and on CUDA what it chooses today)."""
    if recorded is None and device.type == "cpu":
        return "fp32"
    return recorded


def resolve_precision(name: str, device: torch.device) -> str:
    return choose_precision(name, device)[0]


def autocast_for(precision: str, device: torch.device):
    if precision == "fp32":
        return nullcontext()
    dtype = torch.float16 if precision == "fp16" else torch.bfloat16
    return torch.autocast(device.type, dtype=dtype)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
