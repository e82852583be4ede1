"""Hostile input, round 3 (issue 41): bad input that used to exit 1 with another library's message, or
that the library accepted and then did nothing with. Each is one line and exit 2 now (or, in the
library, a TypeError / ValueError saying what is wrong)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from recall_cli.cli import app
from recall_cli.testing import tiny_bert_dir

from conftest import GLUE, tiny_recipe, write_recipe

runner = CliRunner()


def one_error_line(result) -> str:
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    return errors[0]


class Evil:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_a_checkpoint_whose_pickle_holds_more_than_tensors_is_one_line(tmp_path, tiny_model_dir):
    """pytorch_model.bin with a global in it: torch's weights_only load refuses it in six lines (exit 1 before);
    recall says what it is in one, exit 2, and never runs it."""
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_model_dir, folder)
    weights = {k: v for k, v in __import__("safetensors.torch").torch.load_file(str(folder / "model.safetensors")).items()}
    (folder / "model.safetensors").unlink()
    torch.save({**weights, "evil": Evil()}, folder / "pytorch_model.bin")
    result = runner.invoke(app, ["evaluate", str(folder), "--task", "mrpc", "--data-dir", str(GLUE / "MRPC")])
    assert result.exit_code == 2
    line = one_error_line(result)
    assert "its weights are a pickle that holds more than tensors (Unsupported global: GLOBAL print)" in line
    assert "never runs its code" in line and "this must never run" not in result.output


@pytest.mark.slow
def test_a_config_describing_a_model_bigger_than_memory_is_refused_before_allocating(tmp_path, tiny_model_dir):
    folder = tmp_path / "absurd"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_size=10**7, intermediate_size=10**7, num_attention_heads=1)
    (folder / "config.json").write_text(json.dumps(config))
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(folder, tmp_path / "run"))
    result = runner.invoke(app, ["finetune", str(recipe), "--dry-run", "--plain"])
    assert result.exit_code == 2
    assert "config.json describes a model of about" in one_error_line(result) and "check those sizes" in result.output


@pytest.mark.slow
def test_merging_the_current_folder_names_its_output_after_the_folder(tmp_path, monkeypatch):
    """`recall merge . ../b`: "." used to name an output folder '' (OUT itself), exit 4."""
    for name in ("a", "b"):
        tiny_bert_dir(tmp_path / name, seed=len(name))
    monkeypatch.chdir(tmp_path / "a")
    result = runner.invoke(app, ["merge", ".", "../b", "--method", "linear", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a", "b", "merge.json"]


@pytest.mark.slow
def test_resuming_a_run_whose_config_now_names_another_task_is_one_line(tmp_path, tiny_model_dir):
    run = tmp_path / "run"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, run, train={"max_steps": 4, "save_every": 2}))
    assert runner.invoke(app, ["finetune", str(recipe), "--plain"]).exit_code == 0
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["task"].update(name="stsb", data_dir=str(GLUE / "STS-B"))
    config["train"]["max_steps"] = 8
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    before = (run / "last" / "model.safetensors").read_bytes()
    result = runner.invoke(app, ["finetune", "--resume", str(run), "--plain"])
    assert result.exit_code == 2
    line = one_error_line(result)
    assert "names task stsb (1 output, regression), but last/ was trained with 2 (single_label_classification)" in line
    assert (run / "last" / "model.safetensors").read_bytes() == before


# ---- the library ---------------------------------------------------------------------------------


def test_library_calls_on_what_they_cannot_use_say_so(tiny_model_dir):
    import recall_cli
    from transformers import AutoModelForSequenceClassification

    linear = torch.nn.Linear(4, 2)
    with pytest.raises(TypeError, match="freeze_encoder: model is a Linear, not a classifier"):
        recall_cli.freeze_encoder(linear)
    assert all(p.requires_grad for p in linear.parameters())
    with pytest.raises(TypeError, match="embedding_anchor: model is a Linear, not a transformers model"):
        recall_cli.embedding_anchor(linear, tiny_model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=2)
    batch = {"input_ids": torch.tensor([[101, 2000, 102]]), "attention_mask": torch.ones(1, 3, dtype=torch.long)}
    with pytest.raises(ValueError, match="loss_step: the model returned no loss: the batch needs its 'labels' "
                                         r"\(it has attention_mask, input_ids\)"):
        recall_cli.loss_step(model, batch, [], step=1)
    recall_cli.freeze_encoder(model)  # a real classifier: the head trains, the encoder does not
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {"classifier.weight", "classifier.bias"}


@pytest.mark.slow
def test_probe_against_a_model_of_another_width_is_a_value_error(tmp_path, tiny_model_dir):
    import recall_cli
    from transformers import AutoModel, AutoTokenizer

    wider = tiny_bert_dir(tmp_path / "wide", hidden_size=64, num_heads=2, intermediate_size=128)
    model = AutoModel.from_pretrained(tiny_model_dir)
    with pytest.raises(ValueError, match=r"probe: the model's hidden size is 32 and against's .* is 64"):
        recall_cli.probe(model, AutoTokenizer.from_pretrained(tiny_model_dir), wider, probes=["sts"], num_pairs=8)


@pytest.mark.slow
def test_a_wrong_path_is_refused_before_torch_is_imported(tmp_path):
    """evaluate and predict on a folder that does not exist: one line, exit 2, torch never imported
    (it took ~60 s on a loaded machine: torch and the model loaded first)."""
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from recall_cli.cli import app\n"
        "for args in (['evaluate', 'no/such/run'], ['predict', 'no/such/run', '--split', 'dev', '--out', 'p.tsv']):\n"
        "    r = CliRunner().invoke(app, args)\n"
        "    print(args[0], r.exit_code, 'torch' in sys.modules, r.output.strip())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for command in ("evaluate", "predict"):
        assert (f"{command} 2 False error: no/such/run: no such run directory or checkpoint folder (check the path)"
                in done.stdout.splitlines()), done.stdout
