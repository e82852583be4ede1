"""Every JSON recall writes or prints is strict: an undefined number is null, never NaN or Infinity."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from recall_cli.cli import app
from recall_cli.rundir import dumps_strict, read_metrics, read_summary

from conftest import tiny_recipe, write_recipe

runner = CliRunner()


def strict_load(text: str):
    def refuse(constant):
        raise AssertionError(f"non-strict JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def test_dumps_strict_writes_null_for_nan_and_inf():
    assert dumps_strict({"a": math.nan, "b": [1.0, math.inf, -math.inf], "c": {"d": 2.5}}) == \
        '{"a": null, "b": [1.0, null, null], "c": {"d": 2.5}}'


@pytest.mark.slow
def test_an_undefined_dev_metric_is_null_with_a_warning(tiny_model_dir, tmp_path):
    """A regression dev set whose labels are all equal: Pearson and Spearman are undefined."""
    rows = "sentence\tscore\n" + "".join(f"sentence number {i} here\t{i % 5}.0\n" for i in range(24))
    (tmp_path / "train.tsv").write_text(rows)
    (tmp_path / "dev.tsv").write_text("sentence\tscore\n" + "".join(f"dev sentence {i}\t3.0\n" for i in range(6)))
    task = {"name": "custom", "train_file": str(tmp_path / "train.tsv"), "dev_file": str(tmp_path / "dev.tsv"),
            "text_fields": ["sentence"], "label_field": "score", "num_labels": 1, "data_dir": None,
            "max_train_examples": None, "max_eval_examples": None}
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "out", task=task,
                                                           train={"max_steps": 2, "eval_every": 0},
                                                           probe={"enabled": False}))
    result = runner.invoke(app, ["finetune", str(recipe), "--plain"])
    assert result.exit_code == 0, result.output
    assert "pearson, spearman, main undefined on this split" in result.output
    for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines():
        strict_load(line)
    summary = strict_load((tmp_path / "out" / "summary.json").read_text())
    assert summary["final"]["pearson"] is None and summary["final"]["main"] is None
    assert read_summary(tmp_path / "out").final_main is None
    [evaluation] = [r for r in read_metrics(tmp_path / "out") if r["split"] == "eval"]
    assert evaluation["spearman"] is None
    # The reports print it as strict JSON too.
    for command in (["forgetting", str(tmp_path / "out"), "--json", "--out", str(tmp_path / "f.png")],
                    ["compare", str(tmp_path / "out"), "--format", "json"]):
        shown = runner.invoke(app, command)
        assert shown.exit_code == 0, shown.output
        strict_load(shown.stdout)
