"""The encoder's probes (the default ones): what the pooled representations and the masked-LM skill of θ keep
of θ*'s, on the probe sentences and the STS pairs.

    cka      last-layer linear CKA with θ* (biased and debiased), and the same per layer
    drift    mean over texts of 1 - cos(e_θ, e_θ*) of the pooled last layer
    sts      STS Spearman of θ and θ*, and their ratio (the skill kept)
    mlm      θ's encoder under θ*'s masked-LM head: its loss, θ*'s, and their ratio

Each is a registry entry (plugins/probes.py); the measuring code is runner.py's and measures.py's, imported
when a probe runs, so that listing the probes (`recall --help`) loads no torch.
"""

from __future__ import annotations

from typing import Any

from ..plugins.probes import Probe, register_probe


def _layers(prober: Any, model: Any) -> list[Any]:
    """Every layer's pooled probe texts (only the last where no probe needs more), once per model."""
    from .runner import encoder_of, evaluating, pooled_layers

    def compute() -> list[Any]:
        encoder = encoder_of(model)
        with evaluating(encoder):
            return pooled_layers(encoder, prober.texts, prober.device, last_only="cka" not in prober.probes)

    return prober.shared("layers", compute)


class Cka(Probe):
    name, reads, cacheable = "cka", "texts", True
    measures = ("cka", "cka_debiased")

    def side(self, prober: Any, model: Any) -> Any:
        return _layers(prober, model)

    def record(self, prober: Any, mine: Any, ref: Any) -> dict[str, Any]:
        from . import measures

        pairs = list(zip(mine, ref))
        return {"cka": measures.linear_cka(*pairs[-1]), "cka_debiased": measures.debiased_cka(*pairs[-1]),
                "cka_layers": [measures.linear_cka(a, b) for a, b in pairs],
                "cka_debiased_layers": [measures.debiased_cka(a, b) for a, b in pairs]}


class Drift(Probe):
    name, reads, cacheable = "drift", "texts", True
    measures = ("drift",)
    lower_is_better = ("drift",)

    def side(self, prober: Any, model: Any) -> Any:
        return _layers(prober, model)[-1]

    def record(self, prober: Any, mine: Any, ref: Any) -> dict[str, Any]:
        from . import measures

        return {"drift": measures.drift(mine, ref)}


class Sts(Probe):
    name, reads, cacheable = "sts", "pairs", True
    measures = ("sts", "sts_ref", "sts_retained")
    skill, skill_title = "sts_retained", "retained STS skill ρ(θ)/ρ(θ*)"

    def side(self, prober: Any, model: Any) -> Any:
        from . import measures
        from .runner import encoder_of, evaluating, pooled_layers

        encoder = encoder_of(model)
        with evaluating(encoder):
            emb = pooled_layers(encoder, prober.sentences, prober.device, last_only=True)[-1]
        first, second = prober._pair_index
        return measures.spearman(measures.pair_cosines(emb[first], emb[second]), prober.pairs.gold)

    def record(self, prober: Any, mine: Any, ref: Any) -> dict[str, Any]:
        from .runner import _ratio

        # sts_pairs: how many pairs the number rests on (records before it: 256)
        return {"sts": mine, "sts_ref": ref, "sts_retained": _ratio(mine, ref), "sts_pairs": len(prober.pairs)}


class Mlm(Probe):
    name, reads, cacheable = "mlm", "texts", True  # θ*'s head is in the cache's key
    measures = ("mlm_loss", "mlm_loss_ref", "mlm_ratio")
    skill, skill_title = "mlm_ratio", "MLM loss ratio L(θ)/L(θ*)"
    lower_is_better = ("mlm_loss", "mlm_ratio")
    raw = ("mlm_loss", "mlm_loss_ref")

    def prepare(self, prober: Any) -> str | None:
        import copy

        from .runner import _masked_batches, load_mlm_head

        head, note = prober.mlm_head, prober.mlm_note
        if head is None and note is None and prober.source is not None:
            head, note = load_mlm_head(*prober.source)
        if head is None:
            return note or "mlm: skipped, no masked-LM head"
        if prober.tokenizer.mask_token_id is None:
            return "mlm: skipped, the tokenizer has no mask token"
        # θ*'s head, never trained, and the masked texts, kept on the runner for every model it measures
        prober.mlm_head = copy.deepcopy(head).to(prober.device).eval()
        prober.masked = _masked_batches(prober.texts, prober.tokenizer)
        return None

    def side(self, prober: Any, model: Any) -> float:
        import torch

        from .runner import encoder_of, evaluating

        head, masked = prober.mlm_head, prober.masked
        encoder, device = encoder_of(model), prober.device
        total, count = 0.0, 0
        with evaluating(encoder):
            for ids, mask, targets in masked:
                hidden = encoder(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
                chosen = targets.to(device) != -100
                logits = head(hidden[chosen].float())
                total += float(torch.nn.functional.cross_entropy(logits.float(), targets.to(device)[chosen],
                                                                 reduction="sum"))
                count += int(chosen.sum())
        return total / max(count, 1)

    def record(self, prober: Any, mine: Any, ref: Any) -> dict[str, Any]:
        from .runner import _ratio

        return {"mlm_loss": mine, "mlm_loss_ref": ref, "mlm_ratio": _ratio(mine, ref)}


for _probe in (Cka(), Drift(), Sts(), Mlm()):
    register_probe(_probe)
