"""The error boundary every command shares: exit codes and what Ctrl-C says."""

from __future__ import annotations

import re

import pytest
import typer

from recall_cli.cli.common import run_guarded
from recall_cli.errors import ExitCode


def interrupt():
    raise KeyboardInterrupt


def test_ctrl_c_in_finetune_says_how_to_resume(capsys):
    with pytest.raises(typer.Exit) as stopped:
        run_guarded(interrupt)
    assert stopped.value.exit_code == ExitCode.INTERRUPTED == 130
    assert capsys.readouterr().err.strip() == "interrupted: continue with `recall finetune --resume OUTPUT_DIR`"


def test_ctrl_c_in_a_report_has_nothing_to_resume(capsys):
    with pytest.raises(typer.Exit) as stopped:
        run_guarded(interrupt, interrupted_hint=None)
    assert stopped.value.exit_code == 130
    assert capsys.readouterr().err.strip() == "interrupted"


def test_unknown_error_is_one_line_with_exit_1(capsys, monkeypatch):
    monkeypatch.delenv("RECALL_DEBUG", raising=False)

    def boom():
        raise ZeroDivisionError("division by zero")

    with pytest.raises(typer.Exit) as stopped:
        run_guarded(boom)
    assert stopped.value.exit_code == ExitCode.FAILURE == 1
    assert capsys.readouterr().err.strip() == (
        "error: ZeroDivisionError: division by zero (set RECALL_DEBUG=1 for the traceback)")


def _every_error_class():
    from recall_cli import errors

    return [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.RecallError)
            and c is not errors.RecallError]


@pytest.mark.parametrize("kind", _every_error_class(), ids=lambda c: c.__name__)
def test_every_known_error_is_one_line_and_its_documented_code(kind, capsys, monkeypatch):
    """One table (recall_cli/errors.py) for every command: each class carries the code the README lists."""
    from recall_cli import errors

    monkeypatch.delenv("RECALL_DEBUG", raising=False)
    args = {errors.RecipeError: ("r.yaml", ["a", "b"]), errors.TrainingDiverged: (7, float("nan")),
            errors.Preempted: (7, "runs/x")}.get(kind, ("what is wrong, and the fix",))

    def fails():
        raise kind(*args)

    with pytest.raises(typer.Exit) as stopped:
        run_guarded(fails)
    expected = {errors.TrainingDiverged: 3, errors.NonFiniteWeights: 3, errors.EnvironmentProblem: 4,
                errors.Preempted: 143}.get(kind, 2)
    assert stopped.value.exit_code == expected
    err = capsys.readouterr().err.strip().splitlines()
    if kind is errors.RecipeError:
        assert err == ["error: r.yaml: 2 problems in the recipe:", "  - a", "  - b"]
    elif kind is errors.Preempted:
        assert err == ["stopped by SIGTERM after step 7; last/ holds a complete checkpoint: continue with "
                       "recall finetune --resume runs/x"]
    else:
        assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0]


# ---- --help: what a new user reads first -----------------------------------------------------------

COMMANDS = ("finetune", "evaluate", "sweep", "forgetting", "compare", "probe", "tradeoff", "merge")


def _help(*args: str, width: int = 80) -> str:
    from typer.testing import CliRunner

    from recall_cli.cli import app

    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", ("", *COMMANDS))
def test_help_has_no_bool_metavars_and_names_arguments_in_capitals(command):
    text = _help(*([command] if command else []))
    assert "<bool>" not in text
    assert "<list[" not in text  # a list's element type: RUN_DIR... <path>, --grid <str>
    assert "{" not in text.splitlines()[1]  # the usage line: RECIPE, RUN_DIR..., not {path}
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    expected = {"finetune": "[RECIPE] [OVERRIDES...]", "evaluate": "PATH", "sweep": "RECIPE [OVERRIDES...]",
                "forgetting": "[RUN_DIR...]", "compare": "RUN_DIR...", "probe": "TARGETS...",
                "tradeoff": "RUN_DIR...", "merge": "MODELS...", "": "COMMAND [ARGS]..."}[command]
    assert usage.strip().endswith(f"[OPTIONS] {expected}"), usage


@pytest.mark.parametrize("command", COMMANDS)
def test_help_paragraphs_are_not_broken_mid_sentence(command):
    """A docstring's source line breaks used to show up in every paragraph after the first."""
    from recall_cli.cli import app
    import typer.main

    click_command = typer.main.get_command(app).commands[command]
    for text in (click_command.help or "", click_command.epilog or ""):
        for paragraph in text.split("\n\n"):
            assert "\n" not in paragraph, (command, paragraph)


def test_each_command_has_its_own_exit_codes():
    tradeoff, probe = _help("tradeoff", width=200), _help("probe", width=200)
    assert "--within that is negative or not finite" in tradeoff and "the figure cannot be written" in tradeoff
    assert "probe file" in probe and "--within" not in probe and "figure" not in probe
    forgetting, compare = _help("forgetting", width=200), _help("compare", width=200)
    assert "4 the figure cannot be written" in forgetting and "figure" not in compare


def test_merge_help_shows_every_default():
    text = " ".join(_help("merge", width=200).split())
    for flag, default in (("--clusters", "16"), ("--pool", "512"), ("--temperature", "0.05"), ("--gamma", "hidden"),
                          ("--density", "0.2"), ("--seed", "0"), ("--method", "recall")):
        after = text[text.index(flag + " "):]
        assert f"[default: {default}]" in after[:200], (flag, after[:200])
    assert "(default 0.5)" in text and "(default 1)" in text  # --lambda: each method's own


