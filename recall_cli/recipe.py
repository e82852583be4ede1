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
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import yaml

from .errors import RecipeError
from .names import ANNEAL_FUNCTION_NAMES, OPTIMIZER_NAMES, PROBE_NAMES
from .recipe_checks import check_recipe
from .recipe_file import read_yaml, shown


@dataclass(frozen=True)
class LoraConfig:
    """Low-rank adapters through peft (Hu et al. 2021): r = 0 fine-tunes every weight."""

    r: int = 0  # the adapters' rank; 0 = full fine-tuning
    alpha: float = 16.0  # peft's lora_alpha: the update is scaled by alpha / r
    dropout: float = 0.1  # peft's lora_dropout, on the adapters' input
    # Names (or name suffixes) of the modules that get adapters; null = every linear layer of the encoder.
    target_modules: list[str] | None = None


@dataclass(frozen=True)
class ModelConfig:
    name_or_path: str  # a hub id or a local folder
    init: Literal["pretrained", "random"] = "pretrained"  # PI or RI
    anchor_dtype: Literal["float32", "bfloat16"] = "float32"  # how RecAdam keeps theta*
    trust_remote_code: bool = False
    # The classification head of a checkpoint that already has one: "auto" starts a fresh head when the
    # checkpoint is a fine-tuned classifier (its task's head is no prior for this task), "keep" loads it
    # and anchors it like the encoder, "new" always starts a fresh one. A head whose label count differs
    # from the task's is replaced whatever this says.
    head: Literal["auto", "keep", "new"] = "auto"
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass(frozen=True)
class TaskConfig:
    name: str  # a GLUE task or "custom"
    data_dir: str | None = None  # a local GLUE task folder; null = the Hugging Face hub
    max_seq_length: int = 128
    train_file: str | None = None  # custom tasks: .csv, .tsv or .jsonl
    dev_file: str | None = None
    text_fields: list[str] | None = None
    label_field: str | None = None
    num_labels: int | None = None  # 1 = regression
    label_names: list[str] | None = None
    max_train_examples: int | None = None  # first N training rows (smoke tests, quick starts)
    max_eval_examples: int | None = None
    # Length buckets: each batch is padded up to a multiple of this (capped at max_seq_length), so a
    # compiled step sees a handful of shapes; null pads each batch to its longest row (dynamic padding).
    pad_to_multiple_of: int | None = None
    # A fraction of the training rows held out (stratified, by a fixed seed: every run of a task holds out
    # the same rows) to evaluate on during training and choose best/ by; the dev split is then scored
    # once at the end, as a test set. 0 = off: evaluations and best/ use the dev split.
    holdout: float = 0.0


@dataclass(frozen=True)
class OptimizerConfig:
    name: Literal[OPTIMIZER_NAMES] = "recadam"  # a name in names.OPTIMIZERS
    lr: float = 2e-5
    weight_decay: float = 0.0
    eps: float = 1e-8  # the released script's adam_epsilon
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    anneal_fun: Literal[ANNEAL_FUNCTION_NAMES] = "sigmoid"
    anneal_k: float = 0.5
    anneal_t0: float = 250  # optimizer steps (>= 1), or a fraction of the run's steps when < 1
    anneal_w: float = 1.0
    pretrain_cof: float = 5000.0  # gamma
    # The least weight of the recall penalty, as a fraction of gamma, in [0, anneal_w]: the paper's
    # weight (anneal_w - lambda) vanishes after t0; a floor keeps a constant pull for the whole run.
    recall_floor: float = 0.0


@dataclass(frozen=True)
class TrainConfig:
    batch_size: int = 32
    eval_batch_size: int | None = None  # default: 2 x batch_size
    grad_accum: int = 1
    max_steps: int | None = None  # optimizer steps; or
    epochs: float | None = None
    warmup_steps: int = 0
    max_grad_norm: float = 1.0  # 0 disables clipping
    precision: Literal["auto", "fp32", "fp16", "bf16"] = "auto"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # The step under torch.compile: auto compiles where it is measured faster (docs/speed.md), off
    # never, on always (exit 2 with the reason when it cannot).
    compile: Literal["auto", "off", "on"] = "auto"
    # Experiment trackers that get every metrics.jsonl record (names.TRACKERS; the Trainer's names).
    report_to: list[str] = field(default_factory=list)
    seed: int = 42
    log_every: int = 10
    eval_every: int = 0  # 0: evaluate at the end only
    save_every: int = 0  # 0: save at each evaluation and at the end
    keep_last: int = 0  # step-numbered checkpoints kept besides last/ and best/
    # What a finished run keeps: "final" (the default): what every later command reads, best/, last/'s
    # weights, the records, summary and cards; last/'s optimizer and RNG state, theta*
    # (anchor.safetensors) and checkpoints/ are removed once the run has finished (about 2/3 of a run's
    # disk: theta* and Adam's two moments). "all" keeps everything, so that --resume can extend the
    # finished run (more steps or epochs). A run stopped before its end keeps everything, whatever this
    # says, so that --resume continues it; a run written before this key existed resumes as "all".
    save: Literal["all", "final"] = "final"
    # LP-FT (Kumar et al. 2022): the first N steps train the head alone, the encoder frozen; the run
    # keeps that point as lp/. 0 = off.
    linear_probe_steps: int = 0
    # The head phase's peak learning rate (a probe on a frozen encoder takes a larger step than fine-tuning
    # does; the schedule's warm-up and decay apply to it alike); null: optimizer.lr.
    linear_probe_lr: float | None = None


