"""A method written outside recall_cli plugs in without an edit to it (methods/registry.py): through
the entry-point group ``recall_cli.methods`` of a package on the path, or register_method in the
library. The plugin below is a small but real method: a penalty on the logits' size ("shrink") with a
recipe section of its own, a check, a --dry-run line, a card row and a report family."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import summary, tiny_recipe, train_records, write_recipe

REPO = Path(__file__).resolve().parents[1]

# docs/extending.md's example, as the page shows it: the page and the test cannot drift apart.
PLUGIN = re.search(r"^```python\n(.*?)^```", (REPO / "docs" / "extending.md").read_text(encoding="utf-8"),
                   re.DOTALL | re.MULTILINE).group(1)


def plugin_path(root: Path) -> Path:
    """A folder holding the plugin module and the metadata of an installed distribution that names it
    in the entry-point group, as `pip install` would leave them: PYTHONPATH=root is the install."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "recall_shrink_plugin.py").write_text(PLUGIN, encoding="utf-8")
    info = root / "recall_shrink_plugin-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: recall-shrink-plugin\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[recall_cli.methods]\nshrink = recall_shrink_plugin\n", encoding="utf-8")
    return root


def recall(args: list[str], root: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(REPO)]), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "recall_cli", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow
def test_an_installed_plugin_method_trains_checks_and_shows(tmp_path, tiny_model_dir):
    root = plugin_path(tmp_path / "site")
    recipe = tiny_recipe(tiny_model_dir, tmp_path / "run", optimizer={"name": "adamw"},
                         train={"max_steps": 4, "log_every": 2, "eval_every": 4}, probe={"enabled": False})
    recipe["shrink"] = {"weight": 0.5}
    path = write_recipe(tmp_path / "r.yaml", recipe)

    dry = recall(["finetune", str(path), "--dry-run"], root, tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "# methods: logit shrink 0.5" in dry.stdout and "# shrink: the logits' mean square, weight 0.5" in dry.stdout

    misspelt = recall(["finetune", str(path), "shrink.wieght=1"], root, tmp_path)
    assert misspelt.returncode == 2 and "unknown key 'shrink.wieght' (did you mean 'shrink.weight'?)" in misspelt.stderr
    negative = recall(["finetune", str(path), "shrink.weight=-1"], root, tmp_path)
    assert negative.returncode == 2 and "shrink.weight: must be >= 0, got -1.0" in negative.stderr
    assert not (tmp_path / "run").exists()  # refused before anything was written

    done = recall(["finetune", str(path), "--plain"], root, tmp_path)
    assert done.returncode == 0, done.stderr
    run = tmp_path / "run"
    records = train_records(run)
    assert [r["step"] for r in records] == [2, 4]
    for r in records:  # the step's loss is the task loss plus the plugin's weighted term, logged part by part
        assert r["shrink_weight"] == 0.5 and r["loss_shrink"] > 0
        assert math.isclose(r["loss"], r["loss_task"] + 0.5 * r["loss_shrink"], rel_tol=1e-5)
    method = summary(run)["method"]
    assert method["names"] == ["shrink"] and method["labels"] == ["logit shrink 0.5"]
    assert method["shrink"] == {"weight": 0.5, "reduce": "mean"}  # its section, as the recipe set it
    assert method["shrink_plan"] == "logits pulled toward 0"  # the start's words (MethodRun.info) join the block
    assert "| logit shrink | weight 0.5 |" in (run / "best" / "README.md").read_text(encoding="utf-8")
    config = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    assert config["shrink"] == {"weight": 0.5, "reduce": "mean"} and list(config)[-1] == "output_dir"


def test_a_plain_recipe_writes_no_plugin_section(tmp_path, tiny_model_dir):
    """config.yaml of a run without plugins is what earlier versions wrote (the run directory is a public format)."""
    from recall_cli.recipe import recipe_from_dict

    r = recipe_from_dict(tiny_recipe(tiny_model_dir, tmp_path / "run"), "r.yaml")
    assert list(r.to_dict()) == ["model", "task", "optimizer", "train", "probe", "keep", "output_dir"]


def test_a_broken_plugin_is_one_line_naming_it(tmp_path, tiny_model_dir):
    root = tmp_path / "site"
    plugin_path(root)
    (root / "recall_shrink_plugin.py").write_text("raise ImportError('no module named torchmetrics')\n", encoding="utf-8")
    path = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "run"))
    out = recall(["finetune", str(path), "--dry-run"], root, tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        "error: the method plugin shrink (recall_shrink_plugin) failed to load: ImportError: no module named "
        "torchmetrics (fix or uninstall the package that provides it)"]


def test_register_method_from_the_library(monkeypatch):
    """register_method: a method in the library's process gets its report family and words; its name,
    switch and section are its own (a clash is refused)."""
    from recall_cli.methods import Family, Method, registry
    from recall_cli.report.families import _method_words, hue_family, hues

    class Damp(Method):
        name, label, switch = "damp", "damping", "keep.embeddings"

    monkeypatch.setattr(registry._METHODS, "entries", dict(registry._METHODS.entries))  # undone after the test
    with pytest.raises(ValueError, match="its switch is taken by keep"):
        registry.register_method(Damp())

    class Ewc(Method):
        name, label, switch, cell = "ewc_test", "EWC", "train.seed", "ewc"
        family = Family("ewc_test", "#332288", hue_rank=-1)

    registry.register_method(Ewc())
    assert hue_family({"train.seed": 3, "keep.embeddings": 1.0}) == "ewc_test" and hues()["ewc_test"] == "#332288"
    assert _method_words({"train.seed": 3, "model.lora.r": 8}) == ["LoRA r=8", "EWC 3"]
    assert json.dumps([m.name for m in registry.methods()]) == '["keep", "lp_ft", "lora", "osf", "lm_keep", "ewc", "replay", "ewc_test"]'
