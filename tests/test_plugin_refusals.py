"""Issue 52's plugin class: a plugin cannot fake success or hide. Every refusal comes from the one loader
(plugins/loader.py) or the method registry's hooks (plugins/methods.py), names the plugin, and is one line
with exit 2 (docs/errors.md). Plugins here are real modules on sys.path named by real entry points."""

from __future__ import annotations

import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from conftest import tiny_recipe, write_recipe
from test_plugins import plugin_path, recall

from recall_cli.cli import app
from recall_cli.errors import PluginError, RecipeError
from recall_cli.plugins import loader
from recall_cli.plugins import methods as registry

HEAD = "from recall_cli.methods import Method, MethodRun, register_method\n"


@pytest.fixture
def install(tmp_path, monkeypatch):
    """install(name=source, ...): each source a module on sys.path, each named by an entry point of the
    methods' group; the registry then loads afresh (recall's own kept) and is put back after the test."""
    registry.methods()  # recall's own loaded before the swap
    monkeypatch.syspath_prepend(str(tmp_path))

    def go(**modules: str | tuple[str, str]) -> None:
        """name=source (the entry point names the module) or name=(source, attribute) (it names a class or
        an instance in it)."""
        points = []
        for name, source in modules.items():
            source, attribute = source if isinstance(source, tuple) else (source, None)
            module = f"plug_{name}_{abs(hash(str(tmp_path))) % 10**8}"
            (tmp_path / f"{module}.py").write_text(source, encoding="utf-8")
            points.append(EntryPoint(name, f"{module}:{attribute}" if attribute else module, registry.ENTRY_POINT_GROUP))
            monkeypatch.delitem(sys.modules, module, raising=False)
        monkeypatch.setattr(registry._METHODS, "entries", dict(registry._METHODS.entries))
        monkeypatch.setattr(registry._METHODS, "replaced", {})
        monkeypatch.setattr(registry._METHODS, "loaded", False)
        monkeypatch.setattr(registry._METHODS, "failure", None)
        monkeypatch.setattr(loader, "_entry_points",
                            lambda group: points if group == registry.ENTRY_POINT_GROUP else [])

    return go


# ---- a plugin's import cannot end the command ------------------------------------------------------


@pytest.mark.slow
def test_a_plugin_that_calls_sys_exit_0_is_one_line_and_exit_2(tmp_path, tiny_model_dir):
    root = plugin_path(tmp_path / "site")
    (root / "recall_shrink_plugin.py").write_text("import sys\nsys.exit(0)\n", encoding="utf-8")
    path = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "run"))
    out = recall(["finetune", str(path), "--dry-run"], root, tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "error: the method plugin shrink (recall_shrink_plugin) failed to load: it called sys.exit(0) (fix or "
        "uninstall the package that provides it)"]


@pytest.mark.parametrize("body, words", [("raise SystemExit", "it called sys.exit(None)"),
                                         ("import sys\nsys.exit('bye')", "it called sys.exit('bye')"),
                                         ("import os\nos.environ['X'] = 1", "TypeError: str expected, not int")])
def test_a_plugin_import_that_exits_or_fails_names_the_plugin(install, body, words):
    install(quits=body)
    with pytest.raises(PluginError, match=r"^the method plugin quits \(plug_quits_\d+\) failed to load: ") as caught:
        registry.methods()
    assert words in str(caught.value)


def test_a_plugin_import_that_raises_generator_exit_names_the_plugin(install):
    install(quits="raise GeneratorExit")
    with pytest.raises(PluginError, match=r"^the method plugin quits \(plug_quits_\d+\) failed to load: GeneratorExit \("):
        registry.methods()


def test_an_interrupt_in_a_plugin_stays_a_stop_and_its_line_names_the_plugin(install, tmp_path, tiny_model_dir):
    """A KeyboardInterrupt while a plugin is imported is a stop (exit 130), not the plugin's fault to name as
    an error: Ctrl-C and a plugin's own raise look alike. The stop's line says where it came."""
    install(quits="raise KeyboardInterrupt")
    path = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "run"))
    result = CliRunner().invoke(app, ["finetune", str(path), "--dry-run"])
    assert result.exit_code == 130, result.output
    assert result.output.strip().splitlines()[-1].startswith(
        "interrupted while importing the method plugin quits (plug_quits_")
    assert not (tmp_path / "run").exists()


