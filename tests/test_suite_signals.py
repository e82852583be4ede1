"""Ctrl-C or SIGTERM stops the test suite after the test it arrived in (tests/conftest.py), even when the
code under test swallowed it as recall's commands do: `make test` ends instead of running on for minutes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [("SIGINT", 130), ("SIGTERM", 143)])
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_a_signal_ends_the_session(tmp_path, sig, code):
    mark = tmp_path / "ran"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/signal_target.py"],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1], timeout=300,
                          env={**os.environ, "SIGNAL_TARGET_SIG": sig, "SIGNAL_TARGET_MARK": str(mark)})
    assert done.returncode == code, done.stdout[-2000:]
    assert f"stopped by signal {code - 128}" in done.stdout and "1 passed" in done.stdout
    assert not mark.exists()
