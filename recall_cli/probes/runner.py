"""The one probe runner: the training loop, `recall probe` and a study all measure a model with it.

A ``Prober`` holds the probe inputs (tokenized once) and θ*'s side of every measure (computed once,
at construction); ``measure(model)`` runs θ and returns one flat record, one field per measure:

    cka, cka_debiased            last-layer linear CKA (biased and debiased estimators) with θ*
    cka_layers, cka_debiased_layers   the same per layer: embedding output, then every block
    drift                        mean over texts of 1 - cos(e_θ, e_θ*), pooled last layer
    sts, sts_ref, sts_retained   STS Spearman of θ, of θ*, and their ratio
    sts_pairs                    how many STS pairs they rest on
    mlm_loss, mlm_loss_ref, mlm_ratio   θ's encoder under θ*'s MLM head, θ*'s own loss, ratio
    lm_loss, lm_ppl, lm_kept, kl, kl_kept   a causal LM's, on general prose (probes/lm.py)
    choice_acc, choice_acc_ref, choice_chance, choice_kept, choice_items   a causal LM's multiple-choice
                                 skill by log-likelihood (probes/choice.py)
    probe_seconds                wall time of the measurement

Representations are each sentence's hidden states mean-pooled over its non-padding tokens, in
float32 on the model's device (no autocast: a measurement, not training), compared in float64.
"""

from __future__ import annotations

import copy
import math
import time
import weakref
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from . import measures
from ..errors import ProbeError
from ..plugins.probes import probes as registered
from .choice import ChoiceBatches, ChoiceSet, load_choices
from .lm import has_lm_head
from .sets import DEFAULT_LM_TEXTS, PairSet, load_pairs, load_texts

MASK_RATE = 0.15
MASK_SEED = 0


@dataclass
class ProbeInputs:
    texts: list[str]
    pairs: PairSet | None
    notes: list[str] = field(default_factory=list)
    lm_texts: list[str] = field(default_factory=list)  # a causal LM's probes: general prose
    choices: ChoiceSet | None = None  # the choice probe's items


def load_inputs(probes: list[str], texts_file: str | None, pairs_file: str | None, num_texts: int | None,
                num_pairs: int | None, choices_file: str | None = None) -> ProbeInputs:
    known = registered()
    unknown = [p for p in probes if p not in known]
    if unknown:
        raise ProbeError(f"unknown probe {unknown[0]!r}: choose from {', '.join(known)}")
    check_size("--num-texts", num_texts, 4, optional=True)
    check_size("--num-pairs", num_pairs, 3, optional=True)
    reads = {known[p].reads for p in probes}
    texts = load_texts(texts_file, num_texts) if "texts" in reads else []
    pairs = load_pairs(pairs_file, num_pairs) if "pairs" in reads else None
    lm_texts = load_texts(texts_file or DEFAULT_LM_TEXTS, num_texts) if "lm_texts" in reads else []
    choices = load_choices(choices_file) if "choices" in reads else None
    notes = []
    if pairs is not None and float(pairs.gold.min()) == float(pairs.gold.max()):  # the file's do differ (load_pairs)
        notes.append(f"sts: the {len(pairs)} pairs sampled from {pairs.source} all score {pairs.gold[0]:g}: "
                     "no Spearman correlation (sample more pairs)")
    return ProbeInputs(texts, pairs, notes, lm_texts, choices)


def input_names(probes: list[str], texts_file: str | None, pairs_file: str | None, choices_file: str | None) -> str:
    """What ``probes`` read, in words: "the default texts and the default STS pairs", a user's file by its path."""
    named = {"texts": texts_file or "the default texts", "pairs": pairs_file or "the default STS pairs",
             "lm_texts": texts_file or "the default LM prose", "choices": choices_file or "the default choice items"}
    known = registered()
    reads = [named[known[p].reads] for p in probes if p in known]
    parts = list(dict.fromkeys(reads))
    return " and ".join([", ".join(parts[:-1]), parts[-1]] if len(parts) > 1 else parts) or "nothing"