@dataclass(frozen=True)
class ProbeConfig:
    """What the model still knows, measured at step 0 and at every evaluation (recall_cli/probes/).
    Sized so that the quick start spends under 5% of its time here (benchmarks/probe_cost.py)."""

    enabled: bool = True
    probes: list[str] = field(default_factory=lambda: list(PROBE_NAMES))
    texts_file: str | None = None  # null: data/probe/texts.txt (general-domain sentences)
    pairs_file: str | None = None  # null: data/glue/STS-B/dev.tsv
    num_texts: int | None = 128  # first N probe sentences; null = all
    num_pairs: int | None = 256  # a fixed seeded sample of N pairs; null = all
    max_length: int = 64  # tokens per probe sentence
    batch_size: int = 64
    every: int = 0  # 0: at each evaluation; N: every N steps (and the last)


@dataclass(frozen=True)
class KeepConfig:
    """The embedding anchor (methods/keep.py): a term that keeps the pooled sentence embedding of each
    training example near theta*'s (LwF, Li & Hoiem 2016; LDIFS, arXiv 2308.13320)."""

    embeddings: float = 0.0  # the term's weight; 0 = off
    pooling: Literal["mean", "cls"] = "mean"  # mean: what the STS probe reads
    distance: Literal["cosine", "mse", "gram"] = "cosine"
    # constant, or recall: the weight follows RecAdam's pull weight, max(anneal_w - lambda(t), recall_floor)
    schedule: Literal["constant", "recall"] = "constant"


@dataclass(frozen=True)
class Recipe:
    model: ModelConfig
    task: TaskConfig
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    # Runs written before probes existed have no probe section: they read as the defaults.
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    # Runs written before the embedding anchor existed have no keep section: it is off.
    keep: KeepConfig = field(default_factory=KeepConfig)
    output_dir: str = "runs/run"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def anneal_t0_steps(self, total_steps: int) -> float:
        """anneal_t0 in optimizer steps: a value below 1 is a fraction of the run."""
        t0 = self.optimizer.anneal_t0
        return round(t0 * total_steps) if 0 < t0 < 1 else t0


SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "task": TaskConfig,
    "optimizer": OptimizerConfig,
    "train": TrainConfig,
    "probe": ProbeConfig,
    "keep": KeepConfig,
}
REQUIRED_SECTIONS = ("model", "task")


def all_keys() -> list[str]:
    """Every valid dotted key, for did-you-mean suggestions and documentation."""
    def of(prefix: str, cls: type) -> list[str]:
        hints = typing.get_type_hints(cls)
        return [key for f in fields(cls)
                for key in (of(f"{prefix}.{f.name}", hints[f.name]) if dataclasses.is_dataclass(hints[f.name])
                            else [f"{prefix}.{f.name}"])]

    return ["output_dir"] + [key for section, cls in SECTIONS.items() for key in of(section, cls)]


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested recipe dict as {dotted key: value}: the names overrides, grids and reports use."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


# ---- loading -------------------------------------------------------------------------------------

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


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> list[str]:
    """Set each dotted key in ``raw`` (in place); returns problems with the overrides themselves."""
    problems = []
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
               ("probe", "pairs_file"))


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


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    raw = read_yaml(path)
    problems = apply_overrides(raw, overrides or [])
    _beside_recipe(raw, Path(path))
    recipe, more = build_recipe(raw)
    problems += more
    if problems:
        raise RecipeError(str(path), problems)
    assert recipe is not None
    return recipe


def build_recipe(raw: dict[str, Any], check_files: bool = True) -> tuple[Recipe | None, list[str]]:
    problems: list[str] = []
    sections: dict[str, Any] = {}
    for key in raw:
        if key not in SECTIONS and key != "output_dir":
            problems.append(_unknown(key, list(SECTIONS) + ["output_dir"]))
    for name, cls in SECTIONS.items():
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
    recipe = Recipe(output_dir=output_dir, **sections)
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
        return _convert(value, inner[0])
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


def recipe_from_dict(raw: dict[str, Any], source: str, check_files: bool = True) -> Recipe:
    recipe, problems = build_recipe(raw, check_files=check_files)
    if problems:
        raise RecipeError(source, problems)
    assert recipe is not None
    return recipe


def dump_recipe(recipe: Recipe, path: Path) -> None:
    path.write_text(yaml.safe_dump(recipe.to_dict(), sort_keys=False), encoding="utf-8")
