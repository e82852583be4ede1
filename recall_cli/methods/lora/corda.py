"""CorDA's start (Yang et al. 2024, arXiv 2406.05223), knowledge-preserved mode, through peft.

CorDA decomposes each adapted weight W as the product W C with the covariance C of the layer's inputs
on sentences that stand for what to keep; in knowledge-preserved mode ("kpm") the adapters start in the
r directions that these inputs use least, and the frozen residual keeps the ones they use most.

Which sentences: the first ``model.lora.corda_samples`` sentences of the shipped STS-B train split
(data/glue/STS-B/train.tsv, sentence1 and sentence2 in row order, each once) that no probe scores:
every sentence of the probe texts file and of the probe pairs file (the recipe's, else the shipped
ones: probe/texts.txt and STS-B dev, which repeats 38 of STS-B train's first 294) is left out, so that
the kept-skill numbers are not measured on the inputs the start was fitted to.

What peft does and what recall does: peft's ``preprocess_corda`` turns covariances into the
decomposition (the damped inverse, the SVD, the crop to r) and ``get_peft_model`` starts the adapters
from it. peft's own covariance hook expects batch-first 3-D inputs (``input[0].squeeze(0).t()``), which
a pooler's 2-D input breaks, so recall accumulates the covariances itself with the same arithmetic
(each call's inputs flattened to rows, divided by their maximum, X^T X summed and averaged over calls,
one sentence per call) and hands them to peft as its covariance file.

The decomposition is cached in the run directory (peft's cache format, ``corda-<key>.pt``, written at the
first save) and read again on --resume: the key is a hash of what it depends on (the rank, the adapted
layers and their weights, the sentences, the length), so a cache from other settings is never read.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...errors import PreflightError

CACHE_PREFIX = "corda-"


def source_file() -> Path:
    from ...probes.sets import DATA

    return DATA / "glue" / "STS-B" / "train.tsv"


def calibration_texts(recipe: Any) -> tuple[list[str], int]:
    """(the first model.lora.corda_samples sentences of STS-B train that no probe scores, how many of
    those before the last taken were left out for being scored)."""
    from ...probes.sets import load_pairs, load_texts

    n = recipe.model.lora.corda_samples
    scored = set(load_texts(recipe.probe.texts_file))
    pairs = load_pairs(recipe.probe.pairs_file)
    scored.update(" ".join(s.split()) for s in [*pairs.first, *pairs.second])
    pool = load_pairs(source_file())
    seen: set[str] = set()
    texts: list[str] = []
    left_out = 0
    for sentence in (s for pair in zip(pool.first, pool.second) for s in pair):
        sentence = " ".join(sentence.split())
        if sentence in seen or len(texts) == n:
            continue
        seen.add(sentence)
        if sentence in scored:
            left_out += 1
        else:
            texts.append(sentence)
    if len(texts) < n:
        raise PreflightError(f"model.lora.corda_samples: {source_file()} holds {len(texts)} sentences that the probes do "
                             f"not score, fewer than {n}: set it to {len(texts)} or fewer")
    return texts, left_out


@dataclass
class CordaStart:
    """One run's CorDA start: the sentences, where the cache lives, and the decomposition until it is written."""

    texts: list[str]
    left_out: int
    cache_path: Path | None = None  # set by prepare()
    # The decomposition (peft's cache format), kept until the first save writes it into the run directory:
    # also when it was read from there (--overwrite moves the old directory aside before that save).
    eigens: dict[str, torch.Tensor] | None = None
    read: bool = False  # from the run directory's cache

    def note(self) -> str:
        how = "read from" if self.read else "cached at the first save in"
        return (f"CorDA (knowledge-preserved) from the covariance of {len(self.texts)} STS-B train sentences "
                f"({self.left_out} left out: the probes score them); {how} {self.cache_path}")

    def prepare(self, model: torch.nn.Module, config: Any, run_dir: Path, tokenizer: Any, max_length: int) -> None:
        """peft's preprocess_corda on ``model``: from the run directory's cache when it holds this
        decomposition, else from the covariances of the sentences (kept to be cached at the first save)."""
        try:
            from peft.tuners.lora.corda import preprocess_corda, target_modules
            from peft.tuners.tuners_utils import _maybe_include_all_linear_layers
        except ImportError as exc:  # peft 0.21's corda.py imports attrs, which peft does not declare
            raise PreflightError(f"model.lora.init: corda needs peft's CorDA, which cannot be imported here ({exc}): "
                                 "pip install attrs 'peft>=0.14'") from None
        expanded = _maybe_include_all_linear_layers(copy.deepcopy(config), model)  # CorDA reads the names, not "all-linear"
        targets = dict(target_modules(model, expanded))  # the layers peft's preprocessing reads
        self.cache_path = run_dir / f"{CACHE_PREFIX}{self._key(config, targets, max_length)}.pt"
        self.read = self.cache_path.is_file() and self.cache_path.stat().st_size > 0
        if self.read:
            expanded.corda_config.cache_file = str(self.cache_path)
            preprocess_corda(model, expanded)
        else:
            with tempfile.TemporaryDirectory(prefix="recall-corda-") as tmp:
                expanded.corda_config.covariance_file = os.path.join(tmp, "covariance.pt")
                torch.save(covariances(model, targets, tokenizer, self.texts, max_length), expanded.corda_config.covariance_file)
                preprocess_corda(model, expanded)
        # Copies: peft's corda_init divides S_WC by the scale in place when it makes the adapters.
        # On the CPU: the cache reads back on any device (peft maps it to the model's).
        self.eigens = {f"{name}.eigens.{part}": getattr(m.eigens, part).detach().cpu().clone()
                       for name, m in targets.items() for part in ("S_WC", "U_WC", "V_WC")}

    def _key(self, config: Any, targets: dict[str, torch.nn.Module], max_length: int) -> str:
        digest = hashlib.sha256(json.dumps({"r": config.r, "layers": sorted(targets), "max_length": max_length,
                                            "texts": self.texts}).encode())
        for name in sorted(targets):
            digest.update(targets[name].weight.detach().float().cpu().numpy().tobytes())
        return digest.hexdigest()[:16]

    def write_cache(self) -> None:
        """The decomposition into the run directory, where --resume reads it (once, atomically; then
        the copy in memory is let go)."""
        if self.eigens is None or self.cache_path is None:
            return
        if not self.cache_path.is_file():
            partial = self.cache_path.with_name(self.cache_path.name + ".partial")
            torch.save(self.eigens, partial)
            os.replace(partial, self.cache_path)
        self.eigens = None


