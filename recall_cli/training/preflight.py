"""Preflight: what can be known about a run before its first step, checked before anything is written.

Reads the model's config.json and tokenizer (never its weights) and the recipe, and returns checks as
data (name, ok/warn/fail, one line) plus a memory estimate, so that `recall finetune --dry-run` renders
them as a table or JSON and `train.finetune` refuses a run that cannot work before it creates a run
directory. Every rank of a distributed run computes the same checks from the same files, so all of them
refuse alike (the memory check only warns, since free memory differs between devices).

Decisions (docs/commands/finetune.md, "Preflight"):
- task.max_seq_length above the model's position limit is refused, with the limit named, not capped:
  the recipe saved with the run must say what the run did.
- The memory estimate is the peak of one process: fp32 master weights, gradients, Adam's two moments,
  theta* (fp32 or bf16 per model.anchor_dtype), activations of the longest training batch, the tokenized
  data, the framework's own footprint, and each method's own (its ``extra_bytes``: the embedding anchor's
  cache, a frozen teacher); compared with MemAvailable on CPU (all processes of --nproc
  share it) or with the GPU's free memory on CUDA (one GPU per process). Above it is a warning with
  settings that would fit, not a refusal: the estimate is an estimate.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from collections.abc import Sequence
from typing import Any, Literal

import torch

from ..errors import PreflightError

from ..model import head_is_new, is_trained_classifier, position_limit
from ..names import OPTIMIZERS
from ..plugins import methods as registry
from ..plugins.methods import Method
from ..recipe import Recipe
from ..tasks import TaskType
from .weights import weight_dtype

Status = Literal["ok", "warn", "fail"]

# Calibrated with benchmarks/memory_estimate.py on CPU (docs/commands/finetune.md, "Preflight"): the peak resident size of
# a process that has imported torch, transformers and recall (scikit-learn and scipy come with the
# metrics), loaded a tokenizer and taken two training steps of a negligible model (autograd and the
# CPU kernels' workspaces and thread pools arrive with the first step): 555 MiB measured, of which
# 458 MiB is the imports and the tokenizer.
CPU_BASELINE_BYTES = 555 * 2**20
# A CUDA context and the caching allocator's slack, on top of the tensors themselves.
CUDA_BASELINE_BYTES = 600 * 2**20
# Tokenizing the training split peaks far above the token lists it keeps (the tokenizer's per-row
# encodings, then Python int lists; freed memory stays in the process): ~290 bytes per training token
# measured on SST-2 (897k tokens, +260 MiB).
BYTES_PER_TOKEN = 300


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    message: str
    # A check the run makes with its own code (the output folder, the probe files) keeps the run's error,
    # so that the dry run fails with the same line and exit code.
    error: Exception | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "message": self.message}


# The memory parts that scale with the parameters (bytes_per_parameter): the rest is activations, data, framework.
MODEL_STATE = ("weights", "master_weights", "gradients", "adam_moments", "theta_star", "autocast_copies")


@dataclass
class MemoryEstimate:
    device: str
    processes_sharing: int  # processes whose estimates add up against `available_bytes`
    parts: dict[str, int]  # bytes of one process
    available_bytes: int | None
    sequence_length: int  # the activation length used: the longest training row, or max_seq_length
    batch_size: int
    parameters: int = 0  # the model's, all of them (bytes_per_parameter divides by it)

    @property
    def total_bytes(self) -> int:
        return sum(self.parts.values())

    @property
    def state_parts(self) -> dict[str, int]:
        """The parts that grow with the parameter count: weights, master copies, gradients, Adam, theta*."""
        return {k: v for k, v in self.parts.items() if k in MODEL_STATE}

    @property
    def bytes_per_parameter(self) -> float:
        """The model state's bytes per parameter of the model (16 for fp32 AdamW; docs/scaling.md's table)."""
        return sum(self.state_parts.values()) / max(1, self.parameters)

    @property
    def needed_bytes(self) -> int:
        return self.total_bytes * self.processes_sharing

    @property
    def fits(self) -> bool | None:
        return None if self.available_bytes is None else self.needed_bytes <= self.available_bytes

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_bytes": self.total_bytes, "needed_bytes": self.needed_bytes, "fits": self.fits,
                "bytes_per_parameter": round(self.bytes_per_parameter, 2)}


@dataclass
class Preflight:
    checks: list[Check] = field(default_factory=list)
    memory: MemoryEstimate | None = None
    # Checks made early but listed after the model's (the output folder: checked before anything loads, so
    # that a run refused for it loads nothing); :meth:`list_later` puts them in place.
    later: list[Check] = field(default_factory=list)

    def add(self, name: str, status: Status, message: str, error: Exception | None = None, *,
            later: bool = False) -> None:
        (self.later if later else self.checks).append(Check(name, status, message, error))

    def as_the_run(self, name: str, check, ok: str, *, later: bool = False) -> None:
        """Run ``check()``, the code the run itself calls: its RecallError is this check's failure."""
        from ..errors import RecallError

        try:
            check()
        except RecallError as exc:
            self.add(name, "fail", str(exc), exc, later=later)
        else:
            self.add(name, "ok", ok, later=later)

    def list_later(self) -> None:
        """The checks made early, listed from here on (after the model's)."""
        self.checks += self.later
        self.later = []

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    def raise_on_failure(self) -> None:
        failures = self.failures
        if failures and failures[0].error is not None:
            raise failures[0].error  # the run's own error: its line and exit code
        if failures:
            more = f" (and {len(failures) - 1} more: see recall finetune --dry-run)" if len(failures) > 1 else ""
            raise PreflightError(f"preflight: {failures[0].message}{more}")

    def to_dict(self) -> dict[str, Any]:
        return {"ok": not self.failures, "checks": [c.to_dict() for c in self.checks],
                "memory": self.memory.to_dict() if self.memory else None}


