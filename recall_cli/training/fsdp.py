"""train.distributed=fsdp: the model, its gradients, Adam's moments and theta* split over the ranks (FSDP2).

Under DDP every rank keeps all of it (~16-20 bytes a parameter, docs/scaling.md); here torch's FSDP2
(``torch.distributed.fsdp.fully_shard``) shards each transformer block and then the root, so that a rank holds
1/N of every parameter as a DTensor (dim-0 shards), all-gathers a block's weights just before its forward and
backward and reduce-scatters its gradients after. RecAdam runs unchanged on the shards: its state (moments, fp32
masters) is made like its parameter, a DTensor of the same placement, and theta* is placed the same way here
(``shard_anchors``), so the pull toward theta* is shard against shard and no rank keeps a full copy.

What leaves the ranks is consolidated: a checkpoint's weights and optimizer state are gathered to rank 0's
host memory (torch.distributed.checkpoint.state_dict, full_state_dict + cpu_offload) and written as the
same `from_pretrained` folder a single process writes, with the optimizer state keyed by parameter name;
--resume loads it on every rank and each keeps its shard. Everything here is a collective: every rank calls it.
"""

from __future__ import annotations

from typing import Any, Iterator

import torch
from torch import nn

from ..distributed import Distributed


def blocks(model: nn.Module) -> list[nn.Module]:
    """The units FSDP shards one at a time: the modules of the classes transformers keeps whole
    (_no_split_modules: LlamaDecoderLayer; BERT's BertEmbeddings and BertLayer), else the members of the
    model's ModuleLists (its transformer blocks)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    # by the class or a base of it: fully_shard renames a module's class (BertLayer -> FSDPBertLayer)
    found = [m for m in model.modules() if any(c.__name__ in names for c in type(m).__mro__)]
    if found:
        return found
    return [child for m in model.modules() if isinstance(m, nn.ModuleList) for child in m
            if any(True for _ in child.parameters())]


def shard_model(model: nn.Module, device: torch.device, precision: str) -> nn.Module:
    """fully_shard each block, then the root (the embeddings, the head and whatever no block holds), over all
    ranks. bf16/fp16: FSDP2's MixedPrecisionPolicy all-gathers parameters in that dtype and reduces gradients
    in fp32 (the shards themselves stay in model.dtype). The model is changed in place and returned."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    compute = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    policy = MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32 if compute else None)
    for block in blocks(model):
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def is_sharded(tensor: Any) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def shard_anchors(optimizer: torch.optim.Optimizer) -> None:
    """Put each theta* in RecAdam's state on its parameter's mesh and placement: each rank keeps its own
    rows (cut from the full tensor it loaded, no communication) and the full one is freed."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state.get(p, {})
            anchor = state.get("anchor")
            if anchor is not None and not is_sharded(anchor):
                state["anchor"] = like(p, anchor)


def like(param: torch.Tensor, tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` (full, on every rank) placed like ``param``: this rank's rows of it when ``param`` is sharded."""
    from torch.distributed.tensor import distribute_tensor

    if not is_sharded(param):
        return tensor
    return distribute_tensor(tensor, param.device_mesh, param.placements, src_data_rank=None)


def local_numel(tensors) -> int:
    """Elements this rank holds of ``tensors`` (a DTensor's local shard; a plain tensor whole)."""
    return sum((t.to_local() if is_sharded(t) else t).numel() for t in tensors)


def plain(value: torch.Tensor) -> torch.Tensor:
    """A DTensor's full value (a collective), a plain tensor as it is: what the loop reads on the host."""
    return value.full_tensor() if is_sharded(value) else value


def distance(pairs: list[tuple[torch.Tensor, torch.Tensor]], ctx: Distributed) -> float:
    """||theta - theta*|| over sharded pairs: each rank's sum of squares over its shards, summed over ranks."""
    total = torch.zeros((), dtype=torch.float64)
    for p, anchor in pairs:
        a, b = (t.to_local() if is_sharded(t) else t for t in (p.detach(), anchor))
        total += torch.linalg.vector_norm(a.to(torch.float64) - b.to(torch.float64)).cpu() ** 2
    ctx.all_reduce_sum(total)
    return float(total.sqrt())


class Consolidated(nn.Module):
    """The full weights gathered on rank 0, standing in for the sharded model where recall saves one: it
    names its parameters like the model, and save_pretrained writes them through the model's own."""

    def __init__(self, model: nn.Module, state: dict[str, torch.Tensor]):
        super().__init__()
        object.__setattr__(self, "_model", model)  # not a submodule: its DTensors are not this one's
        object.__setattr__(self, "_state", state)

    def named_parameters(self, *args, **kwargs) -> Iterator[tuple[str, torch.Tensor]]:  # noqa: ARG002
        names = {name for name, _ in self._model.named_parameters()}
        return ((n, t) for n, t in self._state.items() if n in names)

    def save_pretrained(self, folder, **kwargs) -> None:
        self._model.save_pretrained(folder, state_dict=self._state, **kwargs)


class ConsolidatedOptimizer:
    """The optimizer state gathered on rank 0 (parameter names as keys), for checkpoint.save_checkpoint."""

    def __init__(self, state: dict[str, Any]):
        self._state = state

    def state_dict(self) -> dict[str, Any]:
        return self._state


_FULL = dict(full_state_dict=True, cpu_offload=True)


def gather(model: nn.Module, optimizer: torch.optim.Optimizer | None) -> tuple[Consolidated | None, Any]:
    """(the full weights, the full optimizer state) on rank 0 for a checkpoint; (None, None) elsewhere."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

    options = StateDictOptions(**_FULL)
    weights = get_model_state_dict(model, options=options)
    optim = get_optimizer_state_dict(model, optimizer, options=options) if optimizer is not None else None
    if torch.distributed.get_rank() != 0:
        return None, None
    return Consolidated(model, weights), ConsolidatedOptimizer(optim) if optim is not None else None


def for_saving(model: nn.Module, state: tuple) -> tuple[nn.Module | None, tuple]:
    """(the model, loop.save_weights's state: trainer state, optimizer, scaler, rng) with the weights and the
    optimizer gathered to rank 0; (None, state) on the other ranks, which write nothing."""
    weights, optimizer = gather(model, state[1] if len(state) > 1 else None)
    return weights, (state[0], optimizer, *state[2:]) if len(state) > 1 else state


def load_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """A consolidated optimizer state (gather's, read from last/ on every rank): each rank keeps its shards."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    # torch places the loaded state like the optimizer's own, which RecAdam makes at its first step: take one
    # at lr 0 on zero gradients (no weight moves; the moments and step counts it makes are then replaced).
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if any("step" not in optimizer.state.get(p, {}) for p in params):
        lrs = [group["lr"] for group in optimizer.param_groups]
        for group in optimizer.param_groups:
            group["lr"] = 0.0
        for p in params:
            p.grad = torch.zeros_like(p)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        for group, lr in zip(optimizer.param_groups, lrs):
            group["lr"] = lr
    set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))
