"""The running sums behind each train record in metrics.jsonl, fp16's skipped steps included."""

import math

from recall_cli.progress import WINDOW_KEYS, add_to_window, window_fields
from recall_cli.train import TrainerState


def fresh() -> dict[str, float]:
    return dict.fromkeys(WINDOW_KEYS, 0.0)


def test_averages_over_the_steps_of_the_window():
    window = fresh()
    add_to_window(window, loss=0.6, grad_norm=2.0, samples=32, seconds=1.0, skipped=False)
    add_to_window(window, loss=0.4, grad_norm=4.0, samples=32, seconds=3.0, skipped=False)
    assert window_fields(window, scaler_enabled=False) == {"loss": 0.5, "grad_norm": 3.0, "samples_per_s": 16.0}


def test_steps_the_scaler_skipped_stay_out_of_grad_norm_but_are_counted():
    window = fresh()
    add_to_window(window, loss=0.7, grad_norm=math.inf, samples=32, seconds=1.0, skipped=True)
    add_to_window(window, loss=0.5, grad_norm=math.nan, samples=32, seconds=1.0, skipped=True)
    add_to_window(window, loss=0.3, grad_norm=1.5, samples=32, seconds=2.0, skipped=False)
    fields = window_fields(window, scaler_enabled=True)
    assert fields["grad_norm"] == 1.5
    assert fields["skipped_steps"] == 2
    # The loss of a skipped step is a real forward pass: it stays in the average.
    assert math.isclose(fields["loss"], 0.5)
    assert fields["samples_per_s"] == 24.0


def test_a_window_of_only_skipped_steps_logs_a_null_grad_norm_not_nan():
    window = fresh()
    add_to_window(window, loss=0.7, grad_norm=math.inf, samples=8, seconds=1.0, skipped=True)
    fields = window_fields(window, scaler_enabled=True)
    assert fields["grad_norm"] is None and fields["skipped_steps"] == 1


def test_a_window_saved_before_the_skip_counters_existed_still_adds_up():
    # A checkpoint written by the previous version holds only these five sums; resume rebuilds the state from it.
    saved = {"step": 2, "window": {"loss": 1.0, "grad_norm": 2.0, "steps": 2.0, "samples": 64.0, "seconds": 4.0}}
    window = TrainerState(**saved).window
    add_to_window(window, loss=0.5, grad_norm=1.0, samples=32, seconds=2.0, skipped=False)
    assert window["stepped"] == 3 and window["skipped"] == 0
    assert window_fields(window, scaler_enabled=False) == {"loss": 0.5, "grad_norm": 1.0, "samples_per_s": 16.0}
