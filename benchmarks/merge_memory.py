"""Peak memory of `recall merge` as the number of models grows: it should stay near two models.

N classifiers of one shape (BERT-base by default: 12 layers, hidden 768, 110M parameters, 438 MB in
float32) are built from a config (random weights, each copy perturbed: memory needs no real weights),
saved with save_pretrained, and merged with N = 2, 4, 8 by recall_cli.merge.run_merge, the function
`recall merge` calls (RECALL with --samples FILE --clusters 4 --pool 16 --device cpu). Each merge runs
in its own fresh process (so that its peak is its own) that reports its peak RSS (VmHWM, reset after the imports with /proc/self/clear_refs,
so the peak is the merge's own above the RSS the imports leave). The result is printed
in units of one model's size on disk.

    python benchmarks/merge_memory.py                         # BERT-base shape, linear and recall
    python benchmarks/merge_memory.py --layers 4 --counts 2 4   # quicker
    python benchmarks/merge_memory.py --methods linear recall ties   # TIES too (theta* = one more model)
    python benchmarks/merge_memory.py --shards 4     # inputs split in 4 model-0000i-of-00004.safetensors + index

The fusion reads one tensor at a time: linear, recall and task arithmetic keep a running sum (one
model's copy read at a time), TIES reads rows of all N copies in 16 MB chunks. Recall adds its
representations (one model loaded at a time, a few samples) on top.

Each merge runs two ways in the same run (--ways): "whole", how merge wrote before it streamed (the merged
encoder collected by engine.fuse, then each output built in memory by safetensors' save_file), and
"streamed", `recall merge` itself (each merged tensor written into every output as it is made,
merge/writer.py). The last column is the peak in units of the largest tensor (float32).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, sys
from pathlib import Path
from recall_cli import merge as m
# run_merge imports the engine (torch, safetensors) on first use: imported here, it stays in the baseline
from recall_cli import runtime  # noqa: F401
from recall_cli.merge import engine  # noqa: F401
from transformers import AutoModel, AutoTokenizer  # what a merge imports anyway (the baseline too)
import sklearn.cluster
args = json.loads(sys.argv[1])

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])

# Imports peak higher than they settle: reset the peak (Linux clear_refs 5) so that what is measured
# is the merge's own peak above the process as it stands after imports.
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
after_imports = status("VmRSS:")
if args["models"] and args["way"] == "whole":
    # The way `recall merge` wrote before it streamed: the whole merged encoder collected (engine.fuse), then
    # each output built in memory by safetensors' save_file (the encoder again, under the source's names, + head).
    from safetensors.torch import save_file
    from recall_cli.merge.io import read_tensors
    from recall_cli.plugins.merges import merges
    sources = engine.open_sources(args["models"])
    base = args["base"] if args["method"] in ("task_arithmetic", "ties") else None
    given = dict(base=base, samples=args["samples"], clusters=4, pool=16)
    values = {}
    for o in merges()[args["method"]].options:  # each option as the command line hands it: parsed
        v = given.get(o.name, o.default)
        values[o.name] = o.parse(v) if o.parse is not None and v is not None else v
    method, _ = merges()[args["method"]].build(sources, values, device=None)
    theta = engine.base_theta_star(sources, base) if method.needs_base else None
    merged = engine.fuse(sources, method, theta)
    Path(args["out"]).mkdir()
    for s in sources:
        tensors = {s.key(n): t for n, t in merged.items()}
        tensors.update(read_tensors(s.files, s.head + s.kept))
        save_file(tensors, str(Path(args["out"]) / f"{s.name}.safetensors"), metadata={"format": "pt"})
        del tensors
elif args["models"]:
    # theta* for task arithmetic and TIES: one more model of the same shape (memory needs no real one)
    base = args["base"] if args["method"] in ("task_arithmetic", "ties") else None
    options = {"samples": args["samples"], "clusters": 4, "pool": 16, "base": base}
    m.run_merge(args["models"], Path(args["out"]), args["method"], options, device="cpu")  # what `recall merge` runs
print(json.dumps({"after_imports_kb": after_imports, "peak_kb": status("VmHWM:")}))
"""


