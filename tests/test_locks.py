"""Locks that follow no link and trust no folder (issue 41): the output lock used to be opened through any
symlink planted at its guessable name (truncating and writing the link's target) in a shared folder
whoever made it first owned."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from recall_cli.errors import RunDirError
from recall_cli.rundir.lifecycle import LOCK_FILE, RunLock, lock_folder, output_lock


@pytest.fixture
def private_tmp(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_a_link_planted_at_the_run_lock_is_refused_and_its_target_untouched(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (run / LOCK_FILE).symlink_to(victim)
    with pytest.raises(RunDirError, match=r"is a symbolic link: recall never writes through one; remove it"):
        RunLock.take(run)
    assert victim.read_text() == "precious"


def test_a_link_planted_at_the_output_lock_is_refused(private_tmp, tmp_path):
    import hashlib

    out = tmp_path / "merged"
    folder = lock_folder()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (folder / f"{hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:24]}.lock").symlink_to(victim)
    with pytest.raises(RunDirError, match="symbolic link"):
        with output_lock(out, "another recall merge", "--out"):
            pass
    assert victim.read_text() == "precious"


def test_the_lock_folder_is_made_private_and_a_shared_one_is_refused(private_tmp):
    folder = lock_folder()
    assert folder.name == f"recall-locks-{os.getuid()}" and (folder.stat().st_mode & 0o777) == 0o700
    folder.chmod(0o777)  # as another user who made it first, open to all, would have it
    with pytest.raises(RunDirError, match=r"is not this user's alone .*mode 777.*set TMPDIR"):
        lock_folder()
    folder.chmod(0o700)
    os.rmdir(folder)
    folder.symlink_to(private_tmp)  # a link in its place
    with pytest.raises(RunDirError, match="not this user's alone"):
        lock_folder()


@pytest.mark.skipif(os.getuid() != 0, reason="making a file of another user needs root")
def test_a_lock_file_of_another_user_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / LOCK_FILE).write_text("")
    os.chown(run / LOCK_FILE, 12345, 12345)
    with pytest.raises(RunDirError, match=r"owned by another user \(uid 12345\)"):
        RunLock.take(run)


def test_a_lock_is_still_taken_released_and_refused_to_a_second_holder(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    lock = RunLock.take(run)
    assert (run / LOCK_FILE).read_text() == str(os.getpid()) and (os.stat(run / LOCK_FILE).st_mode & 0o777) == 0o600
    lock.release()
    assert not (run / LOCK_FILE).exists()


def test_the_next_writer_of_an_output_removes_what_a_killed_one_left(private_tmp, tmp_path):
    """merge --out and evaluate --record stage into .OUT.tmp-XXXX beside OUT, predict into .OUT.tmp: a kill -9
    there leaves a model-sized folder nobody removed. The next writer of OUT, once it holds OUT's lock
    (so no live writer of OUT exists), removes them; another output's staging stays."""
    out = tmp_path / "merged"
    stale_dir = tmp_path / ".merged.tmp-k1ll3d"
    (stale_dir / "s1").mkdir(parents=True)
    (stale_dir / "s1" / "model.safetensors").write_bytes(b"0" * 1024)
    stale_file = tmp_path / ".merged.tmp"
    stale_file.write_text("half a prediction")
    other = tmp_path / ".merged2.tmp-abc"
    other.mkdir()
    with output_lock(out, "another recall merge", "--out"):
        assert not stale_dir.exists() and not stale_file.exists()
    assert other.is_dir()


def test_a_live_writer_keeps_its_staging_and_refuses_the_second(private_tmp, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "rec"
    live = tmp_path / ".rec.tmp-live"
    live.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time, tempfile\n"
        f"tempfile.tempdir = {str(private_tmp)!r}\n"
        "from pathlib import Path\n"
        "from recall_cli.rundir.lifecycle import RunLock, lock_folder\n"
        "import hashlib\n"
        f"out = Path({str(out)!r})\n"
        "name = hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:24]\n"
        "lock = RunLock.take(out, path=lock_folder() / f'{name}.lock')\n"
        "print('held', flush=True); time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirError, match=f"is being written by process {holder.pid}"):
            with output_lock(out, "another recall evaluate --record", "--record folder"):
                pass
        assert live.is_dir()  # the holder's staging was not touched
    finally:
        holder.kill()
        holder.wait()
