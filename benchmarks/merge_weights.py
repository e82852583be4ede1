"""How RECALL's choices move its weights, on real models: gamma rule, temperature, clusters, pool.

Every model's per-layer representations are computed once on a pool of the reference's task
inputs; each setting then picks its typical samples from that pool (k-means++ on the reference's
last layer, as `recall merge` does) and computes similarities and weights from the stored rows.

    python benchmarks/merge_weights.py runs/sst2 runs/mrpc          # reference = the last model
    python benchmarks/merge_weights.py runs/sst2 runs/sst2_then_mrpc --pool 1024

Prints: the similarity of every non-reference model per layer under each gamma rule; the weights
per temperature; the similarity's spread over k-means seeds for several numbers of clusters and
pool sizes (a setting is stable when its spread is small next to the differences between layers).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from recall_cli.merge import open_sources  # noqa: E402
from recall_cli.merge.recall import gammas, layer_representations, similarities, softmax_weights, typical_samples  # noqa: E402
from recall_cli.merge.samples import task_samples  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--pool", type=int, default=1024)
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()

    torch.set_num_threads(max(1, torch.get_num_threads()))
    sources = open_sources(args.models)
    ref = len(sources) - 1
    texts, where, max_len = task_samples(None, sources[ref])
    rng = np.random.default_rng(0)
    pool_idx = sorted(rng.choice(len(texts), size=min(args.pool, len(texts)), replace=False).tolist())
    pool = [texts[i] for i in pool_idx]

    from recall_cli.tasks import Examples
    from recall_cli.tasks.batches import tokenize
    from recall_cli.model import load_tokenizer

    tok = load_tokenizer(str(sources[ref].folder))
    feats = tokenize(Examples(pool, [0] * len(pool), "pool"), tok, max_len)
    reps = [layer_representations(s.folder, feats, 64, torch.device("cpu"), tok.pad_token_id or 0) for s in sources]
    names = [s.name for s in sources]
    others = [i for i in range(len(sources)) if i != ref]
    layers = reps[ref].shape[0]
    print(f"models {names}, reference {names[ref]}, pool {len(pool)} from {where}")

    def sim(chosen, rule):
        sub = [r[:, chosen] for r in reps]
        g = gammas(sub, ref, rule)
        return similarities(sub, ref, g), g

    chosen16 = typical_samples(reps[ref][-1].numpy(), 16, 0)
    print("\n## similarity of each non-reference model per layer, 16 typical samples (seed 0)")
    rules = ["median", "hidden"]
    header = "| layer | " + " | ".join(f"{names[i]} γ={r}" for r in rules for i in others) + " | ‖r_ref‖² mean |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    tables = {r: sim(chosen16, r) for r in rules}
    for n in range(layers):
        norm = float((reps[ref][n, chosen16] ** 2).sum(-1).mean())
        d = {r: tables[r][0] for r in rules}
        print(f"| {n} | " + " | ".join(f"{d[r][n, i]:.3f}" for r in rules for i in others) + f" | {norm:.1f} |")
    print("gamma per layer:", {r: [f"{g:.3g}" for g in tables[r][1]] for r in rules})

    print("\n## weight of the reference per layer, by temperature (16 samples)")
    taus = [10, 1, 0.5, 0.2, 0.1, 0.05]
    for r in rules:
        s = tables[r][0]
        print(f"\nγ = {r}\n| τ | " + " | ".join(f"layer {n}" for n in range(layers)) + " |")
        print("|" + "---|" * (layers + 1))
        for tau in taus:
            w = softmax_weights(s, tau)
            print(f"| {tau:g} | " + " | ".join(f"{w[n, ref]:.3f}" for n in range(layers)) + " |")

    print("\n## stability: similarity of", names[others[0]], "per layer, mean ± sd over", args.seeds, "k-means seeds (γ = hidden)")
    print("| pool | clusters | " + " | ".join(f"layer {n}" for n in range(layers)) + " |")
    print("|" + "---|" * (layers + 2))
    for pool_size in (128, 512, len(pool)):
        sub_pool = list(range(min(pool_size, len(pool))))
        for k in (4, 8, 16, 32, 64):
            runs = []
            for seed in range(args.seeds):
                perm = np.random.default_rng(seed).permutation(len(pool))[: len(sub_pool)]
                picked = typical_samples(reps[ref][-1, perm].numpy(), k, seed)
                runs.append(sim(sorted(perm[picked].tolist()), "hidden")[0][:, others[0]])
            runs = np.array(runs)
            print(f"| {len(sub_pool)} | {k} | " + " | ".join(f"{runs[:, n].mean():.3f} ± {runs[:, n].std():.3f}" for n in range(layers)) + " |")


if __name__ == "__main__":
    main()
