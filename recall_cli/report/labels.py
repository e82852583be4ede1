"""How a setting is spelled: the words for an optimizer, the order of values, a group's label
('vanilla fine-tuning', 'RecAdam + RI, k=0.1'). Below comparison and families, which both spell settings."""

from __future__ import annotations

from typing import Any

from ..names import INIT_TITLES, OPTIMIZERS, is_vanilla
from .runs import label_names

METHOD_NAMES = {name: o.label for name, o in OPTIMIZERS.items()}


def _sort_key(key: str, value: Any) -> tuple:
    if key == "optimizer.name" and value in OPTIMIZERS:
        return (0, OPTIMIZERS[value].report_order, "")
    if key == "model.init" and value in INIT_TITLES:
        return (0, list(INIT_TITLES).index(value), "")
    if value is None:
        return (-1, 0, "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (1, value, "")
    return (2, 0, str(value))


def group_label(settings: dict[str, Any], preset: str | None = None) -> str:
    """'vanilla fine-tuning', 'RecAdam + RI, k=0.1', 'k=0.05, t0=250' — what a reader of the paper calls them."""
    parts: list[str] = []
    name = settings.get("optimizer.name")
    if "optimizer.name" in settings or "model.init" in settings:
        if is_vanilla(name):
            parts.append(METHOD_NAMES[name])
        else:
            method = METHOD_NAMES.get(name, str(name)) if "optimizer.name" in settings else "RecAdam"
            if preset == "init" or "model.init" in settings:
                method += f" + {INIT_TITLES.get(settings.get('model.init'), settings.get('model.init'))}"
            parts.append(method)
    for key, value in settings.items():
        # None is a key the setting leaves unset (a RecAdam key for adamw, a record key for a trained run,
        # task.max_train_examples for every row): not a value to print, for any method alike.
        if key in ("optimizer.name", "model.init") or value is None:
            continue
        parts.append(f"{label_names().get(key, key)}={_fmt_setting(value)}")
    if not parts and settings:  # every key unset: say which (beside a row that sets one)
        parts = [f"{label_names().get(key, key)} unset" for key in settings]
    return ", ".join(parts) or "all runs"


def _fmt_setting(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):  # merge weights: 0.333333 reads as 0.333
        return ",".join(f"{v:.3g}" if isinstance(v, float) else _fmt_setting(v) for v in value)
    if isinstance(value, str) and "/" in value:
        return value.rstrip("/").rsplit("/", 1)[-1]
    return str(value)
