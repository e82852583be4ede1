"""summary.json: what a finished run (or a scored record) amounts to; every layout since 0.1 reads."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .layout import SUMMARY_FILE
from .metrics import _is_number, _json_type, record_problem
from .writing import write_json_atomic


@dataclass
class Summary:
    """summary.json: what a finished run (or a scored record) amounts to.

    Every layout written since 0.1 reads into this; keys a layout lacks are None. A training run
    writes the settings and timing fields, a scored record `record: true` and what it scored."""

    task: str | None = None
    optimizer: str | None = None
    init: str | None = None
    model: str | None = None  # training runs
    seed: int | None = None
    anneal_fun: str | None = None  # training runs: the schedule as run (t0 in steps)
    anneal_k: float | None = None
    anneal_t0: float | None = None
    pretrain_cof: float | None = None
    recall_floor: float | None = None  # None: a run made before the floor existed (it had none)
    lr: float | None = None
    steps: int = 0
    finished: bool = False
    best: dict[str, Any] | None = None  # the eval record (metrics + step) of the best step
    final: dict[str, Any] | None = None  # the last eval record
    final_distance: float | None = None  # ||theta - theta*|| at the end
    probe: dict[str, Any] | None = None  # the last probe record
    train_seconds: float | None = None  # training runs: timing, where and how
    samples_per_s: float | None = None
    device: str | None = None
    device_name: str | None = None  # the GPU's or CPU's model (None in runs made before it was recorded)
    # What the matrix products ran in: train.precision's autocast, or 16-bit weights' own dtype without it (runs
    # made before model.dtype recorded train.precision here, which was the same thing for their fp32 weights).
    precision: str | None = None  # None in a 0.1 run
    weights: str | None = None  # model.dtype as loaded (fp32, bf16, fp16); None in runs made before it was recorded
    # The step's compilation (train.compile): mode (null: eager), seconds (the steps that compiled,
    # their compute included), shapes (the padded lengths trained on), fallback (null, or why eager).
    # None in runs made before it existed.
    compile: dict[str, Any] | None = None
    versions: dict[str, str] | None = None
    world_size: int | None = None
    global_batch_size: int | None = None
    final_distance_by_rank: list[float] | None = None  # under torchrun
    # The methods the run turned on (methods.method_block): names, labels, settings, the anchor's
    # pre-pass; None (not written) for plain fine-tuning and for runs made before methods existed.
    method: dict[str, Any] | None = None
    record: bool = False  # scored records: what was scored, against which theta*
    checkpoint: str | None = None
    against: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # keys of a newer version, kept as read

    # Written even when empty (null): a reader tells "no eval" from "an older layout".
    _ALWAYS = ("task", "optimizer", "init", "seed", "steps", "finished", "best", "final", "final_distance", "probe")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Summary:
        """Raises ValueError naming the first key whose value has the wrong type (a number that is a
        string, a record that is not an object, finished that is not true or false): every reader
        downstream sees numbers where numbers go."""
        if not isinstance(data, dict):
            raise ValueError(f"it holds {_json_type(data)}, not a JSON object")  # noqa: TRY004 - read_summary_checked catches ValueError
        known = {f.name for f in fields(cls) if f.name != "extra"}
        for key, value in data.items():
            problem = _summary_type_problem(key, value)
            if problem is not None:
                raise ValueError(f"'{key}' {problem}")
        return cls(**{k: v for k, v in data.items() if k in known},
                   extra={k: v for k, v in data.items() if k not in known})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"record": True} if self.record else {}
        for f in fields(self):
            if f.name in ("record", "extra"):
                continue
            value = getattr(self, f.name)
            if value is not None or f.name in self._ALWAYS:
                out[f.name] = value
        return {**out, **self.extra}

    @property
    def final_main(self) -> float | None:
        return (self.final or {}).get("main")


def read_summary(run_dir: Path) -> Summary | None:
    """RUN/summary.json, or None while the run has none (it has not finished) or it cannot be read."""
    return read_summary_checked(run_dir)[0]


def read_summary_checked(run_dir: Path) -> tuple[Summary | None, str | None]:
    """(summary, None) for a readable RUN/summary.json, (None, None) while there is none (the run has
    not finished), (None, why) for one that cannot be read: not JSON, not an object, a value of the
    wrong type (Summary.from_dict)."""
    path = run_dir / SUMMARY_FILE
    if not path.exists():
        return None, None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        return None, exc.strerror or str(exc)
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg}, line {exc.lineno})"
    try:
        return Summary.from_dict(data), None
    except ValueError as exc:
        return None, str(exc)


_SUMMARY_TYPES: dict[str, str] = {
    **dict.fromkeys(("task", "optimizer", "init", "model", "anneal_fun", "device", "device_name", "precision", "weights",
                     "checkpoint", "against"), "text"),
    **dict.fromkeys(("seed", "steps", "world_size", "global_batch_size"), "whole"),
    **dict.fromkeys(("anneal_k", "anneal_t0", "pretrain_cof", "recall_floor", "lr", "final_distance",
                     "train_seconds", "samples_per_s"), "number"),
    **dict.fromkeys(("finished", "record"), "bool"),
    **dict.fromkeys(("best", "final", "probe"), "record"),
    "versions": "versions",
    "final_distance_by_rank": "numbers",
    "compile": "object",
}


def _summary_type_problem(key: str, value: Any) -> str | None:
    """Why ``value`` cannot be summary.json's ``key``, or None (null is every key's "not known")."""
    kind = _SUMMARY_TYPES.get(key)
    if kind is None or value is None:
        return None  # a newer version's key: kept as read
    if kind == "text" and not isinstance(value, str):
        return f"is {_json_type(value)}, not text"
    if kind == "whole" and not (isinstance(value, int) and not isinstance(value, bool)):
        return f"is {_json_type(value)}, not a whole number"
    if kind == "number" and not _is_number(value):
        return f"is {_json_type(value)}, not a number"
    if kind == "bool" and not isinstance(value, bool):
        return f"is {_json_type(value)}, not true or false"
    if kind == "numbers" and not (isinstance(value, list) and all(_is_number(v) for v in value)):
        return f"is {_json_type(value)}, not a list of numbers"
    if kind == "versions":
        if not isinstance(value, dict):
            return f"is {_json_type(value)}, not an object"
        bad = next((k for k, v in value.items() if not isinstance(v, str)), None)
        return None if bad is None else f"has '{bad}' {_json_type(value[bad])}, not text"
    if kind == "object" and not isinstance(value, dict):
        return f"is {_json_type(value)}, not an object"
    if kind == "record":
        if not isinstance(value, dict):
            return f"is {_json_type(value)}, not an object"
        problem = record_problem(value, need=())
        return None if problem is None else f"has {problem}"
    return None


def write_summary(run_dir: Path, summary: Summary) -> None:
    write_json_atomic(run_dir / SUMMARY_FILE, summary.to_dict())
