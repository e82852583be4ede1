"""Adapter options a model cannot take are one line, exit 2, on a run and on --dry-run (issue 41): a LoRA
rank of 1e8 failed in the allocator (exit 1), a rank above the hidden size was accepted, and a
target_modules name the model does not have was dropped silently when another one matched."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from recall_cli.cli import app

from conftest import tiny_recipe, write_recipe

runner = CliRunner()


@pytest.mark.parametrize("dry_run", [True, False])
@pytest.mark.parametrize("model, expected", [
    ({"lora": {"r": 100_000_000}}, r"model.lora.r: 100000000 is above what .* can hold \(its smaller dimension is \d+\): set it at most \d+"),
    ({"lora": {"r": 4, "target_modules": ["query", "quary"]}}, r"model.lora.target_modules: this model has no module named 'quary' \(its linear layers are named .*query"),
    ({"osf": {"rank": 2, "target_modules": ["value", "vaule"]}}, r"model.osf.target_modules: this model has no module named 'vaule'"),
])
@pytest.mark.slow
def test_an_option_the_model_cannot_take_is_one_line(tiny_model_dir, tmp_path, model, expected, dry_run):
    import re

    recipe = tiny_recipe(tiny_model_dir, tmp_path / "run", optimizer={"name": "adamw"}, model=None)
    recipe["model"] = {"name_or_path": str(tiny_model_dir), "init": "pretrained", **model}
    path = write_recipe(tmp_path / "r.yaml", recipe)
    result = runner.invoke(app, ["finetune", str(path), "--plain", *(["--dry-run"] if dry_run else [])])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and re.search(expected, errors[0]), result.output
    assert "Traceback" not in result.output and not (tmp_path / "run").exists()
