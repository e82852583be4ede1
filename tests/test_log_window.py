"""The running sums behind each train record in metrics.jsonl, fp16's skipped steps included: summed on
the device step by step (train.Pending), read now and then into the window (progress.add_sums)."""

import math

import pytest
import torch

from recall_cli.distributed import Distributed
from recall_cli.training.progress import WINDOW_KEYS, add_step, add_sums, window_fields
from recall_cli.training.pending import Pending
from recall_cli.training.checkpoint import TrainerState

ONE_PROCESS = Distributed(rank=0, world_size=1, local_rank=0)


def fresh() -> dict[str, float]:
    return dict.fromkeys(WINDOW_KEYS, 0.0)


def window_of(steps, scaler_enabled: bool) -> dict[str, float]:
    """steps: (loss, grad_norm, samples, seconds) per step, through Pending as the loop takes them."""
    window, pending = fresh(), Pending(torch.device("cpu"), scaler_enabled)
    for i, (loss, norm, samples, seconds) in enumerate(steps, start=1):
        pending.add(i, torch.tensor(loss), torch.tensor(norm))
        add_step(window, samples, seconds)
    sums, bad = pending.read(ONE_PROCESS)
    assert bad is None
    add_sums(window, sums)
    return window


def test_averages_over_the_steps_of_the_window():
    window = window_of([(0.6, 2.0, 32, 1.0), (0.4, 4.0, 32, 3.0)], scaler_enabled=False)
    assert window_fields(window, scaler_enabled=False) == pytest.approx({"loss": 0.5, "grad_norm": 3.0, "samples_per_s": 16.0})


def test_steps_the_scaler_skipped_stay_out_of_grad_norm_but_are_counted():
    window = window_of([(0.7, math.inf, 32, 1.0), (0.5, math.nan, 32, 1.0), (0.3, 1.5, 32, 2.0)], scaler_enabled=True)
    fields = window_fields(window, scaler_enabled=True)
    assert fields["grad_norm"] == 1.5
    assert fields["skipped_steps"] == 2
    # The loss of a skipped step is a real forward pass: it stays in the average.
    assert math.isclose(fields["loss"], 0.5)
    assert fields["samples_per_s"] == 24.0


def test_a_window_of_only_skipped_steps_logs_a_null_grad_norm_not_nan():
    window = window_of([(0.7, math.inf, 8, 1.0)], scaler_enabled=True)
    fields = window_fields(window, scaler_enabled=True)
    assert fields["grad_norm"] is None and fields["skipped_steps"] == 1


def test_the_first_non_finite_loss_is_reported_at_its_own_step_and_the_sums_start_over():
    pending = Pending(torch.device("cpu"), scaler_enabled=False)
    for step, loss in enumerate([0.5, math.inf, math.nan, 0.4], start=1):
        pending.add(step, torch.tensor(loss), torch.tensor(1.0))
    _, bad = pending.read(ONE_PROCESS)
    assert bad == (2, math.inf)
    pending.add(5, torch.tensor(0.25), torch.tensor(2.0))
    sums, bad = pending.read(ONE_PROCESS)
    assert bad is None and sums == {"loss": 0.25, "grad_norm": 2.0, "stepped": 1.0, "skipped": 0.0}


def test_a_window_saved_before_the_skip_counters_existed_still_adds_up():
    # A checkpoint written by the previous version holds only these five sums; resume rebuilds the state from it.
    saved = {"step": 2, "window": {"loss": 1.0, "grad_norm": 2.0, "steps": 2.0, "samples": 64.0, "seconds": 4.0}}
    window = TrainerState(**saved).window
    add_step(window, samples=32, seconds=2.0)
    add_sums(window, {"loss": 0.5, "grad_norm": 1.0, "stepped": 1.0, "skipped": 0.0})
    assert window["stepped"] == 3 and window["skipped"] == 0
    assert window_fields(window, scaler_enabled=False) == {"loss": 0.5, "grad_norm": 1.0, "samples_per_s": 16.0}
