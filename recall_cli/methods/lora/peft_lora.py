"""LoRA through peft: the wrapping, counting, merging, saving and loading (methods/lora/__init__.py
declares the method and its keys).

"LoRA learns less and forgets less" (Biderman et al. 2024, arXiv 2405.09673), on the same trade-off curve
as full fine-tuning; it is what most users pick for adapters, so recall measures it with the same probes.

The run trains peft's model; what it saves stays plain: best/, last/ and lp/ are `from_pretrained` folders
with the adapters merged into the weights (every later command reads them unchanged), and an adapter/
folder beside the weights opens with ``PeftModel.from_pretrained(base, folder / "adapter")``.

RecAdam's pull is refused with LoRA (its check in __init__.py): theta* is the frozen base weight, and the adapters start
at a zero update, so a pull toward theta* would be plain weight decay on the adapters. Under LoRA
||theta - theta*|| is the norm of the merged update, sqrt(sum ||B A x scale||^2) over the adapted layers.
"""

from __future__ import annotations

import copy
import math
import warnings
from pathlib import Path

import torch

from ...errors import PreflightError

ADAPTER_DIR = "adapter"  # beside a checkpoint's merged weights


def wrap(model: torch.nn.Module, r: int, alpha: float, dropout: float, target_modules: list[str] | None, *,
         task_type: str):
    """peft's model around ``model`` (a transformers sequence classifier): adapters on ``target_modules``
    (null: every linear layer of the encoder, peft's "all-linear", which leaves the output layer out),
    the head in modules_to_save (``task_type``: the task type's peft TaskType, SEQ_CLS for a sequence
    classifier). One line naming the key when nothing matches."""
    from peft import LoraConfig, TaskType, get_peft_model

    targets = [m.strip() for m in target_modules] if target_modules else "all-linear"
    config = LoraConfig(task_type=TaskType[task_type], r=r, lora_alpha=alpha, lora_dropout=dropout,
                        target_modules=targets)
    try:
        with warnings.catch_warnings():
            # peft reads transformers' is_gradient_checkpointing, which transformers 5 deprecates in a
            # FutureWarning a recall user can do nothing about (recall does not checkpoint activations).
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            return get_peft_model(model, config)
    except ValueError as exc:  # peft: "Target modules {...} not found in the base model"
        linear = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                         if isinstance(module, torch.nn.Linear)})
        reason = " ".join(str(exc).split())[:200]
        raise PreflightError(f"model.lora.target_modules: {reason} (this model's linear layers are named "
                             f"{', '.join(linear)}; or null for all of them)") from None


def is_lora(model: torch.nn.Module) -> bool:
    return any("lora_" in name for name, _ in model.named_parameters())


def trainable_counts(peft_model) -> tuple[int, int]:
    """(trainable, all) parameters, as peft's print_trainable_parameters counts them."""
    return peft_model.get_nb_trainable_parameters()


def theta_star_names(model: torch.nn.Module, theta_star: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """theta* by the adapted model's parameter names, with every adapter's B at zero: loaded into the
    model (probes/runner.weights_loaded, methods/keep.theta_star_copy), it computes theta*'s function.
    An adapted layer's weight is ``...query.base_layer.weight`` where theta* names ``...query.weight``."""
    out: dict[str, torch.Tensor] = {}
    for name, p in model.named_parameters():
        if "lora_B" in name:
            out[name] = torch.zeros_like(p)
            continue
        plain = name.replace(".base_layer.", ".")
        if plain in theta_star and "lora_" not in name:
            out[name] = theta_star[plain]
    return out


@torch.no_grad()
def update_norm(model: torch.nn.Module) -> float:
    """||theta - theta*|| under LoRA: the merged update of every adapted layer (the head, which has no
    theta*, is left out as it is for full fine-tuning)."""
    from peft.tuners.lora import LoraLayer

    total = 0.0
    for module in model.modules():
        if isinstance(module, LoraLayer):
            for adapter in module.active_adapters:
                if adapter in module.lora_A:
                    total += float(module.get_delta_weight(adapter).float().pow(2).sum())
    return math.sqrt(total)


def merged_copy(peft_model) -> torch.nn.Module:
    """A plain transformers model with the adapters merged in (the training model is left as it is)."""
    return copy.deepcopy(peft_model).merge_and_unload()


def save_adapter(peft_model, folder: Path) -> None:
    peft_model.save_pretrained(str(folder / ADAPTER_DIR), safe_serialization=True)


def load_adapter(peft_model, folder: Path) -> None:
    """A checkpoint's adapter/ weights (and its head) back into ``peft_model``: what --resume continues."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = folder / ADAPTER_DIR / "adapter_model.safetensors"
    if not path.is_file():
        from ...errors import RunDirError

        raise RunDirError(f"{path} is missing: this LoRA run cannot be resumed (start it again with --overwrite)")
    set_peft_model_state_dict(peft_model, load_file(str(path)))
