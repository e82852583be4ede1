"""The live progress line keeps step, elapsed/remaining, loss, λ and distance readable at 100 columns;
every record goes into a log line above it, in the plain log's format, wrapped between fields; tables
print whole on a terminal of any width and as pipe tables elsewhere."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from recall_cli.cli.console import PlainReporter, RichReporter, fit_fields, format_record, print_table

RECORD = {"step": 40, "split": "train", "epoch": 0.019, "loss": 0.6789, "lr": 4.025e-05, "lambda": 0.982,
          "distance": 0.5781, "grad_norm": 0.5585, "samples_per_s": 55.25}


@pytest.mark.parametrize("width", [100, 120])
def test_progress_line_fields_readable(width):
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    reporter = RichReporter(console)
    reporter.progress.auto_refresh = False
    reporter.start(200, 0, {"device": "cpu", "precision": "fp32"})
    reporter.train(RECORD)
    reporter.step(40)
    reporter.close()
    log_lines = console.export_text().splitlines()

    screen = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    screen.print(reporter.progress.get_renderable())
    live = screen.export_text().splitlines()
    assert len(live) == 1 and len(live[0]) <= width, live
    line = live[0]
    for field in ("finetune", " 40/200 ", "0:00:00 <", "loss=0.6789", "λ=0.982", "dist=0.5781"):
        assert field in line, (field, line)
    assert "…" not in line
    # Everything else is in the log line printed above the bar (wrapped between fields).
    start = next(i for i, text in enumerate(log_lines) if text.startswith("step=40 split=train"))
    log = " ".join([log_lines[start], *(t.strip() for t in log_lines[start + 1:] if t.startswith("    "))])
    for field in ("lr=4.025e-05", "grad_norm=0.5585", "samples_per_s=55.25", "epoch=0.019"):
        assert field in log


@pytest.mark.slow
def test_rich_output_of_a_real_run(tiny_model_dir, tmp_path):
    """--rich through the CLI: the start line, one full log line per train record, evals and the end line."""
    from typer.testing import CliRunner

    from recall_cli.cli import app

    from conftest import tiny_recipe, write_recipe

    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "run", train={"max_steps": 4}))
    result = CliRunner().invoke(app, ["finetune", str(recipe), "--rich"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "recall: starting — device=cpu, precision=fp32" in out
    for step in (2, 4):
        assert f"step={step} split=train epoch=" in out and "grad_norm=" in out and "samples_per_s=" in out
    # Evals and probes print in the train records' format (not "eval step 4: ..."), as the plain lines do.
    assert "step=4 split=eval accuracy=" in out and "eval step" not in out
    assert "done: 4 steps in" in out


# A train record as the issue saw it wrapped mid-number ("distance=0" / ".23") at 80 and 120 columns.
LONG = {"step": 10, "split": "train", "epoch": 0.0048, "loss": 0.6916, "lr": 3.5e-05, "lambda": 0.8022,
        "penalty_weight": 0.1978, "distance": 0.23, "grad_norm": 0.5475, "samples_per_s": 8.072}


@pytest.mark.parametrize("width", [60, 80, 120])
def test_records_above_the_bar_wrap_between_fields(width):
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    reporter = RichReporter(console)
    reporter.progress.auto_refresh = False
    reporter.start(30, 0, {"device": "cpu"})
    reporter.train(LONG)
    reporter.eval({"step": 10, "split": "eval", "accuracy": 0.5, "main": 0.5})
    reporter.eval({"step": 10, "split": "probe", "cka": 0.9996, "cka_debiased": 0.9994, "drift": 0.002648,
                   "sts": 0.8439, "sts_ref": 0.8435, "sts_retained": 1.0, "probe_seconds": 11.44})
    reporter.close()
    text = console.export_text()
    assert "distance=0.23" in text
    lines = [line for line in text.splitlines()
             if line.strip() and "finetune" not in line and not line.startswith("recall:")]
    assert all(len(line) <= width for line in lines), lines
    # Put back together, the lines are the plain log's lines, field for field: no number was cut.
    records, current = [], None
    for line in lines:
        if line.startswith("step="):
            current = [line]
            records.append(current)
        else:
            assert line.startswith("    "), line  # a continuation is indented
            current.append(line.strip())
    assert [" ".join(r) for r in records] == [
        format_record(LONG), "step=10 split=eval accuracy=0.5 main=0.5",
        "step=10 split=probe cka=0.9996 cka_debiased=0.9994 drift=0.002648 sts=0.8439 sts_ref=0.8435 "
        "sts_retained=1 probe_seconds=11.44"]


def test_fit_fields_never_splits_a_field():
    fields = format_record(LONG).split(" ")
    for width in range(10, 140, 7):
        lines = fit_fields(fields, width)
        assert [f for line in lines for f in line.split()] == fields
        assert all(len(line) <= width for line in lines if " " in line.strip())  # a lone field may be longer


def test_the_bar_counts_the_last_step_while_it_is_evaluated():
    """The loop reports step N done (reporter.step) after its evaluation, probe and save: the bar must
    not sit at N-1/N meanwhile."""
    console = Console(width=100, record=True, file=io.StringIO(), color_system=None)
    reporter = RichReporter(console)
    reporter.progress.auto_refresh = False
    reporter.start(30, 0, {"device": "cpu"})
    reporter.step(29)
    reporter.train({**LONG, "step": 30})  # the last step's record: its eval comes next
    screen = Console(width=100, record=True, file=io.StringIO(), color_system=None)
    screen.print(reporter.progress.get_renderable())
    live = screen.export_text()
    reporter.close()
    assert "30/30" in live and "29/30" not in live and "final eval" in live, live


def test_plain_and_rich_print_the_same_record_line(capsys):
    record = {"step": 30, "split": "eval", "data": "holdout", "accuracy": 0.495, "main": 0.495}
    PlainReporter().eval(record)
    plain = capsys.readouterr().out
    assert plain == "step=30 split=eval data=holdout accuracy=0.495 main=0.495\n"
    console = Console(width=120, record=True, file=io.StringIO(), color_system=None)
    reporter = RichReporter(console)
    reporter.progress.auto_refresh = False
    reporter.start(100, 0, {"device": "cpu"})
    reporter.eval(record)
    reporter.close()
    rich_lines = [line.rstrip() for line in console.export_text().splitlines() if line.startswith("step=")]
    assert rich_lines == [plain.rstrip()]


# ---- tables ----------------------------------------------------------------------------------------


def _runs_table():
    from rich.table import Table

    table = Table(title="forgetting: distance ||theta - theta*|| per run")
    for name in ("run", "setting", "seed", "dist end", "dist min", "at step", "loss end", "dev main"):
        table.add_column(name, justify="left" if name in ("run", "setting") else "right")
    table.add_row("quickstart", "RecAdam", "42", "2.089", "0.01507", "10", "0.3467", "[bold]0.8154[/bold]")
    table.add_row("quickstart_adamw", "vanilla fine-tuning", "42", "2.33", "0.02", "10", "0.31", "0.8245")
    return table


def test_a_table_that_is_not_on_a_terminal_is_a_pipe_table():
    out = io.StringIO()
    print_table(_runs_table(), Console(file=out, width=80))  # a pipe or a file: not a terminal
    lines = out.getvalue().splitlines()
    assert lines[0] == "forgetting: distance ||theta - theta*|| per run"
    header = [c.strip() for c in lines[1].strip("|").split("|")]
    assert header == ["run", "setting", "seed", "dist end", "dist min", "at step", "loss end", "dev main"]
    assert set(lines[2]) <= set("|-:") and lines[2].endswith("---:|")
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[3:]]
    assert [r[0] for r in rows] == ["quickstart", "quickstart_adamw"]  # full names, every column
    assert rows[0][-1] == "**0.8154**" and rows[1][-1] == "0.8245"  # bold as markdown's bold
    assert len({len(line) for line in lines[1:]}) == 1  # padded: it reads as text too
    assert "┃" not in out.getvalue() and "…" not in out.getvalue()


@pytest.mark.parametrize("width", [40, 80, 120])
def test_a_narrow_terminal_keeps_every_column_and_name(width):
    out = io.StringIO()
    print_table(_runs_table(), Console(file=out, width=width, force_terminal=True, color_system=None))
    text = out.getvalue()
    assert "…" not in text
    for header in ("dev", "main", "loss", "seed"):
        assert header in text, (width, text)
    assert "0.8154" in text and "0.8245" in text
    assert "quickstart_adamw" in text and "quickstart " in text, text  # whole names, on one line each
    if width >= 120:
        assert "┃" in text  # room enough: the rich table
    assert all(len(line) <= width for line in text.splitlines() if "┃" in line or "│" in line)


def test_the_gguf_de_quantizing_bar_is_silenced_unless_recall_debug(monkeypatch, capsys):
    """Issue 53: transformers' GGUF reader draws its bar with tqdm itself, past quiet_transformers(); a GGUF
    load is quiet, and RECALL_DEBUG=1 shows the bar again."""
    pytest.importorskip("gguf", reason="the lm extra installs gguf, which transformers' GGUF reader imports")
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    from recall_cli.quiet import quiet_gguf_bar as _quiet_gguf_bar

    original = gguf_utils.tqdm
    monkeypatch.delenv("RECALL_DEBUG", raising=False)
    with _quiet_gguf_bar():
        assert list(gguf_utils.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors...")) == [0, 1, 2]
    assert gguf_utils.tqdm is original and "de-quantizing" not in capsys.readouterr().err
    monkeypatch.setenv("RECALL_DEBUG", "1")
    with _quiet_gguf_bar():
        list(gguf_utils.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."))
    assert "de-quantizing" in capsys.readouterr().err


@pytest.mark.slow
def test_a_local_ray_start_names_its_token_mode_so_ray_does_not_warn(monkeypatch):
    """Issue 53: a local Ray turns token authentication on and warns about it on every start; recall names
    that same mode (RAY_AUTH_MODE=token), which Ray takes without the warning. A cluster's (--address), a
    mode the user set, and RECALL_DEBUG=1 are left alone."""
    import os

    from recall_cli.sweep.on_ray import quiet_token_warning

    for env, address, expected in (({}, None, "token"), ({}, "ray://head:10001", None),
                                   ({"RAY_AUTH_MODE": "disabled"}, None, "disabled"), ({"RECALL_DEBUG": "1"}, None, None)):
        monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
        monkeypatch.delenv("RECALL_DEBUG", raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        quiet_token_warning(address)
        assert os.environ.get("RAY_AUTH_MODE") == expected, (env, address)
    ray_setup = pytest.importorskip("ray._private.authentication.authentication_token_setup")
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    warned = []
    monkeypatch.setattr(ray_setup, "_warn_token_auth_enabled", lambda: warned.append(True))
    assert ray_setup.enable_token_auth_by_default() is True and not warned  # Ray's own: the mode kept, no warning
