"""LoRA (Hu et al. 2021, arXiv 2106.09685) through peft, as recall's first adapter (plugins/adapter.py):
theta* stays frozen, low-rank adapters learn the update, the classification head trains in full.

    peft_lora.py   wrapping, counting, saving and loading with peft (merging: plugins/adapter.PeftAdapted)
    corda.py       CorDA's start: the calibration sentences, their covariances, the cached decomposition

"LoRA learns less and forgets less" (Biderman et al. 2024, arXiv 2405.09673), on the same trade-off curve
as full fine-tuning; it is what most users pick for adapters, so recall measures it with the same probes.
What a run saves stays plain: best/, last/ and lp/ are `from_pretrained` folders with the adapters merged
in, and adapter/ beside the weights opens with ``PeftModel.from_pretrained(base, folder / "adapter")``.
Its keys are the recipe's model.lora section (recipe/schema.py's LoraConfig); ``model.lora.r`` turns it on.
The variants peft offers are keys of the same section: ``init`` (default; pissa: PiSSA, Meng et al. 2024,
arXiv 2404.02948; corda: CorDA's knowledge-preserved mode, Yang et al. 2024, arXiv 2406.05223),
``use_dora`` (DoRA, Liu et al. 2024, arXiv 2402.09353) and ``use_rslora`` (rsLoRA, Kalajdzievski 2023,
arXiv 2312.03732). At their defaults a run is today's LoRA, bit for bit.
"""

from __future__ import annotations

from typing import Any

from ...names import OPTIMIZERS
from ...plugins.adapter import Adapter, PeftAdapted
from ...plugins.methods import Family, register_method


class PeftLora(PeftAdapted):
    extra_markers = ("lora_", "original_module")

    def __init__(self, wrapped: Any, start: Any = None):
        super().__init__(wrapped)
        # PiSSA's and CorDA's start (A0, B0 by layer): what adapter/ is converted against; None: B0 = 0.
        self.initial = None
        self.start = start  # CorDA's (corda.CordaStart): its cache, and the dry run's words

    def save(self, folder: Any) -> None:
        from .peft_lora import save_adapter

        save_adapter(self.wrapped, folder, self.initial)
        if self.start is not None:
            self.start.write_cache()

    def load(self, folder: Any) -> None:
        from .peft_lora import load_adapter

        load_adapter(self.wrapped, folder, self.initial)

    def theta_star_names(self, theta_star: dict[str, Any]) -> dict[str, Any]:
        from .peft_lora import theta_star_names

        return theta_star_names(self.base_model, theta_star)

    def update_norm(self) -> float:
        from .peft_lora import update_norm

        return update_norm(self.base_model, self.initial)


