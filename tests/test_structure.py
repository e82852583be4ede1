"""The house's shape, as benchmarks/structure.py measures it: import arrows point down (no cycles, lazy
imports included), and the CLI's --help loads no torch."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_the_house_keeps_its_shape():
    """Issue 37's bounds: at most 12 modules at the top of recall_cli/ (the rest live in packages that
    own a stage), no module over 500 lines, no function over 80."""
    s = structure()
    top = [p for p in (REPO / "recall_cli").glob("*.py") if p.stem not in ("__init__", "__main__")]
    assert len(top) <= 12, sorted(p.name for p in top)
    long_modules, long_functions = s.sizes()
    assert long_modules == [] and long_functions == []


@pytest.mark.slow
def test_the_recipe_is_read_where_the_run_is_planned():
    """The recipe's walk from finetune to the first step (the calls handed the recipe or a section of it)
    stays short: the run is planned once and the rest read the plan (issue 37: at most 40 stays, 12 climbs)."""
    s = structure()
    walk = s.walk(s.import_graph())
    assert walk["recipe_stays"] <= 40 and walk["recipe_climbs_back_up"] <= 12, walk
    assert walk["recipe_path"][0] == "recall_cli.training.loop"
