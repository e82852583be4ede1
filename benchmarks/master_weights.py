"""bf16 weights with and without RecAdam's fp32 master weights, against fp32 weights: how much of the update survives.

A tiny BERT classifier (hidden 32, 2 layers, dropout off), its weights rounded to bf16 once so that every variant
starts from the same values, takes --steps RecAdam steps at --lr (2e-5: the paper's) on one fixed batch, its
forward under bf16 autocast in every variant. Printed for bf16 weights updated in place (master_weights=False:
moments in bf16 too) and through fp32 masters (the default): the share of the weights that moved among those
the fp32 run moved, the size of the update against the fp32 run's, and the distance to the fp32 run's weights
in units of that update.

    python benchmarks/master_weights.py                 # lr 2e-5, 20 steps
    python benchmarks/master_weights.py --lr 1e-3

bf16 keeps 8 significant bits: near a weight of 0.05 its spacing is 2**-12 (2.4e-4) and an Adam step of lr 2e-5
rounds back to the weight unless accumulated elsewhere, which the fp32 master does.
"""

from __future__ import annotations

import argparse
import copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    import torch

    from recall_cli.optim import RecAdam
    from recall_cli.testing import tiny_bert

    torch.manual_seed(0)
    base = tiny_bert(head="classifier", vocab_size=100, intermediate_size=64, seed=0, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0).to(torch.bfloat16).float()
    x, y = torch.randint(0, 100, (8, 16)), torch.randint(0, 2, (8,))

    def run(dtype, master: bool) -> list:
        model = copy.deepcopy(base).to(dtype)
        params = list(model.parameters())
        opt = RecAdam([{"params": params, "anchors": [p.detach().clone() for p in params]}], lr=args.lr,
                      master_weights=master, anneal_t0=10)
        for _ in range(args.steps):
            with torch.autocast("cpu", torch.bfloat16):
                loss = model(input_ids=x, labels=y).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
        return [p.detach().float() for p in params]

    start = [p.detach() for p in base.parameters()]
    reference = run(torch.float32, True)
    update = sum((r - s).pow(2).sum() for r, s in zip(reference, start)).sqrt()
    moved_ref = sum((r != s).sum() for r, s in zip(reference, start))
    print(f"tiny BERT, {args.steps} RecAdam steps at lr {args.lr:g}, torch {torch.__version__}")
    print("| bf16 weights | weights moved (of those fp32 moved) | update size / fp32's | distance to fp32's weights / fp32's update |")
    print("|---|---|---|---|")
    for master in (False, True):
        got = run(torch.bfloat16, master)
        moved = sum(((g != s) & (r != s)).sum() for g, s, r in zip(got, start, reference)) / moved_ref
        size = sum((g - s).pow(2).sum() for g, s in zip(got, start)).sqrt() / update
        error = sum((g - r).pow(2).sum() for g, r in zip(got, reference)).sqrt() / update
        name = "fp32 master weights (default)" if master else "in place (master_weights=False)"
        print(f"| {name} | {moved:.1%} | {size:.2f} | {error:.2f} |")


if __name__ == "__main__":
    main()
