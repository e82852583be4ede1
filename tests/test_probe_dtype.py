"""`recall probe --dtype bf16`: the models' weights and forward passes in bf16 (half a 7B model's memory), the
numbers computed from the hidden states and logits in float32 -- within a stated tolerance of the fp32 probe's
on tiny models, and not equal to them (the forward really ran in bf16)."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from recall_cli.cli import app
from recall_cli.testing import tiny_bert_dir

from conftest import make_run

runner = CliRunner()

# bf16 keeps 8 significant bits (a relative rounding of ~0.4% a value); pooled over 64 sentences and compared
# in float64, the representation measures move by 1e-4 here, a Spearman ranking of 64 pairs by a few 1e-3.
TOLERANCE = {"cka": 2e-3, "cka_debiased": 2e-3, "drift": 2e-3, "sts": 0.02, "sts_ref": 0.02, "sts_retained": 0.02,
             "lm_loss": 0.02, "lm_kept": 0.02, "kl": 0.02}


def _probe(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["probe", *args, "--json"])
    return result.exit_code, result.stdout if result.exit_code == 0 else result.output


@pytest.mark.slow
def test_an_encoder_probed_in_bf16_agrees_with_fp32(tiny_model_dir, tmp_path):
    run = make_run(tmp_path, "run", tiny_model_dir, seed=5)
    common = [str(run), "--against", str(tiny_model_dir), "--probes", "cka,drift,sts", "--num-texts", "64",
              "--num-pairs", "64", "--max-length", "32", "--device", "cpu"]
    rows = {}
    for dtype in ("fp32", "bf16"):
        code, out = _probe(*common, "--dtype", dtype)
        assert code == 0, out
        (rows[dtype],) = json.loads(out)
    assert "dtype" not in rows["fp32"] and rows["bf16"]["dtype"] == "bf16"
    for key in ("cka", "cka_debiased", "drift", "sts", "sts_ref", "sts_retained"):
        a, b = rows["fp32"][key], rows["bf16"][key]
        assert isinstance(b, float) and math.isfinite(b)
        assert abs(a - b) <= TOLERANCE[key], (key, a, b)
    assert rows["bf16"]["cka"] != rows["fp32"]["cka"]  # the forward ran in bf16, not silently in fp32


@pytest.mark.slow
def test_a_causal_lm_probed_in_bf16_agrees_with_fp32(tmp_path):
    from lm_tiny import tiny_llama_dir

    base = tiny_llama_dir(tmp_path / "base", seed=0)
    tuned = tiny_llama_dir(tmp_path / "tuned", seed=0)
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(str(tuned / "model.safetensors"))
    torch.manual_seed(1)
    save_file({k: v + 0.02 * torch.randn_like(v) for k, v in weights.items()}, str(tuned / "model.safetensors"),
              metadata={"format": "pt"})
    common = [str(tuned), "--against", str(base), "--probes", "lm,kl", "--num-texts", "16", "--max-length", "32",
              "--device", "cpu"]
    rows = {}
    for dtype in ("fp32", "bf16"):
        code, out = _probe(*common, "--dtype", dtype)
        assert code == 0, out
        (rows[dtype],) = json.loads(out)
    for key in ("lm_loss", "lm_kept", "kl"):
        a, b = rows["fp32"][key], rows["bf16"][key]
        assert abs(a - b) <= TOLERANCE[key] * max(1.0, abs(a)), (key, a, b)
    assert rows["bf16"]["lm_loss"] != rows["fp32"]["lm_loss"]


@pytest.mark.parametrize("dtype, said", [("fp16", "--dtype fp16 needs a CUDA device"), ("int8", "--dtype int8: use fp32, bf16 or fp16")])
def test_a_dtype_the_device_lacks_is_one_line_exit_2(tiny_model_dir, dtype, said):
    result = runner.invoke(app, ["probe", str(tiny_model_dir), "--device", "cpu", "--dtype", dtype])
    assert result.exit_code == 2, result.output
    assert said in result.output and "Traceback" not in result.output


@pytest.mark.slow
def test_recall_hidden_states_in_bf16_give_the_fp32_weights_within_tolerance(tiny_model_dir, tmp_path):
    """RECALL's per-layer weights from hidden states computed in bf16 (--dtype bf16) against fp32's: the
    similarities are exp(-gamma d^2) of pooled states compared in fp32, softmaxed at temperature 0.05, so a
    bf16 forward moves each weight by well under 0.05 here; merge.json records the dtype."""
    runs = [make_run(tmp_path, name, tiny_model_dir, seed) for name, seed in (("a", 1), ("b", 2))]
    samples = tmp_path / "samples.txt"
    samples.write_text("\n".join(["the film was a delight", "a dull, lifeless script", "an instant classic",
                                  "nothing works here", "the plot is thin but the cast is great", "He said it would rain.",
                                  "a slow start and a moving end", "I would not watch it again"]) + "\n", encoding="utf-8")
    records = {}
    for dtype in ("fp32", "bf16"):
        out = tmp_path / f"m_{dtype}"
        result = runner.invoke(app, ["merge", *map(str, runs), "--out", str(out), "--samples", str(samples),
                                     "--clusters", "8", "--device", "cpu", "--dtype", dtype, "--json"])
        assert result.exit_code == 0, result.output
        records[dtype] = json.loads((out / "merge.json").read_text())
    assert "dtype" not in records["fp32"] and records["bf16"]["dtype"] == "bf16"
    # every sample a cluster of its own: k-means on a tiny random model's states is chaotic, and its choice
    # under bf16 is not what is compared here (the weights on the same samples are)
    assert records["bf16"]["samples_used"] == records["fp32"]["samples_used"]
    moved = [abs(a - b) for r32, r16 in zip(records["fp32"]["layers"], records["bf16"]["layers"])
             for a, b in zip(r32["weight"], r16["weight"])]
    assert max(moved) <= 0.05, moved
    sims = [(a, b) for r32, r16 in zip(records["fp32"]["layers"], records["bf16"]["layers"])
            for a, b in zip(r32["similarity"], r16["similarity"])]
    assert any(a != b for a, b in sims)  # the forward ran in bf16
    refused = runner.invoke(app, ["merge", *map(str, runs), "--out", str(tmp_path / "x"), "--samples", str(samples),
                                  "--device", "cpu", "--dtype", "fp16"])
    assert refused.exit_code == 2 and "--dtype fp16 needs a CUDA device" in refused.output
    assert not (tmp_path / "x").exists()
