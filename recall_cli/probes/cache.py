"""θ*'s side of the probes, kept between runs: a run's step-0 probe and `recall probe` measure θ* against the
same inputs every time, and on a causal LM that side alone can take longer than a short run's training.

An entry is keyed by everything θ*'s side is a function of: the bytes of the weights the probes run (sha256
over names, dtypes, shapes and data: about 0.4 s for SmolLM2's 540 MB on one core), the model's class and
config, the probes, their tokenized inputs (so the texts, the tokenizer, max_length and batch_size), the
device type and the torch and transformers versions. Anything else is another entry.

One safetensors file per entry in recall's cache folder (cache.py: $RECALL_CACHE), its tensors the side's
tensors and its metadata the rest of the side as JSON (floats round-trip exactly): no pickle, written whole
or not at all. A file that cannot be read is passed over with a note and written again.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..cache import cache_dir, write_atomically

FORMAT = 1  # of an entry: a later recall that changes what a side holds moves it on
_SIDE, _KEY, _SECONDS = "recall_probe_side", "recall_probe_key", "recall_probe_seconds"


class Uncacheable(TypeError):
    """A side holding something other than tensors, numbers, text, None, lists and dicts of text keys."""


def digest_tensors(named: Iterable[tuple[str, Tensor]]) -> str:
    """sha256 over each tensor's name, dtype, shape and bytes, in the order given."""
    h = hashlib.sha256()
    for name, tensor in named:
        t = tensor.detach()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        if t.numel():
            h.update(memoryview(t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy()))
    return h.hexdigest()


def entry_key(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps({"format": FORMAT, **parts}, sort_keys=True, default=str).encode()).hexdigest()


def entry_path(key: str) -> Path:
    return cache_dir("probes") / f"{key[:32]}.safetensors"


def flatten(side: Any) -> tuple[Any, dict[str, Tensor]]:
    """(a JSON-able skeleton, its tensors by name): a tensor met twice (drift's is cka's last layer) is kept once
    and comes back as one object."""
    tensors: dict[str, Tensor] = {}
    seen: dict[int, str] = {}

    def walk(value: Any) -> Any:
        if isinstance(value, Tensor):
            if id(value) not in seen:
                seen[id(value)] = f"t{len(tensors)}"
                tensors[seen[id(value)]] = value.detach().cpu().contiguous()
            return {"__tensor__": seen[id(value)]}
        if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"__float__": repr(value)}
        if isinstance(value, (list, tuple)):
            return {"__list__": [walk(v) for v in value]} if isinstance(value, list) else {"__tuple__": [walk(v) for v in value]}
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return {"__dict__": {k: walk(v) for k, v in value.items()}}
        raise Uncacheable(type(value).__name__)

    return walk(side), tensors


def unflatten(skeleton: Any, tensors: dict[str, Tensor]) -> Any:
    if isinstance(skeleton, dict):
        (kind, value), = skeleton.items()
        if kind == "__tensor__":
            return tensors[value]
        if kind == "__float__":
            return float(value)
        if kind in ("__list__", "__tuple__"):
            items = [unflatten(v, tensors) for v in value]
            return items if kind == "__list__" else tuple(items)
        if kind == "__dict__":
            return {k: unflatten(v, tensors) for k, v in value.items()}
        raise ValueError(f"unknown entry {kind!r}")
    return skeleton


def load(key: str, note: Callable[[str], None]) -> tuple[Any, float] | None:
    """(θ*'s side, the seconds it took to compute) of ``key``, or None: not cached, or a file that cannot be read
    (said in one line through ``note``; it is written again after)."""
    from safetensors import safe_open

    path = entry_path(key)
    if not path.is_file():
        return None
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            if meta.get(_KEY) != key:  # another entry under the same 128-bit prefix: not ours
                return None
            tensors = {name: f.get_tensor(name) for name in f.keys()}
        return unflatten(json.loads(meta[_SIDE]), tensors), float(meta.get(_SECONDS, "nan"))
    except Exception as exc:  # noqa: BLE001 - a cache is never a reason to stop: computed again
        note(f"probe cache: {path} cannot be read ({type(exc).__name__}: {' '.join(str(exc).split())[:100]}): "
             "θ*'s side is computed again and the file replaced")
        return None


def save(key: str, side: Any, seconds: float, note: Callable[[str], None]) -> None:
    """Keep ``side`` under ``key``; a side that is not tensors and plain values is not kept, a folder that cannot
    be written is said in one line (the run goes on)."""
    from safetensors.torch import save_file

    try:
        skeleton, tensors = flatten(side)
    except Uncacheable:
        return
    meta = {_KEY: key, _SIDE: json.dumps(skeleton), _SECONDS: repr(float(seconds))}
    path = entry_path(key)
    try:
        write_atomically(path, lambda tmp: save_file(tensors, str(tmp), metadata=meta))
    except OSError as exc:
        note(f"probe cache: θ*'s side could not be kept in {path.parent} ({exc.strerror or exc}): the next run "
             "computes it again (set RECALL_CACHE to a folder with room)")
