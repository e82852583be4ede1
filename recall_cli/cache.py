"""The user's cache folder, recall's one: what a command or run keeps so that the next one need not compute it
again, each kind in a folder of its own (gguf/: dequantized GGUF models; probes/: θ*'s side of the probes).
Everything in it can be deleted at any time: it is computed again when missing.

Where: $RECALL_CACHE; else $XDG_CACHE_HOME/recall; else ~/.cache/recall. Standard library only.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

CACHE_ENV = "RECALL_CACHE"


def cache_root() -> Path:
    """recall's cache folder (not created here)."""
    given = os.environ.get(CACHE_ENV)
    if given:
        return Path(given).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "recall"


def cache_dir(kind: str) -> Path:
    """The folder of one kind of cached thing ("gguf", "probes"), under :func:`cache_root`."""
    return cache_root() / kind


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """``write(temporary path)`` beside ``path``, then renamed onto it: a reader sees the old file, the whole new
    one, or none, never a half-written one (two processes writing the same entry: the last rename wins)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