# ---- a name that is taken is refused, not dropped --------------------------------------------------


def test_an_entry_point_naming_a_class_with_a_built_in_name_is_refused(install):
    install(mine=(HEAD + "class Anchor(Method):\n    name, label, switch = 'keep', 'my anchor', 'mine.weight'\n", "Anchor"))
    with pytest.raises(PluginError) as caught:
        registry.methods()
    line = str(caught.value)
    assert line.startswith("the method plugin mine (plug_mine_") and line.endswith(
        ":Anchor) cannot be registered: method keep: its name is taken by keep (recall_cli.methods.keep); pick "
        "another, or register_method(..., replace=True)")


def test_an_entry_point_naming_the_class_its_module_registers_is_taken_once(install):
    """The variant that must not be refused: a module that registers its class, named by that class."""
    install(tidy=(HEAD + "class Tidy(Method):\n    name, label, switch = 'tidy', 'tidy', 'train.seed'\n"
                         "register_method(Tidy())\n", "Tidy"))
    assert [m.name for m in registry.methods()] == ["keep", "lp_ft", "lora", "osf", "lm_keep", "ewc", "replay", "tidy"]


def test_an_instance_whose_switch_is_a_built_ins_is_refused_naming_the_plugin(install):
    install(twin=(HEAD + "class Twin(Method):\n    name, label, switch = 'twin', 'twin', 'keep.embeddings'\n"
                         "TWIN = Twin()\n", "TWIN"))
    with pytest.raises(PluginError, match=r"^the method plugin twin \(plug_twin_\d+:TWIN\) cannot be registered: "
                                          r"method twin: its switch is taken by keep"):
        registry.methods()


# ---- recall's own sections are recall's ------------------------------------------------------------


@pytest.mark.parametrize("section", ["train", "keep", "output_dir", "probe"])
def test_a_plugin_cannot_declare_recall_s_own_section(install, section):
    install(sect=HEAD + "from dataclasses import dataclass\n@dataclass(frozen=True)\nclass C:\n    weight: float = 0.0\n"
                        f"class S(Method):\n    name, label, switch = 'sect', 'sect', '{section}.weight'\n"
                        f"    section, config = '{section}', C\nregister_method(S())\n")
    with pytest.raises(PluginError) as caught:
        registry.methods()
    line = str(caught.value)
    assert line.startswith("the method plugin sect (plug_sect_") and "\n" not in line
    assert f"ValueError: method sect: its section '{section}' is one of recall's own" in line


def test_recall_s_reserved_sections_are_the_schema_s():
    from recall_cli.recipe.schema import SECTIONS, Recipe

    fields = [f.name for f in __import__("dataclasses").fields(Recipe)]
    assert set(registry.RESERVED_SECTIONS) == set(SECTIONS) | set(fields)


# ---- replacing a built-in is announced; its orphaned keys are refused -------------------------------

REPLACEMENT = HEAD + """from dataclasses import dataclass
@dataclass(frozen=True)
class C:
    weight: float = 0.0
class Anchor(Method):
    name, label, switch, section, config = "keep", "my anchor", "myanchor.weight", "myanchor", C
register_method(Anchor(), replace=True)
"""


def test_a_plugin_that_replaces_a_built_in_is_announced_and_its_orphaned_key_refused(install, capsys, tmp_path,
                                                                                       tiny_model_dir):
    from recall_cli.recipe import recipe_from_dict

    install(anchor=REPLACEMENT)
    names = [m.name for m in registry.methods()]
    assert names.count("keep") == 1 and registry.get("keep").label == "my anchor"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("note: the method 'keep' of recall_cli.methods.keep is replaced by plug_anchor_")
    with pytest.raises(RecipeError) as caught:
        recipe_from_dict(tiny_recipe(tiny_model_dir, tmp_path / "run", keep={"embeddings": 1.0}), "r.yaml")
    assert ("keep.embeddings: no method reads it any more (plug_anchor_" in str(caught.value)
            and "replaced recall's keep): remove it from the recipe (set it back to 0.0)" in str(caught.value))
    # the variant: at its default, the key says nothing false, and keys another method still reads are kept
    recipe = recipe_from_dict(tiny_recipe(tiny_model_dir, tmp_path / "run", keep={"texts": "pool"}), "r.yaml")
    assert registry.orphaned(recipe) == []


