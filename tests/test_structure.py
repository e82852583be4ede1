"""The house's shape, as benchmarks/structure.py measures it: import arrows point down (no cycles, lazy
imports included), and the CLI's --help loads no torch."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def structure():
    spec = importlib.util.spec_from_file_location("structure", REPO / "benchmarks" / "structure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_import_cycles():
    s = structure()
    graph = s.import_graph()
    assert graph["recall_cli.report.families"] and "recall_cli.merge" not in graph["recall_cli.report.families"]
    assert s.cycles(graph) == []


def test_a_cycle_is_found_where_there_is_one():
    s = structure()
    assert s.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [("a", "b"), ("a", "c"), ("b", "c")]


def test_help_loads_no_torch():
    code = ("import sys; from typer.testing import CliRunner; from recall_cli.cli import app; "
            "result = CliRunner().invoke(app, ['--help']); assert result.exit_code == 0 and 'finetune' in result.output; "
            "assert 'torch' not in sys.modules, 'recall --help imported torch'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
