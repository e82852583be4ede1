"""The diagonal empirical Fisher of the previous stage, saved with it, and EWC's penalty term.

F_i = 1/N sum_n (d log p(y_n | x_n) / d theta_i)^2 over N training rows of the previous task, at the weights
that stage ended with (dropout off, one row per backward pass: the square of each row's own gradient, not of
a batch mean). Written to the previous stage's run directory as fisher.safetensors, its metadata saying
how it was made (samples, gamma, seconds): a later stage, a resumed one, or another sequence reusing that
stage reads it instead of computing it again.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

FISHER_FILE = "fisher.safetensors"


def compute_fisher(model: torch.nn.Module, features: Any, kind: Any, rows: list[int], pad_id: int,
                   device: torch.device) -> dict[str, Tensor]:
    """The mean over ``rows`` of each encoder weight's squared per-row gradient of the row's task loss."""
    from ...model import head_parameter_names
    from ..stages import task_loss

    head = head_parameter_names(model)
    params = {n: p for n, p in model.named_parameters() if n not in head and p.requires_grad}
    sums = {n: torch.zeros_like(p, dtype=torch.float32) for n, p in params.items()}
    model.to(device).eval()
    for row in rows:
        batch = {k: v.to(device) for k, v in kind.collate(features, [row], pad_id).items()}
        labels = batch.pop("labels")
        model.zero_grad(set_to_none=True)
        task_loss(kind, model(**batch).logits, labels).backward()
        for n, p in params.items():
            if p.grad is not None:
                sums[n] += p.grad.detach().float() ** 2
    model.zero_grad(set_to_none=True)
    return {n: (s / max(len(rows), 1)).cpu() for n, s in sums.items()}


def _read(path: Path) -> tuple[dict[str, Tensor], dict[str, str]] | None:
    from safetensors import safe_open
    from safetensors.torch import load_file

    if not path.is_file():
        return None
    with safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata() or {})
    return load_file(str(path)), meta


def fisher_for(previous: str, start_from: str, samples: int, gamma: float, tokenizer: Any, device: torch.device,
               pad_id: int) -> tuple[dict[str, Tensor], float, bool]:
    """(the Fisher to penalise with, the seconds its computation took, whether it was computed now). Online:
    the previous stage's own Fisher plus gamma times the one saved with the stage before it, if any."""
    import numpy as np
    from safetensors.torch import save_file

    from ...model import load_checkpoint_model
    from ...rundir import LAST_DIR
    from .. import stages

    run_dir = Path(previous)
    path = run_dir / FISHER_FILE
    saved = _read(path)
    if saved is not None and saved[1].get("samples") == str(samples) and saved[1].get("gamma") == repr(float(gamma)):
        return saved[0], float(saved[1].get("seconds", 0.0)), False
    started = time.perf_counter()
    checkpoint = Path(start_from) if Path(start_from).parent.resolve() == run_dir.resolve() else run_dir / LAST_DIR
    stage = stages.read(run_dir, checkpoint)
    features = stages.training_rows(stage, tokenizer)
    n = len(features.labels)
    rows = sorted(np.random.default_rng(stage.recipe.train.seed).choice(n, size=min(samples, n), replace=False).tolist())
    with torch.random.fork_rng(devices=[]):  # the Fisher pass leaves the run's random stream alone
        model = load_checkpoint_model(stage.checkpoint, stage.kind)
        fisher = compute_fisher(model, features, stage.kind, rows, pad_id, device)
    # online EWC: the stage before carries its own (already accumulated) Fisher
    settings = stage.recipe.plugins.get("ewc")  # the previous stage's own ewc section (absent: EWC was off there)
    before = settings.previous if settings is not None else None
    earlier = _read(Path(before) / FISHER_FILE) if before else None
    if earlier is not None:
        for k, v in earlier[0].items():
            if k in fisher and fisher[k].shape == v.shape:
                fisher[k] = fisher[k] + gamma * v
    seconds = time.perf_counter() - started
    meta = {"samples": str(samples), "gamma": repr(float(gamma)), "seconds": f"{seconds:.3f}",
            "rows": json.dumps(rows[:16] + (["..."] if len(rows) > 16 else [])), "online": str(earlier is not None)}
    tmp = path.with_name(f".{path.name}.tmp")
    save_file({k: v.contiguous() for k, v in fisher.items()}, str(tmp), metadata=meta)
    tmp.replace(path)
    return fisher, seconds, True


class EwcPenalty:
    """sum_i F_i (theta_i - theta_prev_i)^2 over the weights the Fisher names; the loss adds weight(step) = lambda/2 times it."""

    name = "ewc"
    needs_hidden_states = False

    def __init__(self, model: torch.nn.Module, theta_prev: dict[str, Tensor], fisher: dict[str, Tensor], lam: float,
                 device: torch.device):
        self.lam = lam
        self.items = [(p, fisher[n].to(device), theta_prev[n].detach().to(device, torch.float32))
                      for n, p in model.named_parameters() if n in fisher and n in theta_prev and fisher[n].shape == p.shape]
        self.size = sum(p.numel() for p, _, _ in self.items)

    def weight(self, step: int) -> float:
        return self.lam / 2

    def __call__(self, outputs: Any, batch: dict[str, Tensor], indices: Tensor | None = None) -> Tensor:
        total = None
        for p, f, star in self.items:
            term = (f * (p.float() - star) ** 2).sum()
            total = term if total is None else total + term
        return total if total is not None else torch.zeros(())
