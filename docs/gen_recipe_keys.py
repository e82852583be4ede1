"""Write docs/recipe-keys.md, the table of every recipe key, from the recipe's schema itself.

Each key of ``recall_cli.recipe.all_keys()`` gets its type (the dataclass field's annotation), its
default, what it means (the comments beside and above the field where its class is defined, and what
reads it: the method registry, names.RECADAM_ONLY_KEYS) and the checks that refuse a value (the messages
in recall_cli/recipe/ and recall_cli/methods/ that start with the key). Nothing is written by hand,
so the page cannot drift from the schema: `make docs` runs this first, and tests/test_docs.py checks
that the committed page is what this script writes.

    python docs/gen_recipe_keys.py            # writes docs/recipe-keys.md
    python docs/gen_recipe_keys.py --check    # exit 1 when docs/recipe-keys.md is not up to date
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import re
import sys
import tokenize
import types
import typing
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "recipe-keys.md"
sys.path.insert(0, str(REPO))  # run from a clone without an install, as `make docs` may

from recall_cli import recipe as recipe_module  # noqa: E402
from recall_cli.methods import methods as registered_methods  # noqa: E402
from recall_cli.names import OPTIMIZERS, RECADAM_ONLY_KEYS  # noqa: E402

# Where the checks live: the recipe's own and the methods' (each message starts with the key it is about).
CHECK_SOURCES = tuple(sorted((REPO / "recall_cli" / "recipe").glob("*.py"))
                      + sorted((REPO / "recall_cli" / "methods").rglob("*.py")))
KEY = r"[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*"


# ---- the schema ----------------------------------------------------------------------------------


def comments_by_line(source: str) -> dict[int, str]:
    """Line number -> the text of the comment on that line."""
    found = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = token.string.lstrip("#").strip()
    return found


def field_comments(source: str) -> dict[str, dict[str, str]]:
    """{class name: {field name: its comments}}: the comment lines right above a field, then the one
    at the end of its line."""
    comments = comments_by_line(source)
    lines = source.splitlines()
    out: dict[str, dict[str, str]] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        out[node.name] = {}
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            above, line = [], stmt.lineno - 1
            while line >= 1 and lines[line - 1].strip().startswith("#"):
                above.insert(0, comments[line])
                line -= 1
            beside = comments.get(stmt.lineno) if stmt.lineno == stmt.end_lineno else comments.get(stmt.end_lineno)
            out[node.name][stmt.target.id] = " ".join([*above, *([beside] if beside else [])])
    return out


def sections() -> list[tuple[str, type]]:
    """(dotted prefix, dataclass) for every section, nested ones (model.lora) after their parent."""
    out = []

    def walk(prefix: str, cls: type) -> None:
        out.append((prefix, cls))
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                walk(f"{prefix}.{f.name}", hints[f.name])

    for name, cls in recipe_module.all_sections().items():
        walk(name, cls)
    return out


def type_text(hint: typing.Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        text = " or ".join(type_text(a) for a in rest)
        return f"{text} or null" if len(rest) < len(args) else text
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin is list:
        return f"list of {type_text(args[0])}s" if args else "list"
    return {int: "integer", float: "number", str: "string", bool: "true or false"}.get(hint, getattr(hint, "__name__", str(hint)))


def yaml_text(value: typing.Any) -> str:
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, list):
        return "`[" + ", ".join(yaml_text(v).strip("`") for v in value) + "]`"
    if isinstance(value, float):
        return f"`{value:g}`"
    return f"`{value}`"


def default_text(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return yaml_text(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return yaml_text(f.default_factory())
    return "required"


# ---- the checks ----------------------------------------------------------------------------------


def _loop_values(node: ast.AST, parents: dict[ast.AST, ast.AST], name: str) -> list[str] | None:
    """The constant strings a `for name in (...)` around ``node`` iterates over, if there is one."""
    while node in parents:
        node = parents[node]
        if (isinstance(node, ast.For) and isinstance(node.target, ast.Name) and node.target.id == name
                and isinstance(node.iter, (ast.Tuple, ast.List))
                and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.iter.elts)):
            return [e.value for e in node.iter.elts]
    return None


def _render(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> list[str]:
    """A message's text, one per value of a loop variable it names; other values shown as '…'."""
    if isinstance(node, ast.Constant):
        return [node.value]
    texts = [""]
    for part in node.values:
        if isinstance(part, ast.Constant):
            texts = [t + str(part.value) for t in texts]
            continue
        value = part.value
        loop = _loop_values(node, parents, value.id) if isinstance(value, ast.Name) else None
        texts = [t + v for t in texts for v in loop] if loop else [t + "…" for t in texts]
    return texts


