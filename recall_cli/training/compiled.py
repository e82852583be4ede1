"""The compiled training step (train.compile): whether to compile, how, and what the run records.

The loop's step is one forward (with its loss), a backward and an eager optimizer step. Compiling the
model's forward lets torch.compile (through AOTAutograd) compile the backward as well; on CUDA, the
"reduce-overhead" mode replays both as CUDA graphs, so that a step costs a few launches instead of
hundreds. A CUDA graph is recorded per input shape: with dynamic padding every batch length is a new
graph, so compiling pays only with length buckets (task.pad_to_multiple_of).

What `auto` does, and why (measurements in docs/speed.md, benchmarks/compile_step.py):
- CPU: eager. On a CPU with native bf16, eager bf16 beats a compiled step, and where it is emulated
  a compiled fp32 step is at most ~1.2x eager while its first compile takes minutes.
- CUDA with length buckets, when the run is long enough to pay for its compiles (`pays_back`):
  compiled with CUDA graphs (one process) or without them (under DDP, whose gradient hooks and
  bucketed all-reduce do not replay inside a graph); the compiled forward's loss on the first batch
  is checked against the eager model's before it is trusted. A short run stays eager: compiling a
  BERT step took 28-42 s per padded length on an H100, more than a few hundred steps save.
- CUDA with dynamic padding: eager, saying how to compile.
Where compiling cannot work (no C++ compiler on a CPU, no Triton on a GPU, an old torch, a failed
compile), `auto` trains eagerly and says why in one line; `on` stops with exit 2 and that line.
"""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch

from ..errors import CompileError

# torch.compile's mode per device; under DDP CUDA graphs are left out (see the module's docstring).
MODE_FOR = {"cuda": "reduce-overhead", "cpu": "default"}
DDP_MODE = "default"
MIN_TORCH = (2, 4)  # torch.compile of a BERT forward + backward with dynamic=False works from here

# What `auto` weighs on CUDA, measured on one H100 (torch 2.11, batch 32; ../shared/FINDINGS.md): the
# first compile of a BERT train step took 28-42 s per padded length; CUDA graphs cut a step from
# 18 to 7 ms on MiniLM (6 layers) and from 38.6 to 10.2 ms on BERT-base (12 layers), about 1.8-2.4 ms
# per layer, and compiling without them cut BERT-base's by 12 ms, 1 ms per layer. The low ends, so
# that `auto` compiles only where the run clearly pays for it; `on` compiles whatever the length.
COMPILE_SECONDS_PER_LENGTH = 40.0
SAVED_SECONDS_PER_LAYER = {"reduce-overhead": 0.0018, "default": 0.001}
PAYBACK = 1.5  # the estimated time saved must be this many times the estimated compile time


@dataclass(frozen=True)
class RunSize:
    """What a run's compiles cost and its steps save: how many forward-backward passes it makes,
    in how many padded lengths (one compile each), through how many layers."""

    micro_batches: int
    lengths: int
    layers: int


def run_size(recipe: Any, lengths: list[int], *, total_steps: int, done_steps: int, config: Any,
             world_size: int, sample: int = 2000) -> RunSize:
    """What `auto` weighs on CUDA: the micro-batches left to run, the padded lengths of the run's
    batches (its first ``sample`` global micro-batches in the run's own order, from the training rows'
    ``lengths``: later ones rarely bring a new length, and one that does compiles then), and the
    model's depth (from its ``config``: a resumed run's last/, else the recipe's model)."""
    from ..tasks.batches import BatchOrder, padded_length

    tc, task = recipe.train, recipe.task
    micro_batches = max(0, total_steps - done_steps) * tc.grad_accum
    order = BatchOrder(len(lengths), tc.batch_size * world_size, tc.seed)
    widths = {padded_length(max(lengths[j] for j in order.batch(i)), task.pad_to_multiple_of, task.max_seq_length)
              for i in range(min(micro_batches, sample))}
    return RunSize(micro_batches=micro_batches, lengths=max(1, len(widths)),
                   layers=getattr(config, "num_hidden_layers", None) or 12)


def pays_back(mode: str, size: RunSize) -> tuple[bool, str]:
    """Whether compiling in ``mode`` should pay for itself over the run, and the estimate as words."""
    compile_s = size.lengths * COMPILE_SECONDS_PER_LENGTH
    saved_s = size.micro_batches * size.layers * SAVED_SECONDS_PER_LAYER.get(mode, SAVED_SECONDS_PER_LAYER["default"])
    lengths = f"{size.lengths} length{'s' if size.lengths != 1 else ''}"
    estimate = f"~{compile_s:.0f} s to compile {lengths}, ~{saved_s:.0f} s saved over {size.micro_batches} micro-batches"
    return saved_s >= PAYBACK * compile_s, estimate


