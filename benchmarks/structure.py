"""Counts of the code's shape that anyone can re-run on any commit (issue 27's "Done when"):

    python benchmarks/structure.py            # this checkout
    python benchmarks/structure.py --json

- modules and packages at the top level of recall_cli/;
- the import graph: intra-package edges, and any cycle;
- module-level name tables outside names.py: dicts or tuples of string literals assigned to an
  UPPER_CASE name (a heuristic: it lists them, for a reader to judge);
- places that decide an exit code: `sys.exit(<int>)`, `typer.Exit(<int>)`, `raise SystemExit(<int>)`
  or `exit_code = <int>` with a literal number (ExitCode members do not count: they are the table);
- the set-up's walk in one tiny `recall finetune` (2 steps, probes off): every Python call into
  recall_cli from the training code's entry to the first step, in order, as the sequence of modules
  entered; "stays" is that sequence with repeats collapsed, "climbs back up" the moves from a module
  into one that imports it (directly or not), i.e. a call against the import arrows (a callback, or a
  lower layer asking an upper one). Two narrower walks: the calls handed the recipe (or a section of it),
  and the calls handed anything derived from it (the recipe, its sections, and every object such a call
  returned: the plan, the task's data, the model, ...), the value's whole trip as farm-studio's
  `walk recall_cli/training/loop.py:finetune:recipe` follows it from the code's text.

Functions and modules over the size limits (80 lines, 500 lines) are listed too.
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "recall_cli"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in p.parts}


def parse(path: Path) -> ast.Module:
    """``path``'s syntax tree, parsed once while the file is unchanged: every count (and the structure tests, which
    ask for several) reads the same files. Read-only: callers walk it and never edit it."""
    stat = path.stat()
    return _parse(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=None)
def _parse(path: Path, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """recall_cli modules that ``name`` imports (anywhere in the file, lazily too, and under TYPE_CHECKING:
    an import for annotations only is no arrow at run time, but it is one in the layering, and a circle
    of them is the same fault as a circle at run time)."""
    tree = parse(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                found.add(full if full in known else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports_of(name, path, set(mods)) for name, path in mods.items()}


def reaches(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out = {}
    for start in graph:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        out[start] = seen
    return out


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Pairs that import each other, directly or not (package __init__ re-exports aside)."""
    reach = reaches(graph)
    return sorted((a, b) for a in graph for b in reach[a] if a < b and a in reach[b]
                  and not (b.startswith(a + ".") or a.startswith(b + ".")))


def name_tables() -> list[str]:
    out = []
    for name, path in modules().items():
        if name == "recall_cli.names":
            continue
        for node in parse(path).body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                value = node.value
                if not all(isinstance(t, ast.Name) and t.id.isupper() for t in targets) or value is None:
                    continue
                if isinstance(value, ast.Dict) and value.keys and all(isinstance(k, ast.Constant) and isinstance(k.value, str)
                                                                     for k in value.keys):
                    if all(isinstance(v, ast.Constant) and isinstance(v.value, str) for v in value.values):
                        out.append(f"{name}.{targets[0].id}")
    return out


def exit_decisions() -> list[str]:
    out = []
    for name, path in modules().items():
        for node in ast.walk(parse(path)):
            literal = None
            if isinstance(node, ast.Call):
                func = ast.unparse(node.func)
                if func in ("sys.exit", "typer.Exit", "SystemExit", "exit", "os._exit") and node.args \
                        and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, int):
                    literal = f"{func}({node.args[0].value})"
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "exit_code" for t in node.targets) \
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int):
                literal = f"exit_code = {node.value.value}"
            if literal:
                out.append(f"{name}:{node.lineno} {literal}")
    return out


