"""Exact resume: a real `recall finetune` process killed mid-run and resumed ends where an
uninterrupted run ends (same weights, same metrics records)."""

from __future__ import annotations

import pytest

import json
import os
import signal
import subprocess
import sys
import time

import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from recall_cli.rundir import find_checkpoint, read_metrics
from recall_cli.cli import app

from conftest import tiny_recipe, write_recipe

runner = CliRunner()
STEPS = 240


def comparable(records):
    """Records without wall-clock throughput, which legitimately differs between runs."""
    return [{k: v for k, v in r.items() if k not in ("samples_per_s", "probe_seconds")} for r in records]  # timings


def checkpoint_step(run_dir) -> int:
    """Step of the complete checkpoint on disk (last/, or last.old/ if killed between two renames)."""
    folder = find_checkpoint(run_dir, "last")
    try:
        return json.loads((folder / "trainer_state.json").read_text())["step"] if folder else 0
    except (OSError, ValueError):  # replaced while we read it
        return 0


@pytest.mark.slow
@pytest.mark.long  # minutes on 2 cores: left to make test's second step (python -m pytest -q -m long)
def test_killed_run_resumes_to_identical_weights_and_metrics(tiny_model_dir, tmp_path):
    train = {"max_steps": STEPS, "save_every": 7, "log_every": 3, "eval_every": 40, "grad_accum": 2}
    optimizer = {"anneal_t0": 60, "anneal_k": 0.1}
    recipe = write_recipe(tmp_path / "killed.yaml",
                          tiny_recipe(tiny_model_dir, tmp_path / "killed", train=train, optimizer=optimizer))
    reference = write_recipe(tmp_path / "reference.yaml",
                             tiny_recipe(tiny_model_dir, tmp_path / "reference", train=train, optimizer=optimizer))

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "recall_cli", "finetune", str(recipe), "--plain"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 300
    while checkpoint_step(tmp_path / "killed") < 30 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    killed_at = checkpoint_step(tmp_path / "killed")
    assert 30 <= killed_at < STEPS
    assert not (tmp_path / "killed" / "summary.json").exists()

    resumed = runner.invoke(app, ["finetune", "--resume", str(tmp_path / "killed"), "--plain"])
    assert resumed.exit_code == 0, resumed.output
    assert f"resuming at step {killed_at}," in resumed.output
    uninterrupted = runner.invoke(app, ["finetune", str(reference), "--plain"])
    assert uninterrupted.exit_code == 0, uninterrupted.output

    a = load_file(str(tmp_path / "killed" / "last" / "model.safetensors"))
    b = load_file(str(tmp_path / "reference" / "last" / "model.safetensors"))
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) == 0.0

    killed_records = read_metrics(tmp_path / "killed")
    reference_records = read_metrics(tmp_path / "reference")
    assert [r["step"] for r in killed_records] == [r["step"] for r in reference_records]
    assert comparable(killed_records) == comparable(reference_records)
    assert len([r for r in reference_records if r["split"] == "eval"]) == STEPS // 40

    # The optimizer moments match too, not only the weights.
    oa = torch.load(tmp_path / "killed" / "last" / "optimizer.pt", weights_only=True)["optimizer"]["state"]
    ob = torch.load(tmp_path / "reference" / "last" / "optimizer.pt", weights_only=True)["optimizer"]["state"]
    assert all(torch.equal(oa[i]["exp_avg_sq"], ob[i]["exp_avg_sq"]) for i in ob)


@pytest.mark.slow
def test_resume_of_a_finished_run_changes_nothing(tiny_model_dir, tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "out",
                                                          train={"max_steps": 4, "eval_every": 0}))
    assert runner.invoke(app, ["finetune", str(recipe), "--plain"]).exit_code == 0
    out = tmp_path / "out"

    def files() -> dict[str, bytes]:
        return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}

    before = files()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] is True and summary["steps"] == 4
    assert {"metrics.jsonl", "summary.json", "best/model.safetensors", "last/model.safetensors"} <= before.keys()
    again = runner.invoke(app, ["finetune", "--resume", str(out), "--plain"])
    assert again.exit_code == 0, again.output
    after = files()
    assert after.keys() == before.keys()  # nothing written beside the run, nothing removed
    # byte for byte: the records, the summary, both checkpoints' weights, and every other file
    for name in ("metrics.jsonl", "summary.json", "best/model.safetensors", "last/model.safetensors"):
        assert after[name] == before[name], name
    assert [name for name in before if after[name] != before[name]] == []


