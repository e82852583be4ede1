"""compare and tradeoff read runs of one task computed on one device in one precision (issue 39): a
paired seed or a median across a CPU in bf16 and a GPU in fp32 mixes two sources of difference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_tradeoff import fake, invoke


def computed_on(run: Path, device: str, precision: str, name: str | None = None) -> None:
    summary = json.loads((run / "summary.json").read_text())
    summary.update({"device": device, "precision": precision, **({"device_name": name} if name else {})})
    (run / "summary.json").write_text(json.dumps(summary))


def two_devices(root: Path) -> None:
    for seed in (1, 2, 3):
        computed_on(fake(root, f"vanilla_s{seed}", main=0.80, kept=0.7, seed=seed, optimizer="adamw"),
                    "cpu" if seed == 1 else "cuda", "bf16" if seed == 1 else "fp32")


@pytest.mark.parametrize("command", ["compare", "tradeoff"])
def test_runs_of_two_devices_are_refused_in_one_line_naming_both(tmp_path, command):
    two_devices(tmp_path / "runs")
    out = tmp_path / "t.png"
    result = invoke(command, tmp_path / "runs", *(["--out", out] if command == "tradeoff" else []))
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "cpu bf16 (1 runs, e.g. vanilla_s1)" in line and "cuda fp32 (2 runs" in line
    assert f"--mixed-devices to {command}" in line
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("command", ["compare", "tradeoff"])
def test_mixed_devices_pairs_them_when_asked(tmp_path, command):
    two_devices(tmp_path / "runs")
    out = tmp_path / "t.png"
    result = invoke(command, tmp_path / "runs", "--mixed-devices", *(["--out", out] if command == "tradeoff" else []))
    assert result.exit_code == 0, result.output
    assert command == "compare" or out.is_file()


def test_two_gpu_models_differ_though_both_are_cuda_fp32(tmp_path):
    for seed, name in ((1, "NVIDIA H100 80GB HBM3"), (2, "NVIDIA H200")):
        computed_on(fake(tmp_path / "runs", f"v_s{seed}", main=0.8, kept=0.7, seed=seed), "cuda", "fp32", name)
    result = invoke("compare", tmp_path / "runs")
    assert result.exit_code == 2
    assert "NVIDIA H100 80GB HBM3 (1 runs" in result.output and "NVIDIA H200 (1 runs" in result.output


def test_one_device_and_records_without_one_are_compared(tmp_path):
    """A scored record (evaluate --record) trained nowhere, and runs made before devices were recorded
    name none: neither is a second device."""
    root = tmp_path / "runs"
    for seed in (1, 2):
        computed_on(fake(root, f"v_s{seed}", main=0.8, kept=0.7, seed=seed), "cuda:0", "fp32", "NVIDIA H200")
    fake(root, "merged_s1", main=0.78, kept=0.9, seed=1, record={"merge": "linear"})
    result = invoke("compare", root)
    assert result.exit_code == 0, result.output
