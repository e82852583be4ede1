"""One loop in 1 or N processes: the torchrun environment, the process group, and pre-emption.

torchrun (or Slurm through it) starts one process per device and tells each its place through
RANK, LOCAL_RANK and WORLD_SIZE. Without them the run is one process and nothing here creates a
process group, so the single-process path is exactly the loop without collectives.

    recall finetune R.yaml                                         1 process
    torchrun --nproc_per_node 8 -m recall_cli finetune R.yaml      8 processes, DDP
    recall finetune R.yaml --nproc 8                               the same, torchrun started for you

`train.batch_size` is per process: one optimizer step sees batch_size x world_size x grad_accum examples.
"""

from __future__ import annotations

import io
import os
import signal
import sys
import uuid
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.distributed as dist

from .errors import ExitCode


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise RuntimeError(f"environment variable {name}={value!r} is not an integer (it is set by torchrun)") from None


def env_rank() -> int:
    """This process's global rank from the torchrun environment (0 when not under torchrun)."""
    return _env_int("RANK", 0)


@dataclass
class Distributed:
    """Where this process sits in the job. ``world_size == 1`` means no process group at all."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    # train.distributed=fsdp under torchrun: the model is sharded (training/fsdp.py) instead of replicated by DDP
    shards: bool = False

    @classmethod
    def from_env(cls) -> "Distributed":
        world = _env_int("WORLD_SIZE", 1)
        ctx = cls(rank=_env_int("RANK", 0), local_rank=_env_int("LOCAL_RANK", 0), world_size=world)
        if world < 1 or not 0 <= ctx.rank < world:
            raise RuntimeError(f"RANK={ctx.rank} WORLD_SIZE={world}: not a valid torchrun environment")
        return ctx

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def saves(self) -> bool:
        """Whether this rank calls the checkpoint writer: rank 0, and under FSDP every rank (the weights are
        gathered to rank 0 first, a collective)."""
        return self.is_main or self.shards

    @property
    def scoring(self) -> "Distributed | None":
        """How evaluation splits its batches: a batch per rank in turn (DDP); None under FSDP, where every
        forward is a collective that every rank takes part in, so each rank scores every batch."""
        return None if self.shards else self

    # ---- process group ---------------------------------------------------------------------------

    def init(self, device: torch.device) -> None:
        """Join the process group: nccl for CUDA tensors, gloo on CPU. Called only once everything
        that can fail on user input has been checked, identically, on every rank."""
        if not self.enabled or dist.is_initialized():
            return
        if device.type == "cuda":
            # The object collectives (all_gather_object, gather_object) stage their buffers on the
            # *current* CUDA device: without this every rank would use cuda:0.
            torch.cuda.set_device(device)
            dist.init_process_group("nccl", device_id=device)
        else:
            dist.init_process_group("gloo")

    def close(self) -> None:
        if self.enabled and dist.is_initialized():
            dist.destroy_process_group()

    def wrap(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """DistributedDataParallel around ``model`` (the model itself in a single process, and under FSDP, where
        training/fsdp.py has sharded it in place before the optimizer was built)."""
        if not self.enabled or self.shards:
            return model
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)

    def no_sync(self, ddp_model: torch.nn.Module, skip: bool):
        """Accumulate gradients locally on micro-steps that are not the last of an optimizer step."""
        if self.shards:  # FSDP2: no reduce-scatter until the last micro-step (it keeps unsharded gradients)
            ddp_model.set_requires_gradient_sync(not skip)
            return nullcontext()
        return ddp_model.no_sync() if self.enabled and skip else nullcontext()

    # ---- collectives (no-ops in one process) -----------------------------------------------------

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def any_rank(self, flag: bool) -> bool:
        """Whether ``flag`` is true on any rank (a SIGTERM arrived somewhere): every rank then stops at
        the same step. One small collective under DDP; nothing in one process."""
        if not self.enabled:
            return flag
        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
        packed = torch.tensor(float(flag), device=device)
        dist.all_reduce(packed)
        return packed.item() > 0

    def all_reduce_sum(self, tensor: torch.Tensor) -> None:
        """Sums ``tensor`` over the ranks, in place."""
        if self.enabled:
            dist.all_reduce(tensor)

    def all_gather_object(self, obj: Any) -> list[Any]:
        if not self.enabled:
            return [obj]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, obj)
        return gathered

    def gather_object(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` (which may hold tensors, e.g. RNG states) on rank 0, None elsewhere."""
        if not self.enabled:
            return [obj]
        # Tensors go through torch.save bytes: pickled tensors do not survive gather_object's
        # unpickler in torch 2.13 ("UntypedStorage has no attribute dtype").
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        gathered: list[Any] | None = [None] * self.world_size if self.is_main else None
        dist.gather_object(buffer.getvalue(), gathered, dst=0)
        if gathered is None:
            return None
        return [torch.load(io.BytesIO(b), map_location="cpu", weights_only=True) for b in gathered]


