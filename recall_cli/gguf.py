"""A model or tokenizer from a GGUF file (model.gguf_file, or a package's .gguf), read by transformers with the gguf
package; the file is checked for what a partial download leaves (a header or tensors cut short), so that the
refusal is one line naming the file (model.py's loaders call :func:`load_gguf`)."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

from .errors import ModelLoadError
from .quiet import quiet_gguf_bar


def load_gguf(what: str, loader, name: str, call_loader, **kwargs):
    """A GGUF file (it holds the config, tokenizer and weights; no config.json) read by transformers. A model is
    dequantized to fp32 and forgets it came from GGUF: it trains, and saves as a plain safetensors folder."""
    path = Path(name).expanduser()
    if not path.is_file():
        raise ModelLoadError(f"GGUF file not found: {name} (check model.name_or_path and model.gguf_file)")
    if importlib.util.find_spec("gguf") is None:
        raise ModelLoadError(f"{name}: reading a GGUF file needs the gguf package: pip install gguf (or pip install 'recall-finetune[lm]')")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":  # every GGUF file begins so; transformers would fail on it with a bare struct.error
        raise ModelLoadError(_unreadable_gguf(name, f"it begins with {magic!r}, not b'GGUF'"))
    if what == "model":
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(dequantize=True)

    def read(folder: str, **options):
        # A file cut short (a partial download) fails in gguf's parser as struct.error, an index past the end,
        # or numpy's view/reshape of tensor data that is not all there: one line, naming the file.
        try:
            return loader(folder, **options)
        except (struct.error, IndexError, EOFError) as exc:
            raise ModelLoadError(_unreadable_gguf(name, exc)) from exc
        except ValueError as exc:
            if any(word in str(exc) for word in ("reshape", "divisor", "mmap", "unpack", "buffer")):
                raise ModelLoadError(_unreadable_gguf(name, exc)) from exc
            raise

    with quiet_gguf_bar():
        loaded = call_loader(what, read, str(path.parent), path.parent, gguf_file=path.name, **kwargs)
    if what == "model":  # save_pretrained refuses a model it thinks is still quantized
        model = loaded[0] if isinstance(loaded, tuple) else loaded
        model.hf_quantizer = None
        model.config.__dict__.pop("quantization_config", None)
    return loaded


def _unreadable_gguf(name: str, reason: object) -> str:
    shown = " ".join(str(reason).split())[:160]
    return (f"{name}: not a readable GGUF file ({shown}): it is truncated (a partial download?) or not a GGUF file; "
            "download or copy it again")
