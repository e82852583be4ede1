"""The merge methods by name (``METHODS``), as the registry on the ground floor (plugins/merges.py) holds them:
recall's own rooms (recall.py, linear.py, ...) each register themselves there, and a package adds one through the
entry-point group ``recall_cli.merge``. This module stays for code that reads its ``METHODS``."""

from __future__ import annotations

from typing import Any

from ..plugins.merges import merges


def __getattr__(name: str) -> Any:
    if name == "METHODS":  # read afresh: a plugin registered later is in it
        return merges()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
