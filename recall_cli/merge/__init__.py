"""`recall merge`: fine-tuned models of one pretrained model fused into one encoder, layer by layer.

    io.py              lazy safetensors reads; parameter names -> layers; compatibility checks
    base.py            the interface every method implements (fuse one tensor's N versions)
    linear.py          weighted average (WiSE-FT with the pretrained model among the inputs)
    task_arithmetic.py theta* + lambda * sum of task vectors
    ties.py            trim, elect sign, disjoint mean
    recall.py          RECALL: per-layer weights from representation similarity (fusion = linear)
    engine.py          the layer-by-layer loop and the output folders

``METHODS`` maps a name to a builder taking the opened sources and the options; RECALL's builder is
the only one that looks at data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from . import samples
from .base import MergeMethod
from .engine import MERGE_RECORD, MergeResult, base_anchors, find_reference, merge, open_sources
from .io import SOURCE_RECIPE_FILE, MergeError, Source
from .linear import Linear
from .recall import DEFAULT_CLUSTERS, DEFAULT_GAMMA, DEFAULT_POOL, DEFAULT_TEMPERATURE, recall_weights
from .task_arithmetic import TaskArithmetic
from .ties import Ties

__all__ = [
    "MERGE_RECORD", "METHODS", "SOURCE_RECIPE_FILE", "MergeError", "MergeMethod", "MergeOptions", "MergeResult",
    "Source", "build_method", "merge", "open_sources",
]


@dataclass(frozen=True)
class MergeOptions:
    reference: str | None = None
    texts: list[tuple[str, ...]] | None = None  # RECALL's sample pool
    samples_source: str | None = None
    clusters: int = DEFAULT_CLUSTERS
    pool: int = DEFAULT_POOL
    temperature: float = DEFAULT_TEMPERATURE
    gamma: str | float = DEFAULT_GAMMA
    max_seq_length: int = 128
    weights: tuple[float, ...] | None = None
    lam: float | None = None
    density: float = 0.2
    seed: int = 0
    device: Any = None


def _linear(sources: list[Source], o: MergeOptions) -> tuple[MergeMethod, dict[str, Any]]:
    weights = o.weights or tuple(1.0 / len(sources) for _ in sources)
    if len(weights) != len(sources):
        raise MergeError(f"--weights has {len(weights)} values for {len(sources)} models: give one per model")
    return Linear(weights), {}


def _task_arithmetic(sources: list[Source], o: MergeOptions) -> tuple[MergeMethod, dict[str, Any]]:
    return TaskArithmetic(0.5 if o.lam is None else o.lam), {}


def _ties(sources: list[Source], o: MergeOptions) -> tuple[MergeMethod, dict[str, Any]]:
    return Ties(1.0 if o.lam is None else o.lam, o.density), {}


def _recall(sources: list[Source], o: MergeOptions) -> tuple[MergeMethod, dict[str, Any]]:
    ref = find_reference(sources, o.reference)
    method, report = recall_weights(
        sources, ref, o.texts or [], clusters=o.clusters, pool=o.pool, temperature=o.temperature, gamma=o.gamma,
        max_seq_length=o.max_seq_length, seed=o.seed, device=o.device,
    )
    method.name = "recall"
    return method, {"reference": sources[ref].name, "samples_source": o.samples_source, **report}


METHODS: dict[str, Callable[[list[Source], MergeOptions], tuple[MergeMethod, dict[str, Any]]]] = {
    "recall": _recall,
    "linear": _linear,
    "task_arithmetic": _task_arithmetic,
    "ties": _ties,
}


def build_method(name: str, sources: list[Source], options: MergeOptions) -> tuple[MergeMethod, dict[str, Any]]:
    if name not in METHODS:
        raise MergeError(f"--method {name}: use one of {', '.join(METHODS)}")
    return METHODS[name](sources, options)


def run_merge(args: list[str], out, method_name: str, options: MergeOptions, base: str | None = None) -> MergeResult:
    """Open, check, compute the method's weights, fuse and write: the whole `recall merge`."""
    from .engine import check_out

    check_out(out)
    sources = open_sources(args)
    method, record = build_method(method_name, sources, options)
    anchors = base_anchors(sources, base) if method.needs_base else None
    return merge(sources, method, out, anchors=anchors, record=record)