# ---- a plugin's check() and loss term are held to their contract -----------------------------------


def checker(returns: str) -> str:
    return HEAD + (f"class Odd(Method):\n    name, label, switch = 'odd', 'odd', 'train.seed'\n"
                   f"    def check(self, recipe):\n        {returns}\nregister_method(Odd())\n")


def test_a_check_returning_a_string_is_one_problem(install, tmp_path, tiny_model_dir):
    from recall_cli.recipe import recipe_from_dict

    install(odd=checker("return 'train.seed: odd is not pleased'"))
    with pytest.raises(RecipeError) as caught:
        recipe_from_dict(tiny_recipe(tiny_model_dir, tmp_path / "run"), "r.yaml")
    assert "train.seed: odd is not pleased" in str(caught.value)
    assert "\n  t\n" not in str(caught.value) and str(caught.value).count("odd is not pleased") == 1


@pytest.mark.parametrize("returns, words", [
    ("raise KeyError('weight')", "check() raised KeyError: 'weight' (fix the plugin, or uninstall it)"),
    ("return 3", "check() returned int, not a list of problems"),
    ("return [1, 2]", "check() returned list, not a list of problems"),
    ("import sys; sys.exit(0)", "check() called sys.exit(0) (fix the plugin, or uninstall it)"),
    ("raise GeneratorExit", "check() raised GeneratorExit (fix the plugin, or uninstall it)"),
])
def test_a_check_that_raises_or_returns_nonsense_names_the_plugin(install, tmp_path, tiny_model_dir, returns, words):
    from recall_cli.recipe import recipe_from_dict

    install(odd=checker(returns))
    with pytest.raises(PluginError, match=r"^the method plugin odd \(plug_odd_\d+\): ") as caught:
        recipe_from_dict(tiny_recipe(tiny_model_dir, tmp_path / "run"), "r.yaml")
    assert str(caught.value).endswith(words) or words in str(caught.value)


def test_a_check_returning_none_is_no_problem(install):
    install(odd=checker("return None"))
    assert registry.asked(registry.get("odd"), "check", None) == []


class _Out:
    def __init__(self, logits):
        self.logits = logits


def term_plugin(body: str) -> str:
    return HEAD + f"""import torch
class T:
    name, needs_hidden_states = "bad", False
    def weight(self, step):
        return 1.0
    def __call__(self, outputs, batch, indices=None):
        {body}
class Bad(Method):
    name, label, switch = "badterm", "bad term", "train.seed"
    def start(self, run):
        return MethodRun([T()])
register_method(Bad())
"""


