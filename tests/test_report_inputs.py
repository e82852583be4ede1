"""`recall compare`, `recall tradeoff` and `recall forgetting` on run directories they cannot fully read
(issue 22, the report side): a summary.json of the wrong shape or type, metrics.jsonl records with a
field of the wrong type, a last line cut short by a crash, a NaN record. What cannot be read is skipped
with a warning naming the file (and the line and field), the rest is reported (exit 0); when nothing
readable remains the command fails with one line (exit 2) and writes no figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_tradeoff import fake, invoke

from recall_cli.report import load_runs
from recall_cli.rundir import (
    Summary,
    read_metrics,
    read_metrics_checked,
    read_summary_checked,
)

COMMANDS = ("compare", "tradeoff", "forgetting")


def run_command(command: str, root: Path, out: Path):
    """The command on ``root``; tradeoff and forgetting draw into ``out``."""
    if command == "compare":
        return invoke("compare", root)
    if command == "tradeoff":
        return invoke("tradeoff", root, "--out", out)
    return invoke("forgetting", "--run-dir", root, "--out", out)


def good_runs(root: Path) -> None:
    for seed in (1, 2, 3):
        fake(root, f"ok_s{seed}", main=0.80 + seed / 100, kept=0.7, seed=seed)


def warnings(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("warning: ")]


def append(run: Path, *lines: str) -> None:
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write("".join(lines))


# ---- summary.json --------------------------------------------------------------------------------

BAD_SUMMARIES = {
    "a list": ("[1, 2]", "it holds a list, not a JSON object"),
    "final as text": (json.dumps({"finished": True, "final": "x"}), "'final' is the text 'x', not an object"),
    "steps as text": (json.dumps({"finished": True, "steps": "abc"}), "'steps' is the text 'abc', not a whole number"),
    "finished as text": (json.dumps({"finished": "yes"}), "'finished' is the text 'yes', not true or false"),
    "a metric as text": (json.dumps({"finished": True, "final": {"step": 100, "main": "high"}}),
                         "'final' has 'main' is the text 'high', not a number"),
    "not JSON": ('{"finished": tr', "not valid JSON"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BAD_SUMMARIES))
@pytest.mark.parametrize("command", COMMANDS)
def test_a_broken_summary_is_named_and_the_other_runs_are_reported(tmp_path, command, case):
    text, why = BAD_SUMMARIES[case]
    root = tmp_path / "runs"
    good_runs(root)
    broken = fake(root, "broken", main=0.9, kept=0.9, seed=4)
    (broken / "summary.json").write_text(text)
    result = run_command(command, root, tmp_path / "figure.png")
    assert result.exit_code == 0, result.output
    assert f"warning: {broken / 'summary.json'} cannot be read: " in result.stderr
    assert why in result.stderr
    assert "Traceback" not in result.output
    if command == "compare":
        # named as such, not as a run that did not finish; left out of the numbers
        assert f"{broken}: summary.json cannot be read (" in result.stdout
        assert "did not finish" not in result.stdout
        assert "82.0" in result.stdout and "90.0" not in result.stdout
    if command == "tradeoff":
        assert "n=3 " in result.stdout  # the broken run (main 0.9) is not a point
    if command != "compare":
        assert (tmp_path / "figure.png").is_file()


def test_summary_types_are_checked_where_it_is_read(tmp_path):
    with pytest.raises(ValueError, match="'seed' is the text '1', not a whole number"):
        Summary.from_dict({"seed": "1"})
    with pytest.raises(ValueError, match="'final_distance' is true, not a number"):
        Summary.from_dict({"final_distance": True})
    # null is "not known" for every key, NaN is a number (compare flags it), newer keys are kept
    summary = Summary.from_dict({"seed": None, "final_distance": float("nan"), "finished": True, "new_key": "x"})
    assert summary.finished and summary.extra == {"new_key": "x"}
    assert read_summary_checked(tmp_path) == (None, None)  # no summary.json yet: a run still going


# ---- metrics.jsonl -------------------------------------------------------------------------------

BAD_RECORDS = {
    "step as text": ({"step": "abc", "split": "eval", "main": 0.1}, "'step' is the text 'abc', not a whole number"),
    "no split": ({"step": 50, "main": 0.1}, "no 'split'"),
    "a metric as text": ({"step": 50, "split": "eval", "main": "high"}, "'main' is the text 'high', not a number"),
    "not an object": ([50, "eval"], "it holds a list, not a JSON object"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BAD_RECORDS))
@pytest.mark.parametrize("command", COMMANDS)
def test_a_record_of_the_wrong_type_is_skipped_naming_file_line_and_field(tmp_path, command, case):
    record, why = BAD_RECORDS[case]
    root = tmp_path / "runs"
    good_runs(root)
    odd = fake(root, "odd", main=0.85, kept=0.7, seed=4)
    append(odd, json.dumps(record) + "\n")  # line 3, after the eval and the probe
    result = run_command(command, root, tmp_path / "figure.png")
    assert result.exit_code == 0, result.output
    assert f"warning: {odd / 'metrics.jsonl'}: line 3: {why}: record skipped" in result.stderr
    assert "Traceback" not in result.output
    if command == "tradeoff":
        assert "n=4 " in result.stdout  # the run's other records still count


def test_many_bad_records_give_a_few_warnings_and_a_count(tmp_path):
    root = tmp_path / "runs"
    good_runs(root)
    odd = fake(root, "odd", main=0.85, kept=0.7, seed=4)
    append(odd, *(json.dumps({"step": "x", "split": "train"}) + "\n" for _ in range(10)))
    result = invoke("compare", root)
    assert result.exit_code == 0, result.output
    lines = [w for w in warnings(result) if "metrics.jsonl" in w]
    assert len(lines) == 4 and lines[-1].endswith("7 more records skipped")


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS)
def test_a_last_line_cut_short_is_read_up_to_and_flagged(tmp_path, command):
    root = tmp_path / "runs"
    good_runs(root)
    crashed = fake(root, "crashed", main=0.85, kept=0.7, seed=4)
    append(crashed, '{"step": 150, "split": "tr')  # a kill in the middle of a write
    result = run_command(command, root, tmp_path / "figure.png")
    assert result.exit_code == 0, result.output
    assert (f"warning: {crashed / 'metrics.jsonl'}: line 3 is cut short (the run stopped while writing it?): "
            "read up to line 2") in result.stderr
    if command == "tradeoff":
        assert "n=4 " in result.stdout  # the records before it are read


def test_a_bad_line_further_up_ends_the_reading_and_says_how_much_was_left(tmp_path):
    run = fake(tmp_path, "r", main=0.8, kept=0.7)
    append(run, "not json\n", json.dumps({"step": 200, "split": "eval", "main": 0.9}) + "\n")
    records, problems = read_metrics_checked(run)
    assert len(records) == 2
    assert problems == ["line 3 is not valid JSON (Expecting value): read up to line 2, the 1 line after it left out"]
    assert read_metrics(run) == records  # training's reader stops at the same line, silently, as before


@pytest.mark.slow
def test_tradeoff_names_the_run_and_metric_a_nan_leaves_out(tmp_path):
    root = tmp_path / "runs"
    good_runs(root)
    nan = fake(root, "nan", main=float("nan"), kept=0.7, seed=4)
    inf = fake(root, "inf", main=0.85, kept=float("inf"), seed=5)
    result = invoke("tradeoff", root, "--out", tmp_path / "t.png", "--json")
    assert result.exit_code == 0, result.output
    assert f"warning: {nan}: left out: main is nan at its final step 100" in result.stderr
    assert f"warning: {inf}: left out: sts_retained is inf at its final step 100" in result.stderr
    (setting,) = json.loads(result.stdout)
    assert len(setting["points"]) == 3
    # compare flags the NaN in its cell, as it did
    compared = invoke("compare", root)
    assert f"{nan}: main is nan: left out" in compared.stdout


# ---- nothing readable left -----------------------------------------------------------------------


def unreadable(root: Path, name: str = "broken", seed: int = 1) -> Path:
    run = fake(root, name, main=0.8, kept=0.7, seed=seed)
    (run / "summary.json").write_text('{"finished": "yes"}')
    (run / "metrics.jsonl").write_text(json.dumps({"step": "abc", "split": "eval", "main": 0.8}) + "\n")
    return run


@pytest.mark.parametrize("command", COMMANDS)
def test_nothing_readable_is_one_line_exit_2_and_no_figure(tmp_path, command):
    root = tmp_path / "runs"
    broken = unreadable(root)
    out = tmp_path / "figure.png"
    result = run_command(command, root, out)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if not line.startswith("warning: ")]
    assert errors == [f"error: the one run directory under {root} cannot be read (the warning above says why)"], result.stderr
    assert f"warning: {broken}: cannot read the run (nothing in it can be read" in result.stderr
    assert not out.exists() and not out.with_name("figure_probes.png").exists()
    assert not any(p.name.startswith(".figure") for p in tmp_path.iterdir())  # no staged figure either


@pytest.mark.slow
@pytest.mark.parametrize("command", ("tradeoff", "forgetting"))
def test_a_run_left_with_nothing_to_draw_fails_before_any_figure(tmp_path, command):
    """Readable runs, none of which tradeoff can place: one line, exit 2, no figure."""
    root = tmp_path / "runs"
    for seed in (1, 2):
        fake(root, f"nan_s{seed}", main=float("nan"), kept=0.7, seed=seed)
    unreadable(root, seed=3)
    out = tmp_path / "figure.png"
    result = run_command(command, root, out)
    if command == "tradeoff":
        assert result.exit_code == 2, result.output
        assert "left out: main is nan" in result.stderr
        assert result.stderr.splitlines()[-1] == ("error: no finished run has a finite main (eval) and sts_retained "
                                                  "(probe) at its final step: 2 were left out for NaN or inf (the "
                                                  "warnings above name them)")
        assert not out.exists()
    else:  # forgetting draws what the two readable runs logged
        assert result.exit_code == 0, result.output
        assert out.exists()


def test_load_runs_skips_an_unreadable_run_among_several_folders(tmp_path):
    seen: list[str] = []
    good_runs(tmp_path / "a")
    unreadable(tmp_path / "b")
    runs = load_runs([tmp_path / "a", tmp_path / "b"], warn=seen.append)
    assert len(runs) == 3
    assert any("cannot read the run (nothing in it can be read" in w for w in seen)
