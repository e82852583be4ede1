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
import types
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from conftest import summary, tiny_recipe, train_records, write_recipe

REPO = Path(__file__).resolve().parents[1]

# docs/extending.md's examples, as the page shows them: the page and the test cannot drift apart.
PLUGIN, TEACHER = re.findall(r"^```python\n(.*?)^```", (REPO / "docs" / "extending.md").read_text(encoding="utf-8"),
                             re.DOTALL | re.MULTILINE)[:2]


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
@pytest.mark.long  # minutes on 2 cores: left to make test's second step (python -m pytest -q -m long)
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


@pytest.mark.slow
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


def load_teacher_plugin(monkeypatch) -> types.ModuleType:
    """docs/extending.md's logit_kd plugin imported in this process (its registration undone after the test)."""
    from recall_cli.methods import registry

    registry.methods()  # recall's own first, as an installed plugin would find them
    monkeypatch.setattr(registry._METHODS, "entries", dict(registry._METHODS.entries))
    module = types.ModuleType("recall_logit_kd_plugin")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # as an import would leave it (its dataclass asks)
    exec(compile(TEACHER, "recall_logit_kd_plugin.py", "exec"), module.__dict__)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("method", ["logit_kd", "keep", "keep_texts"])
def test_a_teacher_is_the_same_before_and_after_resume(method, tmp_path, tiny_model_dir, monkeypatch):
    """theta* for a teacher (methods/teacher.frozen_copy(run.model, run.theta_star)) holds the new head as the
    run began, on the new run and on its --resume alike, bit for bit: the docs' logit distillation, and the
    embedding anchor made to run a frozen theta* beside the student (its cache limit set to 0)."""
    from typer.testing import CliRunner

    from recall_cli.cli import app
    from recall_cli.methods import teacher
    from recall_cli.methods.keep import build

    load_teacher_plugin(monkeypatch)
    teachers: list[dict] = []
    real = teacher.frozen_copy

    def spy(model, state):
        copy = real(model, state)
        teachers.append({k: v.detach().clone() for k, v in copy.state_dict().items()})
        return copy

    monkeypatch.setattr(teacher, "frozen_copy", spy)
    monkeypatch.setattr(build, "frozen_copy", spy)
    monkeypatch.setattr(build, "CACHE_LIMIT_BYTES", 0)
    section = {"logit_kd": {"logit_kd": {"weight": 0.5}}, "keep": {"keep": {"embeddings": 1.0}},
               "keep_texts": {"keep": {"embeddings": 1.0, "texts": "pool", "batch_size": 4}}}[method]
    path = write_recipe(tmp_path / "r.yaml", tiny_recipe(
        tiny_model_dir, tmp_path / "run", optimizer={"name": "adamw", "lr": 5e-3},
        train={"max_steps": 4, "save_every": 2, "eval_every": 0, "log_every": 2}, probe={"enabled": False}, **section))
    runner = CliRunner()
    first = runner.invoke(app, ["finetune", str(path), "--plain"])
    assert first.exit_code == 0, first.output
    again = runner.invoke(app, ["finetune", "--resume", str(tmp_path / "run"), "--plain"])
    assert again.exit_code == 0, again.output
    assert len(teachers) == 2
    before, after = teachers
    assert {"classifier.weight", "classifier.bias"} <= before.keys() and before.keys() == after.keys()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed == []
    trained = load_file(str(tmp_path / "run" / "last" / "model.safetensors"))
    assert not torch.equal(trained["classifier.weight"], after["classifier.weight"])  # the head trained; the teacher's did not


def test_frozen_copy_holds_the_state_given_frozen_and_in_eval_mode(tiny_model_dir):
    """The public teacher maker: the state given (others as the model has them), nothing trains, dropout off;
    the model it copied is untouched."""
    from recall_cli.methods.teacher import copy_bytes, frozen_copy
    from recall_cli.model import build_model

    from conftest import binary_task

    built = build_model(__import__("recall_cli.recipe", fromlist=["ModelConfig"]).ModelConfig(
        name_or_path=str(tiny_model_dir)), binary_task(), seed=3)
    model = built.model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = {name: torch.full_like(p, 0.5) for name, p in model.named_parameters() if name.startswith("classifier")}
    frozen = frozen_copy(model, state)
    assert not frozen.training and not any(p.requires_grad for p in frozen.parameters())
    got = dict(frozen.named_parameters())
    assert all(torch.equal(got[n], state[n]) for n in state)
    assert all(torch.equal(got[n], model.get_parameter(n)) for n in got if n not in state)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())
    measured = sum(p.numel() * p.element_size() for p in frozen.parameters())
    assert copy_bytes(sum(p.numel() for p in model.parameters())) == measured


