"""Every extension point is a registry a package outside recall fills (plugins/): a task type, a merge method,
a tracker and a probe, each installed as `pip install` would leave it (a module and a dist-info naming it in the
kind's entry-point group, on PYTHONPATH) and run end to end through the command line. The plugins are
docs/extending.md's examples, read from the page, so that the page and the test cannot drift apart."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import make_run, tiny_recipe, train_records, write_recipe
from test_plugins import recall

REPO = Path(__file__).resolve().parents[1]
PAGE = (REPO / "docs" / "extending.md").read_text(encoding="utf-8")


def example(module: str) -> str:
    """The page's python block whose first line names ``my_pkg/<module>.py``."""
    for block in re.findall(r"^```python\n(.*?)^```", PAGE, re.DOTALL | re.MULTILINE):
        if block.startswith(f'"""my_pkg/{module}.py'):
            return block
    raise AssertionError(f"docs/extending.md has no example my_pkg/{module}.py")


def install(root: Path, module: str, group: str, name: str, source: str | None = None) -> Path:
    """``root`` as a site with the page's ``module`` and a distribution naming it in ``group``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(source if source is not None else example(module), encoding="utf-8")
    info = root / f"recall_{module}-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: recall-{module}\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[{group}]\n{name} = {module}\n", encoding="utf-8")
    return root


def test_the_page_names_every_kind_s_group():
    for group in ("recall_cli.methods", "recall_cli.probes", "recall_cli.tasks", "recall_cli.merge",
                  "recall_cli.trackers"):
        assert f'[project.entry-points."{group}"]' in PAGE, group


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_a_plugin_task_type_trains_on_a_user_s_file(tmp_path, tiny_model_dir):
    root = install(tmp_path / "site", "shouting", "recall_cli.tasks", "shouting")
    rows = [("a fine film", "1"), ("a dull film", "0"), ("great fun", "1"), ("sadly boring", "0")] * 6
    for split, n in (("train", 24), ("dev", 12)):
        (tmp_path / f"{split}.csv").write_text("sentence,label\n" + "".join(f"{t},{y}\n" for t, y in rows[:n]),
                                               encoding="utf-8")
    task = {"name": "shouting", "data_dir": None, "train_file": str(tmp_path / "train.csv"),
            "dev_file": str(tmp_path / "dev.csv"), "text_fields": ["sentence"], "label_field": "label", "num_labels": 2}
    recipe = tiny_recipe(tiny_model_dir, tmp_path / "run", task=task, optimizer={"name": "adamw"},
                         train={"max_steps": 2, "log_every": 1, "eval_every": 2}, probe={"enabled": False})
    path = write_recipe(tmp_path / "r.yaml", recipe)

    unknown = recall(["finetune", str(path), "--dry-run"], tmp_path / "nothing", tmp_path)  # not installed
    assert unknown.returncode == 2 and "task.name: unknown task 'shouting'" in unknown.stderr

    done = recall(["finetune", str(path), "--plain"], root, tmp_path)
    assert done.returncode == 0, done.stderr
    evals = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["split"] == "eval"]
    assert evals and evals[-1]["rows"] == 12.0  # the type's own metric: it read and scored the user's dev file
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["task"] == "shouting"


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_a_plugin_merge_method_merges_with_its_own_option(tmp_path, tiny_model_dir):
    root = install(tmp_path / "site", "pull", "recall_cli.merge", "pull")
    a, b = make_run(tmp_path, "a", tiny_model_dir, 1), make_run(tmp_path, "b", tiny_model_dir, 2)

    shown = recall(["merge", "--help"], root, tmp_path)
    assert shown.returncode == 0 and "--share" in shown.stdout and "pull" in shown.stdout

    out = tmp_path / "out"
    done = recall(["merge", str(a), str(b), "--method", "pull", "--share", "0.25", "--out", str(out), "--device", "cpu",
                   "--json"], root, tmp_path)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["method"] == "pull" and record["share"] == 0.25
    first, second = load_file(str(a / "best" / "model.safetensors")), load_file(str(b / "best" / "model.safetensors"))
    merged = load_file(str(out / "a" / "model.safetensors"))
    key = "bert.encoder.layer.0.attention.self.query.weight"
    assert torch.allclose(merged[key], first[key] + 0.25 * (second[key] - first[key]), atol=1e-6)

    refused = recall(["merge", str(a), str(b), "--method", "pull", "--share", "2", "--out", str(tmp_path / "o2")],
                     root, tmp_path)
    assert refused.returncode == 2 and refused.stderr.strip() == "error: --share 2.0: give a number in [0, 1]"
    assert not (tmp_path / "o2").exists()


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_a_plugin_tracker_receives_every_record_of_a_run(tmp_path, tiny_model_dir):
    root = install(tmp_path / "site", "lines", "recall_cli.trackers", "lines")
    recipe = tiny_recipe(tiny_model_dir, tmp_path / "run", optimizer={"name": "adamw"},
                         train={"max_steps": 4, "log_every": 2, "eval_every": 4, "report_to": ["lines"]},
                         probe={"enabled": False})
    done = recall(["finetune", str(write_recipe(tmp_path / "r.yaml", recipe)), "--plain"], root, tmp_path)
    assert done.returncode == 0, done.stderr
    run = tmp_path / "run"
    sent = [json.loads(line) for line in (run / "lines.jsonl").read_text(encoding="utf-8").splitlines()]
    assert sent[0]["params"]["optimizer.name"] == "adamw" and sent[-1] == {"closed": True}
    logged = {(s["step"], k): v for s in sent if "metrics" in s for k, v in s["metrics"].items()}
    for r in train_records(run):  # every number of every train record, at its step
        assert math.isclose(logged[(r["step"], "train/loss")], r["loss"], rel_tol=1e-9)
    assert {s for s, k in logged if k == "eval/main"} == {4}
    assert any("summary" in s and s["summary"]["summary/steps"] == 4 for s in sent)


@pytest.mark.slow
@pytest.mark.long  # minutes on 2 cores: left to make test's second step (python -m pytest -q -m long)
def test_a_plugin_probe_measures_in_a_run_in_recall_probe_and_in_compare(tmp_path, tiny_model_dir):
    root = install(tmp_path / "site", "norm", "recall_cli.probes", "norm")
    probe = {"probes": ["norm", "drift"], "num_texts": 24, "max_length": 32}
    recipe = tiny_recipe(tiny_model_dir, tmp_path / "run", optimizer={"name": "adamw"},
                         train={"max_steps": 4, "log_every": 2, "eval_every": 2}, probe=probe)
    path = write_recipe(tmp_path / "r.yaml", recipe)
    missing = recall(["finetune", str(path), "--dry-run"], tmp_path / "nothing", tmp_path)
    assert missing.returncode == 2 and "probe.probes: unknown probe 'norm' (choose from cka, drift" in missing.stderr

    done = recall(["finetune", str(path), "--plain"], root, tmp_path)
    assert done.returncode == 0, done.stderr
    run = tmp_path / "run"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    probed = [r for r in records if r["split"] == "probe"]
    assert [r["step"] for r in probed] == [0, 2, 4]
    assert probed[0]["norm"] == probed[0]["norm_ref"] and probed[0]["norm_ratio"] == 1.0  # θ* against itself
    for r in probed:  # the plugin's fields after recall's drift (registry order: recall's first)
        assert list(r)[2:] == ["drift", "norm", "norm_ref", "norm_ratio", "probe_seconds"]
        assert r["norm_ref"] == probed[0]["norm_ref"] and math.isclose(r["norm_ratio"], r["norm"] / r["norm_ref"])
    assert probed[-1]["norm"] != probed[0]["norm"]  # training moved it

    scored = recall(["probe", str(run), str(tiny_model_dir), "--probes", "norm", "--num-texts", "24",
                     "--max-length", "32", "--json", "--device", "cpu"], root, tmp_path)
    assert scored.returncode == 0, scored.stderr
    theta, reference = json.loads(scored.stdout)
    assert math.isclose(theta["norm_ref"], probed[0]["norm_ref"], rel_tol=1e-5)  # θ* and the texts the run's
    assert reference["norm_ratio"] == 1.0

    compared = recall(["compare", str(run), "--metric", "norm_ratio", "--format", "json"], root, tmp_path)
    assert compared.returncode == 0, compared.stderr
    [row] = json.loads(compared.stdout)
    assert row["metric"] == "norm_ratio" and math.isclose(row["median"], probed[-1]["norm_ratio"], rel_tol=1e-9)
