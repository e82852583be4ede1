"""OSF, orthogonal subspace fine-tuning (Nayak et al. 2025, arXiv 2504.07097), through peft's OSFConfig,
as an adapter (plugins/adapter.py): each targeted weight keeps its top singular directions frozen and
trains only the smallest ``model.osf.rank``, with their gradients projected off the frozen subspace.

    peft_osf.py   wrapping, saving and loading with peft (merging is the peft base's: plugins/adapter.PeftAdapted)

Where LoRA adds a low-rank update in any direction (and at high learning rates adds "intruder"
directions, arXiv 2410.21228), OSF moves a weight only within the subspace its pretrained spectrum uses
least: what the top directions carry is kept by construction. Its trainable count is close to LoRA's at
the same rank (rank x (out + in + 1) per layer against r x (out + in)).

What a run saves stays plain: best/ and last/ are `from_pretrained` folders with the update merged in,
and adapter/ beside the weights opens with ``PeftModel.from_pretrained(base, folder / "adapter")``.
Its keys are the recipe's model.osf section (recipe/schema.py's OsfConfig); ``model.osf.rank`` turns it on.
"""

from __future__ import annotations

from typing import Any

from ...names import OPTIMIZERS
from ...plugins.adapter import Adapter, PeftAdapted
from ...plugins.methods import Family, register_method


class PeftOsf(PeftAdapted):
    extra_markers = ("osf_svd_params", "original_module")

    def save(self, folder: Any) -> None:
        from .peft_osf import save_adapter

        save_adapter(self.wrapped, folder)

    def load(self, folder: Any) -> None:
        from .peft_osf import load_adapter

        load_adapter(self.wrapped, folder)

    def theta_star_names(self, theta_star: dict[str, Any]) -> dict[str, Any]:
        from .peft_osf import theta_star_names

        return theta_star_names(self.base_model, theta_star)

    def update_norm(self) -> float:
        from .peft_osf import update_norm

        return update_norm(self.base_model)


class Osf(Adapter):
    name = "osf"
    label = "OSF"
    paper = "Nayak et al. 2025, arXiv 2504.07097"
    switch = "model.osf.rank"
    keys = ("model.osf.rank", "model.osf.target_modules")
    cell = "osf"
    short = "osf_rank"
    family = Family("osf", "#332288", hue_rank=1)

    def words(self, strength: Any) -> str:
        return f"OSF rank={strength}"

    def summary(self, recipe: Any) -> dict[str, Any]:
        osf = recipe.model.osf
        return {"osf": {"rank": osf.rank, "target_modules": osf.target_modules}}

    def check(self, recipe: Any) -> list[str]:
        osf, problems = recipe.model.osf, []
        if osf.rank < 0:
            problems.append(f"model.osf.rank: the trained singular directions per layer must be >= 0 (0 = off), got {osf.rank}")
        if osf.target_modules is not None and not [m for m in osf.target_modules if m.strip()]:
            problems.append("model.osf.target_modules: name at least one module, or null for every linear layer")
        if osf.rank > 0:
            if OPTIMIZERS[recipe.optimizer.name].anchored:
                problems.append(f"model.osf.rank: {recipe.optimizer.name}'s pull toward theta* has nothing to act on under "
                                "OSF (the pretrained weights stay frozen and the update starts at zero): use "
                                "optimizer.name=adamw")
            if recipe.train.linear_probe_steps > 0:
                problems.append("train.linear_probe_steps: LP-FT with OSF is not supported yet "
                                "(set train.linear_probe_steps=0, or model.osf.rank=0)")
        return problems

    def wrap(self, model: Any, recipe: Any, task: Any) -> PeftOsf:
        from .peft_osf import wrap

        osf = recipe.model.osf
        return PeftOsf(wrap(model, osf.rank, osf.target_modules, task_type=task.peft_task_type))

    def trained_parameters(self, meta_model: Any, head: set[str], recipe: Any) -> int:
        """rank x (out + in + 1) on each targeted linear layer (U_low, S_low, V_low; peft's "all-linear"
        without the head's, or the named ones), and the head, which trains in full."""
        import torch

        osf = recipe.model.osf
        head_modules = {name.rsplit(".", 1)[0] for name in head}
        named = {m.strip() for m in osf.target_modules or []}
        trained = sum(osf.rank * (m.in_features + m.out_features + 1) for name, m in meta_model.named_modules()
                      if isinstance(m, torch.nn.Linear) and name not in head_modules
                      and (not named or name.rsplit(".", 1)[-1] in named))
        return trained + sum(p.numel() for n, p in meta_model.named_parameters() if n in head)

    def dry_run_lines(self, prepared: Any) -> dict[str, str]:
        trainable, total = prepared.adapter.trainable_counts()
        rank = prepared.recipe.model.osf.rank
        return {"osf": f"{trainable:,} of {total:,} parameters train ({100 * trainable / total:.2f} %, as peft counts "
                       f"them): the {rank} smallest singular directions of each targeted weight, the rest frozen"}


register_method(Osf())
