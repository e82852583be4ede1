"""How the model's weights and activations are held in memory: model.dtype (the weights' dtype, auto = the
checkpoint's own) and train.gradient_checkpointing (transformers' activation checkpointing). docs/scaling.md."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import torch

from ..errors import PreflightError
from ..model import GGUF_SUFFIX, model_location, resolve_name_or_path
from ..recipe import ModelConfig
from ..runtime import DTYPES  # model.dtype's names ("auto": the checkpoint's own, weight_dtype)

_GGUF_DTYPES = {"BF16": "bf16", "F16": "fp16", "F32": "fp32"}


def checkpoint_dtype(location: str) -> str:
    """The dtype a checkpoint stores its weights in, as model.dtype names it: config.json's dtype (torch_dtype
    in older files), or a GGUF file's most common weight type; fp32 where neither says (a quantized GGUF is
    dequantized to fp32)."""
    name = resolve_name_or_path(location)
    if name.endswith(GGUF_SUFFIX):
        try:
            import gguf

            kinds = Counter(t.tensor_type.name for t in gguf.GGUFReader(name).tensors if len(t.shape) > 1)
        except Exception:  # noqa: BLE001 - unreadable here: the loader names the problem
            return "fp32"
        return _GGUF_DTYPES.get(kinds.most_common(1)[0][0], "fp32") if kinds else "fp32"
    config = Path(name).expanduser() / "config.json"
    try:
        values = json.loads(config.read_text(encoding="utf-8")) if config.is_file() else {}
    except (OSError, ValueError):
        values = {}
    written = str(values.get("dtype") or values.get("torch_dtype") or "float32")
    return {"bfloat16": "bf16", "float16": "fp16"}.get(written, "fp32")


def weight_dtype(cfg: ModelConfig) -> torch.dtype:
    """The torch dtype model.dtype loads the weights in (auto: the checkpoint's)."""
    name = getattr(cfg, "dtype", "fp32")
    if name == "auto":
        name = checkpoint_dtype(model_location(cfg.name_or_path, cfg.gguf_file))
    return DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    """model.dtype's name for a torch dtype (fp32, bf16, fp16); other dtypes by torch's own name."""
    return next((name for name, d in DTYPES.items() if d == dtype), str(dtype).removeprefix("torch."))


def weights_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype most of the model's weights are held in (by element count): a LoRA model's fp32 adapters
    are a sliver beside its base, which is what model.dtype loaded."""
    counts: Counter[torch.dtype] = Counter()
    for p in model.parameters():
        if p.is_floating_point():
            counts[p.dtype] += p.numel()
    return counts.most_common(1)[0][0] if counts else torch.float32


def compute_precision(weights: torch.dtype, precision: str) -> str:
    """What the matrix products run in: train.precision's autocast dtype where it casts (bf16, fp16), else the
    weights' own dtype. A bf16 model under train.precision=fp32 computes in bf16: autocast off casts nothing
    up, so calling that run fp32 (as the start line and summary.json once did) was untrue."""
    return precision if precision in ("bf16", "fp16") else dtype_name(weights)


def computed_in(model: torch.nn.Module, precision: str) -> dict[str, str]:
    """summary.json's precision (what the products ran in) and weights (their dtype)."""
    weights = weights_dtype(model)
    return {"precision": compute_precision(weights, precision), "weights": dtype_name(weights)}


def precision_facts(model: torch.nn.Module, precision: str, reason: str) -> dict[str, str]:
    """The start line's weights (16-bit ones only) and precision, with why where recall chose it or where the
    weights' dtype, not train.precision, decides it."""
    weights = weights_dtype(model)
    computes = compute_precision(weights, precision)
    shown = precision if reason == "set in the recipe" else f"{precision} ({reason})"
    if computes != precision:  # 16-bit weights without autocast: they compute in their own dtype
        shown = f"{computes} (the weights' dtype: train.precision={shown} autocasts nothing)"
    return {**({"weights": dtype_name(weights)} if weights != torch.float32 else {}), "precision": shown}


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """train.gradient_checkpointing: transformers' own, non-reentrant (it works with frozen inputs, LoRA, DDP and
    FSDP, and recomputes each layer's forward in the backward pass instead of keeping its activations)."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise PreflightError(f"train.gradient_checkpointing: {type(model).__name__} has no gradient checkpointing in "
                             "transformers: set train.gradient_checkpointing=false (or a smaller train.batch_size)")
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers 5's name; the old one warns there
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