def test_a_plugins_teacher_is_in_preflights_memory_at_its_measured_size(tmp_path, tiny_model_dir, monkeypatch):
    """The docs' logit distillation declares its frozen teacher (extra_bytes): preflight's estimate lists it under
    its name, the size of the copy frozen_copy makes of the run's model."""
    from recall_cli.methods import active
    from recall_cli.methods.teacher import frozen_copy
    from recall_cli.model import build_model, load_config
    from recall_cli.recipe import recipe_from_dict
    from recall_cli.training import preflight

    from conftest import binary_task

    load_teacher_plugin(monkeypatch)
    recipe = recipe_from_dict(tiny_recipe(tiny_model_dir, tmp_path / "run", logit_kd={"weight": 0.5}), "r.yaml")
    est = preflight.estimate_memory(recipe, load_config(str(tiny_model_dir)), binary_task(), torch.device("cpu"), "fp32",
                                    1, [48] * 96, active(recipe), total_steps=12)
    built = build_model(recipe.model, binary_task(), seed=7)
    teacher = frozen_copy(built.model, built.theta_star)
    assert est.parts["method logit_kd"] == sum(p.numel() * p.element_size() for p in teacher.parameters())


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_a_run_whose_method_is_not_installed_is_named_so_by_every_report(tmp_path, tiny_model_dir, monkeypatch):
    """Runs made with the docs' logit_kd plugin, read where it is not installed: compare and tradeoff name the
    setting "method 'logit_kd' (not installed)" (never vanilla fine-tuning); evaluate and sweep, which must
    build the recipe, refuse it (exit 2) with the same words."""
    from typer.testing import CliRunner

    from recall_cli.cli import app

    load_teacher_plugin(monkeypatch)
    runs = tmp_path / "runs"
    for name, extra in (("vanilla", {}), ("kd", {"logit_kd": {"weight": 0.5}})):
        path = write_recipe(tmp_path / f"{name}.yaml", tiny_recipe(
            tiny_model_dir, runs / name, optimizer={"name": "adamw"}, train={"max_steps": 2, "eval_every": 2},
            probe={"probes": ["sts"], "num_pairs": 32}, **extra))
        done = CliRunner().invoke(app, ["finetune", str(path), "--plain"])
        assert done.exit_code == 0, done.output
    monkeypatch.undo()  # the plugin is gone: what an uninstall leaves

    def bare(args: list[str]) -> subprocess.CompletedProcess:  # recall without the plugin on the path
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        return subprocess.run([sys.executable, "-m", "recall_cli", *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)

    named = "method 'logit_kd' (not installed)"
    compare = bare(["compare", str(runs)])
    assert compare.returncode == 0, compare.stderr
    settings = [line.split("  ")[0] for line in compare.stdout.splitlines() if "median" in line]
    # a vanilla run writes no logit_kd section (a plugin section at its defaults is not written), so the kd run's
    # keys all differ from it and its name spells them (the table cuts the long name short)
    assert sorted(settings) == ["method 'logit_kd' (not installed), logit_kd.weight=0.5, logi…", "vanilla fine-tuning"], compare.stdout
    assert f"{named}, logit_kd.weight=0.5, logit_kd.temperature=2 / mrpc" in compare.stdout
    tradeoff = bare(["tradeoff", str(runs), "--out", str(tmp_path / "t.png")])
    assert tradeoff.returncode == 0, tradeoff.stderr
    assert f"mrpc / {named}, logit_kd.weight=0.5, logit_kd.temperature=2: n=1" in tradeoff.stdout, tradeoff.stdout
    refusal = (f"unknown section 'logit_kd': no installed method declares it ({named}? install the package that "
               "provides it, or remove the section)")
    evaluate = bare(["evaluate", str(runs / "kd")])
    assert evaluate.returncode == 2 and refusal in evaluate.stderr
    sweep = bare(["sweep", str(tmp_path / "kd.yaml"), "--out", str(tmp_path / "sweep")])
    assert sweep.returncode == 2 and refusal in sweep.stderr and not (tmp_path / "sweep").exists()