@pytest.mark.parametrize("body, words", [
    ("raise RuntimeError('shape mismatch')", "raised RuntimeError: shape mismatch"),
    ("return 0.5", "returned float, not a tensor"),
    ("return None", "returned NoneType, not a tensor"),
    ("return outputs.logits.pow(2).mean(0)", "returned a tensor of shape (3,), not a scalar"),
    ("return torch.tensor(outputs.logits.pow(2).mean().item())", "returned a tensor without a gradient"),
    ("return outputs.logits.detach().pow(2).mean()", "returned a tensor without a gradient"),
    ("import sys; sys.exit(0)", "called sys.exit(0) (fix the plugin, or uninstall it)"),
    ("return torch.zeros((), requires_grad=True) * 1.0", "returned a tensor that no weight of the model reaches"),
    ("return (outputs.logits.detach() * 0 + torch.ones(1, requires_grad=True)).sum()", "no weight of the model reaches"),
    ("return outputs.logits.pow(2).mean() * (1 + 1j)", "returned a torch.complex64 tensor, not a real"),
])
def test_a_plugin_term_that_breaks_its_contract_is_one_line_naming_plugin_and_term(install, body, words):
    install(badterm=term_plugin(body))
    started = registry.start(registry.get("badterm"), None)
    logits = torch.randn(2, 3, requires_grad=True)
    with pytest.raises(PluginError, match=r"^the method plugin badterm \(plug_badterm_\d+\): its loss term 'bad' ") as caught:
        started.terms[0](_Out(logits), {})
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_a_term_that_reads_the_weights_and_not_the_outputs_is_taken():
    """A term may be computed from the model's parameters alone (a penalty on the weights, as EWC's is)."""
    model = torch.nn.Linear(3, 2)
    term = registry.CheckedTerm(lambda outputs, batch, indices=None: model.weight.pow(2).sum(), "a plugin", model)
    logits = model(torch.randn(4, 3))
    assert term({"logits": logits}, {}).requires_grad
    detached = registry.CheckedTerm(lambda outputs, batch, indices=None: torch.ones((), requires_grad=True) * 2,
                                    "a plugin", model)
    with pytest.raises(PluginError, match="no weight of the model reaches"):
        detached({"logits": logits}, {})


def test_a_good_plugin_term_passes_through_unchanged(install):
    install(badterm=term_plugin("return outputs.logits.pow(2).mean()"))
    term = registry.start(registry.get("badterm"), None).terms[0]
    logits = torch.randn(2, 3, requires_grad=True)
    value = term(_Out(logits), {})
    assert torch.equal(value, logits.pow(2).mean()) and value.requires_grad and term.name == "bad"
    with torch.no_grad():  # an evaluation without autograd (the Trainer's) is not a constant term
        assert term(_Out(logits), {}).requires_grad is False


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_a_run_whose_plugin_term_returns_a_float_ends_in_one_line(tmp_path, tiny_model_dir):
    root = plugin_path(tmp_path / "site")
    source = (root / "recall_shrink_plugin.py").read_text(encoding="utf-8")
    (root / "recall_shrink_plugin.py").write_text(
        source.replace("return outputs.logits.float().pow(2).mean()", "return float(outputs.logits.float().pow(2).mean())"),
        encoding="utf-8")
    recipe = tiny_recipe(tiny_model_dir, tmp_path / "run", optimizer={"name": "adamw"},
                         train={"max_steps": 2, "log_every": 1, "eval_every": 2}, probe={"enabled": False})
    recipe["shrink"] = {"weight": 0.5}
    out = recall(["finetune", str(write_recipe(tmp_path / "r.yaml", recipe)), "--plain"], root, tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (
        "error: the method plugin shrink (recall_shrink_plugin): its loss term 'shrink' returned float, not a tensor: "
        "return a scalar tensor computed from the model's outputs")
    assert "Traceback" not in out.stderr


# ---- a plugin's memory (extra_bytes) is a whole number of bytes --------------------------------------


@pytest.mark.parametrize("body, words", [("return 1.5e9", "extra_bytes() returned 1500000000.0, not a number of bytes"),
                                         ("return -1", "extra_bytes() returned -1, not a number of bytes"),
                                         ("raise KeyError('hidden')", "extra_bytes() raised KeyError")])
def test_a_plugins_extra_bytes_is_held_to_an_int(install, body, words):
    source = (HEAD + "class Mem(Method):\n    name, label, switch = 'mem', 'mem', 'mem.weight'\n"
              f"    def extra_bytes(self, run):\n        {body}\n"
              "class Fine(Method):\n    name, label, switch = 'fine', 'fine', 'fine.weight'\n"
              "    def extra_bytes(self, run):\n        return 2048\n"
              "register_method(Mem())\nregister_method(Fine())\n")
    install(mem=source)
    entries = {m.name: m for m in registry.methods()}
    with pytest.raises(PluginError, match=r"^the method plugin mem \(plug_mem_\d+\): ") as caught:
        registry.extra_bytes(entries["mem"], None)
    assert words in str(caught.value)
    assert registry.extra_bytes(entries["fine"], None) == 2048