def gib(n: int | float) -> str:
    return f"{n / 2**30:.2f} GiB"


# ---- the checks ----------------------------------------------------------------------------------


def check_positions(report: Preflight, recipe: Recipe, config) -> None:
    asked = recipe.task.max_seq_length
    limit = position_limit(config)
    if limit is None:
        report.add("max_seq_length", "ok", f"{asked} tokens (the model has no absolute position limit)")
    elif asked > limit:
        report.add("max_seq_length", "fail",
                   f"task.max_seq_length={asked} is more than the model's {limit} positions: "
                   f"set task.max_seq_length={limit} or less")
    else:
        report.add("max_seq_length", "ok", f"{asked} of the model's {limit} positions")
    probe = recipe.probe
    if probe.enabled and limit is not None and probe.max_length > limit:  # the probes tokenize with it too
        report.add("probe.max_length", "fail", f"probe.max_length={probe.max_length} is more than the model's {limit} "
                                               f"positions: set probe.max_length={limit} or less")


def check_tokenizer(report: Preflight, recipe: Recipe, tokenizer, config) -> None:
    if tokenizer.pad_token_id is None:
        report.add("pad token", "fail",
                   f"the tokenizer of {recipe.model.name_or_path} has no padding token (a decoder-style "
                   "checkpoint): give it one and save it (tokenizer.pad_token = tokenizer.eos_token; "
                   "model.config.pad_token_id = tokenizer.pad_token_id; save_pretrained to a folder) and "
                   "point model.name_or_path at that folder")
    else:
        report.add("pad token", "ok", f"{tokenizer.pad_token!r} (id {tokenizer.pad_token_id})")
    vocab = getattr(config, "vocab_size", None)
    size = len(tokenizer)
    if isinstance(vocab, int) and size > vocab:
        report.add("vocabulary", "fail",
                   f"the tokenizer has {size} tokens but the model's embedding has {vocab} rows (ids >= {vocab} "
                   "would index past it): use the tokenizer saved with this model")
    else:
        report.add("vocabulary", "ok", f"{size} tokens, embedding of {vocab} rows")


