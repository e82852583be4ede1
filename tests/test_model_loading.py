"""A model folder that is not a full checkpoint is refused with one line (exit 2) before anything is written."""

from __future__ import annotations

import shutil

from typer.testing import CliRunner

from recall_cli.cli import app

from conftest import tiny_recipe, write_recipe

runner = CliRunner()


def run_with_model(folder, tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(folder, tmp_path / "out"))
    return runner.invoke(app, ["finetune", str(recipe), "--plain"])


def test_empty_folder(tmp_path):
    (tmp_path / "model").mkdir()
    result = run_with_model(tmp_path / "model", tmp_path)
    assert result.exit_code == 2
    assert "is a folder without config.json" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_folder_without_tokenizer_files(tiny_model_dir, tmp_path):
    """transformers 5 would build a 5-token tokenizer from config.json alone: every word [UNK]."""
    folder = tmp_path / "model"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_model_dir / name, folder / name)
    result = run_with_model(folder, tmp_path)
    assert result.exit_code == 2
    assert "has no tokenizer files" in result.output and "save_pretrained" in result.output
    assert not (tmp_path / "out").exists()


def test_folder_without_weights(tiny_model_dir, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "model.safetensors").unlink()
    result = run_with_model(folder, tmp_path)
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: cannot load the model from {folder}")
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()
