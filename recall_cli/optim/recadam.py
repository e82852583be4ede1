"""RecAdam: Adam with the recall penalty and objective shifting decoupled from the adaptive step.

The class validates hyperparameters and keeps per-parameter state; the update itself lives in the
functional kernels of :mod:`recall_cli.optim.kernels` (single-tensor, multi-tensor and fused).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from .anneal import ANNEAL_FUNCTIONS, RecallSchedule
from .kernels import _fused_recadam, _multi_tensor_recadam, _single_tensor_recadam

MODES = ("decoupled", "coupled")
# Devices where the multi-tensor kernel is the default: one launch per op for many tensors pays off
# there; on the CPU it only adds model-sized temporaries.
_FOREACH_DEVICES = ("cuda", "xpu")
# Devices with a fused Adam kernel that this optimizer has been checked against.
_FUSED_DEVICES = ("cpu", "cuda")
_HALF_DTYPES = (torch.bfloat16, torch.float16)


class RecAdam(Optimizer):
    r"""Adam that recalls pretrained weights while it learns a new task (Chen et al., 2020).

    Each parameter group may carry ``anchors``: a list of tensors aligned with its ``params`` holding
    the pretrained weights theta* (``theta_star`` everywhere else in recall; the key is public
    API). A group without anchors (or with ``anneal_w == 0``), and any
    ``None`` entry in ``anchors``, is updated by plain Adam with decoupled weight decay: that is how
    the newly initialised classifier head is trained.

    For a parameter theta with gradient g at its t-th update (t starts at 1)::

        lambda    = anneal_lambda(anneal_fun, t, anneal_k, anneal_t0, anneal_w)
        m         = beta1 * m + (1 - beta1) * g            # raw g: lambda does not scale the moments
        v         = beta2 * v + (1 - beta2) * g**2
        step_size = lr * sqrt(1 - beta2**t) / (1 - beta1**t)   if correct_bias else lr
        denom     = sqrt(v) + eps
        pull      = max(anneal_w - lambda, recall_floor)       # never below the floor
        anchored:   theta -= step_size * lambda * m / denom
                    theta -= lr * pull * pretrain_cof * (theta - theta*)
        head:       theta -= step_size * m / denom
        theta -= lr * weight_decay * theta                    # decoupled weight decay, applied last

    With ``recall_floor`` 0 (the default) the pull is the paper's, ``anneal_w - lambda``, which vanishes
    a few 1/k steps after t0; a floor keeps a constant share of it for the rest of the run (at floor
    = anneal_w, lambda still shifts the task gradient but the pull never fades: an L2-SP-like pull).

    ``mode="coupled"`` is the paper's Adam-vs-RecAdam ablation (Algorithm 1, line 6): the objective's
    gradient ``lambda * g + pull * pretrain_cof * (theta - theta*)`` goes through
    Adam's moments and the step is the ordinary Adam step (with anneal_w = 1 this is exactly
    ``lambda * g + (1 - lambda) * gamma * (theta - theta*)``).

    A bfloat16 or float16 parameter is updated through an fp32 master copy (``self.state[p]["master"]``,
    with fp32 moments): its gradient is read in fp32, the rule above runs on the master, and the parameter
    is set to the master rounded. Without it an update below half a unit in the last place of a weight
    (bf16 keeps 8 bits: lr 2e-5 against weights of ~0.05 is below it) rounds away (docs/scaling.md
    measures it); ``master_weights=False`` updates the 16-bit parameters in place, moments in their dtype.

    Anchors live in ``self.state[p]["anchor"]`` so they follow their parameter's device, but
    ``state_dict()`` leaves them out: theta* is saved once per run by the trainer, and a resumed
    optimizer is built with its anchors again before ``load_state_dict``.

    Args:
        params: parameters or parameter groups (dicts); a group may carry ``anchors`` (theta*).
        lr, betas, eps, weight_decay: as in AdamW (eps is added to sqrt(v), as in the released code).
        correct_bias: apply Adam's bias correction.
        anneal_fun: "sigmoid", "linear" or "constant"; anneal_k, anneal_t0, anneal_w: its parameters.
        pretrain_cof: gamma, the strength of the quadratic recall penalty (5000 in the paper).
        recall_floor: the least weight of the penalty, in [0, anneal_w] (0: the paper's schedule).
        mode: "decoupled" (RecAdam) or "coupled" (the ablation).
        anchor_dtype: dtype in which theta* is kept; default float32 (float64 for float64
            parameters). ``torch.bfloat16`` halves the extra memory.
        master_weights: keep fp32 master copies of 16-bit parameters (the default; see above).
        foreach: use the multi-tensor kernel (True) or the one-tensor-at-a-time kernel (False).
        fused: run the Adam part through torch's fused Adam kernel (``torch._fused_adam_``, one pass
            over theta, g, m, v), then the pull toward theta* and the weight decay as separate passes.
            It is exact to the rule above: the released eps convention (eps added to sqrt(v)) is
            torch's with eps / sqrt(1 - beta2**t). Needs correct_bias and mode="decoupled"; groups
            that do not qualify take the other kernels.
        With neither option set, a group uses the fused kernel when it qualifies, else the
        multi-tensor kernel on CUDA (and XPU) and the one-tensor-at-a-time kernel on the CPU, where
        it is about twice as fast as the multi-tensor one (no model-sized temporaries); see
        benchmarks/optimizer_step.py.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float = 2e-5,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        correct_bias: bool = True,
        anneal_fun: str = "sigmoid",
        anneal_k: float = 0.5,
        anneal_t0: float = 250,
        anneal_w: float = 1.0,
        pretrain_cof: float = 5000.0,
        *,
        recall_floor: float = 0.0,
        mode: str = "decoupled",
        anchor_dtype: torch.dtype | None = None,
        master_weights: bool = True,
        foreach: bool | None = None,
        fused: bool | None = None,
    ) -> None:
        if fused and foreach:
            raise ValueError("choose one of fused=True and foreach=True")
        self._master_weights = master_weights
        # add_param_group runs inside Optimizer.__init__ and needs this option already.
        self._anchor_dtype = anchor_dtype
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            correct_bias=correct_bias,
            anneal_fun=anneal_fun,
            anneal_k=anneal_k,
            anneal_t0=anneal_t0,
            anneal_w=anneal_w,
            pretrain_cof=pretrain_cof,
            recall_floor=recall_floor,
            mode=mode,
            foreach=foreach,
            fused=fused,
        )
        super().__init__(params, defaults)

    # ---- bookkeeping -------------------------------------------------------------------------

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        param_group = dict(param_group)  # never mutate the caller's dict
        theta_star = param_group.pop("anchors", None)
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        index = len(self.param_groups) - 1
        _validate_group(group, index)
        if theta_star is None:
            return
        theta_star = list(theta_star)
        params = group["params"]
        if len(theta_star) != len(params):
            raise ValueError(
                f"param group {index}: 'anchors' has {len(theta_star)} tensors but 'params' has {len(params)}"
            )
        if any(a is not None for a in theta_star) and group["pretrain_cof"] <= 0:
            raise ValueError(
                f"param group {index}: pretrain_cof must be > 0 when anchors are given, got {group['pretrain_cof']}"
            )
        for i, (p, anchor) in enumerate(zip(params, theta_star)):
            if anchor is None:
                continue
            if tuple(anchor.shape) != tuple(p.shape):
                raise ValueError(
                    f"param group {index}, parameter {i}: anchor shape {tuple(anchor.shape)} "
                    f"differs from parameter shape {tuple(p.shape)}"
                )
            dtype = self._anchor_dtype or torch.promote_types(p.dtype, torch.float32)
            # copy=True: the caller may pass the parameter itself, which the optimizer will move.
            self.state[p]["anchor"] = anchor.detach().to(device=p.device, dtype=dtype, copy=True)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("mode", "decoupled")
            group.setdefault("recall_floor", 0.0)
            group.setdefault("foreach", None)
            group.setdefault("fused", None)

    def state_dict(self) -> dict[str, Any]:
        """The optimizer state without theta* (it is saved once per run by the trainer)."""
        packed = super().state_dict()
        packed["state"] = {
            key: {name: value for name, value in per_param.items() if name != "anchor"}
            for key, per_param in packed["state"].items()
        }
        return packed

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load moments and steps; theta* given at construction is kept."""
        theta_star = {p: s["anchor"] for p, s in self.state.items() if "anchor" in s}
        super().load_state_dict(state_dict)
        for p, anchor in theta_star.items():
            self.state[p]["anchor"] = anchor
        # torch casts every state tensor to its parameter's dtype: a 16-bit parameter's fp32 master and
        # moments are put back as they were saved, or a resume would round them.
        # saved keys as torch matches them: the saved groups' ids (or names) in order against the parameters
        params = dict(zip((key for group in state_dict["param_groups"] for key in group["params"]),
                          (p for group in self.param_groups for p in group["params"])))
        for key, saved in state_dict["state"].items():
            p = params[key]
            if "master" not in saved:
                continue
            for key in ("master", "exp_avg", "exp_avg_sq"):
                if key in saved and saved[key].dtype == torch.float32:
                    self.state[p][key] = saved[key].to(device=p.device, copy=True)

    def anchored(self) -> Iterator[tuple[Tensor, Tensor]]:
        """(parameter, anchor) pairs of every parameter that is pulled toward theta*."""
        for group in self.param_groups:
            for p in group["params"]:
                anchor = self.state.get(p, {}).get("anchor")
                if anchor is not None:
                    yield p, anchor

    def _first_anchored(self) -> tuple[dict[str, Any], int] | None:
        """The first anchored group and its latest step."""
        for group in self.param_groups:
            anchored = [self.state[p] for p in group["params"] if "anchor" in self.state.get(p, {})]
            if anchored:
                return group, max(state.get("step", 0) for state in anchored)
        return None

    @property
    def current_lambda(self) -> float | None:
        """lambda(t) of the first anchored group at its latest step (None without anchors)."""
        found = self._first_anchored()
        if found is None:
            return None
        group, t = found
        return RecallSchedule.of(group).lam(t)

    @property
    def current_penalty_weight(self) -> float | None:
        """The recall penalty's weight at the latest step, max(anneal_w - lambda, recall_floor) (None without anchors)."""
        found, lam = self._first_anchored(), self.current_lambda
        if found is None or lam is None:
            return None
        return RecallSchedule.of(found[0]).pull(lam)

    # ---- the step ----------------------------------------------------------------------------

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        for group in self.param_groups:
            params: list[Tensor] = []
            grads: list[Tensor] = []
            exp_avgs: list[Tensor] = []
            exp_avg_sqs: list[Tensor] = []
            theta_star: list[Tensor | None] = []
            steps: list[int] = []
            halves: list[Tensor] = []  # 16-bit parameters, set from their fp32 masters after the update
            masters: list[Tensor] = []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("RecAdam does not support sparse gradients")
                state = self.state[p]
                if "step" not in state:
                    state["step"] = 0
                    if self._master_weights and p.dtype in _HALF_DTYPES:
                        state["master"] = p.detach().to(torch.float32, copy=True)
                    like = state.get("master", p)
                    state["exp_avg"] = torch.zeros_like(like, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(like, memory_format=torch.preserve_format)
                master = state.get("master")
                if master is not None:
                    halves.append(p)
                    masters.append(master)
                anchor = state.get("anchor")
                if anchor is not None and anchor.device != p.device:
                    # The model moved after the optimizer was built: move theta* once, lazily.
                    anchor = state["anchor"] = anchor.to(p.device)
                state["step"] += 1
                params.append(p if master is None else master)
                grads.append(p.grad if master is None else p.grad.to(torch.float32))
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
                theta_star.append(anchor)
                steps.append(state["step"])
            if not params:
                continue

            kernel = _choose_kernel(group, params)
            beta1, beta2 = group["betas"]
            kernel(
                params,
                grads,
                exp_avgs,
                exp_avg_sqs,
                theta_star,
                steps,
                lr=group["lr"],
                beta1=beta1,
                beta2=beta2,
                eps=group["eps"],
                weight_decay=group["weight_decay"],
                correct_bias=group["correct_bias"],
                recall=RecallSchedule.of(group),
                mode=group["mode"],
            )
            for p, master in zip(halves, masters):
                p.copy_(master)
        return loss


def _fused_supported(group: dict[str, Any], params: list[Tensor]) -> bool:
    return (
        group["correct_bias"]
        and group["mode"] == "decoupled"
        and all(p.device.type in _FUSED_DEVICES and p.is_floating_point() for p in params)
    )


def _choose_kernel(group: dict[str, Any], params: list[Tensor]):
    fused, foreach = group.get("fused"), group["foreach"]
    if fused and not _fused_supported(group, params):
        raise RuntimeError(
            "RecAdam(fused=True) needs correct_bias=True, mode='decoupled' and floating-point CPU or CUDA "
            "parameters: use foreach=True or False instead"
        )
    if fused or (fused is None and foreach is None and _fused_supported(group, params)):
        return _fused_recadam
    if foreach is None:
        foreach = not torch.jit.is_scripting() and all(p.device.type in _FOREACH_DEVICES for p in params)
    return _multi_tensor_recadam if foreach else _single_tensor_recadam


def _validate_group(group: dict[str, Any], index: int) -> None:
    where = f"param group {index}"
    if group["lr"] < 0:
        raise ValueError(f"{where}: lr must be >= 0, got {group['lr']}")
    if group["eps"] < 0:
        raise ValueError(f"{where}: eps must be >= 0, got {group['eps']}")
    beta1, beta2 = group["betas"]
    if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
        raise ValueError(f"{where}: betas must be in [0, 1), got {group['betas']}")
    if group["weight_decay"] < 0:
        raise ValueError(f"{where}: weight_decay must be >= 0, got {group['weight_decay']}")
    if group["anneal_fun"] not in ANNEAL_FUNCTIONS:
        raise ValueError(
            f"{where}: unknown anneal_fun {group['anneal_fun']!r}: expected one of {', '.join(ANNEAL_FUNCTIONS)}"
        )
    if group["anneal_fun"] == "linear" and group["anneal_t0"] <= 0:
        raise ValueError(f"{where}: anneal_fun 'linear' needs anneal_t0 > 0, got {group['anneal_t0']}")
    if group["anneal_w"] < 0:
        raise ValueError(f"{where}: anneal_w must be >= 0, got {group['anneal_w']}")
    floor = group["recall_floor"]
    if not (math.isfinite(floor) and 0.0 <= floor <= group["anneal_w"]):
        raise ValueError(f"{where}: recall_floor must be in [0, anneal_w = {group['anneal_w']:g}], got {floor}")
    if group["mode"] not in MODES:
        raise ValueError(f"{where}: unknown mode {group['mode']!r}: expected one of {', '.join(MODES)}")
    # NaN passes every comparison above as False; a NaN or infinite number makes every weight NaN at
    # the first step.
    for key in ("lr", "eps", "weight_decay", "anneal_k", "anneal_t0", "anneal_w", "pretrain_cof"):
        value = group[key]
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{where}: {key} must be a finite number, got {value!r}")
