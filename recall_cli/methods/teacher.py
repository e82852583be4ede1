"""A frozen teacher: the model as theta* computes, beside the student, for a method that distils from it
(the LM anchor, the embedding anchor past its cache limit, a plugin's logit distillation).

Public for plugins: ``frozen_copy(run.model, run.theta_star)`` in a method's ``start`` is the teacher.
``run.theta_star`` (training/methods.py's RunView) holds every parameter as the run began, the new head's
start included, on a new run and after --resume alike, so the teacher is the same before and after a resume.

:func:`copy_bytes` is what such a copy adds to the run's memory (a method's ``extra_bytes``).
"""

from __future__ import annotations

import copy
import torch


def frozen_copy(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """A copy of ``model`` holding ``state`` (by parameter name; a parameter ``state`` leaves out keeps the
    model's value), every parameter frozen, in eval mode (dropout off): the function to keep."""
    frozen = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in frozen.named_parameters():
            if name in state:
                p.copy_(state[name].to(p.device, p.dtype))
            p.requires_grad_(False)
    return frozen.eval()


def copy_bytes(parameters: int, bytes_per_parameter: int = 4) -> int:
    """The memory a :func:`frozen_copy` of a model of ``parameters`` fp32 weights takes."""
    return parameters * bytes_per_parameter
