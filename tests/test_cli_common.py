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