def checks() -> dict[str, list[str]]:
    """Key -> the problems recall reports for it (exit 2, nothing written), in source order."""
    found: dict[str, list[str]] = {}
    keys = set(recipe_module.all_keys())
    head = re.compile(rf"^(?P<keys>{KEY}(?: (?:x|/) {KEY})*)(?::| =) ?(?P<body>.*)$", re.DOTALL)
    for path in CHECK_SOURCES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
        for node in ast.walk(tree):
            is_text = isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))
            if not is_text or isinstance(parents.get(node), ast.JoinedStr):
                continue
            for text in _render(node, parents):
                match = head.match(text)
                if not match:
                    continue
                named = [k for k in re.split(r" (?:x|/) ", match["keys"]) if k in keys]
                body = re.sub(r",? got …\)?$", "", match["body"].strip()).strip()
                if match.group(0).split(":")[0].count(" x ") and "=" in text.split(":")[0]:
                    body = match["keys"] + " " + body  # "optimizer.lr x optimizer.pretrain_cof = … must be < 1"
                for key in named:
                    if body and body not in found.setdefault(key, []):
                        found[key].append(body)
    for key, bodies in found.items():  # log_every: ">= 0" with its siblings, then ">= 1" of its own
        if "must be >= 1" in bodies and "must be >= 0" in bodies:
            bodies.remove("must be >= 0")
    return found


# ---- the page ------------------------------------------------------------------------------------


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").strip()


def read_by() -> dict[str, str]:
    anchored = ", ".join(f"`{o.name}`" for o in OPTIMIZERS.values() if o.anchored)
    vanilla = ", ".join(f"`{o.name}`" for o in OPTIMIZERS.values() if not o.anchored)
    notes = {key: f"*Read by RecAdam only* ({anchored}); with {vanilla} it is listed as unused on "
             "the start line and in `--dry-run`." for key in RECADAM_ONLY_KEYS}
    for method in registered_methods():
        for key in method.keys:
            turns_on = "; turns it on" if key == method.switch else ""
            notes[key] = f"*Method:* {method.label} ({method.paper}){turns_on}."
    return notes


def sentence(text: str) -> str:
    text = text.strip()
    return text if not text or text[-1] in ".!?)" else text + "."


def render() -> str:
    comments: dict[str, dict[str, str]] = {}
    for path in sorted({inspect.getsourcefile(cls) for _, cls in sections()}):
        comments.update(field_comments(Path(path).read_text(encoding="utf-8")))
    problems, notes = checks(), read_by()
    documented: list[str] = []
    out = [
        "# Recipe keys",
        "",
        "<!-- Generated by docs/gen_recipe_keys.py from the recipe schema (recall_cli/recipe/): do not edit by hand "
        "(make docs rewrites it; tests/test_docs.py fails when it is stale). -->",
        "",
        "Every key a recipe may set, generated from the recipe's schema (the dataclasses of "
        "`recall_cli/recipe/schema.py` and of each method's room, their defaults and comments) and its checks. Set a key in the YAML file "
        "or on the command line as a dotted `KEY=VALUE` override (`optimizer.lr=3e-5`). A value of the wrong "
        "type, an unknown key (with a did-you-mean) or a failed check is reported with every other problem "
        "at once: exit 2, nothing written. How recipes work: [Recipes](recipes.md).",
        "",
        "| key | type | default |",
        "|---|---|---|",
        "| `output_dir` | string | `runs/run` |",
        "",
        "The run directory ([format](run-directory.md)); an existing one is refused unless "
        "`--resume` or `--overwrite`.",
        "",
    ]
    documented.append("output_dir")
    for prefix, cls in sections():
        hints = typing.get_type_hints(cls)
        out += [f"## {prefix}", ""]
        doc = " ".join((cls.__doc__ or "").split()) if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "(") else ""
        if doc:
            out += [doc, ""]
        out += ["| key | type | default | meaning | refused when |", "|---|---|---|---|---|"]
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                continue
            key = f"{prefix}.{f.name}"
            meaning = " ".join(sentence(x) for x in (comments.get(cls.__name__, {}).get(f.name, ""), notes.get(key, "")) if x)
            refused = "; ".join(problems.get(key, [])) or "(type only)"
            out.append(f"| `{key}` | {cell(type_text(hints[f.name]))} | {cell(default_text(f))} | {cell(meaning)} | "
                       f"{cell(refused)} |")
            documented.append(key)
        out.append("")
    missing = sorted(set(recipe_module.all_keys()) - set(documented))
    if missing:  # a new kind of field this script does not know how to show
        raise SystemExit(f"gen_recipe_keys.py: no row for {', '.join(missing)}")
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE.relative_to(REPO)} is stale: run python docs/gen_recipe_keys.py", file=sys.stderr)
            return 1
        return 0
    if not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != text:
        PAGE.write_text(text, encoding="utf-8")
        print(f"wrote {PAGE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
