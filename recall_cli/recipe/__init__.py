"""The recipe: a YAML file plus dotted KEY=VALUE overrides -> one typed, checked, frozen :class:`Recipe`.

    schema.py   the sections as frozen dataclasses, their defaults and meanings; dump_recipe
    file.py     reading a recipe file safely (UTF-8, YAML without tags, a bound on aliases, text keys)
    build.py    overrides, types and unknown keys (did-you-mean): every problem at once
    checks.py   checks across keys of a built recipe (a method's own keys: its room in methods/)
    advice.py   warnings on a valid recipe (its schedule for this run's length, keys it will not read)

Import from here; the rooms are the recipe's own.
"""

from __future__ import annotations

from .advice import runnable, schedule_warnings, unused_keys
from .build import (ALIASES, INPUT_PATHS, apply_overrides, build_recipe, load_recipe, parse_override,
                    recipe_from_dict)
from .checks import check_recipe
from .file import read_yaml, shown
from .schema import (REQUIRED_SECTIONS, SECTIONS, KeepConfig, LoraConfig, ModelConfig, OptimizerConfig, ProbeConfig,
                     Recipe, TaskConfig, TrainConfig, all_keys, all_sections, dump_recipe, flatten)

__all__ = [
    "ALIASES", "INPUT_PATHS", "REQUIRED_SECTIONS", "SECTIONS", "KeepConfig", "LoraConfig", "ModelConfig",
    "OptimizerConfig", "ProbeConfig", "Recipe", "TaskConfig", "TrainConfig", "all_keys", "all_sections", "apply_overrides",
    "build_recipe", "check_recipe", "dump_recipe", "flatten", "load_recipe", "parse_override", "read_yaml",
    "recipe_from_dict", "runnable", "schedule_warnings", "shown", "unused_keys",
]
