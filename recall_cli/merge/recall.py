"""RECALL (Wang et al., arXiv 2510.20479): per-layer merge weights from how close each model's hidden
representations are to the reference (newest) model's, on a few typical inputs. No training data of
the older tasks is needed.

1. typical samples: a pool of inputs (the reference's task, or a file) embedded by the reference
   model (mean-pooled last hidden state, padding masked, L2-normalised) and clustered with k-means++;
   the input nearest each centroid is kept;
2. representations: r_i^n(x), model i's layer-n hidden states averaged over x's non-padding tokens
   (layer 0 = embedding output);
3. similarity: s_i^n = mean_x exp(-gamma_n ||r_ref^n(x) - r_i^n(x)||^2), so the reference has s = 1;
4. weights: w_i^n = softmax_i(s_i^n / tau).

Only the weights are computed here; fusion is the linear method with these weights per layer.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import MergeError
from ..plugins.merges import register_merge
from . import samples
from .base import Option, finite
from .linear import Linear

if TYPE_CHECKING:
    import numpy as np
    import torch

    from .io import Source

DEFAULT_CLUSTERS = 16
DEFAULT_POOL = 512
DEFAULT_TEMPERATURE = 0.05
DEFAULT_GAMMA = "hidden"


def check_temperature(value: float) -> float:
    temperature = finite("--temperature", value, f"a softmax temperature > 0 (e.g. {DEFAULT_TEMPERATURE:g})")
    if temperature <= 0:
        raise MergeError(f"--temperature {temperature:g}: the softmax temperature must be > 0 (e.g. {DEFAULT_TEMPERATURE:g})")
    return temperature


_DTYPES = ("fp32", "bf16", "fp16")


def check_dtype(value: str) -> str:
    if value not in _DTYPES:
        raise MergeError(f"--dtype {value}: use fp32, bf16 or fp16")
    return value


def parse_gamma(value: str | float) -> str | float:
    """--gamma: median, hidden or a positive finite number."""
    if value in ("median", "hidden"):
        return value
    number = finite("--gamma", value, "median, hidden or a positive number")
    if number <= 0:
        raise MergeError(f"--gamma {value}: use median, hidden or a positive number")
    return number


class Recall(Linear):
    """RECALL's merge: the linear method with the weights per layer that ``build`` computes."""

    name = "recall"
    title = "RECALL"  # as reports and figures name it
    label = "RECALL"
    options = (
        Option("reference", str, "the newest model, whose task gives the samples (default: the last MODEL)."),
        Option("samples", Path, "inputs, one per line (tab between a pair's texts).",
               parse=samples.samples_option, excludes="task"),
        Option("task", str, "take the samples from this task's training inputs (default: the reference run's task)."),
        Option("clusters", int, "number of typical samples (k-means clusters).", default=DEFAULT_CLUSTERS, min=1),
        Option("pool", int, "inputs drawn before clustering.", default=DEFAULT_POOL, min=1),
        Option("temperature", float, "softmax temperature tau (> 0).", default=DEFAULT_TEMPERATURE, parse=check_temperature),
        Option("gamma", str, "RBF gamma per layer: median (heuristic), hidden (1/hidden size) or a number.",
               default=DEFAULT_GAMMA, parse=parse_gamma),
        Option("seed", int, "seed of the sample pool and k-means.", default=0, show_default=True),
        Option("dtype", str, "the models' forward passes for the hidden states in fp32, bf16 or fp16 (half the memory; "
               "the states are pooled and compared in fp32).", default="fp32", show_default=True, parse=check_dtype),
    )

    @classmethod
    def build(cls, sources: list[Source], values: Mapping[str, Any], *,
              device: torch.device | None = None) -> tuple[Recall, dict[str, Any]]:
        from .engine import find_reference

        ref = find_reference(sources, values["reference"])
        texts, source, max_seq_length = samples.choose(values["samples"], values["task"], sources[ref])
        method, report = recall_weights(
            sources, ref, texts, clusters=values["clusters"], pool=values["pool"], temperature=values["temperature"],
            gamma=values["gamma"], max_seq_length=max_seq_length, seed=values["seed"], device=device,
            dtype=values.get("dtype") or "fp32",
        )
        return method, {"reference": sources[ref].name, "samples_source": source, **report}