def shard(indices: Sequence[int], rank: int, world_size: int) -> list[int]:
    """Rank ``rank``'s contiguous part of a global micro-batch; parts differ in size by at most one,
    and may be empty when the last batch of an epoch has fewer examples than there are ranks."""
    base, extra = divmod(len(indices), world_size)
    start = rank * base + min(rank, extra)
    return list(indices[start : start + base + (1 if rank < extra else 0)])


# ---- pre-emption ---------------------------------------------------------------------------------


class SigtermFlag:
    """While active, SIGTERM (a scheduler's pre-emption, or torchrun passing one on) only sets a flag.

    The loop looks at the flag once per optimizer step, agrees on it across ranks, and stops after
    saving a complete checkpoint, so that nothing is ever half written and --resume continues.
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None
        self._installed = False

    def _handle(self, signum, frame) -> None:  # noqa: ARG002 - signal handler signature
        self.requested = True

    def __enter__(self) -> "SigtermFlag":
        try:
            self._previous = signal.signal(signal.SIGTERM, self._handle)
            self._installed = True
        except ValueError:  # not the main thread (e.g. a library caller's worker): leave signals alone
            self._installed = False
        return self

    def __exit__(self, *exc) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)


# ---- launching torchrun for the user (`recall finetune --nproc N`) --------------------------------

# Exit codes a worker chooses deliberately; anything else (a crash, a signal) makes the launcher exit 1.
_PASSED_THROUGH = (ExitCode.USAGE, ExitCode.DIVERGED, ExitCode.ENVIRONMENT, ExitCode.PREEMPTED)


def launch(nproc: int, args: Sequence[str], preempted_code: int = ExitCode.PREEMPTED) -> int:
    """Run ``python -m recall_cli ARGS`` in ``nproc`` local processes under torchrun's elastic agent
    (what ``torchrun --standalone --nproc_per_node N`` does) and return the exit code to use: the
    workers' own code for usage errors, divergence, the environment (a full disk) and pre-emption, 1
    for anything else."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # N processes on one machine share its cores (torchrun itself would set 1 thread each).
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=f"recall-{uuid.uuid4()}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
    )
    try:
        elastic_launch(config, sys.executable)("-m", "recall_cli", *args)
        return 0
    except ChildFailedError as err:
        # Ranks stopped by the agent after the first failure die by signal; the cause is an exit code.
        exits = sorted((f.timestamp, f.exitcode) for f in err.failures.values() if f.exitcode >= 0)
        code = exits[0][1] if exits else 1
        return code if code in _PASSED_THROUGH else ExitCode.FAILURE
    except SignalException as stop:
        # The agent passed the signal on to the workers and waited for them to exit. Only SIGTERM
        # makes them save last/ first; Ctrl-C (SIGINT) stops them as interrupted, without a save.
        if stop.sigval == signal.SIGTERM:
            return preempted_code
        return ExitCode.INTERRUPTED if stop.sigval == signal.SIGINT else ExitCode.FAILURE
