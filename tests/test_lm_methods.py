"""The methods on a causal LM (a tiny Llama on sst2_lm): RecAdam with its floor pulls toward θ*, LoRA trains
peft's CAUSAL_LM adapters, and every merge of `recall merge` takes causal-LM runs, RECALL on the LM's hidden states."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from typer.testing import CliRunner

from recall_cli.cli import app

from lm_tiny import lm_recipe, tiny_llama_dir

runner = CliRunner()


def finetune(tmp: Path, base: Path, name: str, **sections) -> Path:
    recipe = tmp / f"{name}.yaml"
    recipe.write_text(yaml.safe_dump(lm_recipe(base, tmp / name, **sections)), encoding="utf-8")
    result = runner.invoke(app, ["finetune", str(recipe), "--plain"])
    assert result.exit_code == 0, result.output
    return tmp / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("lm_methods")
    model = tiny_llama_dir(tmp / "model")
    return {"model": model, "tmp": tmp, "adamw": finetune(tmp, model, "adamw"),
            "recadam": finetune(tmp, model, "recadam", optimizer={"name": "recadam", "lr": 3e-3, "pretrain_cof": 100.0,
                                                                  "anneal_t0": 2, "anneal_k": 1.0, "recall_floor": 0.5})}


def summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


@pytest.mark.slow
def test_recadam_with_a_floor_stays_nearer_theta_star(runs):
    adamw, recadam = summary(runs["adamw"]), summary(runs["recadam"])
    assert recadam["recall_floor"] == 0.5 and recadam["finished"]
    assert recadam["final_distance"] < 0.8 * adamw["final_distance"]


@pytest.mark.slow
def test_lora_trains_causal_lm_adapters_and_saves_a_plain_model(runs):
    from transformers import AutoModelForCausalLM

    run = finetune(runs["tmp"], runs["model"], "lora", model={"lora": {"r": 4}}, optimizer={"name": "adamw", "lr": 1e-2})
    adapter = json.loads((run / "best" / "adapter" / "adapter_config.json").read_text())
    assert adapter["task_type"] == "CAUSAL_LM" and adapter["r"] == 4
    assert any(m.endswith("q_proj") for m in adapter["target_modules"])
    model = AutoModelForCausalLM.from_pretrained(run / "best")  # merged: a plain folder
    base = AutoModelForCausalLM.from_pretrained(runs["model"])
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(model.state_dict()[name], base.state_dict()[name])
    assert torch.equal(model.state_dict()["model.embed_tokens.weight"], base.state_dict()["model.embed_tokens.weight"])


@pytest.mark.slow
@pytest.mark.parametrize("method", ["linear", "task_arithmetic", "ties", "recall"])
def test_every_merge_takes_causal_lm_runs(runs, method, tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "merged"
    result = runner.invoke(app, ["merge", str(runs["model"]), str(runs["adamw"]), "--method", method, "--out", str(out)])
    assert result.exit_code == 0, result.output
    merged = load_file(str(out / "adamw" / "model.safetensors"))
    star = load_file(str(runs["model"] / "model.safetensors"))
    tuned = load_file(str(runs["adamw"] / "best" / "model.safetensors"))
    for name in ("model.embed_tokens.weight", "model.layers.1.mlp.up_proj.weight", "model.norm.weight"):
        if method == "linear":  # WiSE-FT at α = 0.5
            assert torch.allclose(merged[name], (star[name] + tuned[name]) / 2, atol=1e-6)
        elif method == "task_arithmetic":  # θ* + 0.5 (θ - θ*) with θ* among the inputs: the same point
            assert torch.allclose(merged[name], star[name] + 0.5 * (tuned[name] - star[name]), atol=1e-6)
    assert torch.equal(merged["lm_head.weight"], tuned["lm_head.weight"])  # each model keeps its own head
    AutoModelForCausalLM.from_pretrained(out / "adamw")
    evaluated = runner.invoke(app, ["evaluate", str(out / "adamw"), "--json"])
    assert evaluated.exit_code == 0, evaluated.output
    assert set(json.loads(evaluated.output)["metrics"]) == {"exact_match", "loss", "perplexity", "main"}


@pytest.mark.slow
@pytest.mark.long  # minutes on 2 cores: left to make test's second step (python -m pytest -q -m long)
def test_the_lm_anchor_keeps_next_token_distributions_nearer_theta_star(runs):
    from recall_cli.rundir import read_metrics

    probe = {"enabled": True, "probes": ["kl"], "num_texts": 16}
    free = finetune(runs["tmp"], runs["model"], "free", probe=probe)
    kept = finetune(runs["tmp"], runs["model"], "kept", probe=probe, keep={"next_token": 50.0, "batch_size": 8,
                                                                        "texts": "pool"})
    last = {run: [r for r in read_metrics(run) if r["split"] == "probe"][-1]["kl"] for run in (free, kept)}
    assert last[kept] < 0.5 * last[free]
    records = [r for r in read_metrics(kept) if r["split"] == "train"]
    assert all(r["loss_lm_keep"] >= 0 and r["lm_keep_weight"] == 50.0 for r in records)
    assert summary(kept)["method"]["names"] == ["lm_keep"]


def test_the_lm_anchor_refuses_a_classifier(tmp_path, tiny_model_dir):
    from conftest import tiny_recipe, write_recipe

    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "out", keep={"next_token": 1.0}))
    result = runner.invoke(app, ["finetune", str(recipe), "--plain"])
    assert result.exit_code == 2 and "keep.next_token: the LM anchor keeps next-token distributions" in result.output
    assert not (tmp_path / "out").exists()


def test_the_lm_anchor_refuses_the_texts_the_lm_probes_score(tmp_path):
    from recall_cli.probes.sets import DEFAULT_LM_TEXTS

    model = tiny_llama_dir(tmp_path / "model")
    anchor = tmp_path / "anchor.txt"
    anchor.write_text("A sentence of my own.\n" + DEFAULT_LM_TEXTS.read_text(encoding="utf-8").splitlines()[3] + "\n")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(lm_recipe(model, tmp_path / "out", keep={"next_token": 1.0, "texts": str(anchor)},
                                               probe={"enabled": True, "probes": ["lm", "kl"]})), encoding="utf-8")
    result = runner.invoke(app, ["finetune", str(recipe), "--plain"])
    assert result.exit_code == 2 and "keep.next_token: 1 of the LM anchor's 2 texts are texts the lm/kl probes score" in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_stopped_lm_run_resumes_to_the_uninterrupted_weights_and_records(runs, tmp_path):
    """RecAdam with its floor and the LM anchor on: the anchor's draw and theta*'s frozen copy come back on --resume."""
    from conftest import StopAfter, comparable
    from recall_cli.training import loop as train
    from recall_cli.recipe import recipe_from_dict
    from recall_cli.rundir import read_metrics

    sections = {"optimizer": {"name": "recadam", "lr": 3e-3, "pretrain_cof": 100.0, "anneal_t0": 2, "recall_floor": 0.5},
                "keep": {"next_token": 5.0, "texts": "pool", "batch_size": 4}, "train": {"save_every": 4}}
    reference = finetune(tmp_path, runs["model"], "reference", **sections)
    stopped = tmp_path / "stopped"
    with pytest.raises(KeyboardInterrupt):
        train.finetune(recipe_from_dict(lm_recipe(runs["model"], stopped, **sections), "stopped"), reporter=StopAfter(5))
    result = runner.invoke(app, ["finetune", "--resume", str(stopped), "--plain"])
    assert result.exit_code == 0 and "resuming at step 4," in result.output, result.output
    for folder in ("last", "best"):
        a, b = load_file(str(stopped / folder / "model.safetensors")), load_file(str(reference / folder / "model.safetensors"))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), folder
    assert comparable(read_metrics(stopped)) == comparable(read_metrics(reference))


@pytest.mark.slow
@pytest.mark.parametrize("name, model_section, adapter", [
    ("pissa", {"lora": {"r": 4, "init": "pissa"}}, {"r": 8}),  # saved converted: rank 2r against θ* (peft)
    ("corda", {"lora": {"r": 4, "init": "corda", "corda_samples": 16}}, {"r": 8}),
    ("dora", {"lora": {"r": 4, "use_dora": True}}, {"r": 4, "use_dora": True}),
    ("osf", {"osf": {"rank": 4}}, None),
])
@pytest.mark.long  # minutes on 2 cores: left to make test's second step (python -m pytest -q -m long)
def test_the_lora_variants_and_osf_train_a_causal_lm(runs, name, model_section, adapter):
    from transformers import AutoModelForCausalLM

    run = finetune(runs["tmp"], runs["model"], name, model=model_section, optimizer={"name": "adamw", "lr": 1e-2})
    assert summary(run)["finished"] and summary(run)["method"]["names"] == ["osf" if name == "osf" else "lora"]
    if adapter is not None:
        saved = json.loads((run / "best" / "adapter" / "adapter_config.json").read_text())
        assert saved["task_type"] == "CAUSAL_LM" and {k: saved[k] for k in adapter} == adapter
    model = AutoModelForCausalLM.from_pretrained(run / "best")  # a plain folder, whatever trained it
    base = AutoModelForCausalLM.from_pretrained(runs["model"])
    weight = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(model.state_dict()[weight], base.state_dict()[weight])
