"""Set-up says what it does (cli/console.py's phase): a log gets one line for a phase that takes a while and none
for a quick one, a terminal a live line with its progress that is gone after; and the start line's estimate of
the probe's cost (training/progress.py's probe_cost), from θ*'s side and the run's probe schedule."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from recall_cli.cli.console import PlainReporter, RichReporter
from recall_cli.training.progress import Reporter, probe_cost, probe_due


def test_a_log_gets_one_line_for_a_slow_phase_and_none_for_a_quick_one(monkeypatch):
    out = io.StringIO()
    reporter = PlainReporter(out)
    monkeypatch.setattr(PlainReporter, "say_after", 3600.0)  # a phase that ends before it
    with reporter.phase("set-up: loading the model pkg:x") as progress:
        progress(1, 2)
    assert out.getvalue() == ""
    monkeypatch.setattr(PlainReporter, "say_after", 0.0)  # as a phase that has run past it
    with reporter.phase("set-up: θ*'s side of the probes (cached for the next run)") as progress:
        for done in range(5):
            progress(done, 4)
    assert out.getvalue() == "recall: set-up: θ*'s side of the probes (cached for the next run)…\n"


def test_a_terminal_gets_a_live_line_with_the_phases_progress():
    buf = io.StringIO()
    reporter = RichReporter(Console(file=buf, force_terminal=True, width=100))
    with reporter.phase("set-up: θ*'s side of the probes [48 batches]") as progress:
        progress(0, 48)
        progress(48, 48)
    shown = buf.getvalue()
    assert "set-up: θ*'s side of the probes [48 batches]" in shown and "48/48" in shown
    assert shown.endswith("\x1b[2K")  # transient: the line is cleared, the start line comes next


def test_a_reporter_of_its_own_need_not_know_phases():
    with Reporter().phase("anything") as progress:
        assert progress(1, 2) is None


class FakeProber:
    def __init__(self, seconds, cached=False, reference=False):
        self.ref_seconds, self.ref_cached, self.reference = seconds, cached, reference

    def is_reference(self, model):
        return self.reference


def test_the_probe_schedule_and_its_estimated_cost():
    assert [s for s in range(1, 13) if probe_due(s, 12, 6, 0)] == [6, 12]  # at each evaluation
    assert [s for s in range(1, 13) if probe_due(s, 12, 6, 4)] == [4, 8, 12]  # probe.every, and the last
    assert [s for s in range(1, 8) if probe_due(s, 7, 0, 0)] == [7]
    # steps 6 and 12, and step 0, whose model under RI is not θ*
    ri = probe_cost(FakeProber(2.5), None, 0, 12, 6, 0, resumed=False)
    assert ri == "3 measurements × ~2.5 s ≈ 7.5 s (each about as long as θ*'s side took in set-up; probe.every=N probes less often)"
    # step 0 under PI is θ* (its side is θ*'s); a resumed run at step 6 has only 8 and 12 left
    assert probe_cost(FakeProber(40.0, reference=True), None, 0, 12, 6, 4, resumed=False).startswith("3 measurements × ~40 s ≈ 2.0 min")
    cached = probe_cost(FakeProber(1500.0, cached=True), None, 6, 12, 6, 4, resumed=True)
    assert cached.startswith("2 measurements × ~25.0 min ≈ 50.0 min") and "when it was cached" in cached
    assert probe_cost(FakeProber(float("nan")), None, 0, 12, 6, 0, resumed=False) is None
