"""The one way anything in a run directory is written: strict JSON, staged and renamed into place."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import EnvironmentProblem
from .layout import _old


def strict_json(data: Any) -> Any:
    """``data`` with every NaN or infinite float replaced by None (numpy numbers and arrays as Python's)."""
    if type(data).__module__ == "numpy" and hasattr(data, "tolist"):
        data = data.tolist()
    if isinstance(data, dict):
        return {key: strict_json(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [strict_json(value) for value in data]
    if isinstance(data, float) and not math.isfinite(data):
        return None
    return data


def dumps_strict(data: Any, **kwargs: Any) -> str:
    """Every JSON recall writes or prints: strict (an undefined number, NaN or infinite, is null; a
    reader in another language never meets NaN)."""
    return json.dumps(strict_json(data), allow_nan=False, **kwargs)


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, dumps_strict(data, indent=2) + "\n")


def swap_into_place(staging: Path, dest: Path) -> None:
    """Replace ``dest`` by ``staging`` with renames only. Between the two renames only ``dest.old``
    exists; ``find_checkpoint`` falls back to it."""
    old = _old(dest)
    if not dest.exists():
        # A kill between the two renames of the last save left only dest.old: put the new folder
        # in place before deleting it, so that a complete one exists at every moment.
        os.replace(staging, dest)
        shutil.rmtree(old, ignore_errors=True)
        return
    if old.exists():
        shutil.rmtree(old)
    os.replace(dest, old)
    os.replace(staging, dest)
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def staged_folder(dest: Path, check: Callable[[], None] | None = None) -> Iterator[Path]:
    """Yields an empty hidden folder beside ``dest`` to write into; when the block ends, ``check()``
    (if given: may ``dest`` be replaced now?) and the folder takes ``dest``'s place by renames. On
    any error, or an interruption, the staging folder is removed and ``dest`` is as it was: a reader
    sees the old folder or the complete new one, never a part."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging: Path | None = None
    try:
        # Made and named with SIGINT/SIGTERM held: one landing between the two would leave a folder
        # nobody knows to remove; held, it is raised here, inside the try, with `staging` set.
        with _signals_held():
            staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
        yield staging
        if check is not None:
            check()
        swap_into_place(staging, dest)
    except BaseException:
        with _signals_held():  # a second Ctrl-C or SIGTERM must not cut the clean-up short
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
        raise


@contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait (delivered after the block), where the platform can hold them."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def check_writable(dest: Path, what: str, need_bytes: int | None = None) -> None:
    """Raise EnvironmentProblem (exit 4) unless a folder can be written at ``dest`` (by staged_folder
    or in place): not a file or a dangling symbolic link, and the nearest existing folder above it
    writable, on a writable file system, with ``need_bytes`` free. ``what`` names the option
    ("--out", "output_dir"). Touches nothing; called before the expensive work."""
    dest = Path(dest)
    shown = f"{what} {dest}"
    if dest.is_symlink() and not dest.exists():
        raise EnvironmentProblem(f"{shown} is a dangling symbolic link (to {os.readlink(dest)}): remove it, or choose another path")
    if dest.exists() and not dest.is_dir():
        raise EnvironmentProblem(f"{shown} is a file, not a folder: remove it, or choose another path")
    above = dest.parent
    while not above.exists() and above != above.parent:
        if above.is_symlink():
            raise EnvironmentProblem(f"{shown}: {above} is a dangling symbolic link (to {os.readlink(above)}): "
                                     "remove it, or choose another path")
        above = above.parent
    if above == Path("."):
        above = Path.cwd()  # named in the messages: "." would say little
    if not above.is_dir():
        raise EnvironmentProblem(f"{shown}: {above} is a file, not a folder: remove it, or choose another path")
    targets = [above] + ([dest] if dest.is_dir() else [])
    for folder in targets:
        if _read_only(folder):
            raise EnvironmentProblem(f"{shown}: {folder} is on a read-only file system: write to a folder on a writable one")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise EnvironmentProblem(f"{shown}: cannot write in {folder} (permission denied): give yourself write "
                                     "access (chmod/chown), or choose another folder")
    if need_bytes:
        free = shutil.disk_usage(above).free
        if free < need_bytes:
            raise EnvironmentProblem(f"{shown}: needs about {_mib(need_bytes)}, {above} has {_mib(free)} free: "
                                     "free space there, or choose another folder")


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs (Windows): os.access decides
        return False


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"
