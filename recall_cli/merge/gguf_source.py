"""A GGUF θ* for the merges: they read safetensors folders tensor by tensor, and a GGUF file holds
quantized blocks; so it is dequantized once into the user's cache and read from there after."""

from __future__ import annotations

from pathlib import Path

from ..cache import CACHE_ENV as GGUF_CACHE_ENV, cache_dir
from ..errors import ModelLoadError
from ..model import load_checkpoint_model, load_tokenizer, quiet_transformers


def gguf_cache_root() -> Path:
    """Where dequantized GGUF models are kept: recall's cache folder's gguf/ (cache.py owns where that is)."""
    return cache_dir("gguf")


def gguf_as_folder(gguf: str | Path, note=None) -> Path:
    """A GGUF causal LM as the save_pretrained folder merges read (safetensors, config, tokenizer):
    dequantized once into the user's cache, keyed by the file's SHA-256, and reused after. ``note`` is
    told, in one line, where it went (the folder is ~4x the GGUF file: fp32). The folder appears whole
    or not at all (written beside it, then renamed)."""
    import hashlib
    import shutil
    import tempfile

    from ..names import LM_TASKS
    from ..tasks import task_type_for

    path = Path(gguf).expanduser()
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    folder = gguf_cache_root() / digest.hexdigest()[:16]
    if (folder / "config.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    quiet_transformers()  # save_pretrained's shard bar too: the note below is the one line
    try:
        lm = task_type_for(next(iter(LM_TASKS.values())))  # any causal-LM task: the weights are the model's own
        load_checkpoint_model(str(path), lm).save_pretrained(staging)
        load_tokenizer(str(path)).save_pretrained(staging)
        staging.rename(folder)
    except FileExistsError:  # another process wrote it first: theirs is the same model
        pass
    except OSError as exc:
        raise ModelLoadError(f"{path}: could not write its dequantized copy under {folder.parent} ({exc.strerror or exc}): "
                             f"free some space, or set {GGUF_CACHE_ENV} to a folder with room") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if note is not None:
        size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file()) / 2**20
        note(f"{path.name} dequantized once into {folder} ({size:,.0f} MiB, fp32; reused by later commands; "
             f"{GGUF_CACHE_ENV} moves it)")
    return folder
