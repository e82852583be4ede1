"""Hostile input, round 4 (issue 52): a causal LM whose weights went NaN is refused as a classifier is (exit 3,
nothing written; `recall probe` says why its fields are null); a damaged GGUF file, adapter or keep.texts file and a
recipe that no longer matches its checkpoint are one line with exit 2 (not another library's exception, exit 1);
the LM anchor's dry run refuses what its run refuses; and the library says what it cannot do with a causal LM."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from recall_cli.cli import app

from conftest import GLUE
from lm_tiny import lm_recipe, tiny_llama_dir

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [*map(str, args)])


def one_error_line(result, code: int = 2) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == code and len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    return tiny_llama_dir(tmp_path_factory.mktemp("llama") / "model")


def poisoned(source: Path, folder: Path, tensor: str = "model.layers.0.mlp.down_proj.weight", value=float("nan")) -> Path:
    shutil.copytree(source, folder)
    weights = load_file(str(folder / "model.safetensors"))
    weights[tensor][0, 0] = value
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module")
def nan_lm(lm_dir, tmp_path_factory):
    return poisoned(lm_dir, tmp_path_factory.mktemp("nan") / "model")


def rows_file(tmp_path: Path) -> Path:
    path = tmp_path / "rows.tsv"
    path.write_text("sentence\nThe cat sat\na good film\n", encoding="utf-8")
    return path


# ---- a poisoned causal LM: exit 3 and nothing written, as a classifier -----------------------------


@pytest.mark.parametrize("tensor, value", [("model.layers.0.mlp.down_proj.weight", float("nan")),
                                           ("lm_head.weight", float("inf"))])
@pytest.mark.slow
def test_predict_of_a_causal_lm_with_nan_or_inf_weights_is_exit_3_and_writes_nothing(lm_dir, tmp_path, tensor, value):
    """NaN logits argmax to the pad token: each row's completion used to be empty, exit 0."""
    model = poisoned(lm_dir, tmp_path / "model", tensor, value)
    out = tmp_path / "predictions.jsonl"
    result = invoke("predict", model, "--task", "sst2_lm", "--split", rows_file(tmp_path), "--out", out)
    line = one_error_line(result, code=3)
    assert "the model's outputs are NaN/inf on 2 of 2 rows (the first: row 0): its weights diverged" in line
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["model", "rows.tsv"]


@pytest.mark.slow
def test_evaluate_of_a_causal_lm_with_nan_weights_is_exit_3_and_records_nothing(nan_lm, tmp_path):
    result = invoke("evaluate", nan_lm, "--task", "sst2_lm", "--data-dir", GLUE / "SST-2")
    line = one_error_line(result, code=3)
    assert "the model's outputs are NaN/inf on 872 of 872 rows" in line and "exact_match" not in result.output


def test_scoring_a_causal_lm_refuses_nan_logits_on_the_prompt_alone(lm_dir):
    """The library's scoring: a NaN in one row's prompt logits is enough, named by its row."""
    from transformers import AutoModelForCausalLM

    from recall_cli.tasks.base import Features
    from recall_cli.tasks.generation import completion_outputs
    from recall_cli.errors import NonFiniteWeights

    model = AutoModelForCausalLM.from_pretrained(lm_dir)
    features = Features(input_ids=[[2, 5, 6, 7, 3], [2, 8, 9, 10, 3]], token_type_ids=None, labels=[3, 3])
    healthy = completion_outputs(model, features, 2, torch.device("cpu"), 0)
    assert healthy.shape == (2, 3) and (healthy[:, 1] == [2, 2]).all()
    with torch.no_grad():
        model.model.embed_tokens.weight[8] = float("nan")  # only the second row reads token 8
    with pytest.raises(NonFiniteWeights, match=r"NaN/inf on 1 of 2 rows \(the first: row 1\)"):
        completion_outputs(model, features, 2, torch.device("cpu"), 0)