def test_resume_refuses_a_folder_that_is_not_a_run(tmp_path):
    result = runner.invoke(app, ["finetune", "--resume", str(tmp_path), "--plain"])
    assert result.exit_code == 2
    assert "is not a recall run directory" in result.output


# ---- resume never destroys a trained run ------------------------------------------------------------


def _trained(tiny_model_dir, tmp_path, name="run", **train):
    recipe = write_recipe(tmp_path / f"{name}.yaml", tiny_recipe(
        tiny_model_dir, tmp_path / name, train={"max_steps": 6, "save_every": 2, "eval_every": 2, **train},
        probe={"enabled": False}))
    result = runner.invoke(app, ["finetune", str(recipe), "--plain"])
    assert result.exit_code == 0, result.output
    return tmp_path / name


def _snapshot(run):
    return {p.relative_to(run): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_resume_of_a_run_whose_trainer_state_is_gone_refuses_instead_of_starting_over(tiny_model_dir, tmp_path):
    run = _trained(tiny_model_dir, tmp_path)
    (run / "last" / "trainer_state.json").unlink()
    before = _snapshot(run)
    result = runner.invoke(app, ["finetune", "--resume", str(run), "--plain"])
    assert result.exit_code == 2, result.output
    assert f"{run / 'last' / 'trainer_state.json'} is missing, but {run} has saved before (best/)" in result.output
    assert _snapshot(run) == before  # best/, metrics.jsonl and summary.json as they were


@pytest.mark.slow
def test_resume_with_a_damaged_metrics_line_names_it_and_keeps_every_record(tiny_model_dir, tmp_path):
    run = _trained(tiny_model_dir, tmp_path, max_steps=10, save_every=4)
    # As if killed after step 8's save: drop summary.json, then damage a line in the middle.
    (run / "summary.json").unlink()
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[2] = lines[2][: len(lines[2]) // 2]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    before = _snapshot(run)
    result = runner.invoke(app, ["finetune", "--resume", str(run), "--plain"])
    assert result.exit_code == 2, result.output
    assert f"{run / 'metrics.jsonl'}: line 3 is not valid JSON" in result.output
    assert _snapshot(run) == before


def test_a_users_readme_survives_beside_recalls_card(tmp_path):
    from recall_cli import card

    previous, staging = tmp_path / "best", tmp_path / ".staging"
    previous.mkdir()
    staging.mkdir()
    (previous / "README.user.md").write_text("my first notes\n")
    (previous / "README.md").write_text("my second notes\n")  # written over recall's card since
    card.write_card(staging, f"{card.MARKER}\n# new card\n", previous=previous)
    assert (staging / "README.user.md").read_text() == "my first notes\n"
    assert (staging / "README.user.2.md").read_text() == "my second notes\n"
    assert card.is_recall_card(staging / "README.md")
    # The next save carries both again, and recall's own card is never kept as a user text.
    again = tmp_path / ".again"
    again.mkdir()
    card.write_card(again, f"{card.MARKER}\n# newer card\n", previous=staging)
    assert sorted(p.name for p in again.iterdir()) == ["README.md", "README.user.2.md", "README.user.md"]


@pytest.mark.slow
def test_sigterm_before_the_first_step_puts_an_overwritten_run_back(tiny_model_dir, tmp_path, monkeypatch):
    """SIGTERM while the step-0 probe runs (after the run directory was made, θ* written): the new
    directory is removed, the run --overwrite had set aside is back as it was, exit 143, and the hint
    says nothing was written (it was a literal `--resume OUTPUT_DIR`)."""
    from recall_cli.errors import Terminated
    from recall_cli.training import loop

    run = _trained(tiny_model_dir, tmp_path)
    before = _snapshot(run)
    recipe = write_recipe(tmp_path / "again.yaml", tiny_recipe(tiny_model_dir, run, train={"max_steps": 4}))

    def terminated(*args, **kwargs):
        assert (run / "anchor.safetensors").is_file()  # the new run directory exists by now
        raise Terminated

    monkeypatch.setattr(loop, "record_at", terminated)
    result = runner.invoke(app, ["finetune", str(recipe), "--overwrite", "--plain"])
    assert result.exit_code == 143, result.output
    assert "stopped by SIGTERM: nothing was written; run the same command again" in result.output
    assert _snapshot(run) == before
    assert not [p for p in tmp_path.iterdir() if ".replaced" in p.name]


@pytest.mark.slow
def test_a_second_writer_is_refused_and_a_stale_lock_taken_over(tiny_model_dir, tmp_path):
    """One writer per run directory: while a process holds RUN/.recall.lock, `finetune --overwrite`
    into RUN exits 2 naming it, and changes nothing; a lock left by a dead process is taken over."""
    from recall_cli import rundir

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("a run being written\n")
    (run / "metrics.jsonl").write_text("")
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, run, train={"max_steps": 2},
                                                           probe={"enabled": False}))
    held = rundir.RunLock.take(run)  # another open file description: flock conflicts as with another process
    try:
        result = runner.invoke(app, ["finetune", str(recipe), "--overwrite", "--plain"])
        assert result.exit_code == 2, result.output
        assert f"{run} is being written by process {os.getpid()}" in result.output
        assert (run / "config.yaml").read_text() == "a run being written\n"
    finally:
        held.release()
    assert not (run / ".recall.lock").exists()

    (run / ".recall.lock").write_text("999999999")  # a writer killed with -9: the kernel dropped its lock
    result = runner.invoke(app, ["finetune", str(recipe), "--overwrite", "--plain"])
    assert result.exit_code == 0, result.output
    assert "took over the lock of process 999999999, which is no longer running" in result.output
    assert (run / "summary.json").is_file() and not (run / ".recall.lock").exists()


