"""The registry of names (recall_cli/names.py): torch-free, and every stage reads its entries."""

from __future__ import annotations

import subprocess
import typing
import sys

import numpy as np

from recall_cli import names


def test_registry_imports_nothing_heavy():
    code = ("import sys, recall_cli.names; "
            "heavy = [m for m in ('torch', 'numpy', 'yaml', 'transformers') if m in sys.modules]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_task_loads_and_scores_as_its_entry_says():
    from recall_cli.tasks import TASK_TYPES, task_spec, task_type_for
    from recall_cli.recipe import TaskConfig
    from recall_cli.recipe.checks import GLUE_TASK_NAMES  # what the recipe checks a task name against

    assert GLUE_TASK_NAMES == tuple(names.TASKS)
    for name, task in names.TASKS.items():
        spec = task_spec(TaskConfig(name=name))
        assert spec is task  # the loaders and metrics read the names table itself, not a copy
        assert task.task_type in TASK_TYPES, name
        labels = np.array([0, 1, 1, 0]) if task.labels else np.array([0.5, 1.0, 2.0, 3.0])
        outputs = np.eye(len(task.labels))[labels] if task.labels else labels[:, None]
        scores = task_type_for(spec).metrics(outputs, labels)
        base = {"accuracy"} if task.labels else {"pearson", "spearman"}
        assert set(scores) == base | set(task.extra_metrics) | {"main"}, name
        assert scores["main"] == scores[task.main_metric]


def test_every_optimizer_is_a_valid_recipe_name_with_a_label():
    from recall_cli.recipe import build_recipe
    from recall_cli.report import METHOD_NAMES, group_label

    for name, entry in names.OPTIMIZERS.items():
        recipe, problems = build_recipe({"model": {"name_or_path": "m"}, "task": {"name": "sst2"},
                                         "optimizer": {"name": name}, "train": {"max_steps": 1}}, check_files=False)
        assert not problems and recipe.optimizer.name == name
        assert METHOD_NAMES[name] == entry.label and group_label({"optimizer.name": name}).startswith(entry.label)
    order = sorted(names.OPTIMIZERS, key=lambda n: names.OPTIMIZERS[n].report_order)
    assert order[0] == "adamw" and names.is_vanilla("adamw") and not names.is_vanilla("recadam")


def test_one_alias_table_names_sweep_cells_and_resolves_report_keys():
    from recall_cli.report import resolve_key
    from recall_cli.sweep import name_part

    for alias in names.KEY_ALIASES:
        if alias.short:
            assert resolve_key(alias.short) == alias.key
        if alias.cell is not None:
            assert name_part(alias.key, "x1") == f"{alias.cell}x1"
    from recall_cli.methods import methods

    for method in methods():  # a method's switch: its short name and cell prefix come from its registry entry
        if method.short:
            assert resolve_key(method.short) == method.switch
        assert name_part(method.switch, "x1") == f"{method.cell}x1"
    assert [resolve_key("lora_r"), name_part("model.lora.r", "8"), name_part("model.lora.alpha", "16")] \
        == ["model.lora.r", "r8", "alpha16"]
    assert [name_part("train.seed", "3"), name_part("optimizer.anneal_k", "0.1"), name_part("model.init", "random")] \
        == ["s3", "k0.1", "random"]


def test_every_probe_measure_is_a_report_metric(tmp_path):
    """Every measure a probe writes is a column `recall compare --metric` accepts and reads back from a
    run's probe record (not only a name in a tuple)."""
    import json

    from typer.testing import CliRunner

    from recall_cli.cli import app

    from recall_cli.plugins.probes import probe_measures, probes

    assert all(p.reads in ("texts", "pairs", "lm_texts", "choices") for p in probes().values())
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("model: {name_or_path: x}\ntask: {name: sst2}\noptimizer: {name: adamw}\n")
    probe = {m: 0.5 + i / 100 for i, m in enumerate(probe_measures())}
    (run / "metrics.jsonl").write_text(json.dumps({"step": 5, "split": "eval", "accuracy": 0.9, "main": 0.9}) + "\n"
                                       + json.dumps({"step": 5, "split": "probe", **probe}) + "\n")
    (run / "summary.json").write_text(json.dumps({"task": "sst2", "optimizer": "adamw", "init": "pretrained", "seed": 1,
                                                  "steps": 5, "finished": True, "best": None,
                                                  "final": {"step": 5, "main": 0.9}, "final_distance": 1.0,
                                                  "probe": {"step": 5, **probe}}))
    for measure in probe_measures():
        result = CliRunner().invoke(app, ["compare", str(run), "--metric", measure, "--format", "json"])
        assert result.exit_code == 0, (measure, result.output)
        [row] = json.loads(result.stdout)
        assert row["metric"] == measure and row["n"] == 1, (measure, row)
        assert abs(row["median"] - probe[measure]) < 1e-9, (measure, row)


def test_the_recipes_anneal_functions_are_the_optimizers():
    from recall_cli.optim import ANNEAL_FUNCTIONS
    from recall_cli.recipe import OptimizerConfig

    assert tuple(ANNEAL_FUNCTIONS) == names.ANNEAL_FUNCTION_NAMES
    assert typing.get_args(typing.get_type_hints(OptimizerConfig)["anneal_fun"]) == names.ANNEAL_FUNCTION_NAMES
