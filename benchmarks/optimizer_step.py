"""Time one optimizer step over a BERT-base-shaped parameter set (about 109M fp32 parameters).

Compares torch AdamW (foreach, for-loop, fused), RecAdam (foreach, single-tensor, fused), and a
per-tensor Python loop written in the style of the original RecAdam release. Steps of the
optimizers alternate, so that drift of the machine (thermals, other load) hits all of them alike;
each time is the median of --repeats steps after --warmup steps.

    python benchmarks/optimizer_step.py                 # CPU
    python benchmarks/optimizer_step.py --device cuda   # GPU, when one is available
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

from recall_cli.optim import RecAdam, anneal_lambda
from recall_cli.testing import BERT_BASE, tiny_bert

HP = dict(lr=2e-5, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)
RECALL = dict(anneal_fun="sigmoid", anneal_k=0.5, anneal_t0=250, anneal_w=1.0, pretrain_cof=5000.0)


class ReleasedStyleRecAdam(torch.optim.Optimizer):
    """The published reference update, one tensor at a time in Python (for timing only).

    Like the original release it allocates (theta - theta*) for every tensor, but theta* is kept in
    the per-parameter state and the non-deprecated tensor overloads are used.
    """

    def __init__(self, groups, **defaults):
        super().__init__(groups, dict(HP, **RECALL, **defaults))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                state = self.state[p]
                if "step" not in state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                t, m, v, g = state["step"], state["exp_avg"], state["exp_avg_sq"], p.grad
                m.mul_(beta1).add_(g, alpha=1.0 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
                denom = v.sqrt().add_(group["eps"])
                step_size = group["lr"] * math.sqrt(1.0 - beta2**t) / (1.0 - beta1**t)
                anchor = state.get("anchor")
                if anchor is not None:
                    lam = anneal_lambda(group["anneal_fun"], t, group["anneal_k"], group["anneal_t0"], group["anneal_w"])
                    p.addcdiv_(m, denom, value=-step_size * lam)
                    p.add_(p - anchor, alpha=-group["lr"] * (group["anneal_w"] - lam) * group["pretrain_cof"])
                else:
                    p.addcdiv_(m, denom, value=-step_size)
                if group["weight_decay"] > 0:
                    p.add_(p, alpha=-group["lr"] * group["weight_decay"])


def bert_base_parameters(device: torch.device) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(body, head) parameter tensors of bert-base-uncased for sequence classification, with gradients."""
    model = tiny_bert(head="classifier", num_labels=2, seed=0, **BERT_BASE).to(device)
    body, head = [], []
    for name, p in model.named_parameters():
        q = p.detach().clone().requires_grad_(True)
        q.grad = torch.randn_like(q) * 1e-3
        (head if name.startswith("classifier") else body).append(q)
    return body, head


def build(name: str, device: torch.device):
    body, head = bert_base_parameters(device)
    anchors = [p.detach() + 1e-3 for p in body]
    if name == "AdamW (foreach)":
        return torch.optim.AdamW(body + head, foreach=True, **HP)
    if name == "AdamW (fused)":
        return torch.optim.AdamW(body + head, fused=True, **HP)
    if name == "AdamW (for-loop)":
        return torch.optim.AdamW(body + head, foreach=False, **HP)
    groups = [{"params": body, "anchors": anchors}, {"params": head}]
    if name == "RecAdam (foreach)":
        return RecAdam(groups, foreach=True, **HP, **RECALL)
    if name == "RecAdam (single-tensor)":
        return RecAdam(groups, foreach=False, **HP, **RECALL)
    if name == "RecAdam (fused)":
        return RecAdam(groups, fused=True, **HP, **RECALL)
    if name == "released per-tensor loop":
        opt = ReleasedStyleRecAdam([{"params": body}, {"params": head}])
        for p, a in zip(body, anchors):
            opt.state[p]["anchor"] = a
        return opt
    raise ValueError(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    device = torch.device(args.device)

    # torch's CPU default is the for-loop kernel; fused AdamW exists on CPU too since torch 2.4.
    names = ["AdamW (foreach)", "AdamW (for-loop)", "AdamW (fused)",
             "RecAdam (foreach)", "RecAdam (single-tensor)", "RecAdam (fused)", "released per-tensor loop"]
    optimizers = {name: build(name, device) for name in names}
    n_params = sum(p.numel() for p in optimizers[names[0]].param_groups[0]["params"])

    def timed_step(opt) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(args.warmup + args.repeats):
        for name in names:  # alternate step by step
            elapsed = timed_step(optimizers[name])
            if i >= args.warmup:
                times[name].append(elapsed)

    baseline = "AdamW (fused)" if device.type == "cuda" else "AdamW (foreach)"
    base = statistics.median(times[baseline])
    print(f"device: {device} ({torch.cuda.get_device_name() if device.type == 'cuda' else f'{torch.get_num_threads()} threads'}), "
          f"{n_params / 1e6:.1f}M parameters, median of {args.repeats} steps after {args.warmup} warm-up")
    print(f"| optimizer | step time (ms) | ratio to {baseline} |")
    print("|---|---:|---:|")
    for name in names:
        med = statistics.median(times[name])
        print(f"| {name} | {med * 1e3:.1f} | {med / base:.2f} |")


if __name__ == "__main__":
    main()