def layer_representations(folder, features, batch_size: int, device: torch.device, pad_id: int,
                          dtype: str = "fp32") -> torch.Tensor:
    """(layers, samples, hidden): each layer's hidden states mean-pooled over non-padding tokens, in float32
    (the model's forward runs in ``dtype``)."""
    import torch
    from transformers import AutoModel

    from ..tasks.batches import pad_inputs
    from ..model import quiet_transformers

    quiet_transformers()
    from ..runtime import DTYPES

    weights = DTYPES[dtype]
    model = AutoModel.from_pretrained(str(folder), dtype=weights).to(device).eval()
    pooled = []
    with torch.no_grad():
        for start in range(0, len(features), batch_size):
            batch = pad_inputs(features, list(range(start, min(start + batch_size, len(features)))), pad_id)
            batch = {k: v.to(device) for k, v in batch.items()}
            hidden = model(**batch, output_hidden_states=True).hidden_states
            mask = batch["attention_mask"].unsqueeze(-1).float()
            pooled.append(torch.stack([(h.float() * mask).sum(1) / mask.sum(1) for h in hidden]).cpu())
    del model
    return torch.cat(pooled, dim=1)


def typical_samples(embeddings: np.ndarray, clusters: int, seed: int) -> list[int]:
    """Indices of the inputs nearest each k-means++ centroid of L2-normalised ``embeddings``."""
    import numpy as np
    from sklearn.cluster import KMeans

    x = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True).clip(min=1e-12)
    k = min(clusters, len(x))
    km = KMeans(n_clusters=k, init="k-means++", n_init=4, random_state=seed).fit(x)
    chosen: list[int] = []
    for centre in km.cluster_centers_:
        order = np.argsort(((x - centre) ** 2).sum(1))
        chosen.append(int(next(i for i in order if int(i) not in chosen)))
    return sorted(chosen)


def gammas(reps: list[torch.Tensor], ref: int, gamma: str | float) -> list[float]:
    """gamma_n per layer. "median": 1 / median over samples and non-reference models of the squared
    distance (the median heuristic: a typical distance gives exp(-1) at every layer, whatever the
    layer's scale). "hidden": 1 / hidden size. A number: that gamma at every layer."""
    import torch

    layers, _, hidden = reps[ref].shape
    if isinstance(gamma, (int, float)) or gamma not in ("median", "hidden"):
        return [float(parse_gamma(gamma))] * layers
    if gamma == "hidden":
        return [1.0 / hidden] * layers
    out = []
    for n in range(layers):
        d = torch.cat([((r[n] - reps[ref][n]) ** 2).sum(-1) for i, r in enumerate(reps) if i != ref])
        median = float(d.median()) if d.numel() else 0.0
        # All models equal the reference here: every gamma gives s = 1, so any finite one will do.
        out.append(1.0 / median if median > 0 else 1.0 / hidden)
    return out


def similarities(reps: list[torch.Tensor], ref: int, gamma_n: list[float]) -> np.ndarray:
    """s[n, i] = mean_x exp(-gamma_n ||r_ref^n(x) - r_i^n(x)||^2)."""
    import numpy as np
    import torch

    layers = reps[ref].shape[0]
    s = np.zeros((layers, len(reps)))
    for i, r in enumerate(reps):
        d = ((r - reps[ref]) ** 2).sum(-1)  # (layers, samples)
        s[:, i] = torch.exp(-torch.tensor(gamma_n).unsqueeze(1) * d).mean(1).numpy()
    return s