@torch.no_grad()
def covariances(model: torch.nn.Module, targets: dict[str, torch.nn.Module], tokenizer: Any, texts: list[str],
                max_length: int) -> dict[str, torch.Tensor]:
    """Per targeted layer, the average over ``texts`` (one forward each, in eval mode) of X^T X, X the
    layer's inputs as rows divided by their maximum: peft's calib_cov_distribution for any input rank."""
    sums: dict[str, torch.Tensor] = {}

    def hook(name: str):
        def accumulate(module, inputs, output) -> None:
            x = inputs[0].detach().reshape(-1, inputs[0].shape[-1]).float()
            x = x / torch.max(x).abs()
            if not bool(torch.isfinite(x).all()):
                raise PreflightError(f"model.lora.init: corda: {name}'s inputs hold NaN/inf on the calibration sentences")
            sums[name] = sums[name] + x.t().matmul(x) if name in sums else x.t().matmul(x)
        return accumulate

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device  # the sentences go where the model is (a GPU run's too)
    handles = [module.register_forward_hook(hook(name)) for name, module in targets.items()]
    try:
        for text in texts:
            batch = tokenizer(text, return_tensors="pt", truncation=True, max_length=max_length)
            model(**{key: value.to(device) for key, value in batch.items()})
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    return {name: total / len(texts) for name, total in sums.items()}