def _pickle_in_optimizer(run):
    import pickle

    (run / "last" / "optimizer.pt").write_bytes(pickle.dumps({"optimizer": object}))


DAMAGES = {
    "optimizer.pt deleted": (lambda run: (run / "last" / "optimizer.pt").unlink(), "last/optimizer.pt is missing"),
    "rng_state.pt deleted": (lambda run: (run / "last" / "rng_state.pt").unlink(), "last/rng_state.pt is missing"),
    "trainer_state.json cut": (lambda run: (run / "last" / "trainer_state.json").write_text('{"step": 4, "mi'),
                               "last/trainer_state.json is not valid JSON"),
    "trainer_state.json a list": (lambda run: (run / "last" / "trainer_state.json").write_text("[1, 2]"),
                                  "last/trainer_state.json is not a JSON object"),
    "trainer_state.json extra key": (lambda run: (run / "last" / "trainer_state.json").write_text(
        json.dumps({**json.loads((run / "last" / "trainer_state.json").read_text()), "bogus": 1})),
        "last/trainer_state.json has keys recall does not write (bogus)"),
    "theta* cut": (lambda run: (run / "anchor.safetensors").write_bytes((run / "anchor.safetensors").read_bytes()[:999]),
                   "anchor.safetensors is not a readable safetensors file"),
    "a pickle in optimizer.pt": (_pickle_in_optimizer, "last/optimizer.pt holds Python objects other than tensors: refused unread"),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_checkpoint_is_one_line_naming_the_file(tiny_model_dir, tmp_path, damage):
    run = _trained(tiny_model_dir, tmp_path)
    (run / "summary.json").unlink()  # as if stopped after its last save
    spoil, said = DAMAGES[damage]
    spoil(run)
    before = _snapshot(run)
    result = runner.invoke(app, ["finetune", "--resume", str(run), "--plain"])
    assert result.exit_code == 2, result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert said in line and "cannot be resumed exactly" in line and "Traceback" not in result.output
    assert _snapshot(run) == before
