"""Every script in benchmarks/ starts and prints its usage: a name it imports from recall_cli that a
refactor moved fails here, not in the next session that needs the measurement (throughput.py imported
recall_cli.data.GLUE_FOLDERS for a round after it had become names.TASKS[...].folder)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((REPO / "benchmarks").glob("*.py"))


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_script_prints_its_usage(script):
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage" in done.stdout.lower(), done.stdout[:500]
