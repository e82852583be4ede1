"""Recipe: a YAML file plus dotted KEY=VALUE overrides -> typed, validated, frozen configuration.

Every problem is collected and reported at once (an unknown key with a did-you-mean, a value of the
wrong type, an out-of-range value, a missing file), so that a user fixes a recipe in one pass.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal

import yaml

from ..errors import RecipeError
from .checks import check_recipe
from .file import read_yaml, shown
from .schema import REQUIRED_SECTIONS, SECTIONS, Recipe, all_keys, all_sections


def parse_override(text: str) -> tuple[str, Any]:
    """'optimizer.anneal_k=0.1' -> ('optimizer.anneal_k', 0.1); the value is a YAML scalar."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"override {shown(text)} is not KEY=VALUE (e.g. optimizer.anneal_k=0.1)")
    if "\n" in value or "\r" in value:  # YAML would fold it into a space: a path "a\nb" would become "a b"
        raise ValueError(f"override {key.strip()}: the value holds a line break (a stray newline in a script?): "
                         "write it on one line")
    try:
        parsed = yaml.safe_load(value) if value.strip() else None
    except yaml.YAMLError:
        parsed = value
    return key.strip(), parsed


# Two ways to say how long a run is: an override of one replaces the recipe's other (as run_glue's
# max_steps overrides num_train_epochs), unless the same command line sets both.
LENGTH_KEYS = ("train.max_steps", "train.epochs")


def apply_overrides(raw: dict[str, Any], overrides: list[str], notes: list[str] | None = None) -> list[str]:
    """Set each dotted key in ``raw`` (in place); returns problems with the overrides themselves. A
    train.max_steps (or train.epochs) override clears the recipe's other length key, said in ``notes``."""
    problems = []
    given = {text.split("=", 1)[0].strip() for text in overrides if "=" in text}
    for key, other in (LENGTH_KEYS, LENGTH_KEYS[::-1]):
        train = raw.get("train")
        if key in given and other not in given and isinstance(train, dict) and train.get(other.split(".")[1]) is not None:
            if notes is not None:
                notes.append(f"{key} from the command line replaces the recipe's {other}: {train[other.split('.')[1]]} "
                             f"(give both to be refused as before)")
            train[other.split(".")[1]] = None
    for text in overrides:
        try:
            key, value = parse_override(text)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        parts = key.split(".")
        node = raw
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                problems.append(f"override {key}: {part} is not a section")
                break
            node = child
        else:
            node[parts[-1]] = value
    return problems


# Input paths a recipe names: relative ones are read from the working directory, else beside the recipe.
INPUT_PATHS = (("task", "data_dir"), ("task", "train_file"), ("task", "dev_file"), ("probe", "texts_file"),
               ("probe", "pairs_file"), ("probe", "choices_file"))


def _beside_recipe(raw: dict[str, Any], recipe_file: Path) -> None:
    """A relative input path that does not exist from the working directory but does from the recipe's
    folder or the folder above it (the shipped recipes name data/glue/... from the repository's root) is
    made absolute (in place), so `recall finetune ../recall/recipes/quickstart.yaml` works from anywhere
    and config.yaml records where the data came from. Output paths stay relative to where you run."""
    for section, key in INPUT_PATHS:
        node = raw.get(section)
        value = node.get(key) if isinstance(node, dict) else None
        if not isinstance(value, str) or not value or "\x00" in value or Path(value).is_absolute() or Path(value).exists():
            continue
        for base in (recipe_file.parent, recipe_file.parent.parent):
            candidate = (base / value).resolve()
            if candidate.exists():
                node[key] = str(candidate)
                break


def load_recipe(path: str | Path, overrides: list[str] | None = None, notes: list[str] | None = None) -> Recipe:
    raw = read_yaml(path)
    problems = apply_overrides(raw, overrides or [], notes)
    _beside_recipe(raw, Path(path))
    recipe, more = build_recipe(raw)
    problems += more
    if problems:
        problems = [on_command_line(problem, overrides or []) for problem in problems]
        everything_given = all(problem.endswith(")") and "(set on the command line: " in problem for problem in problems)
        raise RecipeError(str(path), problems, where="in the command line's overrides" if everything_given else "in the recipe")
    assert recipe is not None
    return recipe