def check_head(report: Preflight, recipe: Recipe, config, task: TaskType, resume: bool) -> None:
    num_labels = task.num_labels
    if not num_labels:
        report.add("head", "ok", "the checkpoint's own language-model head (anchored like the rest): no new head")
        return
    if resume:
        report.add("head", "ok", f"{num_labels} labels, the run's own head from last/")
        return
    if recipe.model.init == "random":
        report.add("head", "ok", f"new {num_labels}-label head (model.init=random: every weight is new)")
        return
    if not is_trained_classifier(config):
        report.add("head", "ok", f"new {num_labels}-label head (the checkpoint has no classifier head)")
        return
    has = getattr(config, "num_labels", None)
    if has != num_labels:
        status: Status = "warn" if recipe.model.head == "keep" else "ok"
        report.add("head", status, f"the checkpoint's head has {has} labels, the task {num_labels}: "
                                   "replaced by a new head (not anchored)")
    elif head_is_new(recipe.model, config):
        report.add("head", "ok", f"the checkpoint is a fine-tuned classifier: new {num_labels}-label head, "
                                 "not anchored (model.head=keep loads and anchors its head)")
    else:
        report.add("head", "ok", f"the checkpoint's {num_labels}-label head is kept and anchored (model.head=keep)")


# ---- memory --------------------------------------------------------------------------------------


def parameter_counts(config, task: TaskType, recipe: Recipe | None = None, adapter: Any = None) -> tuple[int, int, int]:
    """(all parameters, head parameters, trained parameters) of ``task``'s model, counted on the meta
    device: no memory. Under the recipe's adapter (LoRA) the trained ones are what the adapter says
    (plugins/adapter.py's trained_parameters: for LoRA what peft's get_nb_trainable_parameters counts)."""
    from ..model import auto_model_class, head_parameter_names, quiet_transformers

    quiet_transformers()
    values = {k: v for k, v in config.to_dict().items() if k not in ("id2label", "label2id")}
    config = config.__class__.from_dict({**values, "num_labels": task.num_labels} if task.num_labels else values)
    with torch.device("meta"):
        model = auto_model_class(task).from_config(config)
    head = head_parameter_names(model)
    total = sum(p.numel() for p in model.parameters())
    head_count = sum(p.numel() for n, p in model.named_parameters() if n in head)
    if adapter is None:
        return total, head_count, total
    return total, head_count, adapter.trained_parameters(model, head, recipe)


def activation_bytes(config, batch: int, length: int, precision: str) -> int:
    """Saved-for-backward activations of the encoder, per layer (after Korthikanti et al. 2022, with the
    feed-forward width as a parameter): 8bsh + 2bsI + 2·a·b·s² elements in the compute dtype plus
    2bsh + a·b·s² one-byte dropout masks, and the embeddings' output."""
    h = getattr(config, "hidden_size", None) or getattr(config, "d_model", 768)
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", 12)
    heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head", 12)
    inter = getattr(config, "intermediate_size", None) or 4 * h
    elt = 4 if precision == "fp32" else 2
    bs = batch * length
    per_layer = elt * (8 * bs * h + 2 * bs * inter + 2 * heads * batch * length**2) + 2 * bs * h + heads * batch * length**2
    return layers * per_layer + 3 * elt * bs * h


@dataclass(frozen=True)
class MemoryView:
    """What a method's ``extra_bytes`` may read: the recipe, the model's config and parameter count, the
    training rows, the run's optimizer steps (None: not known yet, count every row) and processes."""

    recipe: Recipe
    config: Any
    parameters: int
    rows: int
    total_steps: int | None
    world_size: int


def method_bytes(on: Sequence[Method], view: MemoryView) -> dict[str, int]:
    """Each method's own memory, by the part name preflight lists it under ("method keep"): none at 0."""
    sizes = {f"method {m.name}": registry.extra_bytes(m, view) for m in on}  # a plugin's held to an int
    return {name: n for name, n in sizes.items() if n}


