"""OSF through peft: the wrapping, merging, saving and loading (methods/osf/__init__.py declares the
method and its keys).

peft's OSF (``OSFConfig``, ``PeftType.OSF``) replaces each targeted linear layer's update by an SVD of its
weight, W = U_high S_high V_high + U_low S_low V_low: the top singular directions (``effective_rank`` of
them) stay frozen, the rest (U_low, S_low, V_low) train, and a gradient hook projects their gradients
off the frozen subspace. The layer adds (U_low S_low V_low - its start) to the frozen weight, so it starts
at theta*'s function and the merged weight is theta* plus that difference.

recall's key is the trainable rank (``model.osf.rank``, comparable with LoRA's r): peft's effective_rank
is min(out, in) - rank per layer, one number where every targeted layer has the same smaller
dimension (BERT's do), else a rank_pattern entry per layer.

adapter/ holds the trained U_low, S_low, V_low and the head (modules_to_save); peft computes the start
again from the base weights when it loads them, so adapter/ opens on theta* (and --resume starts from the
same SVD the run started from: the set-up makes it again on theta*).
"""

from __future__ import annotations

import copy
import math
import re
import warnings
from pathlib import Path

import torch

from ...errors import PreflightError, RunDirError
from ...plugins.adapter import check_named_targets, linear_names, one_thread

ADAPTER_DIR = "adapter"  # beside a checkpoint's merged weights
TRAINED = "osf_svd_params"  # the trainable parts' name in peft's layers


def wrap(model: torch.nn.Module, rank: int, target_modules: list[str] | None, *, task_type: str):
    """peft's OSF model around ``model``, ``rank`` singular directions training in each targeted layer
    (null: every linear layer of the encoder), the head in modules_to_save. One line naming the key
    when peft cannot: no layer matches, or a layer is too small for the rank."""
    try:
        from peft import OSFConfig, TaskType, get_peft_model
    except ImportError:
        import peft

        raise PreflightError(f"model.osf.rank: OSF needs a peft with OSFConfig (peft {peft.__version__} has none): "
                             "pip install -U peft") from None

    targets = [m.strip() for m in target_modules] if target_modules else "all-linear"
    config = OSFConfig(task_type=TaskType[task_type], target_modules=targets)
    if target_modules:
        check_named_targets(model, targets, "model.osf.target_modules")
    matched = _matched(model, config)
    if not matched:
        raise PreflightError(f"model.osf.target_modules: no linear layer of this model matches {targets} (its linear "
                             f"layers are named {', '.join(linear_names(model))}; or null for all of them)")
    smaller = {name: min(module.weight.shape) for name, module in matched.items()}
    if rank >= min(smaller.values()):
        name = min(smaller, key=smaller.get)
        raise PreflightError(f"model.osf.rank: {rank} leaves nothing frozen in {name} (its smaller dimension is "
                             f"{smaller[name]}): set it below {min(smaller.values())}")
    if len(set(smaller.values())) == 1:
        config.effective_rank = next(iter(smaller.values())) - rank
    else:  # peft reads a pattern per layer (re.search on its name): each layer's own
        config.rank_pattern = {f"(^|\\.){re.escape(name)}$": dim - rank for name, dim in smaller.items()}
    with one_thread(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, config)


def _matched(model: torch.nn.Module, config) -> dict[str, torch.nn.Linear]:
    """The linear layers peft will decompose: peft's own "all-linear" expansion and name matching."""
    from peft.tuners.tuners_utils import _maybe_include_all_linear_layers, check_target_module_exists

    expanded = _maybe_include_all_linear_layers(copy.deepcopy(config), model)
    return {name: m for name, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and bool(check_target_module_exists(expanded, name))}


def osf_layers(model: torch.nn.Module):
    from peft.tuners.osf.layer import OSFLayer

    return [module for module in model.modules() if isinstance(module, OSFLayer)]


def theta_star_names(model: torch.nn.Module, theta_star: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """theta* by the wrapped model's parameter names, OSF at a zero update: the frozen weight (named
    ``...query.base_layer.weight`` where theta* names ``...query.weight``) is theta*, and U_low, S_low and
    V_low are their start (the layer's _osf_*_init buffers), so the layer adds exactly nothing."""
    starts = {}
    for prefix, module in model.named_modules():
        for adapter in getattr(module, "osf_svd_params", {}):
            for part, buffers in (("U_low", module._osf_U_low_init), ("S_low", module._osf_S_low_init),
                                  ("V_low", module._osf_V_low_init)):
                starts[f"{prefix}.{TRAINED}.{adapter}.{part}"] = buffers[adapter]
    out: dict[str, torch.Tensor] = {}
    for name, _ in model.named_parameters():
        if name in starts:
            out[name] = starts[name]
        elif TRAINED not in name and name.replace(".base_layer.", ".") in theta_star:
            out[name] = theta_star[name.replace(".base_layer.", ".")]
    return out


@torch.no_grad()
def update_norm(model: torch.nn.Module) -> float:
    """||theta - theta*|| under OSF: the norm of every layer's merged update (its delta weight)."""
    total = 0.0
    for module in osf_layers(model):
        for adapter in module.active_adapters:
            if adapter in module.osf_svd_params:
                total += float(module.get_delta_weight(adapter).float().pow(2).sum())
    return math.sqrt(total)


def save_adapter(peft_model, folder: Path) -> None:
    peft_model.save_pretrained(str(folder / ADAPTER_DIR), safe_serialization=True)


def load_adapter(peft_model, folder: Path) -> None:
    """A checkpoint's adapter/ (the trained parts and the head) back into ``peft_model``: what --resume continues."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = folder / ADAPTER_DIR / "adapter_model.safetensors"
    if not path.is_file():
        raise RunDirError(f"{path} is missing: this OSF run cannot be resumed (start it again with --overwrite)")
    set_peft_model_state_dict(peft_model, load_file(str(path)))
