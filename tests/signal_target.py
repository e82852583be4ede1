"""Not collected by the suite (no test_ prefix): tests/test_suite_signals.py runs it in its own pytest. The
first test stops itself as a scheduler would, and swallows the stop as recall's commands do (run_guarded
turns it into an exit code); the second must never run."""

import os
import signal
import time
from pathlib import Path

from recall_cli.errors import signals_raise


def test_a_command_that_swallows_the_signal():
    with signals_raise():
        try:
            os.kill(os.getpid(), getattr(signal, os.environ["SIGNAL_TARGET_SIG"]))
            time.sleep(5)
        except KeyboardInterrupt:
            pass  # what a command does: exit 130/143, and the test would go on


def test_never_runs():
    Path(os.environ["SIGNAL_TARGET_MARK"]).write_text("ran")
