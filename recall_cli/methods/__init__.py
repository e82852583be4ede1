"""Ways to forget less that are not optimizers, one room each, all found through one registry.

    registry.py   the old name of plugins/methods.py (Method, MethodRun, Family, register_method: the registry
                  every stage loops over, on the ground floor with its loader)
    adapter.py    the old name of plugins/adapter.py (Adapter and Adapted: what an adapter implements)
    keep/         the embedding anchor: a loss term keeping the pooled sentence embedding near theta*'s
    lpft/         LP-FT: the head alone first (encoder frozen), then everything
    lora/         low-rank adapters through peft, merged into plain checkpoints
    lmkeep/       the LM anchor: a causal LM's next-token distributions on general text kept near theta*'s

A method outside recall plugs in through the entry-point group ``recall_cli.methods`` or
:func:`register_method` (docs/extending.md). Importing this package loads no torch.
"""

from __future__ import annotations

from ..plugins.adapter import Adapted, Adapter
from ..plugins.methods import (ENTRY_POINT_GROUP, Family, Method, MethodRun, active, active_adapter, get, labels, methods,
                       register_method, summary_block, unregister_method)

__all__ = ["ENTRY_POINT_GROUP", "Adapted", "Adapter", "Family", "Method", "MethodRun", "active", "active_adapter",
           "get", "labels", "methods", "register_method", "summary_block", "unregister_method"]
