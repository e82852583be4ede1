"""LP-FT (Kumar et al. 2022, arXiv 2202.10054): train the head alone first, then fine-tune everything.

A fresh head on a pretrained encoder sends large, random gradients into the encoder in the first steps,
and these distort the pretrained features. Fitting the head first (a linear probe, encoder frozen) and
fine-tuning from there changes the features less. The run keeps the probed point as lp/, so that
WiSE-FT has a real alpha = 0 end: `recall merge --method linear lp/ best/`.

Freezing sets ``requires_grad`` off: the encoder's parameters then get no gradient, and the optimizer
skips a parameter without one entirely (no update, no weight decay, no pull), so the encoder stays
bit-identical through the head phase, and the backward pass stops at the head.
"""

from __future__ import annotations

import torch

from ..model import head_parameter_names


def encoder_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """Every parameter but the classification head's."""
    head = head_parameter_names(model)
    return [p for name, p in model.named_parameters() if name not in head]


def freeze_encoder(model: torch.nn.Module) -> None:
    for p in encoder_parameters(model):
        p.requires_grad_(False)


def unfreeze_encoder(model: torch.nn.Module) -> None:
    for p in encoder_parameters(model):
        p.requires_grad_(True)


def in_probe_phase(step_done: int, linear_probe_steps: int) -> bool:
    """Whether the next step (``step_done + 1``) trains the head alone."""
    return step_done < linear_probe_steps
