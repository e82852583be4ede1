"""What the training loop reports: the interface a person's screen or a log implements (cli/console.py),
and the running window that a train record of metrics.jsonl averages over.

Torch-free: the loop hands over plain numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# progress(done, total) of a set-up phase that counts its work (θ*'s forward passes)
Progress = Callable[[int, int], None]


def _ignore(done: int, total: int) -> None:
    return None


class Reporter:
    """What the loop tells the user; the CLI supplies a rich or plain implementation."""

    @contextmanager
    def phase(self, what: str) -> Iterator[Progress]:
        """A set-up phase that can take minutes ("loading the model"), said while it runs (a log gets one line
        once it has taken a few seconds; a terminal a live line with its progress). Yields ``progress(done,
        total)`` for a phase that counts its work. The base says nothing."""
        yield _ignore

    def start(self, total_steps: int, start_step: int, info: dict[str, Any]) -> None: ...
    def warn(self, message: str) -> None: ...
    def note(self, message: str) -> None:
        """Something the person waiting should know that is not a problem (a compile under way)."""
        self.warn(message)

    def train(self, record: dict[str, Any]) -> None: ...
    def eval(self, record: dict[str, Any]) -> None: ...
    def step(self, step: int) -> None: ...
    def finish(self, summary: dict[str, Any]) -> None: ...
    def close(self) -> None: ...


def probe_due(step: int, total_steps: int, eval_every: int, every: int) -> bool:
    """Whether step ``step`` (1..total) probes: at each evaluation (probe.every 0), else every ``every`` steps;
    and at the last."""
    last = step == total_steps
    evaluate_now = bool(eval_every and step % eval_every == 0) or last
    return (evaluate_now and not every) or bool(every and step % every == 0) or last


def probe_cost(prober: Any, model: Any, done: int, total_steps: int, eval_every: int, every: int,
               resumed: bool) -> str | None:
    """The start line's word on the probe: how many measurements the run makes and what they cost, estimated
    from θ*'s side (one model's side: what each measurement computes again), which set-up just measured or the
    cache kept. A step-0 model that is θ* bit for bit takes θ*'s side and costs nothing."""
    each = prober.ref_seconds
    if not math.isfinite(each):
        return None
    count = sum(probe_due(s, total_steps, eval_every, every) for s in range(done + 1, total_steps + 1))
    count += not resumed and not prober.is_reference(model)
    when = "when it was cached" if prober.ref_cached else "in set-up"
    return (f"{count} measurement{'s' if count != 1 else ''} × ~{_seconds(each)} ≈ {_seconds(count * each)} "
            f"(each about as long as θ*'s side took {when}; probe.every=N probes less often)")


def _seconds(value: float) -> str:
    if value < 10:
        return f"{value:.1f} s" if value >= 1 else f"{value:.2f} s"
    if value < 120:
        return f"{value:.0f} s"
    return f"{value / 60:.1f} min" if value < 7200 else f"{value / 3600:.1f} h"


# The running sums since the last train record; saved in the trainer state, so that a resumed run
# logs the same averages as an uninterrupted one.
WINDOW_KEYS = ("loss", "grad_norm", "steps", "samples", "seconds", "stepped", "skipped")


def empty_window() -> dict[str, float]:
    return dict.fromkeys(WINDOW_KEYS, 0.0)


def add_step(window: dict[str, float], samples: int, seconds: float) -> None:
    """Counts one optimizer step of the next train record: its examples and its time."""
    window["steps"] += 1
    window["samples"] += samples
    window["seconds"] += seconds


def add_sums(window: dict[str, float], sums: dict[str, float]) -> None:
    """Adds the steps' loss and gradient-norm sums, read off the device now and then (train.Pending).

    A step that fp16's GradScaler skipped (its gradients overflowed) has an inf/nan norm that says
    nothing about training: it is counted in "skipped" and left out of "grad_norm" and "stepped"."""
    for key in ("loss", "grad_norm", "stepped", "skipped"):
        window[key] += sums[key]
    for key in method_parts(sums):  # the methods' loss parts: loss_task, loss_keep
        window[key] = window.get(key, 0.0) + sums[key]


def method_parts(values: dict[str, Any]) -> list[str]:
    """The loss parts a window or record holds besides the total (training/loss.py names them loss_<term>)."""
    return sorted(key for key in values if key.startswith("loss_"))


def window_fields(window: dict[str, float], scaler_enabled: bool) -> dict[str, float | int | None]:
    """The averaged fields of a train record: grad_norm is null when every step in it was skipped."""
    fields: dict[str, float | int | None] = {
        "loss": window["loss"] / window["steps"],
        "grad_norm": window["grad_norm"] / window["stepped"] if window["stepped"] else None,
        "samples_per_s": window["samples"] / max(window["seconds"], 1e-9),
    }
    if scaler_enabled:
        fields["skipped_steps"] = int(window["skipped"])
    for key in method_parts(window):
        fields[key] = window[key] / window["steps"]
    return fields


def train_record(step: int, epoch: float, lr: float, lam: float | None, distance: float,
                 window: dict[str, float], scaler_enabled: bool, penalty_weight: float | None = None,
                 method_fields: dict[str, float] | None = None) -> dict[str, Any]:
    """One "train" line of metrics.jsonl, in its documented key order. ``penalty_weight`` (the recall
    penalty's weight, max(anneal_w - lambda, floor)) is written by runs with a recall_floor; the loss
    parts (loss_task, loss_keep: each term unweighted) and ``method_fields`` (keep_weight) by runs with
    a method that adds a loss term."""
    averages = window_fields(window, scaler_enabled)
    parts = {key: averages.pop(key) for key in method_parts(averages)}
    return {
        "step": step,
        "split": "train",
        "epoch": epoch,
        "loss": averages.pop("loss"),
        **parts,
        **(method_fields or {}),
        "lr": lr,
        "lambda": 1.0 if lam is None else lam,
        **({} if penalty_weight is None else {"penalty_weight": penalty_weight}),
        "distance": distance,
        **averages,
    }