def on_command_line(problem: str, overrides: list[str]) -> str:
    """``problem``, saying so when the key it names was set on the command line (an override's typo is the
    command line's, not the recipe file's)."""
    keyed = [(text.split("=", 1)[0].strip(), text) for text in overrides]
    # The key the problem is about (its first word) first; then one it quotes ("unknown key 'x'").
    for key, text in keyed:
        if key and (problem.startswith(f"{key}:") or problem.startswith(f"override {key}:")):
            return f"{problem} (set on the command line: {text})"
    for key, text in keyed:
        if key and f"'{key}'" in problem:
            return f"{problem} (set on the command line: {text})"
    return problem


def build_recipe(raw: dict[str, Any], check_files: bool = True) -> tuple[Recipe | None, list[str]]:
    problems: list[str] = []
    sections: dict[str, Any] = {}
    known = all_sections()  # recall's own, then the method plugins'
    for key in raw:
        if key not in known and key != "output_dir":
            problems.append(_unknown_section(key, raw[key], list(known) + ["output_dir"]))
    for name, cls in known.items():
        value = raw.get(name)
        if value is None:
            if name in REQUIRED_SECTIONS:
                problems.append(f"missing section '{name}' (see recipes/quickstart.yaml for an example)")
                continue
            value = {}
        if not isinstance(value, dict):
            problems.append(f"'{name}' must be a mapping of keys, got {type(value).__name__}")
            continue
        sections[name] = _build_section(name, cls, value, problems)

    output_dir = raw.get("output_dir", "runs/run")
    if not isinstance(output_dir, str) or not output_dir:
        problems.append(f"output_dir: expected a path (string), got {shown(output_dir)}")

    if problems or any(v is None for v in sections.values()):
        return None, problems
    plugins = {name: sections.pop(name) for name in list(sections) if name not in SECTIONS}
    recipe = Recipe(output_dir=output_dir, plugins=plugins, **sections)
    problems += check_recipe(recipe, check_files=check_files)
    return (None if problems else recipe), problems


# What other trainers call recall's keys (transformers' TrainingArguments, the released RecAdam script):
# the did-you-mean of a name that spelling alone would not find (learning_rate is closer to name than to lr).
ALIASES = {
    "learning_rate": "lr", "adam_epsilon": "eps", "adam_eps": "eps", "epsilon": "eps", "gamma": "pretrain_cof",
    "per_device_train_batch_size": "batch_size", "train_batch_size": "batch_size",
    "per_device_eval_batch_size": "eval_batch_size", "gradient_accumulation_steps": "grad_accum",
    "num_train_epochs": "epochs", "logging_steps": "log_every", "eval_steps": "eval_every",
    "save_steps": "save_every", "save_total_limit": "keep_last", "max_length": "max_seq_length",
    "model_name_or_path": "name_or_path", "model_name": "name_or_path", "model": "name_or_path",
}


def _unknown_section(key: str, value: Any, valid: list[str]) -> str:
    """An unknown top-level key: a misspelt section (did-you-mean), or a mapping no section is close to,
    which is what a method plugin's section looks like once the plugin is uninstalled (a run's config.yaml)."""
    if isinstance(value, dict) and not difflib.get_close_matches(key, valid, n=1, cutoff=0.6):
        return (f"unknown section '{key}': no installed method declares it (method '{key}' (not installed)? "
                "install the package that provides it, or remove the section)")
    return _unknown(key, valid)


def _unknown(key: str, valid: list[str]) -> str:
    section, _, name = key.rpartition(".")
    alias = ALIASES.get(name)
    if alias is not None:
        # In the same section, else the one key of that name elsewhere (learning_rate at the top -> optimizer.lr).
        same = f"{section}.{alias}" if section else alias
        elsewhere = [k for k in all_keys() if k.rpartition(".")[2] == alias]
        target = same if same in valid else elsewhere[0] if len(elsewhere) == 1 else None
        if target is not None:
            return f"unknown key '{key}' (did you mean '{target}'?)"
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0]}'?)" if close else f" (valid keys: {', '.join(valid)})"
    return f"unknown key '{key}'{hint}"