def estimate_memory(recipe: Recipe, config, task: TaskType, device: torch.device, precision: str,
                    world_size: int, lengths: list[int] | None, on: Sequence[Method],
                    total_steps: int | None = None) -> MemoryEstimate:
    """One process's peak. ``on``: the methods the run turns on (the plan's), its adapter's counts and each
    one's ``extra_bytes``; ``total_steps`` the run's, for what they size by it."""
    tc = recipe.train
    adapter = next((m for m in on if m.is_adapter), None)
    total, head, trained = parameter_counts(config, task, recipe, adapter)
    length = min(max(lengths), recipe.task.max_seq_length) if lengths else recipe.task.max_seq_length
    lora = adapter is not None
    anchor_bytes = 2 if recipe.model.anchor_dtype == "bfloat16" else 4
    # model.dtype: a weight's bytes. 16-bit weights that train keep an fp32 master copy and fp32 moments in
    # RecAdam (their gradients are 16-bit); peft keeps LoRA's adapters in fp32 whatever the base's dtype.
    elt = weight_bytes(recipe)
    # Under an adapter (LoRA) peft adds the adapters and a trainable copy of the head (modules_to_save) beside
    # the frozen model, and theta* is only the probes' fp32 copy in host memory (no pull, no copy on the device).
    theta_star = 0 if lora and device.type != "cpu" else (4 if lora else anchor_bytes) * (total - head)
    parts = {
        "weights": elt * total + (4 * trained if lora else 0),  # autocast casts fp32 weights per op
        **({"master_weights": 4 * trained} if elt < 4 and not lora else {}),
        "gradients": (4 if lora else elt) * trained,  # under LoRA only the adapters and the head have them
        "adam_moments": 8 * trained if OPTIMIZERS[recipe.optimizer.name].adam_moments else 0,
        "theta_star": theta_star,
        "activations": activation_bytes(config, tc.batch_size, length, precision),
    }
    if not task.num_labels:  # a causal LM: a logit per vocabulary entry and position, in fp32, with its gradient
        parts["logits"] = 12 * tc.batch_size * length * (getattr(config, "vocab_size", None) or 0)
    if precision != "fp32" and (elt == 4 or lora):
        # autocast's 16-bit cache of the fp32 weights that train (it keeps no cast of a frozen one, nor of a 16-bit one)
        parts["autocast_copies"] = 2 * trained
    parts.update(method_bytes(on, MemoryView(recipe, config, total, len(lengths or ()), total_steps, world_size)))
    if recipe.train.distributed == "fsdp" and world_size > 1:  # each rank holds 1/N of the model's state
        parts.update({k: -(-v // world_size) for k, v in parts.items() if k in MODEL_STATE})
    if device.type == "cpu":
        # Every process tokenizes and keeps all training rows (ranks slice batches, not the data).
        parts["data"] = BYTES_PER_TOKEN * (sum(lengths) if lengths else 0)
        parts["framework"] = CPU_BASELINE_BYTES
        available, sharing = available_ram(), world_size
    else:
        parts["framework"] = CUDA_BASELINE_BYTES
        available, sharing = available_cuda(device), 1
    return MemoryEstimate(str(device), sharing, parts, available, length, tc.batch_size, total)


def weight_bytes(recipe: Recipe) -> int:
    """Bytes of one weight as model.dtype loads it (auto: the checkpoint's, from its config or GGUF header)."""
    return torch.finfo(weight_dtype(recipe.model)).bits // 8


def available_ram() -> int | None:
    """MemAvailable: what can be allocated now without swapping (Linux); else free physical pages."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def available_cuda(device: torch.device) -> int | None:
    try:
        free, _total = torch.cuda.mem_get_info(device)
    except (RuntimeError, AssertionError):  # AssertionError: a torch built without CUDA
        return None
    return int(free)


def fitting_settings(recipe: Recipe, config, task: TaskType, device: torch.device, precision: str,
                     world_size: int, lengths: list[int] | None, budget: int, on: Sequence[Method],
                     total_steps: int | None = None) -> list[str]:
    """Single changes that bring the estimate under ``budget``: a smaller micro-batch with more
    accumulation (the same optimizer steps), bf16 anchors, a shorter length."""
    import dataclasses

    def fits(**changes) -> bool:
        r = recipe
        for section, values in changes.items():
            r = dataclasses.replace(r, **{section: dataclasses.replace(getattr(r, section), **values)})
        est = estimate_memory(r, config, task, device, precision, world_size, lengths, on, total_steps)
        return est.total_bytes * est.processes_sharing <= budget

    tc, found = recipe.train, []
    factor = 2
    while factor <= tc.batch_size:
        if tc.batch_size % factor == 0 and fits(train={"batch_size": tc.batch_size // factor,
                                                        "grad_accum": tc.grad_accum * factor}):
            found.append(f"train.batch_size={tc.batch_size // factor} train.grad_accum={tc.grad_accum * factor}")
            break
        factor *= 2
    if (recipe.model.anchor_dtype == "float32" and not any(m.is_adapter for m in on)
            and fits(model={"anchor_dtype": "bfloat16"})):
        found.append("model.anchor_dtype=bfloat16")
    length = recipe.task.max_seq_length // 2
    while length >= 16:
        if fits(task={"max_seq_length": length}):
            found.append(f"task.max_seq_length={length}")
            break
        length //= 2
    return found


def check_memory(report: Preflight, recipe: Recipe, config, task: TaskType, device: torch.device,
                 precision: str, world_size: int, lengths: list[int] | None, on: Sequence[Method],
                 total_steps: int | None = None) -> None:
    est = estimate_memory(recipe, config, task, device, precision, world_size, lengths, on, total_steps)
    report.memory = est
    where = "RAM available" if device.type == "cpu" else f"free on {device}"
    share = f"{world_size} processes x {gib(est.total_bytes)}" if est.processes_sharing > 1 else gib(est.total_bytes)
    own = [f"{name} {gib(n)}" for name, n in est.parts.items() if name.startswith("method ")]
    at = (f"batch {est.batch_size} x length {est.sequence_length}, {precision}; {est.bytes_per_parameter:.0f} B a parameter"
          + (f"; {', '.join(own)}" if own else ""))
    if est.available_bytes is None:
        report.add("memory", "ok", f"peak ~{share} ({at}); the device's free memory is unknown")
    elif est.fits:
        report.add("memory", "ok", f"peak ~{share} of {gib(est.available_bytes)} {where} ({at})")
    else:
        fixes = fitting_settings(recipe, config, task, device, precision, world_size, lengths, est.available_bytes,
                                 on, total_steps)
        advice = ("; would fit: " + " | ".join(fixes)) if fixes else "; no single setting fits: use a smaller model or a device with more memory"
        report.add("memory", "warn", f"peak ~{share} is more than the {gib(est.available_bytes)} {where} ({at}){advice}")


def check_scale(report: Preflight, recipe: Recipe, device: torch.device, world_size: int, adapter: Any,
                on: Sequence[Method] = ()) -> None:
    """model.dtype and train.distributed (rows only where a recipe sets them away from fp32 and ddp):
    what this device cannot hold or this launch cannot shard is refused with its fix (DeviceError, exit 2).
    ``adapter``: the run's (the plan's, or None); ``on``: the methods the run turns on (the plan's)."""
    from ..errors import DeviceError

    name = recipe.model.dtype
    if name != "fp32":
        dtype = weight_dtype(recipe.model)
        problem = None
        if dtype == torch.float16 and device.type != "cuda":
            problem = "model.dtype=fp16 needs a CUDA device (on a CPU use model.dtype=bf16 or fp32)"
        elif dtype == torch.float16 and adapter is None:
            problem = ("model.dtype=fp16 cannot fine-tune every weight: fp16 gradients overflow without a loss scale, "
                       "which cannot unscale fp16 gradients (use model.dtype=bf16, or fp32 with train.precision=fp16, "
                       "or LoRA: model.lora.r=8)")
        elif dtype == torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
            problem = f"model.dtype=bf16: {device} has no bfloat16 (use model.dtype=fp32 with train.precision=fp16)"
        if problem:
            report.add("dtype", "fail", problem, DeviceError(problem))
        else:
            shown = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
            report.add("dtype", "ok", f"weights in {shown}" + (" (the checkpoint's)" if name == "auto" else "")
                       + ("; fp32 master weights and Adam moments in the optimizer" if dtype != torch.float32 and adapter is None else ""))
    if recipe.train.distributed == "fsdp":
        check_fsdp(report, recipe, world_size, on)


def check_fsdp(report: Preflight, recipe: Recipe, world_size: int, on: Sequence[Method] = ()) -> None:
    """What FSDP (training/fsdp.py) cannot shard yet is refused by name, with the setting that runs (``on``: the
    methods the run turns on, the plan's)."""
    methods = [f"{m.name} ({m.switch})" for m in on]
    if world_size <= 1:
        problem = ("train.distributed=fsdp shards the model over processes, and this is one: start it under torchrun "
                   "(recall finetune R.yaml --nproc N, or torchrun --nproc_per_node N -m recall_cli finetune R.yaml)")
    elif methods:
        # Their terms and hooks run theta*'s function on the whole model (the embedding and LM anchors' frozen
        # copy, LoRA's wrapping, LP-FT's re-wrap): not sharded yet.
        problem = (f"train.distributed=fsdp: {', '.join(methods)} cannot shard yet (its term or hooks need the whole "
                   "model on one rank): turn it off, or use train.distributed=ddp")
    elif recipe.probe.enabled:
        problem = ("train.distributed=fsdp: the probes run theta* and the model on rank 0 alone, which a sharded "
                   "model cannot: set probe.enabled=false (then `recall probe` the checkpoints), or use train.distributed=ddp")
    elif recipe.train.compile == "on":
        problem = "train.distributed=fsdp: the compiled step is not supported under FSDP yet: set train.compile=off"
    else:
        report.add("distributed", "ok", f"FSDP2 over {world_size} processes: weights, gradients, Adam's moments and "
                                        "theta* sharded; checkpoints consolidated on rank 0")
        return
    report.add("distributed", "fail", problem, PreflightError(problem))


def check_processes(report: Preflight, recipe: Recipe, world_size: int, device: torch.device) -> None:
    if world_size <= 1:
        return
    tc = recipe.train
    global_batch = tc.batch_size * world_size * tc.grad_accum
    memory = "share this machine's RAM" if device.type == "cpu" else "each use one GPU"
    report.add("processes", "ok", f"{world_size} processes ({memory}): batch {tc.batch_size} per process x {world_size} "
                                  f"x grad_accum {tc.grad_accum} = global batch {global_batch}")


def run_checks(recipe: Recipe, tokenizer, config, report: Preflight, *, task: TaskType, device: torch.device,
               precision: str, world_size: int = 1, lengths: list[int] | None = None, resume: bool = False,
               on: Sequence[Method] = (), total_steps: int | None = None) -> Preflight:
    """Every check, in the order a user would fix them, added to ``report``. ``config`` is the model's
    (the recipe's model, or the run's last/ on resume); ``task`` the task's type (the head's labels and
    model class); ``lengths`` the tokenized training rows; ``on`` the methods the run turns on (the plan's)."""
    check_positions(report, recipe, config)
    check_tokenizer(report, recipe, tokenizer, config)
    check_head(report, recipe, config, task, resume)
    check_scale(report, recipe, device, world_size, next((m for m in on if m.is_adapter), None), on)
    check_processes(report, recipe, world_size, device)
    if not report.failures:  # an estimate for a run that cannot start would only add noise
        check_memory(report, recipe, config, task, device, precision, world_size, lengths, on, total_steps)
    return report
