"""recall as a library: RecAdam for a model you built, its distance to θ*, and the probes on a model in memory.

The same pieces `recall finetune` and `recall probe` run (model.py's name matching of θ*, model.py's
parameter groups, optim.RecAdam, probes.runner.Prober), behind three calls for a training loop you
already have. The Hugging Face Trainer's logging callback is in hf_trainer.py. README: "RecAdam in
your own training loop".
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch

from . import names
from .recipe.schema import ProbeConfig
from .optim import RecAdam, distance_to_theta_star

__all__ = ["anchor_distance", "embedding_anchor", "freeze_encoder", "probe", "recadam_for", "unfreeze_encoder"]

DEFAULT_PROBES = names.DEFAULT_PROBES
_IN_RUN = ProbeConfig()  # probe()'s defaults are a run's probe section's (tests/test_library.py ties them)


def recadam_for(
    model: torch.nn.Module,
    pretrained: str | os.PathLike,
    *,
    lr: float = 2e-5,
    pretrain_cof: float = 5000.0,
    anneal_fun: str = "sigmoid",
    anneal_k: float = 0.5,
    anneal_t0: float = 250,
    anneal_w: float = 1.0,
    recall_floor: float = 0.0,
    weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    mode: str = "decoupled",
    head: str = "auto",
    anchor_dtype: torch.dtype | None = None,
    foreach: bool | None = None,
    fused: bool | None = None,
    trust_remote_code: bool = False,
) -> RecAdam:
    """RecAdam for ``model`` (any ``transformers`` PreTrainedModel), pulled toward the pretrained
    weights θ* of ``pretrained`` (a hub id, a local folder or ``pkg:MODULE``).

    θ* is read from the checkpoint on disk by parameter name: ``type(model).from_pretrained`` loads it
    with ``model``'s config, and its loading report says which parameters it holds (the same matching
    as `recall finetune`). Parameters it lacks or holds with another shape (a new classification
    head, resized embeddings) get plain Adam. ``head`` is recall's ``model.head``: "auto" leaves a
    fine-tuned classifier checkpoint's head unanchored (another task's head is no prior), "keep"
    anchors it, "new" never anchors a head. Four groups: (anchored | not) x (weight decay | none for
    biases and norms). ``anneal_t0`` is in optimizer steps; the other arguments are RecAdam's
    (the defaults are the recipe's). Build it after ``model.to(device)`` (θ* is put on each
    parameter's device).
    """
    from .model import (
        _load,
        theta_star_by_name,
        fresh_parameters,
        head_is_new,
        head_parameter_names,
        parameter_groups,
        quiet_transformers,
    )
    from .recipe import ModelConfig, OptimizerConfig

    loader = getattr(type(model), "from_pretrained", None)
    if loader is None or not hasattr(model, "config"):
        raise TypeError(f"recadam_for needs a transformers PreTrainedModel, not {type(model).__name__} "
                        "(unwrap torch.compile or DDP first: pass the module they wrap)")
    if mode not in ("decoupled", "coupled"):
        raise ValueError(f"mode {mode!r}: choose 'decoupled' (RecAdam) or 'coupled'")
    if head not in ("auto", "keep", "new"):
        raise ValueError(f"head {head!r}: choose 'auto', 'keep' or 'new'")
    quiet_transformers()
    theta_star_model, info = _load("model", loader, str(pretrained), config=model.config, output_loading_info=True,
                                  ignore_mismatched_sizes=True, dtype=torch.float32, trust_remote_code=trust_remote_code)
    fresh = fresh_parameters(info)
    if head_is_new(ModelConfig(name_or_path=str(pretrained), head=head), theta_star_model.config):
        fresh |= head_parameter_names(theta_star_model)
    theta_star = theta_star_by_name(theta_star_model, fresh, copy=False)  # RecAdam copies θ* onto each parameter's device
    own = dict(model.named_parameters())
    theta_star = {name: a for name, a in theta_star.items() if name in own and own[name].shape == a.shape}
    if not theta_star:
        raise ValueError(f"no parameter of {type(model).__name__} has a pretrained counterpart in {pretrained}: "
                         "is it the checkpoint this model was built from?")
    anchored = sum(a.numel() for a in theta_star.values())
    total = sum(p.numel() for p in model.parameters())
    if anchored < total / 2:  # another width or architecture: a few shapes (a bias) match by chance
        raise ValueError(f"only {anchored:,} of {type(model).__name__}'s {total:,} weights have a counterpart of the "
                         f"same shape in {pretrained}: is it the checkpoint this model was built from (the same "
                         "width and depth)?")
    name = "adam_coupled" if mode == "coupled" else "recadam"
    groups = parameter_groups(model, theta_star, OptimizerConfig(name=name, weight_decay=weight_decay))
    optimizer = RecAdam(groups, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        anneal_fun=anneal_fun, anneal_k=anneal_k, anneal_t0=anneal_t0, anneal_w=anneal_w,
                        pretrain_cof=pretrain_cof, recall_floor=recall_floor, mode=mode,
                        anchor_dtype=anchor_dtype, foreach=foreach, fused=fused)
    del theta_star_model, theta_star
    return optimizer


def anchor_distance(optimizer: torch.optim.Optimizer) -> float:
    """‖θ − θ*‖ over the parameters RecAdam pulls toward θ* (the distance `recall finetune` logs).
    Accepts the optimizer as a wrapper (accelerate's) hands it back too."""
    pairs = list(unwrap(optimizer).anchored())
    return distance_to_theta_star(*zip(*pairs)) if pairs else 0.0


def unwrap(optimizer: Any) -> RecAdam:
    """The RecAdam inside accelerate's AcceleratedOptimizer (or any wrapper that keeps it as ``.optimizer``)."""
    seen = optimizer
    while not isinstance(seen, RecAdam) and hasattr(seen, "optimizer"):
        seen = seen.optimizer
    if not isinstance(seen, RecAdam):
        raise TypeError(f"{type(optimizer).__name__} is not RecAdam: build it with recall_cli.recadam_for")
    return seen


@torch.no_grad()
def probe(
    model: torch.nn.Module,
    tokenizer,
    against: str | os.PathLike,
    *,
    probes: Sequence[str] = DEFAULT_PROBES,
    texts: str | os.PathLike | None = None,
    pairs: str | os.PathLike | None = None,
    choices: str | os.PathLike | None = None,
    num_texts: int | None = _IN_RUN.num_texts,
    num_pairs: int | None = _IN_RUN.num_pairs,
    max_length: int = _IN_RUN.max_length,
    batch_size: int = _IN_RUN.batch_size,
    name: str = "model",
    trust_remote_code: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """What ``model`` (in memory: a classifier, an MLM model or a bare encoder) still knows of θ* =
    ``against``, measured as a run's own probe measures it (the recipe's probe section's defaults: the first
    128 probe sentences, every STS pair, 64 tokens), so its numbers sit beside a run's: one record with the
    fields of a row of `recall probe --json`: ``target`` (``name``), ``theta`` (None: in memory),
    ``reference`` (θ*), ``texts``, ``pairs``, ``cka``, ``cka_debiased``, ``cka_layers``,
    ``cka_debiased_layers``, ``drift``, ``sts``, ``sts_ref``, ``sts_retained``, ``mlm_loss``,
    ``mlm_loss_ref``, ``mlm_ratio``, a causal LM's ``lm_*``, ``kl``, ``kl_kept`` and ``choice_*`` (``choices``: its
    items file) (each when its probe ran), ``probe_seconds`` and ``notes``. Runs on the
    model's device; leaves its mode (train/eval) as it was. ``progress``: a line on stderr before (what it
    reads) and after (how long it took): a probe of all 1,500 STS pairs is a minute or more on a CPU.
    """
    from .probes.runner import check_size, load_inputs
    from .probes.targets import theta_star_prober

    started = time.perf_counter()

    check_size("max_length", max_length, 8)
    check_size("batch_size", batch_size, 1)
    probes = list(probes)
    inputs = load_inputs(probes, str(texts) if texts else None, str(pairs) if pairs else None, num_texts, num_pairs,
                         str(choices) if choices else None)
    theta_star = str(against)
    device = next(model.parameters()).device
    prober, ref_model = theta_star_prober(theta_star, probes, inputs, tokenizer, device, max_length=max_length,
                                         batch_size=batch_size, option="max_length=",
                                         trust_remote_code=trust_remote_code)
    mine, theirs = _hidden_size(model), _hidden_size(ref_model)
    del ref_model
    if mine is not None and theirs is not None and mine != theirs:
        raise ValueError(f"probe: the model's hidden size is {mine} and against's ({theta_star}) is {theirs}: a probe "
                         "compares a model with the pretrained model it was fine-tuned from")
    if progress:
        print(f"probe: {name} against {theta_star}: {prober.n_texts} sentences, {prober.n_pairs} STS pairs, "
              f"{max_length} tokens ({', '.join(probes)})", file=sys.stderr, flush=True)
    record = prober.measure(model)
    own = record.pop("notes", [])
    if progress:
        print(f"probe: done in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return {"target": name, "theta": None, "reference": theta_star, "texts": prober.n_texts, "pairs": prober.n_pairs,
            **record, "notes": list(prober.notes) + own}


# ---- methods beside RecAdam (README "Methods in your own training loop") -------------------------


def embedding_anchor(model: torch.nn.Module, pretrained: str | os.PathLike | torch.nn.Module, *, weight: float = 1.0,
                     pooling: str = "mean", distance: str = "cosine", trust_remote_code: bool = False):
    """The embedding anchor as a loss term for your loop: ``anchor(outputs, batch)`` is the distance
    between ``model``'s pooled sentence embeddings (``outputs`` of a forward with
    ``output_hidden_states=True``) and θ*'s on the same batch, ``anchor.weight(step)`` its weight.

    θ* is ``pretrained``: a hub id, a local folder or ``pkg:MODULE`` (its encoder is loaded), or a model
    in memory (copied); it is kept frozen, in eval mode, on ``model``'s device, and runs on each batch
    under no_grad. (`recall finetune` caches θ*'s embeddings instead: it knows every training row.)
    ``recall_cli.loss_step(model, batch, [anchor], step)`` adds it to the task loss as the CLI does."""
    import copy

    from .methods.keep.term import EmbeddingAnchor

    if _hidden_size(model) is None:
        raise TypeError(f"embedding_anchor: model is a {type(model).__name__}, not a transformers model (one with a "
                        "config and hidden states, e.g. AutoModelForSequenceClassification): there is no sentence "
                        "embedding to keep")
    if isinstance(pretrained, torch.nn.Module):
        theta_star = copy.deepcopy(pretrained)
    else:
        from .model import load_encoder

        theta_star = load_encoder(str(pretrained), trust_remote_code)
    device = next(model.parameters()).device
    theta_star = theta_star.to(device).eval()
    for p in theta_star.parameters():
        p.requires_grad_(False)
    return EmbeddingAnchor(weight, pooling=pooling, distance=distance, theta_star=theta_star)


def freeze_encoder(model: torch.nn.Module) -> None:
    """LP-FT's first phase: every parameter but the classification head stops training (no gradient,
    so optimizers skip it: no update, no weight decay). :func:`unfreeze_encoder` starts the second."""
    from .methods.lpft.freeze import encoder_parameters, freeze_encoder as freeze
    from .probes.lm import has_lm_head

    if has_lm_head(model):  # its head is the LM head over every token: "freezing the encoder" freezes the decoder
        raise TypeError(f"freeze_encoder: model is a {type(model).__name__}, a causal LM: it has no task head to train "
                        "alone (LP-FT's first phase is a classifier's); train it whole, or with LoRA")
    trainable = [p for p in model.parameters() if p.requires_grad]
    kept = [p for p in trainable if not any(p is q for q in encoder_parameters(model))]
    if _hidden_size(model) is None or not kept or len(kept) == len(trainable):
        raise TypeError(f"freeze_encoder: model is a {type(model).__name__}, not a classifier with an encoder and a "
                        "head (e.g. AutoModelForSequenceClassification): nothing would be left to train, or nothing "
                        "frozen")
    freeze(model)


def _hidden_size(model: Any) -> int | None:
    """A transformers model's hidden size (its config's), or None for anything else."""
    config = getattr(model, "config", None)
    size = getattr(config, "hidden_size", None) or getattr(config, "d_model", None) or getattr(config, "dim", None)
    return int(size) if isinstance(size, int) else None


def unfreeze_encoder(model: torch.nn.Module) -> None:
    from .methods.lpft.freeze import unfreeze_encoder as unfreeze

    unfreeze(model)
