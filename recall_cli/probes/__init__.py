"""What a fine-tuned model still knows: CKA, drift, STS and MLM probes (and a causal LM's lm, kl and choice)
against the pretrained θ*.

encoder.py and causal.py hold the probes, each a registry entry (plugins/probes.py: a probe is one room);
measures.py the pure functions on tensors, sets.py the probe inputs, runner.py the one runner (``Prober``)
that the training loop, `recall probe` and studies call. Nothing here imports the training loop. Importing
this package loads no torch (the probes' entries are listed by `recall --help`); the runner comes with its
first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Prober", "debiased_cka", "drift", "linear_cka", "load_inputs", "load_mlm_head",
           "load_pairs", "load_texts", "mean_pool", "prober_for_run", "spearman", "unbiased_hsic"]

_HOMES = {"Prober": "runner", "load_inputs": "runner", "load_mlm_head": "runner", "prober_for_run": "runner",
          "debiased_cka": "measures", "drift": "measures", "linear_cka": "measures", "mean_pool": "measures",
          "spearman": "measures", "unbiased_hsic": "measures", "load_pairs": "sets", "load_texts": "sets"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
