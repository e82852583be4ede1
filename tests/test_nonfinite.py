"""No checkpoint from NaN/inf weights, and no score or prediction from a model whose outputs are NaN/inf
(issue 41): a diverged head phase used to leave lp/ with NaN in the classifier, which predict then read as
class 0 for every row and evaluate as accuracy 0.5, both with exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from recall_cli.cli import app

from conftest import tiny_recipe, write_recipe

runner = CliRunner()


def invoke(*args) -> object:
    return runner.invoke(app, [str(a) for a in args])


def one_line_error(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("log_every", [1, 5])
def test_a_head_phase_that_diverges_writes_no_lp_folder(tiny_model_dir, tmp_path, log_every):
    """linear_probe_lr=1e38 makes the head's weights inf in one step: however rarely the run logs, lp/
    is never written from them, and the run exits 3 naming the weight and the step."""
    recipe = tiny_recipe(tiny_model_dir, tmp_path / "run", optimizer={"name": "adamw", "lr": 1e-3},
                         train={"linear_probe_steps": 3, "linear_probe_lr": 1e38, "log_every": log_every,
                                "eval_every": 0, "max_steps": 8}, probe={"enabled": False})
    result = invoke("finetune", write_recipe(tmp_path / "r.yaml", recipe), "--plain")
    assert result.exit_code == 3, result.output
    assert "diverged" in result.output
    assert not (tmp_path / "run" / "lp").exists()
    for folder in ("best", "last"):  # whatever a run left, it holds only finite weights
        weights = tmp_path / "run" / folder / "model.safetensors"
        if weights.is_file():
            assert all(torch.isfinite(t).all() for t in load_file(str(weights)).values() if t.is_floating_point())


@pytest.fixture
def nan_checkpoint(tiny_model_dir, tmp_path) -> Path:
    """A finished tiny run whose best/ classifier was then poisoned with NaN (what a diverged save left)."""
    recipe = tiny_recipe(tiny_model_dir, tmp_path / "run", optimizer={"name": "adamw"}, train={"max_steps": 2, "eval_every": 2},
                         probe={"enabled": False})
    assert invoke("finetune", write_recipe(tmp_path / "r.yaml", recipe), "--plain").exit_code == 0
    weights = tmp_path / "run" / "best" / "model.safetensors"
    tensors = load_file(str(weights))
    name = next(n for n in tensors if n.startswith("classifier") and n.endswith("weight"))
    tensors[name] = torch.full_like(tensors[name], float("nan"))
    save_file(tensors, str(weights), metadata={"format": "pt"})
    return tmp_path / "run"


@pytest.mark.slow
def test_evaluate_refuses_a_model_whose_outputs_are_nan(nan_checkpoint, tmp_path):
    record = tmp_path / "record"
    result = invoke("evaluate", nan_checkpoint, "--record", record, "--no-probe")
    assert result.exit_code == 3
    line = one_line_error(result)
    assert "outputs are NaN/inf on 40 of 40 rows" in line and "nothing was written" in line
    assert not record.exists()


@pytest.mark.slow
def test_predict_refuses_a_model_whose_outputs_are_nan(nan_checkpoint, tmp_path):
    out = tmp_path / "preds.tsv"
    result = invoke("predict", nan_checkpoint, "--split", "dev", "--out", out)
    assert result.exit_code == 3, result.output
    assert "outputs are NaN/inf" in one_line_error(result)
    assert not out.exists() and not list(tmp_path.glob(".preds*"))


def test_predict_refuses_to_write_over_the_file_it_predicts(tmp_path, tiny_model_dir):
    rows = tmp_path / "rows.tsv"
    rows.write_text("sentence\nhello\n")
    result = invoke("predict", tiny_model_dir, "--split", rows, "--out", rows, "--overwrite", "--task", "sst2")
    assert result.exit_code == 2
    assert "is the file being predicted: write the predictions to another file" in one_line_error(result)
    assert rows.read_text() == "sentence\nhello\n"