def sizes() -> tuple[list[str], list[str]]:
    long_modules, long_functions = [], []
    for name, path in modules().items():
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > 500:
            long_modules.append(f"{name} {text.count(chr(10))}")
        for node in ast.walk(parse(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80:
                long_functions.append(f"{name}.{node.name} {node.end_lineno - node.lineno + 1}")
    return long_modules, long_functions


def collapse_loops(stays: list[str], longest: int = 4) -> list[str]:
    """The walk with each loop counted once: a cycle of up to ``longest`` modules repeated back to back
    (a per-row loop: a reader calling the task type's label parser for each of 4,000 rows) is one pass
    of it, so the count says how many places the set-up visits, not how many rows the data has."""
    out: list[str] = []
    for module in stays:
        out.append(module)
        for n in range(1, longest + 1):
            if len(out) >= 2 * n and out[-n:] == out[-2 * n:-n]:
                del out[-n:]
                break
    return out


def walk(graph: dict[str, set[str]]) -> dict:
    """The modules one tiny finetune enters, in order (a profile hook on every Python call)."""
    from typer.testing import CliRunner

    sys.path.insert(0, str(REPO / "tests"))
    from conftest import tiny_recipe, write_recipe  # the tests' tiny run on real MRPC rows

    from recall_cli.cli import app
    from recall_cli.testing import tiny_bert_dir

    known = set(graph)
    with tempfile.TemporaryDirectory() as tmp:
        model = tiny_bert_dir(Path(tmp) / "model", seed=1)
        recipe = write_recipe(Path(tmp) / "r.yaml", tiny_recipe(model, Path(tmp) / "run", train={"max_steps": 2, "eval_every": 2},
                                                               probe={"enabled": False}))
        entered: list[str] = []
        first_step: list[int] = []  # where in ``entered`` the first train_step began
        with_recipe: list[str] = []  # the calls handed the recipe (or one of its sections), in order
        recipe_step: list[int] = []
        from recall_cli.recipe import Recipe

        def holds_recipe(frame) -> bool:
            code = frame.f_code
            for arg in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]:
                value = frame.f_locals.get(arg)
                if isinstance(value, Recipe) or type(value).__module__ == "recall_cli.recipe.schema":
                    return True
            return False

        # The walk of everything derived from the recipe (farm-studio's `walk ...:finetune:recipe` follows the
        # same, from the code's text): a call counts when it is handed the recipe, a section of it, or an object
        # that a counted call returned (the plan, the task's data, the model, the Training, ...). Numbers, strings
        # and None are left out: they are shared by value, so their identity says nothing of where they came from.
        derived: dict[int, object] = {}  # id -> the object (held, so that its id is not reused)
        counted_frames: set[int] = set()
        with_derived: list[str] = []
        derived_step: list[int] = []
        plain = (int, float, complex, str, bytes, bool, type(None))

        def is_derived(value) -> bool:
            return (id(value) in derived or isinstance(value, Recipe)
                    or type(value).__module__ == "recall_cli.recipe.schema")

        def handed_derived(frame) -> bool:
            code = frame.f_code
            count = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
            for arg in code.co_varnames[:count]:
                value = frame.f_locals.get(arg)
                if is_derived(value):
                    return True
                if isinstance(value, (tuple, list)) and any(is_derived(v) for v in value[:16]):
                    return True
                if isinstance(value, dict) and any(is_derived(v) for v in list(value.values())[:16]):
                    return True
            return False

        def hook(frame, event, arg):
            if event == "call":
                name = frame.f_globals.get("__name__", "")
                if name in known and (not entered or entered[-1] != name):
                    entered.append(name)
                if name in known and holds_recipe(frame) and (not with_recipe or with_recipe[-1] != name):
                    with_recipe.append(name)
                if name in known and handed_derived(frame):
                    counted_frames.add(id(frame))
                    if not with_derived or with_derived[-1] != name:
                        with_derived.append(name)
                if frame.f_code.co_name == "train_step" and not first_step:
                    first_step.append(len(entered))
                    recipe_step.append(len(with_recipe))
                    derived_step.append(len(with_derived))
            elif event == "return" and id(frame) in counted_frames:
                counted_frames.discard(id(frame))
                if not first_step and not isinstance(arg, plain):
                    derived[id(arg)] = arg

        sys.setprofile(hook)
        try:
            result = CliRunner().invoke(app, ["finetune", str(recipe), "--plain"])
        finally:
            sys.setprofile(None)
        if result.exit_code != 0:
            raise SystemExit(f"the tiny run failed: {result.output}")
    # The set-up's walk: from the training code's entry (after the CLI has read the recipe) to the first
    # train_step, after which the same few modules repeat every step.
    start = next((i for i, m in enumerate(entered) if m in ("recall_cli.training.loop", "recall_cli.train")), 0)
    stays = collapse_loops(entered[start:first_step[0] if first_step else len(entered)])
    reach = reaches(graph)
    climbs = sum(1 for a, b in zip(stays, stays[1:]) if a in reach.get(b, set()))
    # The recipe's walk: the same, counting only the calls that are handed the recipe (or a section of it),
    # i.e. where the run's configuration is read and decided; a plan made once is read by fewer of them.
    rstart = next((i for i, m in enumerate(with_recipe) if m == "recall_cli.training.loop"), 0)
    rstays = with_recipe[rstart:recipe_step[0] if recipe_step else len(with_recipe)]
    rclimbs = sum(1 for a, b in zip(rstays, rstays[1:]) if a in reach.get(b, set()))
    # Everything derived from it (the issue-54 ruler): loops counted once, as the set-up's walk is.
    dstart = next((i for i, m in enumerate(with_derived) if m == "recall_cli.training.loop"), 0)
    dstays = collapse_loops(with_derived[dstart:derived_step[0] if derived_step else len(with_derived)])
    dclimbs = sum(1 for a, b in zip(dstays, dstays[1:]) if a in reach.get(b, set()))
    return {"stays": len(stays), "modules": len(set(stays)), "climbs_back_up": climbs,
            "recipe_stays": len(rstays), "recipe_modules": len(set(rstays)), "recipe_climbs_back_up": rclimbs,
            "recipe_path": rstays, "derived_stays": len(dstays), "derived_modules": len(set(dstays)),
            "derived_climbs_back_up": dclimbs, "derived_path": dstays}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-walk", action="store_true", help="skip the tiny run")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    graph = import_graph()
    top = sorted(p.name for p in PACKAGE.iterdir() if (p.suffix == ".py" and p.stem not in ("__init__", "__main__"))
                 or (p.is_dir() and (p / "__init__.py").is_file()))
    long_modules, long_functions = sizes()
    counts = {
        "top_level": {"modules": sum(n.endswith(".py") for n in top), "packages": sum(not n.endswith(".py") for n in top)},
        "import_edges": sum(len(v) for v in graph.values()),
        "import_cycles": cycles(graph),
        "name_tables_outside_names_py": name_tables(),
        "exit_code_literals": exit_decisions(),
        "modules_over_500_lines": long_modules,
        "functions_over_80_lines": long_functions,
    }
    if not args.no_walk:
        counts["walk_from_finetune"] = walk(graph)
    if args.json:
        print(json.dumps(counts, indent=2))
    else:
        for key, value in counts.items():
            print(f"{key}: {value if not isinstance(value, list) else (len(value), value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
