"""RecAdam's update kernels, functional and with keyword-only hyperparameters: a simple one-tensor-at-a-time
loop, a multi-tensor one built on ``torch._foreach_*``, and one on torch's fused Adam with the recall pull
applied beside it. :class:`~recall_cli.optim.recadam.RecAdam` picks one per parameter group; tests hold the
fast kernels to the simple one.
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch
from torch import Tensor

from .anneal import RecallSchedule, pull_weight  # noqa: F401  (pull_weight: the kernels' public name too)


def _step_size(lr: float, beta1: float, beta2: float, step: int, correct_bias: bool) -> float:
    if not correct_bias:
        return lr
    return lr * math.sqrt(1.0 - beta2**step) / (1.0 - beta1**step)


def _single_tensor_recadam(
    params: list[Tensor],
    grads: list[Tensor],
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    theta_star: list[Tensor | None],
    steps: list[int],
    *,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    correct_bias: bool,
    recall: RecallSchedule,
    mode: str,
) -> None:
    for p, grad, exp_avg, exp_avg_sq, anchor, step in zip(params, grads, exp_avgs, exp_avg_sqs, theta_star, steps):
        anchored = anchor is not None and recall.recalls
        lam = recall.lam(step) if anchored else 1.0
        weight = recall.pull(lam)
        pull = lr * weight * recall.pretrain_cof  # fraction of (theta - theta*) removed this step
        if anchored and mode == "coupled":
            grad = grad.mul(lam).add_(p - anchor.to(p.dtype), alpha=weight * recall.pretrain_cof)

        exp_avg.lerp_(grad, 1.0 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        denom = exp_avg_sq.sqrt().add_(eps)
        step_size = _step_size(lr, beta1, beta2, step, correct_bias)

        if anchored and mode == "decoupled":
            p.addcdiv_(exp_avg, denom, value=-step_size * lam)
            # theta - pull * (theta - theta*) == lerp(theta, theta*, pull): one pass, no temporary.
            p.lerp_(anchor.to(p.dtype), pull)
        else:
            p.addcdiv_(exp_avg, denom, value=-step_size)
        if weight_decay != 0:
            p.mul_(1.0 - lr * weight_decay)


def _multi_tensor_recadam(
    params: list[Tensor],
    grads: list[Tensor],
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    theta_star: list[Tensor | None],
    steps: list[int],
    *,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    correct_bias: bool,
    recall: RecallSchedule,
    mode: str,
) -> None:
    # foreach kernels need every list on one device and dtype.
    buckets: dict[tuple[torch.device, torch.dtype], list[int]] = defaultdict(list)
    for i, p in enumerate(params):
        buckets[(p.device, p.dtype)].append(i)

    for indices in buckets.values():
        b_params = [params[i] for i in indices]
        b_grads = [grads[i] for i in indices]
        b_exp_avgs = [exp_avgs[i] for i in indices]
        b_exp_avg_sqs = [exp_avg_sqs[i] for i in indices]
        b_steps = [steps[i] for i in indices]
        b_anchored = [theta_star[i] is not None and recall.recalls for i in indices]
        lams = [
            recall.lam(t) if anchored else 1.0
            for t, anchored in zip(b_steps, b_anchored)
        ]
        anchored_pos = [j for j, anchored in enumerate(b_anchored) if anchored]
        a_params = [b_params[j] for j in anchored_pos]
        a_theta_star = [theta_star[indices[j]] for j in anchored_pos]
        a_pulls = [lr * recall.pull(lams[j]) * recall.pretrain_cof for j in anchored_pos]

        if mode == "coupled" and anchored_pos:
            b_grads = list(b_grads)  # the effective gradients are new tensors; p.grad stays as it was
            diffs = torch._foreach_sub(a_params, _as_dtype(a_theta_star, a_params))
            torch._foreach_mul_(diffs, [recall.pull(lams[j]) * recall.pretrain_cof for j in anchored_pos])
            for j, diff in zip(anchored_pos, diffs):
                b_grads[j] = torch.add(diff, b_grads[j], alpha=lams[j])

        torch._foreach_lerp_(b_exp_avgs, b_grads, 1.0 - beta1)
        torch._foreach_mul_(b_exp_avg_sqs, beta2)
        torch._foreach_addcmul_(b_exp_avg_sqs, b_grads, b_grads, 1.0 - beta2)
        denom = torch._foreach_sqrt(b_exp_avg_sqs)
        torch._foreach_add_(denom, eps)

        decoupled = mode == "decoupled"
        neg_steps = [
            -_step_size(lr, beta1, beta2, t, correct_bias) * (lam if decoupled else 1.0)
            for t, lam in zip(b_steps, lams)
        ]
        torch._foreach_addcdiv_(b_params, b_exp_avgs, denom, neg_steps)
        del denom

        if decoupled and anchored_pos:
            _pull_toward_theta_star(a_params, a_theta_star, a_pulls)
        if weight_decay != 0:
            torch._foreach_mul_(b_params, 1.0 - lr * weight_decay)


def _pull_toward_theta_star(params: list[Tensor], theta_star: list[Tensor], pulls: list[float]) -> None:
    """theta -= pull * (theta - theta*), i.e. lerp(theta, theta*, pull): one pass, no temporary."""
    if all(a.dtype == p.dtype for a, p in zip(theta_star, params)):
        torch._foreach_lerp_(params, theta_star, pulls)
    else:
        # Anchors kept in a narrower dtype (bfloat16): upcast one tensor at a time so the
        # temporary stays the size of one parameter, not of the model.
        for p, anchor, pull in zip(params, theta_star, pulls):
            p.lerp_(anchor.to(p.dtype), pull)


def _fused_recadam(
    params: list[Tensor],
    grads: list[Tensor],
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    theta_star: list[Tensor | None],
    steps: list[int],
    *,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    correct_bias: bool,
    recall: RecallSchedule,
    mode: str,
) -> None:
    assert correct_bias and mode == "decoupled", "callers check _fused_supported"
    # One fused call per (device, dtype, step, anchored): lambda and the eps shift depend on the step.
    buckets: dict[tuple[torch.device, torch.dtype, int, bool], list[int]] = defaultdict(list)
    for i, (p, t) in enumerate(zip(params, steps)):
        buckets[(p.device, p.dtype, t, theta_star[i] is not None and recall.recalls)].append(i)

    for (device, _, t, anchored), indices in buckets.items():
        b_params = [params[i] for i in indices]
        lam = recall.lam(t) if anchored else 1.0
        # torch's kernel: theta -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps'). With eps' = eps/sqrt(bc2)
        # that is lr*sqrt(bc2)/bc1 * m / (sqrt(v) + eps): the released rule's step, exactly.
        # The kernel reads the step from these tensors (it does not increment them).
        step_t = torch.full((), float(t), dtype=torch.float32, device=device)
        torch._fused_adam_(
            b_params,
            [grads[i] for i in indices],
            [exp_avgs[i] for i in indices],
            [exp_avg_sqs[i] for i in indices],
            [],
            [step_t] * len(indices),
            amsgrad=False,
            lr=lr * lam,
            beta1=beta1,
            beta2=beta2,
            weight_decay=0.0,
            eps=eps / math.sqrt(1.0 - beta2**t),
            maximize=False,
            grad_scale=None,
            found_inf=None,
        )
        if anchored:
            pull = lr * recall.pull(lam) * recall.pretrain_cof
            _pull_toward_theta_star(b_params, [theta_star[i] for i in indices], [pull] * len(indices))
        if weight_decay != 0:
            torch._foreach_mul_(b_params, 1.0 - lr * weight_decay)


def _as_dtype(tensors: list[Tensor], like: list[Tensor]) -> list[Tensor]:
    return [t if t.dtype == ref.dtype else t.to(ref.dtype) for t, ref in zip(tensors, like)]