class Lora(Adapter):
    name = "lora"
    label = "LoRA"
    paper = "Hu et al. 2021, arXiv 2106.09685; Biderman et al. 2024, arXiv 2405.09673"
    switch = "model.lora.r"
    keys = ("model.lora.r", "model.lora.alpha", "model.lora.dropout", "model.lora.target_modules", "model.lora.init",
            "model.lora.corda_samples", "model.lora.use_dora", "model.lora.use_rslora")
    cell = "r"
    named_keys = ("model.lora.init", "model.lora.use_dora", "model.lora.use_rslora")
    short = "lora_r"
    family = Family("lora", "#D55E00", hue_rank=1)

    def describe(self, recipe: Any) -> str:
        lora = recipe.model.lora
        return " ".join([f"LoRA r={lora.r} alpha={lora.alpha:g}", *variant_words(lora)])

    def words(self, strength: Any) -> str:
        return f"LoRA r={strength}"

    def named(self, values: Any) -> str:
        # A variant is a different method at the same rank: "LoRA r=8 DoRA", never plain "LoRA r=8".
        # Runs made before a variant's key existed lack it: their names stay as they were.
        init = values.get("model.lora.init") or "default"
        variants = ([INIT_NAMES.get(init, init)] if init != "default" else []) \
            + [name for key, name in (("model.lora.use_dora", "DoRA"), ("model.lora.use_rslora", "rsLoRA"))
               if values.get(key)]
        return " ".join([self.words(self.strength(values)), *variants])

    def summary(self, recipe: Any) -> dict[str, Any]:
        lora = recipe.model.lora
        block = {"r": lora.r, "alpha": lora.alpha, "dropout": lora.dropout, "target_modules": lora.target_modules}
        if lora.init != "default":
            block.update(init=lora.init, **({"corda_samples": lora.corda_samples} if lora.init == "corda" else {}))
        block.update({key: True for key in ("use_dora", "use_rslora") if getattr(lora, key)})
        return {"lora": block}

    def check(self, recipe: Any) -> list[str]:
        lora, tr, o, problems = recipe.model.lora, recipe.train, recipe.optimizer, []
        if lora.r < 0:
            problems.append(f"model.lora.r: the adapters' rank must be >= 0 (0 = full fine-tuning), got {lora.r}")
        if lora.alpha <= 0:
            problems.append(f"model.lora.alpha: must be > 0, got {lora.alpha}")
        if not 0 <= lora.dropout < 1:
            problems.append(f"model.lora.dropout: must be in [0, 1), got {lora.dropout}")
        if lora.target_modules is not None and not [m for m in lora.target_modules if m.strip()]:
            problems.append("model.lora.target_modules: name at least one module, or null for every linear layer")
        if lora.corda_samples < 1:
            problems.append(f"model.lora.corda_samples: must be >= 1 (sentences for CorDA's covariance), got {lora.corda_samples}")
        if lora.r > 0:
            anchored = OPTIMIZERS[o.name].anchored
            if anchored:
                problems.append(f"model.lora.r: {o.name}'s pull toward theta* has nothing to act on under LoRA (the "
                                "pretrained weights stay frozen and the adapters start at zero): use optimizer.name=adamw")
            if recipe.model.init == "random" and anchored:
                problems.append("model.lora.r: adapters on a random-init model train a random encoder's few weights "
                                "(set model.init=pretrained, or model.lora.r=0)")
            if recipe.model.theta_star is not None:
                problems.append("model.theta_star: under LoRA theta* is the frozen weights the adapters start on (a "
                                "later stage of `recall continual` starts on the previous stage's merged weights): drop "
                                "model.theta_star (continual.theta_star=previous), or set model.lora.r=0")
            if tr.linear_probe_steps > 0:
                problems.append("train.linear_probe_steps: LP-FT with LoRA is not supported yet "
                                "(set train.linear_probe_steps=0, or model.lora.r=0)")
        return problems

    def wrap(self, model: Any, recipe: Any, task: Any) -> PeftLora:
        from .peft_lora import initial_adapters, wrap

        lora, start, prepare = recipe.model.lora, None, None
        if lora.init == "corda":
            from pathlib import Path

            from ...model import load_tokenizer
            from .corda import CordaStart, calibration_texts

            start = CordaStart(*calibration_texts(recipe))
            tokenizer = load_tokenizer(recipe.model.name_or_path, recipe.model.trust_remote_code)

            def prepare(m: Any, config: Any) -> None:
                start.prepare(m, config, Path(recipe.output_dir), tokenizer, recipe.task.max_seq_length)

        adapted = PeftLora(wrap(model, lora.r, lora.alpha, lora.dropout, lora.target_modules, task_type=task.peft_task_type,
                                init=lora.init, use_dora=lora.use_dora, use_rslora=lora.use_rslora, prepare=prepare), start)
        if lora.init != "default":
            adapted.initial = initial_adapters(adapted.base_model)
        return adapted

    def trained_parameters(self, meta_model: Any, head: set[str], recipe: Any) -> int:
        """r x (in + out) on each targeted linear layer (peft's "all-linear" without the head's, or the
        named ones), and the head, which trains in full: what peft's get_nb_trainable_parameters counts."""
        import torch

        lora = recipe.model.lora
        head_modules = {name.rsplit(".", 1)[0] for name in head}
        named = {m.strip() for m in lora.target_modules or []}
        # DoRA adds a magnitude per output row of each adapted layer.
        adapters = sum(lora.r * (m.in_features + m.out_features) + (m.out_features if lora.use_dora else 0)
                       for name, m in meta_model.named_modules()
                       if isinstance(m, torch.nn.Linear) and name not in head_modules
                       and (not named or name.rsplit(".", 1)[-1] in named))
        head_count = sum(p.numel() for n, p in meta_model.named_parameters() if n in head)
        return adapters + head_count

    def dry_run_lines(self, prepared: Any) -> dict[str, str]:
        trainable, total = prepared.adapter.trainable_counts()
        frozen = total - trainable
        # Full fine-tuning keeps a gradient and Adam's two moments (fp32) for every parameter.
        lines = {"lora": f"{trainable:,} of {total:,} parameters train ({100 * trainable / total:.2f} %, as peft counts "
                         f"them); ~{frozen * 12 / 2**20:.0f} MiB less for gradients and Adam's moments than full fine-tuning"}
        if prepared.adapter.start is not None:
            lines["lora_init"] = prepared.adapter.start.note()
        return lines


INIT_NAMES = {"pissa": "PiSSA", "corda": "CorDA"}  # model.lora.init as reports name it


def variant_words(lora: Any) -> list[str]:
    """How a run's words name the variants it sets (none at their defaults: today's words)."""
    return ([f"init={lora.init}"] if lora.init != "default" else []) + (["DoRA"] if lora.use_dora else []) \
        + (["rsLoRA"] if lora.use_rslora else [])


register_method(Lora())
