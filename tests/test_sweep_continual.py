"""`recall sweep A.yaml B.yaml ...`: a grid of `recall continual` sequences (issue 49). Each cell's stages are
checked as `recall continual` checks them before anything runs; a cell's folder is the sequence's --out; its
score is the sequence's ACC; a re-run skips finished sequences and resumes an unfinished one to the record an
uninterrupted sequence writes; `recall compare` reads the sweep's folder as sequences."""

from __future__ import annotations

import json
import shlex
import shutil

import pytest
from typer.testing import CliRunner

from recall_cli.cli import app
from recall_cli.sequence.runner import run_continual

from test_continual import stage_files, without_seconds

runner = CliRunner()
TWO = (("mrpc", "MRPC"), ("rte", "RTE"))


def invoke(*args: str):
    return runner.invoke(app, list(args))


@pytest.mark.slow
def test_each_cell_is_one_continual_command(tiny_model_dir, tmp_path):
    a, b = stage_files(tmp_path, tiny_model_dir, TWO)
    out = tmp_path / "sweep"
    result = invoke("sweep", str(a), str(b), "train.max_steps=3", "--grid", "continual.merge=none,linear",
                    "--seeds", "1,2", "--out", str(out), "--print-commands")
    assert result.exit_code == 0, result.output
    argv = [shlex.split(line) for line in result.stdout.splitlines()]
    assert [x[-3:] for x in argv] == [["--out", str(out / n), "--plain"]
                                      for n in ("mergenone_s1", "mergenone_s2", "mergelinear_s1", "mergelinear_s2")]
    assert argv[2][:-3] == ["recall", "continual", str(a), str(b), "train.max_steps=3", "continual.merge=linear",
                            "train.seed=1"]
    assert not out.exists()


@pytest.mark.slow
def test_every_cells_stages_are_checked_before_anything_runs(tiny_model_dir, tmp_path):
    a, b = stage_files(tmp_path, tiny_model_dir, TWO)
    out = tmp_path / "sweep"
    result = invoke("sweep", str(a), str(b), "--grid", "continual.merge=none,fuse", "--grid", "train.max_steps=2,x",
                    "--out", str(out))
    assert result.exit_code == 2, result.output
    err = result.stderr
    # a stage's problem names its stage, and the cells it affects; the sequence's own key its cells
    assert f"stage 2 ({b}): train.max_steps: expected an integer, got 'x'" in err
    assert "continual.merge: one of none, recall, linear, ties, got 'fuse'" in err
    assert "Traceback" not in result.output and not out.exists()
    missing = invoke("sweep", str(a), str(tmp_path / "nope.yaml"), "--out", str(out))
    assert missing.exit_code == 2 and "nope.yaml: no such recipe file" in missing.stderr and not out.exists()


@pytest.fixture(scope="module")
def sequences(tiny_model_dir, tmp_path_factory):
    """Two seeds of a 2-stage sequence through the sweep, and seed 1 run directly as `recall continual` does."""
    tmp = tmp_path_factory.mktemp("sweep_continual")
    files = stage_files(tmp, tiny_model_dir, TWO)
    out = tmp / "out"
    args = ["sweep", *map(str, files), "--seeds", "1,2", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    direct = run_continual(files, ["train.seed=1"], tmp / "direct")
    return files, out, args, result, direct


@pytest.mark.slow
@pytest.mark.long  # three sequences through child processes: make test's second step runs them
def test_a_sweep_of_sequences_runs_indexes_and_scores_each_by_its_acc(sequences):
    files, out, _, result, direct = sequences
    index = json.loads((out / "sweep.json").read_text())
    assert [c["name"] for c in index["cells"]] == ["s1", "s2"]
    assert index["stages"] == [str(f) for f in files]
    for cell in index["cells"]:
        record = json.loads((out / cell["name"] / "continual.json").read_text())
        assert record["finished"] and cell["state"] == "finished" and cell["main"] == record["acc"]
        assert record["command"]["overrides"] == [f"train.seed={cell['name'][1:]}"]
    # a cell is the sequence `recall continual` runs with the same settings, number for number
    cell = json.loads((out / "s1" / "continual.json").read_text())
    assert without_seconds(cell)["matrix"] == without_seconds(direct)["matrix"]
    assert "sweep: [2/2] s2 finished" in result.stdout and "acc=" in result.stdout


@pytest.mark.slow
@pytest.mark.long  # three sequences through child processes: make test's second step runs them
def test_a_rerun_skips_finished_sequences_and_resumes_an_unfinished_one(sequences, tmp_path):
    files, out, args, _, _ = sequences
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    before = without_seconds(json.loads((out / "s2" / "continual.json").read_text()))
    # s2 as a sequence stopped after its first stage's row leaves it
    record = json.loads((copy / "s2" / "continual.json").read_text())
    record["stages"], record["matrix"], record["finished"] = record["stages"][:1], record["matrix"][:2], False
    (copy / "s2" / "continual.json").write_text(json.dumps(record))
    again = args[: args.index("--out")] + ["--out", str(copy)]
    listed = invoke(*again, "--print-commands")
    assert listed.stdout.splitlines() == [f"recall continual --resume --out {copy / 's2'} --plain"]
    result = invoke(*again)
    assert result.exit_code == 0, result.output
    assert "1 of 2 cells already finished, skipped" in result.stdout
    assert without_seconds(json.loads((copy / "s2" / "continual.json").read_text())) == before
    # another setting over a finished cell's folder is refused, naming what differs
    other = invoke(*again[:-2], "train.max_steps=5", "--out", str(copy))
    assert other.exit_code == 2 and "holds a sequence with other settings (overrides:" in other.stderr


@pytest.mark.slow
@pytest.mark.long  # three sequences through child processes: make test's second step runs them
def test_compare_reads_the_sweep_of_sequences(sequences):
    _, out, _, _, _ = sequences
    result = invoke("compare", str(out), "--format", "json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["rows"]  # the seed is no method: both cells are one row, n=2
    accs = [json.loads((out / c / "continual.json").read_text())["acc"] for c in ("s1", "s2")]
    assert row["method"] == "sequential" and row["n"] == 2 and row["seeds"] == [1, 2]
    assert row["median"]["acc"] == pytest.approx(sum(accs) / 2)


@pytest.mark.slow
def test_a_ray_task_finds_a_sequence_finished_or_resumes_it(tmp_path):
    """The Ray backend's task (run_cell) on a sequence's folder: a finished continual.json is not run again (a node
    that left after finishing it), an unfinished one runs the resume command; no Ray needed to check either."""
    from recall_cli.rundir import CONTINUAL_FILE
    from recall_cli.sweep.on_ray import run_cell

    fresh = ["python", "-c", "print('ran fresh')"]
    resume = ["python", "-c", "print('ran resume')"]
    cell = tmp_path / "s1"
    cell.mkdir()
    record = {"command": {}, "matrix": [None, {"mrpc": 0.5}], "stages": [{}], "finished": True, "acc": 0.5}
    (cell / CONTINUAL_FILE).write_text(json.dumps(record))
    log = tmp_path / "s1.log"
    assert run_cell(fresh, resume, "s1", str(log), str(tmp_path), "1", None, True) == (0, 0.0)
    assert not log.exists()
    (cell / CONTINUAL_FILE).write_text(json.dumps({**record, "finished": False}))
    code, _ = run_cell(fresh, resume, "s1", str(log), str(tmp_path), "1", None, True)
    assert code == 0 and "ran resume" in log.read_text() and "ran fresh" not in log.read_text()
