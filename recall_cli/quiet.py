"""What recall keeps off the terminal: other libraries' bars and warnings that say nothing a user asked
for, in --plain and piped logs above all. RECALL_DEBUG=1 shows them again."""

from __future__ import annotations

import contextlib
import functools
import os


def quiet_transformers() -> None:
    """transformers prints load reports and progress bars; the CLI reports what matters itself."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


@contextlib.contextmanager
def quiet_gguf_bar():
    """transformers' GGUF reader draws its de-quantizing bar with tqdm directly, past quiet_transformers()'s
    switch: a bar in a --plain or piped log, and over rich's progress on a terminal. Silenced while a GGUF
    file loads; RECALL_DEBUG=1 shows it (and transformers' other output) again."""
    if os.environ.get("RECALL_DEBUG"):
        yield
        return
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:  # another transformers layout: its bar, if any, is its own
        yield
        return
    bar = getattr(gguf_utils, "tqdm", None)
    if bar is None:
        yield
        return
    gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = bar