@pytest.mark.slow
def test_probe_of_a_causal_lm_with_nan_weights_says_why_its_fields_are_null(nan_lm, lm_dir):
    result = invoke("probe", nan_lm, "--against", lm_dir, "--probes", "lm,kl", "--json")
    assert result.exit_code == 0, result.output
    (record,) = json.loads(result.output)
    assert record["lm_kept"] is None and record["kl"] is None and record["lm_loss_ref"] > 0
    assert record["notes"] == ["lm, kl: the model's next-token outputs are NaN/inf (diverged weights), so lm_kept and "
                               "kl are null: probe a checkpoint from before the divergence"]
    # the variant: θ* itself poisoned, one probe
    result = invoke("probe", lm_dir, "--against", nan_lm, "--probes", "kl", "--json")
    (record,) = json.loads(result.output)
    assert record["kl"] is None and record["notes"] == [
        "kl: θ*'s next-token outputs are NaN/inf (diverged weights), so kl is null: probe a checkpoint from before "
        "the divergence"]
    healthy = json.loads(invoke("probe", lm_dir, "--against", lm_dir, "--probes", "lm,kl", "--json").output)[0]
    assert healthy["notes"] == [] and healthy["lm_kept"] == pytest.approx(1.0) and healthy["kl"] == pytest.approx(0, abs=1e-9)


# ---- a GGUF file that is cut short or not a GGUF ----------------------------------------------------


def tiny_gguf(path: Path) -> bytes:
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.ones((64, 16), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


@pytest.mark.parametrize("cut", [4, 24, 100, "mid-tensor", "not a gguf", "a link to another file"])
def test_a_truncated_or_foreign_gguf_is_one_line_naming_the_file(lm_dir, tmp_path, cut):
    pytest.importorskip("gguf")
    folder = tmp_path / "gguf"
    folder.mkdir()
    whole = tiny_gguf(tmp_path / "whole.gguf")
    data = {"mid-tensor": whole[: len(whole) - 1000], "not a gguf": b"<html>404</html>"}.get(cut)
    if cut == "a link to another file":  # a link out of the folder is followed (the hub's cache links its blobs) ...
        (tmp_path / "secret.txt").write_text("s3cr3t:x:0:0")
        (folder / "m.gguf").symlink_to(tmp_path / "secret.txt")
    else:
        (folder / "m.gguf").write_bytes(data if data is not None else whole[:cut])
    recipe = lm_recipe(lm_dir, tmp_path / "out", model={"name_or_path": str(folder), "gguf_file": "m.gguf"})
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    result = invoke("finetune", tmp_path / "r.yaml", "--dry-run", "--plain")
    line = one_error_line(result)
    assert f"{folder / 'm.gguf'}: not a readable GGUF file (" in line
    assert "it is truncated (a partial download?) or not a GGUF file; download or copy it again" in line
    assert "s3cr" not in line  # ... and the line quotes none of the file's bytes
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, said", [
    ("../../etc/passwd", "leaves the model folder"), ("/etc/passwd", "leaves the model folder"),
    ("sub/m.gguf", "leaves the model folder"), ("weights.bin", "is not a .gguf file")])
def test_a_gguf_file_that_leaves_the_folder_or_is_no_gguf_is_refused(lm_dir, tmp_path, name, said):
    recipe = lm_recipe(lm_dir, tmp_path / "out", model={"gguf_file": name})
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    line = one_error_line(invoke("finetune", tmp_path / "r.yaml", "--dry-run", "--plain"))
    assert f"model.gguf_file={name} {said}" in line and "model folder not found" not in line
    assert not (tmp_path / "out").exists()


# ---- merge --method intruders with a damaged adapter/ -----------------------------------------------