# How far the compiled loss may be from the eager one on the same batch: fused kernels and another
# summation order move fp32 by ~1e-6 relative; bf16 rounds each matmul to 8 bits of mantissa.
LOSS_TOLERANCE = {"fp32": 1e-3, "bf16": 3e-2, "fp16": 1e-2}


@dataclass
class CompileRecord:
    """summary.json's "compile" object."""

    mode: str | None = None  # torch.compile's mode; None: the step ran eagerly
    seconds: float = 0.0  # the steps that compiled a new shape, their compute included
    shapes: list[int] = field(default_factory=list)  # the padded lengths trained on (by this process)
    fallback: str | None = None  # why the step ran eagerly after compiling was tried
    reason: str = ""  # why this mode: "off in the recipe", or what `auto` weighed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def cannot_compile(device: torch.device) -> str | None:
    """Why torch.compile cannot work here, or None."""
    if _torch_version() < MIN_TORCH:
        return f"torch {torch.__version__} is older than {'.'.join(map(str, MIN_TORCH))}, which the compiled step needs"
    if not hasattr(torch, "compile") or not torch._dynamo.is_dynamo_supported():
        return f"torch.compile is not supported on this Python/platform (torch {torch.__version__})"
    if device.type == "cuda" and importlib.util.find_spec("triton") is None:
        return "Triton is not installed (torch.compile's GPU code generator; it comes with CUDA builds of torch)"
    if device.type == "cpu":
        chosen = os.environ.get("CXX", "").split()  # a blank CXX is no CXX
        if chosen:  # inductor builds with $CXX when it is set, whatever else is installed
            if not shutil.which(chosen[0]):
                return f"CXX={' '.join(chosen)} is not an executable (torch.compile builds CPU kernels with it): fix or unset CXX"
        elif not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
            return "no C++ compiler found (torch.compile builds CPU kernels with one: install g++ or set CXX)"
    return None


def decide(setting: str, device: torch.device, *, pad_to_multiple_of: int | None, world_size: int,
           size: RunSize | None = None) -> tuple[str | None, str]:
    """(torch.compile mode or None for eager, why): what the start line shows and summary.json keeps.
    ``size``: the run's, for `auto` on CUDA to weigh compile time against what the steps save (None:
    not weighed)."""
    if setting == "off":
        return None, "off in the recipe"
    problem = cannot_compile(device)
    mode = DDP_MODE if world_size > 1 and device.type == "cuda" else MODE_FOR.get(device.type, "default")
    if setting == "on":
        if problem is not None:
            raise CompileError(f"train.compile=on, but {problem} (or set train.compile=off)")
        return mode, "on in the recipe"
    if device.type != "cuda":
        return None, "auto: eager on CPU, measured faster there (docs/speed.md)"
    if problem is not None:
        return None, f"auto: eager, {problem}"
    if pad_to_multiple_of is None:
        return None, ("auto: eager, dynamic padding would record a CUDA graph per batch length "
                      "(set task.pad_to_multiple_of=32 to compile)")
    how = "auto: compiled on CUDA" + (" (no CUDA graphs under DDP)" if mode == DDP_MODE else " with CUDA graphs")
    if size is None:
        return mode, how
    pays, estimate = pays_back(mode, size)
    if not pays:
        return None, f"auto: eager, compiling would not pay back in this run ({estimate}; train.compile=on compiles anyway)"
    return mode, f"{how} ({estimate})"


@dataclass(frozen=True)
class CompilePlan:
    """Whether the run's step compiles, in which torch.compile mode, and why (the start line, --dry-run
    and summary.json say it). The precision is chosen beside the device (training.setup), from this."""

    mode: str | None
    reason: str


def plan_step(recipe: Any, device: torch.device, *, lengths: list[int], total_steps: int, done_steps: int = 0,
              config: Any = None, world_size: int = 1, recorded_mode: tuple[str | None, str | None] | None = None) -> CompilePlan:
    """train.compile decided, for the run and for its --dry-run alike. Raises CompileError under
    train.compile=on where compiling cannot work. ``recorded_mode``: (how a resumed run's step ran,
    "eager" or a mode; why), which `auto` keeps, as it keeps the precision: deciding anew on the
    steps left could switch kernels mid-run, or compile again a step that was given up as wrong."""
    tc = recipe.train
    kept = resumed_mode(tc.compile, device, recorded_mode)
    if kept is not None:
        mode, reason = kept
    else:
        weigh = tc.compile == "auto" and device.type == "cuda" and recipe.task.pad_to_multiple_of is not None
        size = run_size(recipe, lengths, total_steps=total_steps, done_steps=done_steps, config=config,
                        world_size=world_size) if weigh else None
        mode, reason = decide(tc.compile, device, pad_to_multiple_of=recipe.task.pad_to_multiple_of,
                              world_size=world_size, size=size)
    return CompilePlan(mode, reason)


