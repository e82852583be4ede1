"""The run-directory format (recall_cli/rundir/): one resolver, one summary, one staged writer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recall_cli import rundir
from recall_cli.errors import RunDirError

STUDY = Path(__file__).resolve().parents[1] / "docs" / "study" / "runs"


def _checkpoint(folder: Path, trainer_state: bool = False) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    if trainer_state:
        (folder / rundir.TRAINER_STATE_FILE).write_text("{}")
    return folder


def _run(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / rundir.CONFIG_FILE).write_text("task: {name: mrpc}\n")
    (path / rundir.METRICS_FILE).write_text("")
    return path


def test_locate_names_every_kind_and_prefers_best(tmp_path):
    run = _run(tmp_path / "run")
    _checkpoint(run / "last", trainer_state=True)
    assert rundir.locate(run) == rundir.Located(run, "run", run / "last", run_dir=run)
    _checkpoint(run / "best")
    located = rundir.locate(run)
    assert (located.kind, located.folder, located.recipe_file) == ("run", run / "best", run / rundir.CONFIG_FILE)
    inside = rundir.locate(run / "last")
    assert (inside.kind, inside.folder, inside.run_dir) == ("checkpoint", run / "last", run)

    merged = tmp_path / "merged"
    _checkpoint(merged / "a")
    (merged / "a" / rundir.SOURCE_RECIPE_FILE).write_text("task: {name: sst2}\n")
    (merged / rundir.MERGE_RECORD).write_text(json.dumps({"method": "linear"}))
    located = rundir.locate(merged / "a")
    assert (located.kind, located.merge, located.recipe_file) == ("merge", {"method": "linear"}, merged / "a" / rundir.SOURCE_RECIPE_FILE)

    bare = _checkpoint(tmp_path / "bare")
    assert rundir.locate(bare) == rundir.Located(bare, "checkpoint", bare)
    assert rundir.locate(bare).recipe_file is None


@pytest.mark.parametrize("case, needle", [
    ("missing", "no such run directory or checkpoint folder"),
    ("empty run", "the run has no best/ or last/ checkpoint yet"),
    ("record", "is a scored record (recall evaluate --record) and holds no weights: give the checkpoint it scored, runs/x/best"),
    ("not a model", "not a run directory or checkpoint folder (no config.yaml, no config.json)"),
    ("broken merge.json", "merge.json is not valid JSON"),
])
def test_locate_refuses_with_one_error_type_and_one_message_per_case(tmp_path, case, needle):
    path = tmp_path / "x"
    if case == "empty run":
        _run(path)
    elif case == "record":
        _run(path)
        (path / rundir.CONFIG_FILE).write_text("task: {name: mrpc}\nrecord: {checkpoint: runs/x/best}\n")
    elif case == "not a model":
        path.mkdir()
    elif case == "broken merge.json":
        _checkpoint(path / "a")
        (path / rundir.MERGE_RECORD).write_text("{")
        path = path / "a"
    with pytest.raises(RunDirError) as error:
        rundir.locate(path)
    assert needle in str(error.value) and "\n" not in str(error.value)


def test_every_committed_summary_reads_and_writes_back_unchanged():
    """Both layouts in the committed study (training runs and scored records) round-trip key for key."""
    files = sorted(STUDY.rglob(rundir.SUMMARY_FILE))
    assert len(files) > 100
    kinds = set()
    for file in files:
        data = json.loads(file.read_text(encoding="utf-8"))
        summary = rundir.read_summary(file.parent)
        assert summary is not None and summary.finished is True and summary.task == data["task"]
        assert summary.to_dict() == data and summary.extra == {}
        assert summary.final_main == data["final"]["main"]
        kinds.add(summary.record)
    assert kinds == {True, False}


def test_summary_of_an_older_or_newer_version(tmp_path):
    # 0.1 wrote no precision, world size or probe; a newer version may add keys: kept as read.
    old = {"task": "rte", "optimizer": "recadam", "init": "pretrained", "seed": 1, "steps": 3, "finished": False,
           "best": None, "final": None, "final_distance": 0.5, "from_the_future": [1, 2]}
    (tmp_path / rundir.SUMMARY_FILE).write_text(json.dumps(old))
    summary = rundir.read_summary(tmp_path)
    assert (summary.precision, summary.world_size, summary.probe, summary.final_main) == (None, None, None, None)
    assert summary.extra == {"from_the_future": [1, 2]}
    assert summary.to_dict() == {**old, "probe": None}
    (tmp_path / rundir.SUMMARY_FILE).write_text("[1, 2]")
    assert rundir.read_summary(tmp_path) is None
    (tmp_path / rundir.SUMMARY_FILE).write_text('{"task": ')
    assert rundir.read_summary(tmp_path) is None


def test_staged_folder_replaces_whole_or_not_at_all(tmp_path):
    dest = tmp_path / "out"
    with rundir.staged_folder(dest) as staging:
        (staging / "a.txt").write_text("first")
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and (dest / "a.txt").read_text() == "first"

    with pytest.raises(KeyboardInterrupt):
        with rundir.staged_folder(dest) as staging:
            (staging / "a.txt").write_text("second")
            raise KeyboardInterrupt
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and (dest / "a.txt").read_text() == "first"

    def refuse() -> None:
        raise RunDirError("taken meanwhile")

    with pytest.raises(RunDirError):
        with rundir.staged_folder(dest, check=refuse) as staging:
            (staging / "a.txt").write_text("third")
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and (dest / "a.txt").read_text() == "first"

    with rundir.staged_folder(dest) as staging:
        (staging / "b.txt").write_text("fourth")
    assert sorted(p.name for p in dest.iterdir()) == ["b.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
