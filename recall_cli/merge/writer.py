"""Writing a merge's output checkpoint as its tensors are made, one at a time, never the whole model in memory.

safetensors' own ``save_file`` takes a dict of every tensor, so an output built with it holds a whole model
(and the merged encoder beside it, another). A safetensors file is an 8-byte header length, a JSON header
that gives each tensor's dtype, shape and byte range, then the bytes. Every merged tensor's name, dtype and
shape are known before the first one is fused (the inputs' headers say them), so the header can be written
first and each tensor's bytes put at their place the moment it exists: the writer seeks to it, so tensors
arrive in any order. The layout is the one safetensors itself writes (larger elements first, each tensor
aligned to its element size; the header padded with spaces to 8 bytes), and the file reads back with
``safe_open``, ``load_file`` and ``from_pretrained``.

A model past ``max_shard_bytes`` is split as ``save_pretrained`` splits one: model-0000i-of-0000K.safetensors
and model.safetensors.index.json (the count K is known up front, so the names are final when opened).
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import torch

from ..errors import MergeError
from .io import INDEX_FILE, WEIGHTS_FILE

# safetensors' dtype names and their element sizes (the ones a checkpoint holds)
_SIZES = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2, "I16": 2, "U8": 1, "I8": 1, "BOOL": 1}
_TORCH = {torch.float64: "F64", torch.int64: "I64", torch.float32: "F32", torch.int32: "I32", torch.float16: "F16",
          torch.bfloat16: "BF16", torch.int16: "I16", torch.uint8: "U8", torch.int8: "I8", torch.bool: "BOOL"}


@dataclass(frozen=True)
class Planned:
    """One tensor the output will hold: its key in the file, safetensors' dtype name, its shape."""

    key: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return _SIZES[self.dtype] * math.prod(self.shape)


def dtype_name(dtype: torch.dtype) -> str:
    return _TORCH[dtype]


def _shards(planned: list[Planned], max_shard_bytes: int | None) -> list[list[Planned]]:
    """The tensors split into files of at most ``max_shard_bytes`` (a bigger tensor alone in its own), in order."""
    if not max_shard_bytes:
        return [planned]
    files: list[list[Planned]] = [[]]
    size = 0
    for p in planned:
        if files[-1] and size + p.nbytes > max_shard_bytes:
            files.append([])
            size = 0
        files[-1].append(p)
        size += p.nbytes
    return files


class _File:
    """One safetensors file, its header written at open: ``put`` writes a tensor's bytes at their offset."""

    def __init__(self, path: Path, planned: list[Planned], metadata: dict[str, str]):
        # safetensors' own layout: larger elements first (each tensor then starts aligned to its element size)
        ordered = sorted(planned, key=lambda p: -_SIZES[p.dtype])
        header: dict[str, object] = {"__metadata__": metadata}
        self.offsets: dict[str, tuple[int, int]] = {}
        at = 0
        for p in ordered:
            header[p.key] = {"dtype": p.dtype, "shape": list(p.shape), "data_offsets": [at, at + p.nbytes]}
            self.offsets[p.key] = (at, at + p.nbytes)
            at += p.nbytes
        text = json.dumps(header, separators=(",", ":")).encode("utf-8")
        text += b" " * (-len(text) % 8)
        self.start = 8 + len(text)
        self.size = at
        self.path = path
        self.planned = {p.key: p for p in planned}
        self.missing = set(self.planned)
        self.handle: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed by close(), also on failure
        self.handle.write(struct.pack("<Q", len(text)) + text)
        self.handle.truncate(self.start + at)  # the file's full size at once: no byte of it left unwritten by accident

    def put(self, key: str, tensor: torch.Tensor) -> None:
        p = self.planned[key]
        if dtype_name(tensor.dtype) != p.dtype or tuple(tensor.shape) != p.shape:
            raise MergeError(f"{key}: a {dtype_name(tensor.dtype)} {list(tensor.shape)} tensor where the output's header "
                             f"says {p.dtype} {list(p.shape)} (a bug: report it)")
        begin, _ = self.offsets[key]
        self.handle.seek(self.start + begin)
        # the tensor's own bytes (little-endian, as safetensors stores them), through a view: no copy of it
        self.handle.write(tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy().data)
        self.missing.discard(key)

    def close(self) -> None:
        self.handle.close()


class StreamedCheckpoint:
    """An output checkpoint in ``folder``: ``write`` each planned tensor once, in any order, then ``close``."""

    def __init__(self, folder: Path, planned: list[Planned], *, max_shard_bytes: int | None = None,
                 metadata: dict[str, str] | None = None):
        shards = _shards(planned, max_shard_bytes)
        names = [WEIGHTS_FILE] if len(shards) == 1 else [
            f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
        self.folder = Path(folder)
        self.files: list[_File] = []
        try:
            for name, part in zip(names, shards):
                self.files.append(_File(self.folder / name, part, metadata or {"format": "pt"}))
        except BaseException:
            self.abort()
            raise
        self.by_key = {key: f for f in self.files for key in f.planned}

    def write(self, key: str, tensor: torch.Tensor) -> None:
        self.by_key[key].put(key, tensor)

    def close(self) -> list[Path]:
        """The files written; refuses (MergeError) when a planned tensor was never written."""
        self.abort()
        missing = sorted(k for f in self.files for k in f.missing)
        if missing:
            raise MergeError(f"the output lacks {missing[0]} (a bug: report it)")
        if len(self.files) > 1:
            index = {"metadata": {"total_size": sum(f.size for f in self.files)},
                     "weight_map": {key: f.path.name for f in self.files for key in sorted(f.planned)}}
            (self.folder / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
        return [f.path for f in self.files]

    def abort(self) -> None:
        """Every file closed, complete or not (on a failure the caller removes them)."""
        for f in self.files:
            f.close()