def test_merge_options_not_given_still_reach_the_method_as_none():
    """--help shows the method's default, but an option left out is still "not given" (None)."""
    import inspect

    from recall_cli.cli.merge import merge

    parameters = inspect.signature(merge).parameters
    assert parameters["clusters"].default is None and parameters["seed"].default == 0


@pytest.mark.slow
def test_theta_star_is_spelled_one_way_in_help():
    text = _help(width=200) + "".join(_help(c, width=200) for c in COMMANDS)
    assert "θ" not in text and "theta*" in text


@pytest.mark.slow
def test_forgetting_takes_run_folders_as_arguments_and_as_run_dir(tmp_path):
    from typer.testing import CliRunner

    from recall_cli.cli import app

    from test_report import fake_run

    fake_run(tmp_path / "a", "quickstart", optimizer="recadam", seed=42)
    fake_run(tmp_path / "b", "quickstart_adamw", optimizer="adamw", seed=42, main=0.82)
    runner = CliRunner()
    both = [runner.invoke(app, ["forgetting", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "1.png")],
                          env={"COLUMNS": "80"}),
            runner.invoke(app, ["forgetting", "--run-dir", str(tmp_path / "a"), "--run-dir", str(tmp_path / "b"),
                                "--out", str(tmp_path / "2.png")], env={"COLUMNS": "80"}),
            runner.invoke(app, ["forgetting", str(tmp_path / "a"), "--run-dir", str(tmp_path / "b"),
                                "--out", str(tmp_path / "3.png")], env={"COLUMNS": "80"})]
    for result in both:
        assert result.exit_code == 0, result.output
        # 80 columns: a plain table fitted to the width (the same piped or not), the columns left out named.
        lines = result.stdout.splitlines()
        assert re.split(r"\s{2,}", lines[1].strip()) == ["run", "setting", "seed", "dist end", "loss end", "dev main"]
        assert lines[5] == "(not shown at 80 columns: at step, dist min)"
        assert sorted(line.split()[0] for line in lines[3:5]) == ["quickstart", "quickstart_adamw"], result.stdout
        assert "…" not in result.stdout and all(len(line) <= 80 for line in lines[:6])
    none = runner.invoke(app, ["forgetting", "--out", str(tmp_path / "4.png")])
    assert none.exit_code == 2 and none.output.strip().startswith("error: give the runs: recall forgetting RUN_DIR")
    assert not (tmp_path / "4.png").exists()


@pytest.mark.slow  # starts a process (a Python subprocess, or wandb's service)
def test_a_stdout_that_is_not_unicode_prints_ascii_instead_of_crashing():
    import subprocess
    import sys

    env = {**__import__("os").environ, "PYTHONIOENCODING": "ascii", "COLUMNS": "100"}
    code = ("import sys; from recall_cli.cli.console import printable_streams, out_console; printable_streams(); "
            "out_console.print('λ=0.5 θ* – ±'); print('‖θ − θ*‖')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["lambda=0.5 theta* - +-", "||theta - theta*||"]


@pytest.mark.parametrize("args", [["recipes"], ["compare", "docs/study/runs/frontier"]], ids=["echo", "rich"])
@pytest.mark.slow  # starts a process (a Python subprocess, or wandb's service)
def test_a_closed_stdout_exits_141_in_silence(args):
    """`recall recipes | head -1`: the reader leaving is no error (no line, no traceback) and exits 141, as a
    shell reports for cat; both ways a command prints (typer.echo, rich) are covered."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line is written
    try:
        done = subprocess.run([sys.executable, "-m", "recall_cli", *args], stdout=write, stderr=subprocess.PIPE,
                              text=True, cwd=Path(__file__).resolve().parents[1], timeout=120)
    finally:
        os.close(write)
    assert done.returncode == 141 and done.stderr == ""


@pytest.mark.parametrize("args, said", [
    (["--max_steps", "10"], "--max_steps is not an option: recipe keys are overrides after the recipe, KEY=VALUE: train.max_steps=10"),
    (["--max-steps=7"], "--max-steps is not an option: recipe keys are overrides after the recipe, KEY=VALUE: train.max_steps=7"),
    (["--seed", "3", "train.max_steps=2"], "KEY=VALUE: train.seed=3"),
])
def test_a_run_glue_flag_says_overrides_are_key_value(args, said, tmp_path):
    """Issue 53: run_glue's `--max_steps 10` got click's bare "No such option"; a flag that names a recipe
    key gets the override to write instead (one line, exit 2, nothing written)."""
    from typer.testing import CliRunner

    from recall_cli.cli import app

    result = CliRunner().invoke(app, ["finetune", "recipes/quickstart.yaml", *args, f"output_dir={tmp_path / 'run'}"])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {said}" if said.startswith("--") else said in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_an_unknown_flag_that_names_no_recipe_key_keeps_clicks_words():
    from typer.testing import CliRunner

    from recall_cli.cli import app

    result = CliRunner().invoke(app, ["finetune", "recipes/quickstart.yaml", "--frobnicate", "3"])
    assert result.exit_code == 2 and "No such option: --frobnicate" in result.output
    assert "recipe keys are overrides" not in result.output
