"""LP-FT's freezing: the encoder stops training while the head is fitted.

Freezing sets ``requires_grad`` off: the encoder's parameters then get no gradient, and the optimizer
skips a parameter without one entirely (no update, no weight decay, no pull), so the encoder stays
bit-identical through the head phase, and the backward pass stops at the head.
"""

from __future__ import annotations

import torch

from ...model import head_parameter_names


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
