"""The house's shape, as benchmarks/structure.py measures it: import arrows point down (no cycles, lazy
imports included), and the CLI's --help loads no torch; every error type is reached through errors.py."""

from __future__ import annotations

import ast
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



def python_files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (REPO / folder).rglob("*.py"))


def test_no_package_re_exports_an_error_type():
    """errors.py owns every exception type recall reports. A package that re-exported one (report.ReportError,
    probes.ProbeError, merge.MergeError) gave it a second name: no package lists one in its __all__, and
    nothing reaches one through a package."""
    tree = ast.parse((REPO / "recall_cli" / "errors.py").read_text(encoding="utf-8"))
    error_types = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    assert {"RecallError", "ReportError", "ProbeError", "MergeError"} <= error_types
    packages = {"recall_cli"} | {init.parent.name for init in (REPO / "recall_cli").rglob("__init__.py")}
    found = []
    for path in python_files("recall_cli", "tests", "docs", "examples", "benchmarks"):
        where = path.relative_to(REPO)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                source = (node.module or "").split(".")[-1] if node.module else path.parent.name  # from . import X
                if source in packages:
                    found += [f"{where}:{node.lineno}: from {node.module} import {a.name}"
                              for a in node.names if a.name in error_types]
            elif isinstance(node, ast.Attribute) and node.attr in error_types:
                if ast.unparse(node.value).split(".")[-1] in packages:
                    found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                found += [f"{where}:{node.lineno}: __all__ lists {e.value}" for e in ast.walk(node.value)
                          if isinstance(e, ast.Constant) and e.value in error_types and path.name == "__init__.py"]
    assert found == []
