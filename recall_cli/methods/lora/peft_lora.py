"""LoRA through peft: the wrapping, counting, merging, saving and loading (methods/lora/__init__.py
declares the method and its keys; corda.py prepares CorDA's start).

"LoRA learns less and forgets less" (Biderman et al. 2024, arXiv 2405.09673), on the same trade-off curve
as full fine-tuning; it is what most users pick for adapters, so recall measures it with the same probes.

The run trains peft's model; what it saves stays plain: best/, last/ and lp/ are `from_pretrained` folders
with the adapters merged into the weights (every later command reads them unchanged), and an adapter/
folder beside the weights opens with ``PeftModel.from_pretrained(base, folder / "adapter")``.

PiSSA and CorDA start from a decomposition of the weights: the adapters take part of each weight
(A0, B0) and the frozen weight keeps the residual W - s B0 A0. Their adapter/ is converted to a plain
LoRA on theta* (peft's own conversion, LoraModel.subtract_mutated_init: [A | A0] and [B | -B0], rank and
alpha doubled), so that it opens on the pretrained model like any other; peft's save_pretrained
conversion drops the head (modules_to_save) and DoRA's magnitudes, so recall writes it with them.
--resume splits it back: A and B continue, A0 and B0 must be the decomposition the set-up made again.

RecAdam's pull is refused with LoRA (its check in __init__.py): theta* is the frozen base weight, and the adapters start
at a zero update, so a pull toward theta* would be plain weight decay on the adapters. Under LoRA
||theta - theta*|| is the norm of the merged update, sqrt(sum ||W_merged - W||^2) over the adapted layers.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from ...errors import PreflightError, RunDirError
from ...plugins.adapter import check_named_targets, linear_names, one_thread

ADAPTER_DIR = "adapter"  # beside a checkpoint's merged weights
PEFT_PREFIX = "base_model.model."  # how peft's adapter files name the classifier's modules


def wrap(model: torch.nn.Module, r: int, alpha: float, dropout: float, target_modules: list[str] | None, *,
         task_type: str, init: str = "default", use_dora: bool = False, use_rslora: bool = False,
         prepare: Callable[[torch.nn.Module, Any], None] | None = None):
    """peft's model around ``model`` (a transformers sequence classifier): adapters on ``target_modules``
    (null: every linear layer of the encoder, peft's "all-linear", which leaves the output layer out),
    the head in modules_to_save (``task_type``: the task type's peft TaskType, SEQ_CLS for a sequence
    classifier). ``init``: peft's init_lora_weights (default, pissa or corda); ``prepare(model, config)``
    runs before the adapters are made (CorDA's preprocessing). One line naming the key when nothing matches."""
    from peft import LoraConfig, TaskType, get_peft_model

    targets = [m.strip() for m in target_modules] if target_modules else "all-linear"
    variants = {} if (init, use_dora, use_rslora) == ("default", False, False) else {
        "init_lora_weights": True if init == "default" else init, "use_dora": use_dora, "use_rslora": use_rslora}
    if init == "corda":
        from peft.tuners.lora.config import CordaConfig

        variants["corda_config"] = CordaConfig(corda_method="kpm")
    config = LoraConfig(task_type=TaskType[task_type], r=r, lora_alpha=alpha, lora_dropout=dropout,
                        target_modules=targets, **variants)
    if target_modules:
        check_named_targets(model, targets, "model.lora.target_modules")
    if init != "default":
        check_decomposed_rank(model, config, r, init)  # stricter: r must leave the frozen residual some
    else:
        check_rank_fits(model, config, r, "model.lora.r")
    if prepare is not None:
        prepare(model, config)
    try:
        with (one_thread() if init != "default" else contextlib.nullcontext()), warnings.catch_warnings():
            # peft reads transformers' is_gradient_checkpointing, which transformers 5 deprecates in a
            # FutureWarning a recall user can do nothing about (recall does not checkpoint activations).
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            return get_peft_model(model, config)
    except ValueError as exc:  # peft: "Target modules {...} not found in the base model"
        raise PreflightError(f"model.lora.target_modules: {' '.join(str(exc).split())[:200]} (this model's linear "
                             f"layers are named {', '.join(linear_names(model))}; or null for all of them)") from None


def check_rank_fits(model: torch.nn.Module, config: Any, r: int, key: str) -> None:
    """A rank above a targeted layer's smaller dimension adds nothing a full-rank update would not, and a
    huge one fails in the allocator: refused before any adapter is made."""
    from peft.tuners.tuners_utils import _maybe_include_all_linear_layers, check_target_module_exists

    expanded = _maybe_include_all_linear_layers(copy.deepcopy(config), model)
    sizes = {name: min(m.weight.shape) for name, m in model.named_modules()
             if isinstance(m, torch.nn.Linear) and check_target_module_exists(expanded, name)}
    if sizes and r > min(sizes.values()):
        name = min(sizes, key=sizes.get)
        raise PreflightError(f"{key}: {r} is above what {name} can hold (its smaller dimension is {sizes[name]}): "
                             f"set it at most {sizes[name]}")


def check_decomposed_rank(model: torch.nn.Module, config: Any, r: int, init: str) -> None:
    """PiSSA and CorDA move r singular directions of each adapted weight into the adapters: r must leave
    the frozen residual some. Past a layer's smaller dimension peft's CorDA stops with an internal error
    and PiSSA makes adapters of fewer rows than r; at it, nothing stays frozen. One line naming the key."""
    from peft.tuners.tuners_utils import _maybe_include_all_linear_layers, check_target_module_exists

    expanded = _maybe_include_all_linear_layers(copy.deepcopy(config), model)
    smaller = {name: min(m.weight.shape) for name, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and bool(check_target_module_exists(expanded, name))}
    if smaller and r >= min(smaller.values()):  # no layer at all: get_peft_model's target_modules line
        name = min(smaller, key=smaller.get)
        raise PreflightError(f"model.lora.r: {r} leaves nothing frozen in {name} with model.lora.init={init} (its smaller "
                             f"dimension is {smaller[name]}): set it below {smaller[name]}")


def lora_layers(model: torch.nn.Module):
    """(the classifier's name for the layer, the layer) of every peft LoRA layer in ``model``."""
    from peft.tuners.lora import LoraLayer

    return [(name, module) for name, module in model.named_modules() if isinstance(module, LoraLayer)]


def initial_adapters(model: torch.nn.Module) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The adapters as the set-up made them, by layer name: (A0, B0), copies (PiSSA's and CorDA's
    decomposition, which the saved adapter is converted against)."""
    return {name: (module.lora_A[a].weight.detach().clone(), module.lora_B[a].weight.detach().clone())
            for name, module in lora_layers(model) for a in module.active_adapters if a in module.lora_A}


def theta_star_names(model: torch.nn.Module, theta_star: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """theta* by the adapted model's parameter names, with every adapter at a zero update: loaded into the
    model (probes/runner.weights_loaded, methods/teacher.frozen_copy), it computes theta*'s function.
    An adapted layer's weight is ``...query.base_layer.weight`` where theta* names ``...query.weight``
    (under PiSSA and CorDA it holds the residual; theta* goes there), every B is zero, and DoRA's magnitude
    is the norm of theta*'s rows, as DoRA starts it on a zero update."""
    out: dict[str, torch.Tensor] = {}
    for name, p in model.named_parameters():
        if "lora_B" in name:
            out[name] = torch.zeros_like(p)
        elif "lora_magnitude_vector" in name:
            weight = theta_star[name.split(".lora_magnitude_vector.", 1)[0] + ".weight"]
            out[name] = torch.linalg.norm(weight.to(p.dtype), dim=1).to(p.dtype)
        elif "lora_" not in name and name.replace(".base_layer.", ".") in theta_star:
            out[name] = theta_star[name.replace(".base_layer.", ".")]
    return out


@torch.no_grad()
def update_norm(model: torch.nn.Module, initial: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None) -> float:
    """||theta - theta*|| under LoRA: the merged update of every adapted layer (the head, which has no
    theta*, is left out as it is for full fine-tuning). DoRA's merged weight is peft's own merge; under
    PiSSA and CorDA theta* is the residual plus the adapters' start, s B0 A0."""
    from peft.utils.other import transpose

    total = 0.0
    for name, module in lora_layers(model):
        for adapter in module.active_adapters:
            if adapter not in module.lora_A:
                continue
            if adapter in getattr(module, "lora_variant", {}):  # DoRA: the weight peft's merge writes, less the frozen one
                weight = module.get_base_layer().weight
                delta = module.lora_variant[adapter].merge_safe(module, adapter, weight.detach().clone()) - weight
            else:
                delta = module.get_delta_weight(adapter)
            if initial is not None:
                a0, b0 = initial[name]
                delta = delta - transpose(b0 @ a0, module.fan_in_fan_out) * module.scaling[adapter]
            total += float(delta.float().pow(2).sum())
    return math.sqrt(total)


def save_adapter(peft_model, folder: Path, initial: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None) -> None:
    """peft's adapter folder in ``folder``/adapter; under PiSSA and CorDA (``initial``: their A0, B0)
    converted to a LoRA on theta* (the module docstring says how)."""
    target = folder / ADAPTER_DIR
    peft_model.save_pretrained(str(target), safe_serialization=True)
    if initial is None:
        return
    from safetensors.torch import load_file, save_file

    weights = load_file(str(target / "adapter_model.safetensors"))
    for key, value in weights.items():
        if ".lora_A." in key:
            weights[key] = torch.cat([value, initial[_layer(key, ".lora_A.")][0]], dim=0)
        elif ".lora_B." in key:
            weights[key] = torch.cat([value, -initial[_layer(key, ".lora_B.")][1]], dim=1)
    save_file(weights, str(target / "adapter_model.safetensors"), metadata={"format": "pt"})
    path = target / "adapter_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    # As peft's save_pretrained(path_initial_model_for_weight_conversion=...) writes it: the same scale at 2r.
    # A plain LoRA now: CorDA's settings go too (peft warns on load that they would be ignored).
    config.update(init_lora_weights=True, corda_config=None, r=2 * config["r"],
                  lora_alpha=config["lora_alpha"] * (2 ** 0.5 if config.get("use_rslora") else 2))
    path.write_text(json.dumps(config, indent=2, sort_keys=True), encoding="utf-8")


def _layer(key: str, marker: str) -> str:
    return key.split(marker, 1)[0].removeprefix(PEFT_PREFIX)


def load_adapter(peft_model, folder: Path, initial: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None) -> None:
    """A checkpoint's adapter/ weights (and its head) back into ``peft_model``: what --resume continues.
    Under PiSSA and CorDA the saved LoRA on theta* is split back into the trained A, B and the start
    A0, B0, which must be the decomposition this set-up made (else the frozen residual differs)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = folder / ADAPTER_DIR / "adapter_model.safetensors"
    if not path.is_file():
        raise RunDirError(f"{path} is missing: this LoRA run cannot be resumed (start it again with --overwrite)")
    weights = load_file(str(path))
    if initial is not None:
        for key, value in weights.items():
            for marker, index in ((".lora_A.", 0), (".lora_B.", 1)):
                if marker not in key:
                    continue
                start = initial[_layer(key, marker)][index]
                r = start.shape[index]
                trained, saved = (value[:r], value[r:]) if index == 0 else (value[:, :r], -value[:, r:])
                if not torch.equal(saved, start):
                    raise RunDirError(f"{path}: the adapters' start (model.lora.init) differs from the one this set-up "
                                      "computed again (another torch or BLAS, or a changed model?): the run cannot be "
                                      "resumed exactly (start it again with --overwrite)")
                weights[key] = trained.contiguous()
    set_peft_model_state_dict(peft_model, weights)
