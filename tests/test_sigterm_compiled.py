"""SIGTERM to a compiled run (train.compile=on), sent at three moments: during the first compile (and, on a
GPU, the CUDA graph's capture), in the steady state, and during an evaluation. Each time the run finishes the
step it is in, saves a complete last/, exits 143, and `--resume` carries it to the end with one record a step.

The CPU case is sent during the compile only (the steady state and evaluations are test_preemption.py's on
the eager step). The CUDA cases are issue 40's check (benchmarks/gpu_check.py runs the `cuda` marker); the
seconds from the signal to the exit are printed, not asserted: a compile's length is the machine's."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from recall_cli.rundir import read_metrics

from conftest import tiny_recipe, write_recipe

STEPS = 60
# What the run prints just before each moment: the compile's note; a train record of the steady state; the
# train record of the step an evaluation follows (eval_every=EVAL).
EVAL = 40
MOMENTS = {"compile": "compiling the step", "steady": "step=20 split=train", "eval": f"step={EVAL} split=train"}


def signalled_run(recipe: Path, out: Path, device: str, moment: str) -> tuple[int, str, float]:
    command = [sys.executable, "-m", "recall_cli", "finetune", str(recipe), f"train.device={device}", "--plain"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if MOMENTS[moment] in line:
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            break
    else:
        raise AssertionError(f"the run never reached {moment!r}:\n{''.join(seen)[-2000:]}")
    rest = proc.stdout.read()
    proc.wait(timeout=600)
    return proc.returncode, "".join(seen) + rest, time.monotonic() - sent


def check(tmp_path: Path, model_dir: Path, device: str, moment: str) -> None:
    out = tmp_path / "run"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(model_dir, out, task={"pad_to_multiple_of": 16}, train={
        "max_steps": STEPS, "log_every": 1, "eval_every": EVAL, "compile": "on", "precision": "auto"}))
    code, printed, seconds = signalled_run(recipe, out, device, moment)
    print(f"{device} {moment}: exit {code} {seconds:.1f} s after SIGTERM")
    assert code == 143, printed[-2000:]
    state = json.loads((out / "last" / "trainer_state.json").read_text())
    assert 0 < state["step"] < STEPS
    assert f"stopped by SIGTERM after step {state['step']}; last/ holds a complete checkpoint" in printed
    resumed = subprocess.run([sys.executable, "-m", "recall_cli", "finetune", "--resume", str(out), "--plain"],
                             capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    steps = [r["step"] for r in read_metrics(out) if r["split"] == "train"]
    assert steps == list(range(1, STEPS + 1))
    assert json.loads((out / "summary.json").read_text())["finished"]


@pytest.mark.slow
@pytest.mark.long  # two compiles of the step, minutes on a loaded 2-core CPU: make test's second step runs it
def test_sigterm_during_the_first_compile_on_cpu(tiny_model_dir, tmp_path):
    check(tmp_path, tiny_model_dir, "cpu", "compile")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (benchmarks/gpu_check.py runs these)")
@pytest.mark.parametrize("moment", list(MOMENTS))
def test_sigterm_on_cuda_saves_last_and_exits_143(tiny_model_dir, tmp_path, moment):
    check(tmp_path, tiny_model_dir, "cuda", moment)
