"""The recipe's schema: one frozen dataclass per section, their defaults and what each key means
(docs/gen_recipe_keys.py writes docs/recipe-keys.md from these classes and their comments)."""

from __future__ import annotations

import copy
import dataclasses
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import yaml

from ..names import (ANNEAL_FUNCTION_NAMES, DEFAULT_PROBES, OPTIMIZER_NAMES, PROBE_BATCH_SIZE, PROBE_MAX_LENGTH,
                     PROBE_NUM_PAIRS, PROBE_NUM_TEXTS)


# Keys that config.yaml records only when they are set away from their default: added after runs were
# written, they leave a run that does not use them with the config.yaml it wrote before they existed
# (byte for byte), and a config.yaml without them reads as the default, as every older one does (report.runs
# fills them in, a sweep compares them as the default: when_set_defaults). to_dict() and flat() hold every key.
WHEN_SET = {"when_set": True}  # a field's metadata


@dataclass(frozen=True)
class LoraConfig:
    """Low-rank adapters through peft (Hu et al. 2021): r = 0 fine-tunes every weight."""

    r: int = 0  # the adapters' rank; 0 = full fine-tuning
    alpha: float = 16.0  # peft's lora_alpha: the update is scaled by alpha / r
    dropout: float = 0.1  # peft's lora_dropout, on the adapters' input
    # Names (or name suffixes) of the modules that get adapters; null = every linear layer of the encoder.
    target_modules: list[str] | None = None
    # How the adapters start (peft's init_lora_weights): default (A random, B = 0: theta* untouched); pissa
    # (PiSSA: the r largest singular directions of each weight move into the adapters, the rest stays frozen);
    # corda (CorDA's knowledge-preserved mode: the r directions that general sentences use least, from their
    # covariance; model.lora.corda_samples).
    init: Literal["default", "pissa", "corda"] = field(default="default", metadata=WHEN_SET)
    # CorDA's covariance: the first N sentences of the shipped STS-B train split that the probes do not score
    # (data/glue/STS-B/train.tsv, sentences the probe files hold left out), one at a time; cached in the run
    # directory and read again on --resume.
    corda_samples: int = field(default=256, metadata=WHEN_SET)
    # DoRA: a magnitude per output row trains beside the low-rank direction update (peft's use_dora).
    use_dora: bool = field(default=False, metadata=WHEN_SET)
    # rsLoRA: the update is scaled by alpha / sqrt(r) instead of alpha / r (peft's use_rslora).
    use_rslora: bool = field(default=False, metadata=WHEN_SET)


@dataclass(frozen=True)
class OsfConfig:
    """Orthogonal subspace fine-tuning through peft (OSFConfig): each targeted weight's top singular
    directions stay frozen, its smallest ``rank`` train, their gradients kept orthogonal to the frozen ones."""

    # Singular directions that train per targeted weight (peft's effective_rank, the frozen ones, is
    # min(out, in) - rank); 0 = off.
    rank: int = field(default=0, metadata=WHEN_SET)
    # Names (or name suffixes) of the modules OSF decomposes; null = every linear layer of the encoder.
    target_modules: list[str] | None = field(default=None, metadata=WHEN_SET)


