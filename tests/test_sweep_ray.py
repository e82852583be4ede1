"""`recall sweep --backend ray`: the same cells, folders, records and sweep.json as the local backend, from
a local Ray on this machine's CPUs; a cell whose Ray worker dies (its node leaving) is run again and
resumes from the last/ its child saved; the options refused in one line before anything is made."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recall_cli.cli import app

from conftest import tiny_recipe, write_recipe

runner = CliRunner()
# Timings differ between any two runs; every other field of a record must be equal.
TIMING = {"train_seconds", "samples_per_s", "probe_seconds", "seconds", "eval_seconds", "elapsed_s", "updated"}


def records(path: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING}
            for line in path.read_text().splitlines()]


def weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(path / "last" / "model.safetensors")


@pytest.mark.slow
@pytest.mark.long  # a Ray cluster started and stopped: make test's second step runs it
def test_a_ray_sweep_equals_the_local_sweep_record_for_record(tiny_model_dir, tmp_path, monkeypatch):
    pytest.importorskip("ray", reason="recall-finetune[dev] installs ray; this checks the ray backend")
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(
        tiny_model_dir, tmp_path / "unused", train={"max_steps": 6, "eval_every": 3, "log_every": 2}))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # each local child's share, as each Ray task's --cpus-per-cell 1
    monkeypatch.chdir(tmp_path)
    common = ["sweep", "recipe.yaml", "--grid", "optimizer.anneal_k=0.1,1"]
    local = runner.invoke(app, [*common, "--out", "local", "--jobs", "2"])
    assert local.exit_code == 0, local.output
    ray = runner.invoke(app, [*common, "--out", "onray", "--backend", "ray", "--cpus-per-cell", "1"])
    assert ray.exit_code == 0, ray.output
    assert "2 cells sent to Ray (1 CPU each)" in ray.stdout

    index = {name: json.loads((tmp_path / name / "sweep.json").read_text()) for name in ("local", "onray")}
    for a, b in zip(index["local"]["cells"], index["onray"]["cells"], strict=True):
        assert (a["name"], a["state"], a["exit_code"], a["settings"], a["main"]) == \
               (b["name"], b["state"], b["exit_code"], b["settings"], b["main"])
        assert b["dir"] == f"onray/{b['name']}" and b["state"] == "finished"
        for record in ("metrics.jsonl",):
            assert records(tmp_path / "local" / a["name"] / record) == records(tmp_path / "onray" / b["name"] / record)
        summaries = [json.loads((tmp_path / side / a["name"] / "summary.json").read_text()) for side in ("local", "onray")]
        assert summaries[0]["final"] == summaries[1]["final"] and summaries[1]["steps"] == 6
        left, right = weights(tmp_path / "local" / a["name"]), weights(tmp_path / "onray" / b["name"])
        assert left.keys() == right.keys() and all(left[k].equal(right[k]) for k in left)
    # Run again: every cell is finished, nothing is sent to Ray.
    again = runner.invoke(app, [*common, "--out", "onray", "--backend", "ray"])
    assert again.exit_code == 0 and "2 of 2 cells already finished" in again.stdout and "sent to Ray" not in again.stdout


@pytest.mark.slow
@pytest.mark.long  # a Ray cluster started and stopped: make test's second step runs it
def test_a_cell_whose_ray_worker_dies_resumes_from_its_last_checkpoint(tiny_model_dir, tmp_path):
    """A node leaving, as the cell sees it: its Ray worker is killed (SIGKILL). The child gets SIGTERM
    (it is tied to the worker) and saves last/; Ray runs the task again, which resumes the cell."""
    pytest.importorskip("ray", reason="recall-finetune[dev] installs ray; this checks the ray backend")
    steps = 200
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(
        tiny_model_dir, tmp_path / "unused", train={"max_steps": steps, "eval_every": 0, "log_every": 1}))
    out = tmp_path / "out"
    sweep = subprocess.Popen([sys.executable, "-m", "recall_cli", "sweep", str(recipe), "--seeds", "1", "--out", str(out),
                              "--backend", "ray"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
    log = out / "logs" / "s1.log"
    deadline = time.monotonic() + 240
    while not (log.is_file() and "split=train" in log.read_text()):
        assert time.monotonic() < deadline and sweep.poll() is None, "the cell never started training"
        time.sleep(0.2)
    worker = int(re.search(r"ray pid=(\d+)", log.read_text()).group(1))
    os.kill(worker, signal.SIGKILL)
    stdout, stderr = sweep.communicate(timeout=600)
    assert sweep.returncode == 0, stdout + stderr

    starts = [line for line in log.read_text().splitlines() if line.startswith("# ") and " ray pid=" in line]
    assert len(starts) == 2 and "--resume" not in starts[0] and f"finetune --resume {out / 's1'} --plain" in starts[1]
    assert int(re.search(r"ray pid=(\d+)", starts[1]).group(1)) != worker
    summary = json.loads((out / "s1" / "summary.json").read_text())
    assert summary["finished"] and summary["steps"] == steps
    resumed_at = int(re.search(r"resuming at step (\d+)", log.read_text()).group(1))
    assert 0 < resumed_at < steps
    # One record per step, as an uninterrupted run writes: the resume continued where last/ left off.
    logged = [r["step"] for r in map(json.loads, (out / "s1" / "metrics.jsonl").read_text().splitlines())
              if r.get("split") == "train"]
    assert logged == list(range(1, steps + 1))
    cell = json.loads((out / "sweep.json").read_text())["cells"][0]
    assert cell["state"] == "finished" and cell["exit_code"] == 0


@pytest.mark.parametrize("args, message", [
    (["--backend", "ray", "--jobs", "2"], "--jobs is the local backend's"),
    (["--gpus-per-cell", "0.5"], "are for --backend ray"),
    (["--backend", "ray", "--gpus-per-cell", "nan"], "--gpus-per-cell must be a number >= 0, got nan"),
    (["--backend", "ray", "--gpus-per-cell", "1.5"], "above 1 it must be a whole number"),
    (["--backend", "ray", "--cpus-per-cell", "-1"], "--cpus-per-cell must be a number >= 0"),
])
def test_ray_options_are_refused_in_one_line_before_anything_is_made(tiny_model_dir, tmp_path, args, message):
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(tiny_model_dir, tmp_path / "unused"))
    result = runner.invoke(app, ["sweep", str(recipe), "--out", str(tmp_path / "out"), *args])
    assert result.exit_code == 2 and message in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_without_ray_the_backend_names_the_extra(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(tiny_model_dir, tmp_path / "unused"))
    result = runner.invoke(app, ["sweep", str(recipe), "--out", str(tmp_path / "out"), "--backend", "ray"])
    assert result.exit_code == 2 and "pip install 'recall-finetune[ray]'" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.long  # a Ray cluster started and stopped: make test's second step runs it
def test_sigterm_to_a_ray_sweep_saves_its_cells_resumably(tiny_model_dir, tmp_path):
    """A scheduler pre-empting the driver: its tasks are cancelled, each running cell saves last/ and exits
    143, the index says interrupted, exit 143, and the next sweep resumes the cell."""
    pytest.importorskip("ray", reason="recall-finetune[dev] installs ray; this checks the ray backend")
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(
        tiny_model_dir, tmp_path / "unused", train={"max_steps": 5000, "eval_every": 0, "log_every": 1}))
    out = tmp_path / "out"
    sweep = subprocess.Popen([sys.executable, "-m", "recall_cli", "sweep", str(recipe), "--seeds", "1,2", "--out", str(out),
                              "--backend", "ray", "--cpus-per-cell", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    log = out / "logs" / "s1.log"
    deadline = time.monotonic() + 240
    while not (log.is_file() and "split=train" in log.read_text()):
        assert time.monotonic() < deadline and sweep.poll() is None, "the first cell never started training"
        time.sleep(0.2)
    sweep.send_signal(signal.SIGTERM)
    _, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 143, err
    assert "run the same recall sweep command again to resume" in err
    cells = {c["name"]: c for c in json.loads((out / "sweep.json").read_text())["cells"]}
    assert cells["s1"]["state"] == "interrupted" and cells["s1"]["exit_code"] == 143
    # On 2 CPUs (this project's machine) s2 never started; with more, it was stopped like s1.
    assert cells["s2"]["state"] in ("pending", "interrupted")
    assert (out / "s1" / "last" / "trainer_state.json").is_file() and "stopped by SIGTERM" in log.read_text()
    commands = runner.invoke(app, ["sweep", str(recipe), "--seeds", "1,2", "--out", str(out), "--print-commands"])
    assert commands.stdout.splitlines()[0] == f"recall finetune --resume {out / 's1'} --plain"
