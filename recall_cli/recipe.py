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
from .methods import check_methods
from .names import ANNEAL_FUNCTION_NAMES, GLUE_TASK_NAMES, OPTIMIZER_NAMES, OPTIMIZERS, PROBE_NAMES, TRACKERS


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
    # What a finished run keeps: "all" (everything, so that --resume can extend it and merges find
    # theta* in the run), or "final": best/, last/'s weights, the records, summary and cards; last/'s
    # optimizer and RNG state, theta* (anchor.safetensors) and checkpoints/ are removed once the run has
    # finished (about 2/3 of a run's disk: theta* and Adam's two moments). A run stopped before its end
    # keeps everything, whatever this says, so that --resume continues it.
    save: Literal["all", "final"] = "all"
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


# A recipe is a few dozen values; YAML aliases can make a few lines stand for billions of them (an
# "alias bomb"), which no check or message should walk or print.
MAX_VALUES = 10_000


def _shown(value: Any, limit: int = 120) -> str:
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


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise RecipeError(str(path), [f"recipe file not found: {path} (check the path)"])
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
        raise RecipeError(str(path), [f"key {_shown(keys[0])} is not a name: recipe keys are text "
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


def parse_override(text: str) -> tuple[str, Any]:
    """'optimizer.anneal_k=0.1' -> ('optimizer.anneal_k', 0.1); the value is a YAML scalar."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"override {_shown(text)} is not KEY=VALUE (e.g. optimizer.anneal_k=0.1)")
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
        problems.append(f"output_dir: expected a path (string), got {_shown(output_dir)}")

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
        return None, f"expected one of {', '.join(map(str, args))}, got {_shown(value)}"
    if origin is list:
        if isinstance(value, str) and args[0] is str:
            value = [] if value == "none" else [value]  # report_to: tensorboard, as the Trainer accepts
        if not isinstance(value, list):
            return None, f"expected a list, got {_shown(value)}"
        items = []
        for item in value:
            converted, error = _convert(item, args[0])
            if error:
                return None, f"list item {_shown(item)}: {error}"
            items.append(converted)
        return items, None
    if hint is bool:
        return (value, None) if isinstance(value, bool) else (None, f"expected true or false, got {_shown(value)}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value, None
        if isinstance(value, float) and value.is_integer():
            return int(value), None
        return None, f"expected an integer, got {_shown(value)}"
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
            return None, f"expected a number, got {_shown(value)}"
        if not math.isfinite(number):  # .inf / .nan would reach the run as NaN weights or an endless run
            return None, f"expected a finite number, got {_shown(value)}"
        return number, None
    if hint is str:
        return (value, None) if isinstance(value, str) else (None, f"expected a string, got {_shown(value)}")
    raise TypeError(f"unsupported recipe field type {hint}")  # a bug in this module, not user input


# ---- checks across fields ------------------------------------------------------------------------


def check_recipe(recipe: Recipe, check_files: bool = True) -> list[str]:
    problems: list[str] = []
    m, t, o, tr = recipe.model, recipe.task, recipe.optimizer, recipe.train

    def need(condition: bool, message: str) -> None:
        if not condition:
            problems.append(message)

    paths = {"output_dir": recipe.output_dir, "model.name_or_path": m.name_or_path, "task.data_dir": t.data_dir,
             "task.train_file": t.train_file, "task.dev_file": t.dev_file, "probe.texts_file": recipe.probe.texts_file,
             "probe.pairs_file": recipe.probe.pairs_file}
    for key, value in paths.items():  # first: the file checks below cannot even ask about such a path
        need(value is None or "\x00" not in value, f"{key}: a path cannot hold a NUL byte (\\0): remove it")
    if problems:
        return problems

    problems += _check_task(t, check_files)
    problems += _check_optimizer(o)

    need(tr.batch_size >= 1, f"train.batch_size: must be >= 1, got {tr.batch_size}")
    need(tr.eval_batch_size is None or tr.eval_batch_size >= 1,
         f"train.eval_batch_size: must be >= 1, got {tr.eval_batch_size}")
    need(tr.grad_accum >= 1, f"train.grad_accum: must be >= 1, got {tr.grad_accum}")
    need((tr.max_steps is None) != (tr.epochs is None),
         "train.max_steps / train.epochs: set exactly one of them")
    need(tr.max_steps is None or tr.max_steps >= 1, f"train.max_steps: must be >= 1, got {tr.max_steps}")
    need(tr.epochs is None or tr.epochs > 0, f"train.epochs: must be > 0, got {tr.epochs}")
    for key in ("warmup_steps", "log_every", "eval_every", "save_every", "keep_last"):
        need(getattr(tr, key) >= 0, f"train.{key}: must be >= 0, got {getattr(tr, key)}")
    need(tr.log_every >= 1, f"train.log_every: must be >= 1, got {tr.log_every}")
    need(0 <= t.holdout < 0.5, f"task.holdout: a fraction of the training rows in (0, 0.5), or 0 for none, got {t.holdout}")
    need(t.pad_to_multiple_of is None or 1 <= t.pad_to_multiple_of <= t.max_seq_length,
         f"task.pad_to_multiple_of: must be in [1, max_seq_length = {t.max_seq_length}] or null (dynamic padding), "
         f"got {t.pad_to_multiple_of}")
    unknown = [name for name in tr.report_to if name not in TRACKERS]
    need(not unknown, f"train.report_to: unknown tracker {', '.join(map(repr, unknown))} "
         f"(choose from {', '.join(TRACKERS)}, or none)")
    need(tr.max_grad_norm >= 0, f"train.max_grad_norm: must be >= 0 (0 disables clipping), got {tr.max_grad_norm}")
    # numpy and torch seed with 32 bits: a larger seed fails deep inside them, or wraps silently.
    need(0 <= tr.seed < 2**32, f"train.seed: must be in [0, 2^32), got {tr.seed}")

    problems += _check_probe(recipe.probe, check_files)
    problems += check_methods(recipe)
    return problems


def _collector() -> tuple[list[str], Any]:
    problems: list[str] = []

    def need(condition: bool, message: str) -> None:
        if not condition:
            problems.append(message)

    return problems, need


def _check_task(t: TaskConfig, check_files: bool) -> list[str]:
    problems, need = _collector()
    need(t.name in GLUE_TASK_NAMES or t.name == "custom",
         f"task.name: unknown task '{t.name}' (GLUE: {', '.join(GLUE_TASK_NAMES)}; or 'custom' with train_file/dev_file)")
    need(t.max_seq_length >= 8, f"task.max_seq_length: must be >= 8, got {t.max_seq_length}")
    for key in ("max_train_examples", "max_eval_examples"):
        value = getattr(t, key)
        need(value is None or value >= 1, f"task.{key}: must be >= 1 or null, got {value}")
    if t.name == "custom":
        for key in ("train_file", "dev_file", "text_fields", "label_field", "num_labels"):
            need(getattr(t, key) is not None, f"task.{key}: required for a custom task")
        if t.text_fields is not None:
            need(1 <= len(t.text_fields) <= 2, f"task.text_fields: one or two columns, got {len(t.text_fields)}")
        if t.num_labels is not None:
            need(t.num_labels >= 1, f"task.num_labels: must be >= 1 (1 = regression), got {t.num_labels}")
            if t.label_names is not None:
                need(len(t.label_names) == t.num_labels,
                     f"task.label_names: {len(t.label_names)} names for num_labels={t.num_labels}")
        if check_files:
            for key in ("train_file", "dev_file"):
                path = getattr(t, key)
                if path is not None:
                    need(Path(path).is_file(), f"task.{key}: file not found: {path}")
    if t.data_dir is not None and check_files:
        need(Path(t.data_dir).is_dir(),
             f"task.data_dir: folder not found: {t.data_dir} (a GLUE task folder with train.tsv and dev.tsv, "
             "or null to load from the hub)")
    return problems


def _check_optimizer(o: OptimizerConfig) -> list[str]:
    problems, need = _collector()
    need(o.lr > 0, f"optimizer.lr: must be > 0, got {o.lr}")
    need(o.weight_decay >= 0, f"optimizer.weight_decay: must be >= 0, got {o.weight_decay}")
    need(o.eps >= 0, f"optimizer.eps: must be >= 0, got {o.eps}")
    need(len(o.betas) == 2 and all(0 <= b < 1 for b in o.betas),
         f"optimizer.betas: two numbers in [0, 1), got {o.betas}")
    need(o.anneal_k > 0, f"optimizer.anneal_k: must be > 0, got {o.anneal_k}")
    need(0 <= o.anneal_w <= 1, f"optimizer.anneal_w: must be in [0, 1], got {o.anneal_w}")
    need(o.pretrain_cof > 0, f"optimizer.pretrain_cof: must be > 0, got {o.pretrain_cof}")
    need(0 <= o.recall_floor <= o.anneal_w,
         f"optimizer.recall_floor: must be in [0, anneal_w = {o.anneal_w:g}] (a fraction of pretrain_cof; "
         f"0 is the paper's schedule), got {o.recall_floor}")
    t0 = o.anneal_t0
    need((0 < t0 < 1) or (t0 >= 1 and float(t0).is_integer()),
         f"optimizer.anneal_t0: a step count (integer >= 1) or a fraction of the run in (0, 1), got {t0}")
    if OPTIMIZERS[o.name].anchored:
        # Each step with lambda near 0 multiplies theta - theta* by (1 - lr * gamma): above 1 it overshoots.
        need(o.lr * o.pretrain_cof < 1,
             f"optimizer.lr x optimizer.pretrain_cof = {o.lr * o.pretrain_cof:g} must be < 1, or the recall "
             "penalty overshoots theta* (lower lr or pretrain_cof)")
    return problems


def _check_probe(p: ProbeConfig, check_files: bool) -> list[str]:
    problems = [f"probe.probes: unknown probe '{name}' (choose from {', '.join(PROBE_NAMES)})"
                for name in p.probes if name not in PROBE_NAMES]
    for key in ("num_texts", "num_pairs"):
        value = getattr(p, key)
        if value is not None and value < 4:
            problems.append(f"probe.{key}: must be >= 4 or null (all), got {value}")
    if p.max_length < 8:
        problems.append(f"probe.max_length: must be >= 8, got {p.max_length}")
    if p.batch_size < 1:
        problems.append(f"probe.batch_size: must be >= 1, got {p.batch_size}")
    if p.every < 0:
        problems.append(f"probe.every: must be >= 0 (0: at each evaluation), got {p.every}")
    if check_files and p.enabled:
        for key in ("texts_file", "pairs_file"):
            path = getattr(p, key)
            if path is not None and not Path(path).is_file():
                problems.append(f"probe.{key}: file not found: {path}")
    return problems


def recipe_from_dict(raw: dict[str, Any], source: str, check_files: bool = True) -> Recipe:
    recipe, problems = build_recipe(raw, check_files=check_files)
    if problems:
        raise RecipeError(source, problems)
    assert recipe is not None
    return recipe


def dump_recipe(recipe: Recipe, path: Path) -> None:
    path.write_text(yaml.safe_dump(recipe.to_dict(), sort_keys=False), encoding="utf-8")