def build_models(root: Path, n: int, layers: int, hidden: int) -> list[str]:
    import torch
    from transformers.utils import logging as hf_logging

    from recall_cli.testing import save_with_tokenizer, tiny_bert, wordpiece_tokenizer

    hf_logging.disable_progress_bar()
    # Offline, as when this imported tests/conftest.py for the tokenizer (the merge children inherit it).
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(name, "1")

    tokenizer = wordpiece_tokenizer()  # BERT's 30522-token WordPiece vocabulary
    model = tiny_bert(head="classifier", num_labels=2, hidden_size=hidden, num_layers=layers,
                      num_heads=max(1, hidden // 64), intermediate_size=4 * hidden, max_positions=512,
                      vocab_size=30522, seed=0)
    paths = []
    for i in range(n):
        folder = root / f"model{i}"
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1e-3 * torch.randn_like(p))
        save_with_tokenizer(model, folder, tokenizer=tokenizer)
        paths.append(str(folder))
    return paths


def shard_folder(folder: Path, parts: int) -> None:
    """Split ``folder``'s model.safetensors in ``parts`` files and an index, as save_pretrained does past its
    max_shard_size (tensors in name order, about equal bytes a file)."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / "model.safetensors"))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    weight_map, chunk, size, index = {}, {}, 0, 1

    def flush() -> None:
        nonlocal chunk, size, index
        file = f"model-{index:05d}-of-{parts:05d}.safetensors"
        save_file(chunk, str(folder / file), metadata={"format": "pt"})
        weight_map.update({n: file for n in chunk})
        chunk, size, index = {}, 0, index + 1

    for name in sorted(tensors):
        chunk[name] = tensors[name].contiguous()
        size += tensors[name].numel() * tensors[name].element_size()
        if size >= total / parts and index < parts:
            flush()
    if chunk:
        flush()
    files = sorted(set(weight_map.values()))  # fewer files than asked when one tensor fills several shares
    renamed = {old: f"model-{i + 1:05d}-of-{len(files):05d}.safetensors" for i, old in enumerate(files)}
    for old, new in renamed.items():
        (folder / old).rename(folder / new)
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": {n: renamed[f] for n, f in weight_map.items()}}))
    (folder / "model.safetensors").unlink()


def peak_rss_mb(models: list[str], out: Path, method: str, samples: Path, base: str,
                way: str = "streamed") -> tuple[float, float]:
    payload = json.dumps({"models": models, "out": str(out), "method": method, "samples": str(samples), "base": base,
                          "way": way})
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, "-c", _CHILD, payload], capture_output=True, text=True, env=env, check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    return got["after_imports_kb"] / 1024, got["peak_kb"] / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--counts", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--methods", nargs="+", default=["linear", "recall"],
                        choices=["linear", "recall", "task_arithmetic", "ties"])
    parser.add_argument("--ways", nargs="+", default=["whole", "streamed"], choices=["whole", "streamed"],
                        help="whole: the merged encoder collected and each output built in memory (how merge wrote "
                             "before it streamed); streamed: `recall merge` as it is")
    parser.add_argument("--shards", type=int, default=0, help="split each input's weights in this many files (0: one file)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="merge_memory_") as tmp:
        root = Path(tmp)
        models = build_models(root, max(args.counts) + 1, args.layers, args.hidden)
        theta_star = models.pop()  # for task arithmetic and TIES
        model_mb = (Path(models[0]) / "model.safetensors").stat().st_size / 2**20
        from safetensors import safe_open

        with safe_open(str(Path(models[0]) / "model.safetensors"), "pt") as f:
            largest_mb = max(math.prod(f.get_slice(k).get_shape()) * 4 for k in f.keys()) / 2**20
        print(f"its largest tensor: {largest_mb:.0f} MB in float32")
        if args.shards > 1:
            for folder in models + [theta_star]:
                shard_folder(Path(folder), args.shards)
            shards = len(list(Path(models[0]).glob("model-*.safetensors")))
            print(f"each input's weights in {shards} safetensors files and model.safetensors.index.json")
        samples = root / "samples.txt"
        samples.write_text("\n".join(f"sample sentence number {i} for the typical set" for i in range(16)) + "\n")
        print(f"one model: {model_mb:.0f} MB on disk ({args.layers} layers, hidden {args.hidden})")
        print("| N | method | written | inputs on disk (MB) | RSS after imports (MB) | peak RSS (MB) | peak above imports (MB) "
              "| in models | in largest tensors |")
        print("|---|---|---|---|---|---|---|---|---|")
        for n in args.counts:
            for method in args.methods:
                for way in args.ways:
                    out = root / f"out_{method}_{n}_{way}"
                    base, peak = peak_rss_mb(models[:n], out, method, samples, theta_star, way)
                    above = peak - base
                    print(f"| {n} | {method} | {way} | {n * model_mb:.0f} | {base:.0f} | {peak:.0f} | {above:.0f} "
                          f"| {above / model_mb:.2f} | {above / largest_mb:.1f} |", flush=True)
                    shutil.rmtree(out)


if __name__ == "__main__":
    main()