@pytest.fixture(scope="module")
def lora_checkpoint(tiny_model_dir, tmp_path_factory) -> Path:
    """A checkpoint folder with adapter/ as a recall LoRA run writes it (peft's save_pretrained, safetensors),
    made without training: intruder reduction reads the files."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForSequenceClassification

    folder = tmp_path_factory.mktemp("lora") / "ckpt"
    shutil.copytree(tiny_model_dir, folder)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=2)
    model.save_pretrained(folder)  # the run's merged classifier (here with a zero update)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"],
                                                  task_type="SEQ_CLS", init_lora_weights=False))
    peft_model.save_pretrained(str(folder / "adapter"), safe_serialization=True)
    return folder


def _set_config(config: dict, **changes) -> str:
    return json.dumps({**config, **changes})


DAMAGE = {
    "not json": (lambda f, c: (f / "adapter_config.json").write_text("{peft_type: LORA"), "adapter_config.json: not JSON ("),
    "a list": (lambda f, c: (f / "adapter_config.json").write_text("[1, 2]"),
               "adapter_config.json: holds a JSON list, not the object peft writes"),
    "latin-1": (lambda f, c: (f / "adapter_config.json").write_bytes(json.dumps({**c, "base_model_name_or_path": "Zürich"}, ensure_ascii=False)
                                                                      .encode("latin-1")),
                "adapter_config.json: not UTF-8 text (byte "),
    "r 0": (lambda f, c: (f / "adapter_config.json").write_text(_set_config(c, r=0)),
            "adapter_config.json: r is 0, not a LoRA rank (a whole number >= 1)"),
    "r string": (lambda f, c: (f / "adapter_config.json").write_text(_set_config(c, r="4")),
                 "adapter_config.json: r is '4', not a LoRA rank"),
    "regex target": (lambda f, c: (f / "adapter_config.json").write_text(_set_config(c, target_modules=".*nothing.*")),
                     'adapter_config.json: target_modules is ".*nothing.*", not a list of module names'),
    "weights cut": (lambda f, c: (f / "adapter_model.safetensors").write_bytes(
        (f / "adapter_model.safetensors").read_bytes()[:-100]), "adapter_model.safetensors: not a readable safetensors file"),
    "weights missing": (lambda f, c: (f / "adapter_model.safetensors").unlink(), "adapter_model.safetensors is missing: "),
    "pickle only": (lambda f, c: (torch.save({"x": torch.zeros(1)}, f / "adapter_model.bin"),
                                  (f / "adapter_model.safetensors").unlink()),
                    "adapter_model.safetensors is missing (adapter_model.bin is a pickle, which recall does not load)"),
    "deep config": (lambda f, c: (f / "adapter_config.json").write_text("[" * 100_000 + "]" * 100_000),
                    "adapter_config.json: nested too deeply to be peft's config"),
    "alpha nan": (lambda f, c: (f / "adapter_config.json").write_text(_set_config(c, lora_alpha=float("nan"))),
                  "adapter_config.json: lora_alpha is nan, not a LoRA scale (a finite number > 0)"),
    "alpha text": (lambda f, c: (f / "adapter_config.json").write_text(_set_config(c, lora_alpha="8")),
                   "adapter_config.json: lora_alpha is '8', not a LoRA scale"),
    "nan weights": (lambda f, c: _poison_adapter(f, float("nan")), "adapter_model.safetensors: base_model.model."),
    "inf weights": (lambda f, c: _poison_adapter(f, float("-inf")), "holds NaN or inf (the LoRA run diverged"),
    "another model's layers": (lambda f, c: (f / "adapter_config.json").write_text(_set_config(c, target_modules=["q_proj"])),
                               "'s adapter/ does not load onto "),
}


@pytest.mark.slow
def _poison_adapter(folder: Path, value: float) -> None:
    weights = load_file(folder / "adapter_model.safetensors")
    first = sorted(weights)[0]
    weights[first] = weights[first].clone()
    weights[first][0, 0] = value
    save_file(weights, folder / "adapter_model.safetensors")


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_intruders_with_a_damaged_adapter_is_one_line_and_never_asks_the_hub(lora_checkpoint, tiny_model_dir, tmp_path,
                                                                           monkeypatch, damage):
    import huggingface_hub

    run = tmp_path / "run"
    shutil.copytree(lora_checkpoint, run)
    config = json.loads((run / "adapter" / "adapter_config.json").read_text())
    spoil, said = DAMAGE[damage]
    spoil(run / "adapter", config)
    asked = []
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: asked.append(a) or pytest.fail("asked the hub"))
    out = tmp_path / "out"
    result = invoke("merge", tiny_model_dir, run, "--method", "intruders", "--out", out)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and "Traceback" not in result.output, result.output
    assert not out.exists() and not asked


@pytest.mark.slow
def test_intruders_on_the_undamaged_adapter_merges(lora_checkpoint, tiny_model_dir, tmp_path):
    """The reader refuses the damaged folders only: the same adapter as written merges (exit 0, one output per input)."""
    result = invoke("merge", tiny_model_dir, lora_checkpoint, "--method", "intruders", "--out", tmp_path / "out", "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["method"] == "intruders" and len(record["intruders"]) == 4  # query and value of 2 layers


# ---- the LM anchor's texts: the dry run refuses what the run refuses, read by the task files' reader ---------


def anchor_files(tmp: Path) -> dict[str, Path]:
    from recall_cli.probes.sets import DEFAULT_LM_TEXTS

    files = {"empty.txt": b"", "binary.txt": bytes(range(128, 256)) * 4,
             "deep.jsonl": b'{"text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
             "wide.csv": b"text\n" + b"a" * 131_073 + b"\n",
             "bigint.jsonl": b'{"text": ' + b"7" * 5000 + b"}\n",
             "surrogate.jsonl": b'{"text": "a cat \\ud800 sat"}\n',
             "prose.txt": Path(DEFAULT_LM_TEXTS).read_bytes()}
    for name, data in files.items():
        (tmp / name).write_bytes(data)
    return {name: tmp / name for name in files} | {"missing.txt": tmp / "missing.txt"}


ANCHOR_REFUSALS = {
    "missing.txt": "keep.texts: file not found: {path}",
    "empty.txt": "keep.texts: {path} has no sentence to anchor on (every line is blank)",
    "binary.txt": "keep.texts: {path} is not UTF-8 text (byte 0): save it as UTF-8",
    "deep.jsonl": "keep.texts: {path} line 1: nested too deeply to read: write one flat JSON object per line",
    "wide.csv": "keep.texts: {path} line 2: malformed row (field larger than field limit (131072))",
    "bigint.jsonl": "keep.texts: {path} line 1: a number with more digits than can be read (over 4,300)",
    "surrogate.jsonl": "keep.texts: {path} line 1: holds a lone UTF-16 surrogate",
    "prose.txt": "keep.next_token: 60 of the LM anchor's 60 texts are texts the lm/kl probes score",
}


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry run", "run"])
@pytest.mark.parametrize("name", list(ANCHOR_REFUSALS))
def test_the_lm_anchor_refuses_its_texts_in_the_dry_run_as_in_the_run(lm_dir, tmp_path, name, dry_run):
    """Probes off (lm_recipe's): the lm/kl probes' own prose is refused all the same, as `recall probe` reads it later."""
    path = anchor_files(tmp_path)[name]
    recipe = lm_recipe(lm_dir, tmp_path / "out", keep={"next_token": 0.5, "texts": str(path)})
    assert recipe["probe"] == {"enabled": False}
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    result = invoke("finetune", tmp_path / "r.yaml", "--plain", *(["--dry-run"] if dry_run else []))
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if not line.startswith("warning: ")]
    assert len(errors) == 1 and errors[0].startswith("error: " + ANCHOR_REFUSALS[name].format(path=path)), result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["deep.jsonl", "wide.csv", "bigint.jsonl", "surrogate.jsonl"])
def test_the_embedding_anchor_reads_its_texts_with_the_same_reader(tiny_model_dir, tmp_path, name):
    from conftest import tiny_recipe, write_recipe

    path = anchor_files(tmp_path)[name]
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "out", probe={"enabled": False},
                                                           keep={"embeddings": 1.0, "texts": str(path)}))
    result = invoke("finetune", recipe, "--plain", "--dry-run")
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if not line.startswith("warning: ")]
    assert errors[0].startswith("error: " + ANCHOR_REFUSALS[name].format(path=path)) and len(errors) == 1


# ---- a run whose recipe no longer matches its checkpoint; a pickle torch warns about ------------------------


@pytest.mark.slow
def test_resuming_a_causal_lm_run_whose_config_now_names_a_classifier_task_is_one_line(lm_dir, tmp_path):
    """torch's "loaded state dict has a different number of parameter groups" was exit 1."""
    run = tmp_path / "run"
    recipe = lm_recipe(lm_dir, run, train={"max_steps": 4, "save_every": 2, "eval_every": 0})
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    assert invoke("finetune", tmp_path / "r.yaml", "--plain").exit_code == 0
    before = (run / "last" / "model.safetensors").read_bytes()
    for task in ({"name": "sst2"}, {"name": "stsb", "data_dir": str(GLUE / "STS-B")}):
        config = yaml.safe_load((run / "config.yaml").read_text())
        config["task"].update(task)
        config["train"]["max_steps"] = 8
        (run / "config.yaml").write_text(yaml.safe_dump(config))
        result = invoke("finetune", "--resume", run, "--plain")
        line = one_error_line(result)
        assert f"{run}: the run's recipe no longer matches its checkpoint: config.yaml names task {task['name']} (a " in line
        assert "but last/ holds a LlamaForCausalLM: config.yaml changed since the run began" in line
        assert (run / "last" / "model.safetensors").read_bytes() == before


@pytest.mark.parametrize("protocol, said", [
    (4, "its weights are a pickle that torch's tensor-only reader cannot read (Unsupported operand 149)"),
    (5, "its weights are a pickle that torch's tensor-only reader cannot read (Unsupported operand 149)"),
])
@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_a_pickle_torch_warns_about_is_recalls_one_line_alone(tiny_model_dir, tmp_path, protocol, said):
    """torch's weights_only reader warned "Detected pickle protocol N" (two lines of its source) before recall's line."""
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_model_dir, folder)
    weights = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    torch.save(weights, folder / "pytorch_model.bin", pickle_protocol=protocol, _use_new_zipfile_serialization=False)
    import subprocess
    import sys

    # A process of its own: pytest records warnings instead of printing them, and --plain / non-TTY is the case asked
    done = subprocess.run([sys.executable, "-m", "recall_cli", "evaluate", str(folder), "--task", "mrpc", "--data-dir",
                           str(GLUE / "MRPC")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.splitlines() == [f"error: {folder}: {said}; recall never runs a pickle's code: save the model as "
                                        "safetensors (save_pretrained) from a source you trust"], done.stderr


# ---- smaller: custom_lm's JSON values, the library on a causal LM ------------------------------------------


@pytest.mark.parametrize("row, said", [
    ({"prompt": "The", "completion": True}, "field 'completion' is true (a JSON boolean), not text: write it in quotes "
                                            '("true") if that is the text to learn'),
    ({"prompt": False, "completion": " cat"}, "field 'prompt' is false (a JSON boolean), not text"),
    ('{"prompt": "The", "completion": NaN}', "field 'completion' is nan (JSON's NaN or Infinity), not a value"),
    ('{"prompt": -Infinity, "completion": " cat"}', "field 'prompt' is -inf (JSON's NaN or Infinity), not a value"),
    ('{"prompt": "The", "completion": ' + "9" * 5000 + "}", "a number with more digits than can be read (over 4,300)"),
    ('{"prompt": "The \\udc00", "completion": " cat"}', "holds a lone UTF-16 surrogate"),
])
def test_custom_lm_refuses_a_boolean_or_nan_where_text_is_learnt(lm_dir, tmp_path, row, said):
    """They were learnt as the text "True" / "nan"."""
    rows = tmp_path / "rows.jsonl"
    line = row if isinstance(row, str) else json.dumps(row)
    rows.write_text(json.dumps({"prompt": "The cat", "completion": " sat"}) + "\n" + line + "\n", encoding="utf-8")
    recipe = lm_recipe(lm_dir, tmp_path / "out", task={"name": "custom_lm", "data_dir": None, "train_file": str(rows),
                                                       "dev_file": str(rows)})
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    for extra in ([], ["--dry-run"]):
        result = invoke("finetune", tmp_path / "r.yaml", "--plain", *extra)
        assert result.exit_code == 2, result.output
        errors = [x for x in result.stderr.splitlines() if x.startswith(("error", "  - "))]
        assert len(errors) <= 2 and f"{rows} line 2: {said}" in result.stderr, result.output
        assert not (tmp_path / "out").exists()


def test_a_numeric_completion_is_still_text_and_a_classifiers_true_label_still_reads(tmp_path):
    from recall_cli.tasks.files import json_scalar

    assert json_scalar(4, tmp_path, 1, "completion", text_only=True) == "4"
    assert json_scalar(True, tmp_path, 1, "label") == "true"  # label_names ["false", "true"]


def test_freeze_encoder_on_a_causal_lm_is_a_type_error_and_freezes_nothing(lm_dir):
    import recall_cli
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(lm_dir)
    with pytest.raises(TypeError, match="freeze_encoder: model is a LlamaForCausalLM, a causal LM: it has no task head "
                                        "to train alone"):
        recall_cli.freeze_encoder(model)
    assert all(p.requires_grad for p in model.parameters())


def test_loss_step_on_a_batch_with_no_label_to_learn_says_so(lm_dir):
    import recall_cli
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(lm_dir)
    ids = torch.tensor([[2, 5, 6, 7], [2, 8, 9, 0]])
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.full_like(ids, -100)}
    with pytest.raises(ValueError, match=r"loss_step: every label the loss reads is -100 \(ignored by the loss, 6 of "
                                         r"them\): the model's mean loss over no token would be NaN"):
        recall_cli.loss_step(model, batch, [], step=1)
    batch["labels"][:, 0] = ids[:, 0]  # labels at the first position only: the causal shift drops them all
    with pytest.raises(ValueError, match=r"every label the loss reads is -100 after the shift that drops each row's "
                                         r"first position"):
        recall_cli.loss_step(model, batch, [], step=1)
    batch["labels"][1, 2] = 9  # one token to learn: a finite loss, as before
    loss, _ = recall_cli.loss_step(model, batch, [], step=1)
    assert torch.isfinite(loss) and loss.item() > 0
