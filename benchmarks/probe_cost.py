"""The probes' share of training time on the quick start (recipes/quickstart.yaml), in one run.

The quick start's own parts are timed in one process, alternating so that drift of a shared machine
hits both alike: a training step exactly as `recall finetune` takes it (batch 32 of SST-2 in the
loop's order, forward, backward, clip, RecAdam step) and one probe measurement (`Prober.measure`) with
the recipe's probe defaults. The default cadence costs one θ* pass at start plus one measurement at
step 0 and at every evaluation, so

    share = (build + n_probes x probe) / (steps x step + build + n_probes x probe)

with build the time to build the prober (θ*'s side), measured once.

    python benchmarks/probe_cost.py                    # quick start defaults
    python benchmarks/probe_cost.py probe.num_texts=256 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from recall_cli.methods import active
from recall_cli.model import build_model, load_tokenizer
from recall_cli.probes.runner import prober_for_run
from recall_cli.recipe import load_recipe
from recall_cli.tasks.batches import BatchOrder
from recall_cli.training.plan import StepPlan, plan_run
from recall_cli.training.setup import build_optimizer, load_task_data, plan_total_steps

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="recipe overrides, e.g. probe.num_pairs=128")
    parser.add_argument("--recipe", default=str(REPO / "recipes" / "quickstart.yaml"))
    parser.add_argument("--rounds", type=int, default=3, help="alternations of (steps, probe)")
    parser.add_argument("--steps-per-round", type=int, default=5)
    args = parser.parse_args()

    recipe = load_recipe(args.recipe, ["train.device=cpu", *args.overrides])
    tc = recipe.train
    device = torch.device("cpu")
    tokenizer = load_tokenizer(recipe.model.name_or_path)
    task = load_task_data(recipe, tokenizer)
    total = plan_total_steps(recipe, len(task.train))
    built = build_model(recipe.model, task.kind, tc.seed)
    model = built.model.to(device).train()
    optimizer = build_optimizer(model, built.theta_star, recipe, plan_run(recipe, total, StepPlan(None, "eager", "fp32", ""), active(recipe)))
    order = BatchOrder(len(task.train), tc.batch_size, tc.seed)
    pad = tokenizer.pad_token_id or 0

    start = time.perf_counter()
    prober = prober_for_run(recipe, model, built.theta_star, tokenizer, device)
    build_s = time.perf_counter() - start
    for note in prober.notes:
        print(f"note: {note}")

    micro = 0

    def train_step() -> float:
        nonlocal micro
        t = time.perf_counter()
        batch = task.kind.collate(task.train, order.batch(micro), pad)
        micro += 1
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - t

    train_step()  # warm-up
    prober.measure(model)
    steps, probes = [], []
    for _ in range(args.rounds):
        steps += [train_step() for _ in range(args.steps_per_round)]
        probes.append(prober.measure(model)["probe_seconds"])
    step_s, probe_s = statistics.median(steps), statistics.median(probes)
    evals = total // tc.eval_every if tc.eval_every else 0
    n_probes = 1 + max(evals, 1)  # step 0, each evaluation (the last step is one)
    probe_total = build_s + n_probes * probe_s
    train_total = total * step_s
    share = probe_total / (train_total + probe_total)
    cfg = recipe.probe
    print(f"probes {','.join(prober.probes)}: {prober.n_texts} texts, {prober.n_pairs} STS pairs, max_length {cfg.max_length}")
    print(f"train step  {step_s * 1000:8.1f} ms (median of {len(steps)})   x {total} steps = {train_total:7.1f} s")
    print(f"probe call  {probe_s * 1000:8.1f} ms (median of {len(probes)})   x {n_probes} + build {build_s:.1f} s = {probe_total:7.1f} s")
    print(f"probe share of training time: {share:.1%} (one probe = {probe_s / step_s:.2f} train steps)")


if __name__ == "__main__":
    main()