def _build_section(name: str, cls: type, values: dict[str, Any], problems: list[str]):
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    kwargs = {}
    start = len(problems)
    for key, value in values.items():
        if key not in known:
            problems.append(_unknown(f"{name}.{key}", [f"{name}.{k}" for k in known]))
            continue
        if dataclasses.is_dataclass(hints[key]):  # a nested section (model.lora)
            if not isinstance(value, dict):
                problems.append(f"'{name}.{key}' must be a mapping of keys, got {type(value).__name__}")
            else:
                built = _build_section(f"{name}.{key}", hints[key], value, problems)
                if built is not None:
                    kwargs[key] = built
            continue
        converted, error = _convert(value, hints[key])
        if error:
            problems.append(f"{name}.{key}: {error}")
        else:
            kwargs[key] = converted
    for f in fields(cls):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.name not in values:
            problems.append(f"missing key '{name}.{f.name}'")
    if len(problems) > start:
        return None
    return cls(**kwargs)


def _convert(value: Any, hint: Any) -> tuple[Any, str | None]:
    """Check ``value`` against a field's type; returns (value, None) or (None, error)."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None, None
        inner = [a for a in args if a is not type(None)]
        errors = []
        for alternative in inner:  # keep.layers: "last" or a list of integers; the first that takes the value
            converted, error = _convert(value, alternative)
            if error is None:
                return converted, None
            errors.append(error)
        if len(errors) == 1:
            return None, errors[0]
        return None, f"expected {' or '.join(_type_words(a) for a in inner)}, got {shown(value)}"
    if value is None:
        return None, "must be set (null is not allowed here)"
    if origin is Literal:
        if isinstance(value, bool) and {"on", "off"} <= set(args):
            return ("on" if value else "off"), None  # YAML 1.1 reads a bare on/off as true/false
        if value in args:
            return value, None
        return None, f"expected one of {', '.join(map(str, args))}, got {shown(value)}"
    if origin is list:
        if isinstance(value, str) and args[0] is str:
            value = [] if value == "none" else [value]  # report_to: tensorboard, as the Trainer accepts
        if not isinstance(value, list):
            return None, f"expected a list, got {shown(value)}"
        items = []
        for item in value:
            converted, error = _convert(item, args[0])
            if error:
                return None, f"list item {shown(item)}: {error}"
            items.append(converted)
        return items, None
    if hint is bool:
        return (value, None) if isinstance(value, bool) else (None, f"expected true or false, got {shown(value)}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value, None
        if isinstance(value, float) and value.is_integer():
            return int(value), None
        return None, f"expected an integer, got {shown(value)}"
    if hint is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            # YAML 1.1 reads 2e-5 (no dot) as a string; accept what is plainly a number.
            try:
                number = float(value)
            except ValueError:
                pass
        if number is None:
            return None, f"expected a number, got {shown(value)}"
        if not math.isfinite(number):  # .inf / .nan would reach the run as NaN weights or an endless run
            return None, f"expected a finite number, got {shown(value)}"
        return number, None
    if hint is str:
        return (value, None) if isinstance(value, str) else (None, f"expected a string, got {shown(value)}")
    raise TypeError(f"unsupported recipe field type {hint}")  # a bug in this module, not user input


def _type_words(hint: Any) -> str:
    """How a refusal names a type: "last", "a list of integers"."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return " or ".join(map(str, args))
    if origin is list:
        return f"a list of {_type_words(args[0])}s" if args else "a list"
    return {int: "integer", float: "number", str: "string", bool: "true or false"}.get(hint, str(hint))


def recipe_from_dict(raw: dict[str, Any], source: str, check_files: bool = True) -> Recipe:
    recipe, problems = build_recipe(raw, check_files=check_files)
    if problems:
        raise RecipeError(source, problems)
    assert recipe is not None
    return recipe
