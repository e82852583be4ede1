"""The error boundary every command shares: exit codes and what Ctrl-C says."""

from __future__ import annotations

import pytest
import typer

from recall_cli.cli_common import EXIT_FAILURE, EXIT_INTERRUPTED, run_guarded


def interrupt():
    raise KeyboardInterrupt


def test_ctrl_c_in_finetune_says_how_to_resume(capsys):
    with pytest.raises(typer.Exit) as stopped:
        run_guarded(interrupt)
    assert stopped.value.exit_code == EXIT_INTERRUPTED == 130
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
    assert stopped.value.exit_code == EXIT_FAILURE == 1
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
    expected = {errors.TrainingDiverged: 3, errors.EnvironmentProblem: 4, errors.Preempted: 143}.get(kind, 2)
    assert stopped.value.exit_code == expected
    err = capsys.readouterr().err.strip().splitlines()
    if kind is errors.RecipeError:
        assert err == ["error: r.yaml: 2 problems in the recipe:", "  - a", "  - b"]
    elif kind is errors.Preempted:
        assert err == ["stopped by SIGTERM after step 7; last/ holds a complete checkpoint: continue with "
                       "recall finetune --resume runs/x"]
    else:
        assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0]