def resumed_mode(setting: str, device: torch.device,
                 recorded: tuple[str | None, str | None] | None) -> tuple[str | None, str] | None:
    """`auto`'s decision for a run that recorded one, with the reason it gave then, or None to
    decide anew (no record, another setting, or a compiled mode this device cannot run)."""
    mode, reason = recorded or (None, None)
    if setting != "auto" or mode is None:
        return None
    if mode == "eager":
        return None, reason or "auto: eager, as the run started"
    if device.type == "cuda" and cannot_compile(device) is None:
        return mode, reason or f"auto: compiled ({mode}), as the run started"
    return None


def compile_model(model: torch.nn.Module, device: torch.device, mode: str | None = None, *,
                  lengths: int = 8) -> Callable[..., Any]:
    """The model's forward under torch.compile (lazily: nothing compiles until the first call).
    dynamic=False: one specialised graph per padded shape, as CUDA graphs need anyway. ``lengths``:
    how many padded lengths the run can make; dynamo keeps only `recompile_limit` graphs per function
    (8 by default) and runs any further length eagerly without a word, so the limit is raised to
    hold every length, the eval-mode check's graph and a margin."""
    allow_graphs(lengths + 4)
    return torch.compile(model, mode=mode or MODE_FOR.get(device.type, "default"), dynamic=False)


def allow_graphs(n: int) -> None:
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # torch < 2.6: the old name
    setattr(config, name, max(getattr(config, name), n))


def uses_cuda_graphs(mode: str | None) -> bool:
    return mode == "reduce-overhead"


def own_gradients(params: list[torch.nn.Parameter]) -> None:
    """Copies every .grad into memory of its own, after the first micro-batch of a step whose
    backward replayed as a CUDA graph (when more micro-batches follow).

    The graph writes its gradients into its memory pool, and autograd adopts such an output as the
    .grad of a parameter that has none; the next micro-batch's replay then overwrites it, so the
    accumulated gradient would silently be the last micro-batch's alone, or torch raises "accessing
    tensor output of CUDAGraphs that has been overwritten" (pytorch #169545). A .grad of its own is
    added to in place by the later micro-batches, and parameters that got no gradient keep None, so
    the optimizer skips them as in an eager step. One copy of the gradients per step."""
    for p in params:
        if p.grad is not None:
            p.grad = p.grad.clone()


def mark_step(device: torch.device) -> None:
    """Tells CUDA graph trees that a new iteration begins, so that the previous step's graph outputs
    may be overwritten (they are read only after being copied into the loss sum)."""
    if device.type == "cuda":
        torch.compiler.cudagraph_mark_step_begin()


def one_line(exc: BaseException) -> str:
    """An exception as one line for the start line or the summary (torch's messages run to pages)."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first[:200]}"


@torch.no_grad()
def loss_matches_eager(model: torch.nn.Module, compiled: Callable[..., Any], batch: dict[str, torch.Tensor],
                       autocast, precision: str) -> str | None:
    """None when the compiled forward's loss on ``batch`` is the eager model's within the precision's
    tolerance, else why not. Both run in eval mode (dropout off), so that they compute the same thing;
    the training graph compiles separately."""
    was_training = model.training
    model.eval()
    try:
        with autocast:
            eager = model(**batch).loss.float().item()
            mine = compiled(**batch).loss.float().item()
    finally:
        model.train(was_training)
    tolerance = LOSS_TOLERANCE.get(precision, 1e-3)
    if not (math.isfinite(mine) and abs(mine - eager) <= tolerance * max(1.0, abs(eager))):
        return f"the compiled step's loss {mine:.6g} differs from the eager step's {eager:.6g} on the same batch"
    return None


class ShapeLog:
    """The padded lengths the step has trained on (kept across a resume in the trainer state), which
    of them this process has compiled, and the time of the steps that compiled one."""

    def __init__(self, record: CompileRecord):
        self.record = record
        self._here: set[int] = set()  # a resumed process compiles again: its own lengths decide

    def new(self, lengths: list[int]) -> list[int]:
        return sorted({n for n in lengths if n not in self._here})

    def add(self, lengths: list[int], seconds: float) -> None:
        self._here.update(lengths)
        self.record.shapes = sorted(self._here | set(self.record.shapes))
        self.record.seconds += seconds
