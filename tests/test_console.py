"""The live progress line keeps step, elapsed/remaining, loss, λ and distance readable at 100 columns;
the other fields of each train record go into a log line above it."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from recall_cli.console import RichReporter

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
    # Everything else is in the log line printed above the bar.
    log = next(text for text in log_lines if text.startswith("step=40 split=train"))
    for field in ("lr=4.025e-05", "grad_norm=0.5585", "samples_per_s=55.25", "epoch=0.019"):
        assert field in log


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
    assert "eval step 4: accuracy=" in out
    assert "done: 4 steps in" in out