@dataclass(frozen=True)
class ModelConfig:
    name_or_path: str  # a hub id or a local folder
    gguf_file: str | None = field(default=None, metadata=WHEN_SET)  # a GGUF file in the name_or_path folder (needs gguf)
    init: Literal["pretrained", "random"] = "pretrained"  # PI or RI
    anchor_dtype: Literal["float32", "bfloat16"] = "float32"  # how RecAdam keeps theta*
    # The dtype the weights are loaded and kept in: fp32 (the default: fp32 weights, autocast computes in
    # train.precision), bf16 or fp16 (half the bytes a weight; the optimizer keeps fp32 master weights and fp32
    # Adam moments of those that train: docs/scaling.md), or auto (the checkpoint's own: config.json's dtype,
    # a GGUF file's tensor type; fp32 where it names none). fp16 needs CUDA.
    dtype: Literal["auto", "fp32", "bf16", "fp16"] = field(default="fp32", metadata=WHEN_SET)
    trust_remote_code: bool = False
    # The classification head of a checkpoint that already has one: "auto" starts a fresh head when the
    # checkpoint is a fine-tuned classifier (its task's head is no prior for this task), "keep" loads it
    # and anchors it like the encoder, "new" always starts a fresh one. A head whose label count differs
    # from the task's is replaced whatever this says.
    head: Literal["auto", "keep", "new"] = "auto"
    # Where theta* comes from (what RecAdam, the embedding anchor and EWC keep, and what the probes compare
    # with): null, the weights the run starts from (name_or_path); or another checkpoint of the same model,
    # e.g. the original pretrained model in a later stage of `recall continual` (continual.theta_star=original).
    # A head it lacks, or one the run starts afresh, has no anchor.
    theta_star: str | None = field(default=None, metadata=WHEN_SET)
    lora: LoraConfig = field(default_factory=LoraConfig)
    osf: OsfConfig = field(default_factory=OsfConfig, metadata=WHEN_SET)


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
    # Score at most N of the held-out rows at each evaluation: a stratified sample, fixed as the holdout is
    # (every run of the task scores the same rows), so that the chooser stays honest and cheap; the rest
    # stay out of training. null = all of them (SST-2 at 0.2: 13,470 rows an evaluation).
    max_holdout_examples: int | None = field(default=None, metadata=WHEN_SET)


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
    # Experiment trackers that get every metrics.jsonl record (plugins/trackers.py; the Trainer's names).
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
    # Activation checkpointing (transformers' gradient_checkpointing_enable, non-reentrant): each layer's
    # activations are recomputed in the backward pass instead of kept: one more forward pass a step (docs/scaling.md).
    gradient_checkpointing: bool = field(default=False, metadata=WHEN_SET)
    # How N processes under torchrun share the model: ddp (a full replica each) or fsdp (FSDP2's fully_shard per
    # transformer block and the root: weights, gradients, Adam's moments and theta* each split over the ranks).
    distributed: Literal["ddp", "fsdp"] = field(default="ddp", metadata=WHEN_SET)
    # LP-FT (Kumar et al. 2022): the first N steps train the head alone, the encoder frozen; the run
    # keeps that point as lp/. 0 = off.
    linear_probe_steps: int = 0
    # The head phase's peak learning rate (a probe on a frozen encoder takes a larger step than fine-tuning
    # does; the schedule's warm-up and decay apply to it alike); null: optimizer.lr.
    linear_probe_lr: float | None = None


@dataclass(frozen=True)
class ProbeConfig:
    """What the model still knows, measured at step 0 and at every evaluation (recall_cli/probes/).
    Every STS pair by default; the quick start samples 256 of them to spend under 5% of its time here
    (benchmarks/probe_cost.py: 4.3 % with 256 pairs, 14.6 % with all 1,500, on a loaded 2-core CPU)."""

    enabled: bool = True
    probes: list[str] = field(default_factory=lambda: list(DEFAULT_PROBES))  # the encoder's; a causal LM's: lm, kl
    texts_file: str | None = None  # null: data/probe/texts.txt (general-domain sentences)
    pairs_file: str | None = None  # null: data/glue/STS-B/dev.tsv
    # The choice probe's items, JSONL of {"prompt", "choices", "answer"}; null: data/probe/lm_choice.jsonl
    choices_file: str | None = field(default=None, metadata=WHEN_SET)
    num_texts: int | None = PROBE_NUM_TEXTS  # first N probe sentences; null = all
    # A fixed seeded sample of N pairs; null = all 1,500, the default: a sample of 256 moves the kept skill by points,
    # enough to cross a bar (a probe on all of them costs ~4x: benchmarks/probe_cost.py).
    num_pairs: int | None = PROBE_NUM_PAIRS
    max_length: int = PROBE_MAX_LENGTH  # tokens per probe sentence
    batch_size: int = PROBE_BATCH_SIZE
    every: int = 0  # 0: at each evaluation; N: every N steps (and the last)


