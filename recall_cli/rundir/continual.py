"""continual.json, a `recall continual` sequence's record in its --out (written by sequence/runner.py), read
back checked: the runner's --resume, a sweep of sequences and the reports open it here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import RunDirError
from .layout import CONTINUAL_FILE

# The sequence's own keys (continual.KEY on the command line) and their defaults, as the record's command keeps
# them: sequence/plan.py checks them, the reports name a sequence's method by the ones set away from these.
SEQUENCE_DEFAULTS: dict[str, Any] = {"weights": "last", "probe": None, "merge": "none", "theta_star": "previous"}


def read_continual(out: str | Path) -> dict[str, Any] | None:
    """The record in ``out``; None where there is none; RunDirError (one line) where it is not one."""
    path = Path(out) / CONTINUAL_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunDirError(f"{path} cannot be read ({exc}): it is not a continual sequence's record") from None
    if not isinstance(data, dict) or "command" not in data or "matrix" not in data:
        raise RunDirError(f"{path} is not a continual sequence's record (no command or matrix)")
    return data
