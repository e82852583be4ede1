"""Reading a recipe file: UTF-8 YAML, one mapping of sections, text keys, and a bound on its size (a
YAML alias bomb), each refused with one line naming the fix. Also how an error message quotes a value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..errors import RecipeError

# A recipe is a few dozen values; YAML aliases can make a few lines stand for billions of them (an
# "alias bomb"), which no check or message should walk or print.
MAX_VALUES = 10_000


def shown(value: Any, limit: int = 120) -> str:
    """A value as an error message quotes it: its repr, cut to ``limit`` characters (a nested alias
    bomb's repr would be gigabytes)."""
    import reprlib

    short = reprlib.Repr()
    short.maxlevel, short.maxlist, short.maxdict, short.maxstring, short.maxother = 3, 6, 6, limit, limit
    text = short.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _count_values(value: Any, budget: int = MAX_VALUES) -> int:
    """How many values ``value`` holds, counting a shared (aliased) one each time it is used, up to
    ``budget`` + 1 (then it stops: the walk itself stays cheap)."""
    seen, stack = 0, [value]
    while stack and seen <= budget:
        item = stack.pop()
        seen += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return seen


def recipes_folder() -> Path:
    """The shipped recipes: recall_cli/recipes in an installed package (package data) or a clone (a link
    to recipes/); a clone whose link was checked out as a plain file (Windows without symlinks) has them
    beside the package."""
    package = Path(__file__).resolve().parents[1]  # recall_cli/, found without importing the package (a circle)
    packaged = package / "recipes"
    if packaged.is_dir():
        return packaged.resolve()  # a clone's link: name the recipes/ folder a user edits
    return package.parent / "recipes"


def _did_you_mean(path: Path) -> str:
    """' (did you mean recipes/minilm_mrpc.yaml?)' for a path a few letters off a recipe in its own
    folder or a shipped one (shown as a path the command takes), else ''."""
    import difflib

    candidates: dict[str, Path] = {}
    shipped = recipes_folder()
    for folder in (shipped, path.parent):  # the user's own folder last: its files win a tie of names
        try:
            for found in sorted(folder.glob("*.y*ml")):
                candidates[found.name] = found if folder == shipped else path.parent / found.name
        except OSError:
            continue
    close = difflib.get_close_matches(path.name, list(candidates), n=1, cutoff=0.8)
    if not close:
        return ""
    found = candidates[close[0]]
    if found.is_absolute():  # a shipped recipe: relative to here when it is below
        try:
            found = found.relative_to(Path.cwd().resolve())
        except ValueError:
            pass
    return f" (did you mean {found.as_posix()}?)"


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        hint = _did_you_mean(path) if path.suffix.lower() in (".yaml", ".yml", "") else ""
        raise RecipeError(str(path), [f"recipe file not found: {path}{hint or ' (check the path)'}"])
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise RecipeError(str(path), [f"not UTF-8 text (byte {exc.start}): save the recipe as UTF-8"]) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RecipeError(str(path), [f"invalid YAML{where}: {problem}"]) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RecipeError(str(path), [f"a recipe is a YAML mapping of sections, got {type(raw).__name__}"])
    if _count_values(raw) > MAX_VALUES:
        raise RecipeError(str(path), [f"the recipe expands to more than {MAX_VALUES:,} values (YAML aliases "
                                      "repeating a value?): a recipe holds a few dozen"])
    keys = [k for k in _all_keys(raw) if not isinstance(k, str)]
    if keys:
        raise RecipeError(str(path), [f"key {shown(keys[0])} is not a name: recipe keys are text "
                                      "(quote it, e.g. '1': ...)"])
    return raw


def _all_keys(raw: dict[str, Any]) -> list[Any]:
    """Every mapping key in a recipe, its sections' keys too (bounded: read_yaml counted the values)."""
    keys, stack = [], [raw]
    while stack:
        node = stack.pop()
        for key, value in node.items():
            keys.append(key)
            if isinstance(value, dict):
                stack.append(value)
    return keys