def check_size(flag: str, value: int | None, least: int, optional: bool = False) -> None:
    """A count a user gave (the command line checks its own; this is for every other caller)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ProbeError(f"{flag} {value}: give a whole number >= {least}" + (" (or none: all)" if optional else ""))


def encoder_of(model: torch.nn.Module) -> torch.nn.Module:
    """The transformer under any task head (a classifier's, an MLM's); a bare AutoModel is its own."""
    return getattr(model, "base_model", model)


class _Batches:
    """Sentences tokenized once, batched by length (little padding), with the way back to file order."""

    def __init__(self, tokenizer, texts: list[str], max_length: int, batch_size: int):
        encoded = tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.n = len(texts)
        self.batches = []
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            width = max(len(encoded[i]) for i in idx)
            ids = torch.full((len(idx), width), pad, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for row, i in enumerate(idx):
                ids[row, : len(encoded[i])] = torch.tensor(encoded[i])
                mask[row, : len(encoded[i])] = 1
            self.batches.append((torch.tensor(idx), ids, mask))


@torch.no_grad()
def pooled_layers(encoder: torch.nn.Module, batches: _Batches, device: torch.device, last_only: bool = False) -> list[Tensor]:
    """Mean-pooled hidden states of every layer (embedding output first), each (n, H) on the CPU."""
    out: list[Tensor] | None = None
    for idx, ids, mask in batches.batches:
        ids, mask = ids.to(device), mask.to(device)
        result = encoder(input_ids=ids, attention_mask=mask, output_hidden_states=not last_only)
        if last_only:
            states = (result.last_hidden_state,)
        else:
            states = getattr(result, "hidden_states", None)
            if not states:
                raise ProbeError(f"{type(encoder).__name__} returns no hidden states: the cka probe cannot run "
                                 "on it (use --probes sts,drift)")
        if out is None:
            out = [torch.empty((batches.n, h.shape[-1]), dtype=torch.float32) for h in states]
        for layer, hidden in enumerate(states):
            out[layer][idx] = measures.mean_pool(hidden.float(), mask).cpu()
    return out or []


@contextmanager
def evaluating(model: torch.nn.Module):
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


@contextmanager
def weights_loaded(model: torch.nn.Module, weights: dict[str, Tensor]):
    """Temporarily give ``model`` the named weights (θ* from a run's anchor.safetensors), then put its own back."""
    params = dict(model.named_parameters())
    own = {name: params[name].detach().clone() for name in weights if name in params}
    with torch.no_grad():
        for name in own:
            params[name].copy_(weights[name])
    try:
        yield model
    finally:
        with torch.no_grad():
            for name, value in own.items():
                params[name].copy_(value)


def load_mlm_head(name_or_path: str, trust_remote_code: bool = False) -> tuple[torch.nn.Module | None, str | None]:
    """θ*'s masked-LM head, or (None, note) when the checkpoint holds none (a sentence-embedding
    model such as all-MiniLM-L6-v2, or an architecture without an MLM form)."""
    from transformers import AutoModelForMaskedLM

    from ..model import quiet_transformers, resolve_name_or_path

    quiet_transformers()
    try:
        mlm, info = AutoModelForMaskedLM.from_pretrained(resolve_name_or_path(name_or_path), output_loading_info=True,
                                                         dtype=torch.float32, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        return None, f"mlm: skipped, {name_or_path} has no masked-LM form ({' '.join(str(exc).split())[:120]})"
    prefix = mlm.base_model_prefix
    missing = [k for k in info.get("missing_keys", ()) if not k.startswith(prefix + ".")]
    if missing:
        return None, f"mlm: skipped, {name_or_path} has no pretrained masked-LM head ({len(missing)} head weights missing)"
    heads = [module for name, module in mlm.named_children() if name != prefix]
    if len(heads) != 1:
        return None, f"mlm: skipped, {type(mlm).__name__} splits its head over {len(heads)} modules (not supported)"
    return heads[0], None


class Prober:
    """Probe inputs and θ*'s side, computed once; ``measure(model)`` for each θ. Every probe is an entry of the
    registry (plugins/probes.py), asked in its order to prepare, to measure a model's side and to write its
    fields; the runner batches the inputs they read and names none of them.

    ``source``: θ*'s name_or_path and trust_remote_code, for a probe that loads more of θ* than the model
    (the mlm probe's masked-LM head, unless ``mlm_head`` is given).

    θ*'s side comes from recall's cache when this model and setting were probed before (probes/cache.py;
    ``ref_cached`` says so, ``ref_seconds`` what computing it took); ``cache=False`` neither reads nor writes it.
    ``progress(done, total)`` is told of each of θ*'s forward passes while its side is computed (``total`` an
    estimate); ``note`` gets the cache's one-line notes (default: ``notes``)."""

    def __init__(self, probes: list[str], inputs: ProbeInputs, tokenizer, theta_star: torch.nn.Module,
                 device: torch.device, *, max_length: int = 64, batch_size: int = 64,
                 mlm_head: torch.nn.Module | None = None, mlm_note: str | None = None,
                 source: tuple[str, bool] | None = None, cache: bool = True,
                 progress: Callable[[int, int], None] | None = None, note: Callable[[str], None] | None = None):
        known = registered()
        self.probes = [p for p in known if p in probes]
        self.notes = list(inputs.notes)
        self.device = device
        self.tokenizer, self.max_length, self.batch_size = tokenizer, max_length, batch_size
        self.mlm_head, self.mlm_note, self.source = mlm_head, mlm_note, source
        self.texts = _Batches(tokenizer, inputs.texts, max_length, batch_size) if inputs.texts else None
        self.pairs = inputs.pairs
        # the sentences the probes read: the encoder's texts, else a causal LM's prose
        self.n_texts, self.n_pairs = len(inputs.texts) or len(inputs.lm_texts), len(inputs.pairs or ())
        if self.pairs is not None:
            # Each distinct sentence is encoded once; pairs index into them.
            unique = list(dict.fromkeys(self.pairs.first + self.pairs.second))
            where = {s: i for i, s in enumerate(unique)}
            self._pair_index = (torch.tensor([where[s] for s in self.pairs.first]),
                                torch.tensor([where[s] for s in self.pairs.second]))
            self.sentences = _Batches(tokenizer, unique, max_length, batch_size)
        self._prepare([p for p in self.probes if not known[p].causal], known)
        causal = [p for p in self.probes if known[p].causal]
        if causal and not has_lm_head(theta_star):
            self.notes.append(f"{', '.join(causal)}: skipped, {type(theta_star).__name__} is not a causal LM")
            self.probes = [p for p in self.probes if p not in causal]
        reads = {known[p].reads for p in self.probes}
        if "lm_texts" in reads:
            self.lm_texts = _Batches(tokenizer, inputs.lm_texts, max_length, batch_size)
        self.n_choices = len(inputs.choices) if "choices" in reads else 0
        if self.n_choices:
            self.choices = ChoiceBatches(tokenizer, inputs.choices, max_length, batch_size)
        self._prepare([p for p in self.probes if known[p].causal], known)
        self.entries = {p: known[p] for p in self.probes}
        # θ*'s weights as the probes read them: the cache's key, and how measure() knows θ* when it meets it
        cacheable = bool(self.entries) and all(e.cacheable for e in self.entries.values())
        self.ref_digest = self._digest(theta_star) if cacheable else None
        self._reference_check: tuple[Any, tuple[int, ...], bool] | None = None  # is_reference's last answer
        self.ref, self.ref_seconds, self.ref_cached = self._reference_side(
            theta_star, use_cache=cache, progress=progress, note=note or self.notes.append)

    def _reference_side(self, theta_star: torch.nn.Module, *, use_cache: bool, progress, note) -> tuple[dict[str, Any], float, bool]:
        from . import cache

        key = self._cache_key(theta_star) if use_cache and self.ref_digest is not None else None
        kept = cache.load(key, note) if key else None
        if kept is not None:
            return kept[0], kept[1], True
        start = time.perf_counter()
        with _counting_forwards(encoder_of(theta_star), self._forwards_estimate(), progress):
            ref = self._features(theta_star)
        seconds = time.perf_counter() - start
        if key:
            cache.save(key, ref, seconds, note)
        return ref, seconds, False

    def _probed(self, model: torch.nn.Module) -> list[tuple[str, Tensor]]:
        """What of ``model`` the probes' forward passes read: the whole causal LM, else its encoder; and θ*'s
        masked-LM head, which every model is measured under."""
        causal = any(e.causal for e in self.entries.values())
        state = list((model if causal else encoder_of(model)).state_dict().items())
        if self.mlm_head is not None:
            state += [(f"mlm_head.{k}", v) for k, v in self.mlm_head.state_dict().items()]
        return state

    def _digest(self, model: torch.nn.Module) -> str:
        from .cache import digest_tensors

        return digest_tensors(self._probed(model))

    def _cache_key(self, theta_star: torch.nn.Module) -> str:
        import transformers

        from .cache import digest_tensors, entry_key

        probed = theta_star if any(e.causal for e in self.entries.values()) else encoder_of(theta_star)
        config = getattr(theta_star, "config", None)
        config = config.to_dict() if hasattr(config, "to_dict") else {}
        # where it was loaded from, and what only a task head reads, leave θ*'s side as it is
        for key in ("_name_or_path", "id2label", "label2id", "num_labels", "problem_type", "finetuning_task",
                    "transformers_version"):
            config.pop(key, None)
        inputs = [getattr(self, name, None) for name in ("texts", "sentences", "_pair_index", "lm_texts", "choices",
                                                          "masked")]
        if self.pairs is not None:
            inputs.append(self.pairs.gold)
        return entry_key({"probes": self.probes, "weights": self.ref_digest, "model": type(probed).__name__,
                          "config": config, "inputs": digest_tensors((str(i), t) for i, t in enumerate(_tensors_in(inputs))),
                          "device": self.device.type, "torch": torch.__version__,
                          "transformers": transformers.__version__})

    def _forwards_estimate(self) -> int:
        """How many forward passes θ*'s side makes, about (the batches of each input the probes read, and the
        masked texts): for a progress bar, never for a result."""
        reads = {e.reads for e in self.entries.values()}
        held = {"texts": "texts", "pairs": "sentences", "lm_texts": "lm_texts", "choices": "choices"}
        held = [getattr(self, held[r], None) for r in reads if r in held]
        total = sum(len(h.batches) for h in held if h is not None)
        return total + len(getattr(self, "masked", ()))

    def _prepare(self, names: list[str], known: dict[str, Any]) -> None:
        for name in names:
            note = known[name].prepare(self)
            if note:
                self.notes.append(note)
                self.probes.remove(name)

    # ---- one model's side ----

    def shared(self, key: str, compute) -> Any:
        """What several probes read of one model (the pooled layers), computed once per model."""
        if key not in self._shared:
            self._shared[key] = compute()
        return self._shared[key]

    @torch.no_grad()
    def _features(self, model: torch.nn.Module) -> dict[str, Any]:
        self._shared: dict[str, Any] = {}
        try:
            return {name: self.entries[name].side(self, model) for name in self.probes}
        finally:
            self._shared = {}

    def is_reference(self, model: torch.nn.Module) -> bool:
        """Whether ``model`` holds, bit for bit, the weights θ*'s side was computed from (a run's step 0 under
        PI): its side is then θ*'s, and need not be computed again. The answer is kept for this very model
        while no probed tensor changed in place (their version counters): the start line's estimate and
        step 0's measurement ask of the same weights, and hashing them is seconds at 7B."""
        if self.ref_digest is None:
            return False
        versions = tuple(t._version for _, t in self._probed(model))
        kept = self._reference_check
        if kept is None or kept[0]() is not model or kept[1] != versions:
            kept = (weakref.ref(model), versions, self._digest(model) == self.ref_digest)
            self._reference_check = kept
        return kept[2]

    def measure(self, model: torch.nn.Module, *, may_be_reference: bool = False) -> dict[str, Any]:
        """One record of ``model`` against θ*. ``may_be_reference``: the caller's model may be θ* itself (a run's
        step 0, `recall probe` of θ*): its weights are compared with θ*'s and, when equal, θ*'s side is its own."""
        start = time.perf_counter()
        with torch.random.fork_rng(devices=[]):  # a measurement leaves the training's random stream alone
            mine = self.ref if may_be_reference and self.is_reference(model) else self._features(model)
        record: dict[str, Any] = {}
        notes: list[str] = []
        for name in self.probes:
            entry_record = self.entries[name].record(self, mine[name], self.ref[name])
            # an entry's notes are about this θ alone (lm and kl share theirs): the callers add them to the prober's
            notes += [n for n in entry_record.pop("notes", []) if n not in notes]
            record.update(entry_record)
        if notes:
            record["notes"] = notes
        record["probe_seconds"] = round(time.perf_counter() - start, 4)
        return record


def _tensors_in(value: Any):
    """Every tensor in nested lists and tuples and in _Batches / ChoiceBatches, in order."""
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors_in(item)
    elif hasattr(value, "batches"):
        yield from _tensors_in(value.batches)


@contextmanager
def _counting_forwards(module: torch.nn.Module, total: int, progress):
    """``progress(done, total)`` after each forward pass of ``module`` (a hook, removed on the way out), and once
    at the end with done == total."""
    if progress is None:
        yield
        return
    done = [0]

    def count(*_):
        done[0] += 1
        progress(done[0], max(total, done[0]))

    handle = module.register_forward_hook(count)
    try:
        progress(0, total)
        yield
    finally:
        handle.remove()
    progress(done[0], done[0])


def _ratio(a: float, b: float) -> float:
    return a / b if math.isfinite(a) and math.isfinite(b) and b != 0 else math.nan


def _masked_batches(texts: _Batches, tokenizer) -> list[tuple[Tensor, Tensor, Tensor]]:
    """The probe texts with a fixed, seeded 15% of each sentence's ordinary tokens replaced by the mask
    token (at least one); targets hold the original ids there and -100 elsewhere."""
    special = set(tokenizer.all_special_ids)
    generator = torch.Generator().manual_seed(MASK_SEED)
    out = []
    for _, ids, mask in texts.batches:
        ids = ids.clone()
        targets = torch.full_like(ids, -100)
        for row in range(ids.shape[0]):
            candidates = [j for j in range(ids.shape[1]) if mask[row, j] and int(ids[row, j]) not in special]
            if not candidates:
                continue
            k = max(1, round(MASK_RATE * len(candidates)))
            picked = [candidates[j] for j in torch.randperm(len(candidates), generator=generator)[:k].tolist()]
            targets[row, picked] = ids[row, picked]
            ids[row, picked] = tokenizer.mask_token_id
        out.append((ids, mask, targets))
    return out


def prober_for_run(recipe, model: torch.nn.Module, theta_star: dict[str, Tensor], tokenizer,
                   device: torch.device, training_texts: list[str] | None = None, *,
                   progress: Callable[[int, int], None] | None = None, note: Callable[[str], None] | None = None) -> Prober:
    """The training loop's prober: θ* is ``model`` with the run's θ* loaded for the moment of
    computing θ*'s side (so it works under RI, and on resume from the saved θ*), or θ*'s side from the cache.
    ``training_texts``: the task's training sentences as the run loaded them (read again when not given);
    ``progress`` and ``note``: Prober's."""
    cfg = recipe.probe
    inputs = load_inputs(list(cfg.probes), cfg.texts_file, cfg.pairs_file, cfg.num_texts, cfg.num_pairs,
                         cfg.choices_file)
    if training_texts is None:
        training_texts = task_sentences(recipe.task)
    if training_texts:
        from .sets import overlap

        for name, texts in (("probe texts", inputs.texts), ("LM probe texts", inputs.lm_texts), ("STS pairs", (inputs.pairs.first + inputs.pairs.second) if inputs.pairs else [])):
            shared = overlap(texts, training_texts) if texts else 0
            if shared:
                inputs.notes.append(f"{shared} of the {len(texts)} {name} sentences also occur in the task's training "
                                    "data: the probe partly measures the task itself (set probe.texts_file / probe.pairs_file)")
    # Building the MLM model initialises weights (a head the checkpoint lacks): keep the run's random
    # stream untouched, so that a run trains the same with probes on or off.
    with torch.random.fork_rng(devices=[]), weights_loaded(model, theta_star):
        return Prober(list(cfg.probes), inputs, tokenizer, model, device, max_length=cfg.max_length,
                      batch_size=cfg.batch_size, source=(recipe.model.name_or_path, recipe.model.trust_remote_code),
                      progress=progress, note=note)


def task_sentences(task_cfg) -> list[str]:
    """Every sentence of the target task's training rows, to warn where the probe reads them too."""
    from ..tasks import load_split

    try:
        examples = load_split(task_cfg, "train", task_cfg.max_train_examples)
    except Exception:  # noqa: BLE001 - only a warning depends on it; training reports data problems itself
        return []
    return [text for row in examples.texts for text in row]


def record_at(prober: Prober, model: torch.nn.Module, step: int) -> dict[str, Any]:
    """A metrics.jsonl line: {"step": s, "split": "probe", one field per measure}."""
    record = prober.measure(model, may_be_reference=step == 0)  # step 0 under PI is θ*: its side is cached
    record.pop("notes", None)  # metrics.jsonl holds numbers; a run whose weights went NaN stopped before its probe
    return {"step": step, "split": "probe", **record}