@dataclass(frozen=True)
class KeepConfig:
    """The embedding anchor (methods/keep/): a term that keeps the pooled sentence embedding of each
    training example, or of general sentences, near theta*'s (LwF, Li & Hoiem 2016; LDIFS, arXiv 2308.13320)."""

    embeddings: float = 0.0  # the term's weight; 0 = off
    pooling: Literal["mean", "cls"] = "mean"  # mean: what the STS probe reads
    distance: Literal["cosine", "mse", "gram"] = "cosine"
    # constant, or recall: the weight follows RecAdam's pull weight, max(anneal_w - lambda(t), recall_floor)
    schedule: Literal["constant", "recall"] = "constant"
    # Where the anchor's inputs come from: "task" (each training batch's own rows), "pool" (recall's general
    # pool, data/pool/general.txt: 5,442 headlines and image captions from STS-B's train split,
    # data/pool/SOURCES.md), or a file of sentences: .txt (one a line), or .csv, .tsv or .jsonl (keep.text_column).
    # Never a text the probes score: a set that overlaps the probe files is refused.
    texts: str = field(default="task", metadata=WHEN_SET)
    # The column of a .csv, .tsv or .jsonl keep.texts file; null: its only column, or else its "text" column.
    text_column: str | None = field(default=None, metadata=WHEN_SET)
    # Anchor texts per micro-batch and process (a pool or a file), drawn in a fixed seeded order that
    # --resume continues; 0 or null: train.batch_size.
    batch_size: int | None = field(default=0, metadata=WHEN_SET)
    # Whose pooled features are kept: "last" (the encoder's output), or a list of hidden states (0: the
    # embeddings' output, i: layer i's), each kept by the distance and the distances averaged (LDIFS).
    layers: Literal["last"] | list[int] = field(default="last", metadata=WHEN_SET)
    # The LM anchor (methods/lmkeep/): the weight of KL(theta* || theta) of a causal LM's next-token distributions
    # on general text (the pool, or the keep.texts file), beside or instead of the embedding anchor; 0 = off.
    next_token: float = field(default=0.0, metadata=WHEN_SET)


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
    # The sections of method plugins (plugins/methods.py), by section name: written in a recipe and in
    # config.yaml as top-level mappings beside keep, absent from both when no plugin has one.
    plugins: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, *, as_written: bool = False) -> dict[str, Any]:
        """Every key by section; ``as_written``: as config.yaml records it and --dry-run prints it, less the
        keys added after runs were made (WHEN_SET) while they are at their defaults."""
        section = _written if as_written else dataclasses.asdict
        out = {f.name: section(getattr(self, f.name)) if dataclasses.is_dataclass(getattr(self, f.name))
               else getattr(self, f.name) for f in fields(self) if f.name not in ("plugins", "output_dir")}
        # A plugin section at its defaults (the method off) is not written: a plain run's config.yaml stays
        # what earlier versions wrote, whichever methods are installed; read back, it is the defaults again.
        out.update({name: section(plugin) for name, plugin in self.plugins.items() if plugin != type(plugin)()})
        out["output_dir"] = self.output_dir
        return out

    def flat(self) -> dict[str, Any]:
        """Every key as a dotted name -> its value: what methods, sweeps and reports read."""
        return flatten(self.to_dict())

    def get(self, key: str) -> Any:
        """One dotted key's value ("keep.embeddings"); KeyError for a key the recipe does not have."""
        return self.flat()[key]

    def flat_section(self, name: str) -> dict[str, Any]:
        """One section's keys without its prefix: {"weight": 1.0, ...}."""
        prefix = name + "."
        return {k[len(prefix):]: v for k, v in self.flat().items() if k.startswith(prefix)}

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

    return ["output_dir"] + [key for section, cls in all_sections().items() for key in of(section, cls)]


def all_sections() -> dict[str, type]:
    """recall's sections, then the method plugins' (plugins/methods.py), name -> dataclass."""
    from ..plugins.methods import sections

    return {**SECTIONS, **sections()}


def when_set_defaults() -> dict[str, Any]:
    """Every WHEN_SET key (a key of a WHEN_SET section too), dotted, at its default: what a config.yaml
    without it ran at, so that a run made before the key existed, or with it at its default, reads alike."""
    def default(f: Any) -> Any:
        return f.default if f.default is not dataclasses.MISSING else f.default_factory()

    def walk(prefix: str, cls: type, inherited: bool) -> dict[str, Any]:
        hints, out = typing.get_type_hints(cls), {}
        for f in fields(cls):
            marked = inherited or bool(f.metadata.get("when_set"))
            if dataclasses.is_dataclass(hints[f.name]):
                out.update(walk(f"{prefix}{f.name}.", hints[f.name], marked))
            elif marked:
                out[f"{prefix}{f.name}"] = default(f)
        return out

    return {key: value for section, cls in all_sections().items()
            for key, value in walk(f"{section}.", cls, False).items()}


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested recipe dict as {dotted key: value}: the names overrides, grids and reports use."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _written(section: Any) -> dict[str, Any]:
    """One section as config.yaml records it: dataclasses.asdict, less the WHEN_SET keys at their default."""
    out = {}
    for f in fields(section):
        value = getattr(section, f.name)
        if f.metadata.get("when_set"):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            if value == default:
                continue
        out[f.name] = _written(value) if dataclasses.is_dataclass(value) else copy.deepcopy(value)
    return out


def dump_recipe(recipe: Recipe, path: Path) -> None:
    path.write_text(yaml.safe_dump(recipe.to_dict(as_written=True), sort_keys=False), encoding="utf-8")