def softmax_weights(s: np.ndarray, temperature: float) -> np.ndarray:
    import numpy as np

    with np.errstate(all="ignore"):  # an overflow (a tiny temperature) is reported by the caller
        z = s / temperature
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)


def recall_weights(
    sources: list[Source],
    ref: int,
    texts: list[tuple[str, ...]],
    *,
    clusters: int = DEFAULT_CLUSTERS,
    pool: int = DEFAULT_POOL,
    temperature: float = DEFAULT_TEMPERATURE,
    gamma: str | float = DEFAULT_GAMMA,
    max_seq_length: int = 128,
    batch_size: int = 32,
    seed: int = 0,
    device: torch.device | None = None,
    dtype: str = "fp32",
) -> tuple[Recall, dict[str, Any]]:
    """The linear method with RECALL's per-layer weights, and what merge.json records about them. ``dtype``: the
    models' forward passes (a 7B model's in bf16 on a GPU); the representations are compared in float32."""
    import numpy as np
    import torch

    from ..tasks import Examples
    from ..tasks.batches import tokenize
    from ..model import load_tokenizer

    temperature = check_temperature(temperature)
    if not texts:
        raise MergeError("no input to take typical samples from: the samples are empty")
    device = device or torch.device("cpu")
    if check_dtype(dtype) == "fp16" and device.type != "cuda":
        raise MergeError("--dtype fp16 needs a CUDA device for RECALL's hidden states (on a CPU use --dtype bf16 or fp32)")
    rng = random.Random(seed)
    candidates = list(range(len(texts)))
    rng.shuffle(candidates)
    candidates = sorted(candidates[:pool])
    pool_texts = [texts[i] for i in candidates]

    tokenizer = load_tokenizer(str(sources[ref].folder))
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    def features(rows):
        return tokenize(Examples(rows, [0] * len(rows), "samples"), tokenizer, max_seq_length)

    # The reference embeds the pool once; its last layer is the clustering embedding.
    pool_reps = layer_representations(sources[ref].folder, features(pool_texts), batch_size, device, pad_id, dtype)
    chosen = typical_samples(pool_reps[-1].numpy(), clusters, seed)
    sample_features = features([pool_texts[i] for i in chosen])
    reps = []
    for i, source in enumerate(sources):
        reps.append(pool_reps[:, chosen] if i == ref else layer_representations(source.folder, sample_features, batch_size, device,
                                                                                      pad_id, dtype))
    gamma_n = gammas(reps, ref, gamma)
    s = similarities(reps, ref, gamma_n)
    if not np.isfinite(s).all():  # a gamma so large that gamma * distance overflows
        layer = int(np.argwhere(~np.isfinite(s))[0][0])
        raise MergeError(f"--gamma {gamma} gives similarities that are not finite numbers at layer {layer} "
                         f"(gamma {gamma_n[layer]:g}): use --gamma hidden or a smaller number")
    w = softmax_weights(s, temperature)
    if not np.isfinite(w).all():  # a temperature so small that s / tau overflows
        layer = int(np.argwhere(~np.isfinite(w))[0][0])
        raise MergeError(f"--temperature {temperature:g} gives RECALL weights that are not finite numbers at layer {layer}: "
                         f"use a larger temperature (e.g. {DEFAULT_TEMPERATURE:g})")
    report = {
        **({"dtype": dtype} if dtype != "fp32" else {}),  # merge.json of an fp32 merge stays as it was
        "temperature": temperature,
        "gamma_rule": gamma if isinstance(gamma, str) else float(gamma),
        "gamma": gamma_n,
        "pool": len(pool_texts),
        "clusters": len(chosen),
        "samples_used": [list(pool_texts[i]) for i in chosen],
        "layers": [
            {"layer": n, "gamma": gamma_n[n], "similarity": s[n].tolist(), "weight": w[n].tolist()}
            for n in range(s.shape[0])
        ],
    }
    return Recall({n: w[n].tolist() for n in range(w.shape[0])}), report


register_merge(Recall)
