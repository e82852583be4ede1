"""What a figure calls a setting, and the families of settings that differ only in one strength.

A group label (comparison.group_label) spells the grouping keys as they are, which is what a table
row and `recall tradeoff`'s lines print: `vanilla fine-tuning, merge=linear, with=pretrained,
weights=0.25,0.75`. A figure's legend says what a reader calls the same setting: "WiSE-FT α=0.75".

A family is the settings of one task that differ only in one "strength" key, drawn as a line from the
weakest to the strongest:

    floor  RecAdam's optimizer.recall_floor (RecAdam as published, floor 0, is the weakest point)
    wise   WiSE-FT's α, the fine-tuned model's weight in a linear merge with θ*; the fine-tuned runs
           themselves are α = 1 (a merge with weights 0, 1 is the run), so the line ends at them
    tau    RECALL's temperature τ (record.temperature)
    and a method's own line where its registry entry has one (plugins/methods.py's Family.line_title):
    keep   the embedding anchor's weight (keep.embeddings; the runs without it, weight 0, are the weakest)

Pure functions of the settings: no figure, no file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..plugins.merges import merges
from ..plugins.methods import methods
from ..names import INIT_TITLES, is_vanilla
from .labels import METHOD_NAMES, _fmt_setting, group_label
from .runs import NOT_INSTALLED, label_names

# The families that are not a method's (a method's line comes from its registry entry: family_titles()).
FAMILY_TITLES = {"floor": "RecAdam floor", "wise": "WiSE-FT α", "tau": "RECALL τ"}
# Each family's line in the trade-off figures. Solid, dash-dot, dotted: the dashed line is the one-class score.
FAMILY_STYLES = {"RecAdam floor": "-", "WiSE-FT α": "-.", "RECALL τ": ":"}
# recall merge's defaults (merge/recall.py): a legend names τ and γ only where they are not these, or vary.
RECALL_DEFAULTS = {"record.temperature": 0.05, "record.gamma_rule": "hidden"}
# Keys a name spells in words; any other grouping key is appended as key=value, as group_label does.
# (the methods' switches too: method_keys())
NAMED_KEYS = ("optimizer.name", "model.init", "optimizer.recall_floor", "record.merge", "record.with",
              "record.weights", "record.temperature", "record.gamma_rule", NOT_INSTALLED)
# Legend order: the baseline, the trained methods, the merges with θ*, the merges of several runs.
RANK = {"vanilla": 0, "trained": 1, "wise": 2, "recall": 3, "merge": 4}


def method_keys() -> tuple[str, ...]:
    """The methods' keys a trained setting's name spells: "embedding anchor 1", "LP-FT 100", "LoRA r=8 DoRA"."""
    return (*(key for m in methods() for key in (m.switch, *m.named_keys)), NOT_INSTALLED)


def family_titles() -> dict[str, str]:
    return {**FAMILY_TITLES, **{m.name: m.family.line_title for m in methods() if m.family and m.family.line_title}}


def family_styles() -> dict[str, str]:
    return {**FAMILY_STYLES, **{m.family.line_title: m.family.line_style for m in methods()
                                if m.family and m.family.line_title}}


@dataclass(frozen=True)
class Described:
    """One setting as a figure shows it."""

    name: str  # the legend's words: "RecAdam floor 0.01", "WiSE-FT α=0.75", "RECALL with θ*"
    rank: tuple  # legend order (sorts families together, weakest first)
    # (family id, strength): a setting may sit on two lines (a fine-tuned run: its floor family, and
    # α = 1 of the WiSE-FT family made from it)
    families: tuple[tuple[str, float], ...]


def describe(settings: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[Described]:
    """Per setting (its grouping keys, a member run's whole recipe as dotted keys): its name and families.

    Names are made unique: two settings that read alike get their group label in brackets. The rank
    keeps the given order within a kind, a family's members together and weakest first."""
    varying = {k for k in {k for shown, _ in settings for k in shown}
               if len({json.dumps(shown.get(k), sort_keys=True, default=str) for shown, _ in settings
                       if shown.get(k) is not None}) > 1}
    parts = [_describe(shown, full, varying) for shown, full in settings]
    labels: dict[str, set[str]] = {}  # a name -> the group labels it stands for (one setting: one label)
    for (name, *_), (shown, _) in zip(parts, settings):
        labels.setdefault(name, set()).add(group_label(shown))
    first: dict[str, int] = {}
    out = []
    for i, ((name, kind, strength, families, primary), (shown, _)) in enumerate(zip(parts, settings)):
        position = first.setdefault(primary or group_label(shown), i)
        out.append(Described(f"{name} ({group_label(shown)})" if len(labels[name]) > 1 else name,
                             (RANK[kind], position, strength), tuple(families)))
    return out


# One hue per family, the same in every figure (Okabe-Ito, colour-blind safe): a family's settings are
# shades of it, lightest the weakest. Methods combined with RecAdam take the method's hue (its registry
# entry's Family: hues()).
HUES = {"vanilla": "#000000", "recadam": "#0072B2", "wise": "#CC79A7", "recall": "#009E73", "merge": "#999933",
        "not_installed": "#BBBBBB"}  # a run whose method is not installed: never drawn as vanilla


def hues() -> dict[str, str]:
    out = dict(HUES)
    for m in methods():
        if m.family:
            out[m.family.hue_id] = m.family.hue
            if m.family.wise_hue:
                out[f"wise_{m.family.hue_id}"] = m.family.wise_hue
    return out


def hue_family(full: dict[str, Any]) -> str:
    """The key of hues() a setting is drawn in, from one member run's whole recipe as dotted keys."""
    on = sorted((m for m in methods() if m.family and m.strength(full)), key=lambda m: m.family.hue_rank)
    merge = full.get("record.merge")
    if merge is not None:
        if wise_alpha(full) is not None:  # after LP-FT: a line of its own beside WiSE-FT after vanilla
            after = next((m for m in methods() if m.family and m.family.wise_hue and m.strength(full)), None)
            return f"wise_{after.family.hue_id}" if after else "wise"
        return "recall" if merge == "recall" and full.get("record.with") == ["pretrained"] else "merge"
    if on:
        return on[0].family.hue_id
    if full.get(NOT_INSTALLED):
        return "not_installed"
    return "vanilla" if is_vanilla(full.get("optimizer.name")) else "recadam"


def shades(hue: str, n: int) -> list[str]:
    """n shades of ``hue`` from light (weakest) to the hue itself (strongest); one setting: the hue."""
    r, g, b = (int(hue[i:i + 2], 16) for i in (1, 3, 5))
    out = []
    for i in range(n):
        t = 0.0 if n == 1 else 0.6 * (1 - i / (n - 1))  # how far toward white (black's shades: toward grey)
        out.append("#" + "".join(f"{round(c + (255 - c) * t):02X}" for c in (r, g, b)))
    return out


def family_colors(items: list[tuple[str, dict[str, Any]]]) -> dict[str, str]:
    """key -> colour for settings given in legend order (weakest first within a family) as (key, the
    whole recipe of one member run): each family's hue, in shades where it holds several settings. Items
    with one key (one setting on several tasks' panels or curves) get one colour."""
    groups: dict[str, list[str]] = {}
    for label, full in items:
        members = groups.setdefault(hue_family(full), [])
        if label not in members:
            members.append(label)
    palette = hues()
    return {label: color for key, labels in groups.items() for label, color in zip(labels, shades(palette[key], len(labels)))}


def wise_alpha(full: dict[str, Any]) -> float | None:
    """The fine-tuned model's weight in a two-model linear merge with θ*, or None for any other record.

    The pretrained input is the one the record was scored against (record.against, else the run's
    model.name_or_path); the other weight is α."""
    weights, models = full.get("record.weights"), full.get("record.models")
    if (full.get("record.merge") != "linear" or full.get("record.with") != ["pretrained"]
            or not isinstance(weights, list) or len(weights) != 2):
        return None
    pretrained = [full.get("record.against"), full.get("model.name_or_path")]
    if isinstance(models, list) and len(models) == 2:
        for i, model in enumerate(models):
            if model in pretrained:
                return float(weights[1 - i])
    return float(weights[-1])  # recall merge's order: θ* first, the fine-tuned run last


def _describe(shown: dict[str, Any], full: dict[str, Any], varying: set[str]):
    """(name, kind, strength, families, the family it is ranked with or None)."""
    merge = full.get("record.merge")
    trained, kind = _trained_name(shown, full)
    named, names = set(NAMED_KEYS) | set(method_keys()), label_names()
    extras = [f"{names.get(k, k)}={_fmt_setting(v)}" for k, v in shown.items()
              if k not in named and v is not None]
    source = {k: v for k, v in shown.items() if not k.startswith("record.")}  # what was trained
    families: list[tuple[str, float]] = []
    primary = None
    if merge is None:
        name, strength = trained, float(full.get("optimizer.recall_floor") or 0.0)
        if kind == "trained" and "optimizer.recall_floor" in shown:
            primary = _family("floor", shown, "optimizer.recall_floor")
            families.append((primary, strength))
        for method in methods():  # a method's strength line (the embedding anchor's weight)
            if method.family and method.family.line_title and method.switch in shown:
                line = _family(method.name, shown, method.switch)
                families.append((line, float(full.get(method.switch) or 0.0)))
                primary = primary or line
        families.append((_family("wise", source), 1.0))  # α = 1 of the WiSE-FT line made from these runs
    else:
        name, kind, strength = _merge_name(shown, full, varying)
        if kind == "wise":
            primary = _family("wise", source)
        elif merge == "recall" and "record.temperature" in shown:
            primary = _family("tau", shown, "record.temperature")
        if primary is not None:
            families.append((primary, strength))
        if not is_vanilla(full.get("optimizer.name")):
            name += f" of {trained or METHOD_NAMES.get(full.get('optimizer.name'), 'RecAdam')}"
    return ", ".join(p for p in (name, *extras) if p), kind, strength, families, primary


def _trained_name(shown: dict[str, Any], full: dict[str, Any]) -> tuple[str, str]:
    """'vanilla fine-tuning', 'RecAdam + PI', 'RecAdam floor 0.01', 'embedding anchor 1', 'RecAdam +
    LoRA r=8'; and its rank's kind."""
    optimizer = full.get("optimizer.name")
    methods = _method_words(full)
    if is_vanilla(optimizer):
        return (" + ".join(methods), "trained") if methods else (METHOD_NAMES[optimizer], "vanilla")
    name = METHOD_NAMES.get(optimizer, str(optimizer))
    if "model.init" in shown:
        name += f" + {INIT_TITLES.get(full.get('model.init'), full.get('model.init'))}"
    floor = full.get("optimizer.recall_floor") or 0.0
    if floor:
        name += f" floor {floor:g}"
    # A sweep of one other key (k, t0) keeps its curves' names as group_label spells them: k=0.1.
    if not {"optimizer.name", "model.init", "optimizer.recall_floor", *method_keys()} & set(shown) \
            and full.get("record.merge") is None:
        return "", "trained"
    return " + ".join([name, *methods]), "trained"


def _method_words(full: dict[str, Any]) -> list[str]:
    """The methods a run turned on, in their registry entries' words with their strength (runs made
    before the methods existed have none of their keys: no words); then each it turned on that is not
    installed now, by name (report/runs.py's NOT_INSTALLED): "method 'logit_kd' (not installed)"."""
    missing = [f"method '{name}' (not installed)" for name in (full.get(NOT_INSTALLED) or "").split(",") if name]
    return [m.named(full) for m in methods() if m.strength(full)] + missing


def _merge_name(shown: dict[str, Any], full: dict[str, Any], varying: set[str]) -> tuple[str, str, float]:
    """The merge part of a scored record's name, its rank's kind and its strength (α, τ or 0)."""
    method = full.get("record.merge")
    others = full.get("record.with") or []
    known = merges()
    title = known[method].title if method in known else str(method)
    tau = full.get("record.temperature")
    details = []
    if method == "recall":
        for key, symbol in (("record.temperature", "τ"), ("record.gamma_rule", "γ")):
            value = full.get(key)
            if value is not None and (key in varying or value != RECALL_DEFAULTS[key]):
                details.append(f"{symbol}={_fmt_setting(value)}")
    weights = full.get("record.weights")
    if others == ["pretrained"]:
        alpha = wise_alpha(full)
        if alpha is not None:
            return f"WiSE-FT α={alpha:.3g}", "wise", alpha
        if method == "linear" and weights:
            details.append(f"weights={_fmt_setting(weights)}")
        head = f"{title} {' '.join(details)}".strip() if method == "recall" else ", ".join([title, *details])
        return f"{head} with θ*", "recall" if method == "recall" else "merge", float(tau or 0.0)
    kinds = sorted(set(others))
    if len(kinds) == 1 and kinds[0] != "pretrained":
        head = f"{'RECALL merge' if method == 'recall' else title} of {len(others) + 1} runs"
    else:
        head = f"{title} with {', '.join(others) or 'nothing'}"
    if method == "linear" and isinstance(weights, list) and len(set(weights)) > 1:
        details.append(f"weights={_fmt_setting(weights)}")
    return ", ".join([head, *details]), "merge", float(tau or 0.0)


def _family(kind: str, shown: dict[str, Any], strength_key: str | None = None) -> str:
    rest = {k: v for k, v in shown.items() if k != strength_key}
    return json.dumps([kind, rest], sort_keys=True, default=str)


def family_title(family: str) -> str:
    return family_titles()[json.loads(family)[0]]
