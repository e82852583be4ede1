"""What `train.precision` resolves to, why the start line says so, and that a resumed run keeps the
precision it started with (an fp32 run never resumes in bf16, whatever `auto` picks today)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from typer.testing import CliRunner

from recall_cli import runtime
from recall_cli.cli import app

from conftest import tiny_recipe, write_recipe

CPU = torch.device("cpu")
runner = CliRunner()


def finetune(*args: str) -> str:
    """`recall finetune ARGS --plain` in this process (so that monkeypatching holds); its output."""
    result = runner.invoke(app, ["finetune", *args, "--plain"])
    assert result.exit_code == 0, result.output
    return result.output


def set_max_steps(run_dir: Path, steps: int) -> None:
    """Make a finished run an unfinished one, as if it had been stopped before `steps`."""
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    config["train"]["max_steps"] = steps
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def trainer_state(run_dir: Path) -> dict:
    return json.loads((run_dir / "last" / "trainer_state.json").read_text())


def test_choices_and_reasons(monkeypatch):
    assert runtime.choose_precision("fp32", CPU) == ("fp32", "set in the recipe")
    assert runtime.choose_precision("bf16", CPU) == ("bf16", "set in the recipe")
    with pytest.raises(runtime.DeviceError, match="fp16 needs a CUDA device"):
        runtime.choose_precision("fp16", CPU)
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: True)
    assert runtime.choose_precision("auto", CPU) == ("bf16", "auto: this CPU has native bf16, ~2x faster than fp32 at equal accuracy")
    # Whether the step is compiled does not change a CPU's choice (eager bf16 beats a compiled step there).
    assert runtime.choose_precision("auto", CPU, compiled=True)[0] == "bf16"
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: False)
    assert runtime.choose_precision("auto", CPU) == ("fp32", "auto: fp32 on CPU; no native bf16 here, bf16 would be slower")
    # On CUDA: bf16 for a compiled step, fp32 for an eager one (launch-bound at these model sizes).
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert runtime.choose_precision("auto", torch.device("cuda"), compiled=True) == ("bf16", "auto: bf16 for the compiled step on this GPU")
    assert runtime.choose_precision("auto", torch.device("cuda"), compiled=False)[0] == "fp32"
    # A resumed run: auto keeps what the run started with; an explicit setting is the recipe's.
    assert runtime.choose_precision("auto", CPU, recorded="bf16") == ("bf16", "auto, as the run started")
    with pytest.raises(runtime.DeviceError, match="started in fp16 on CUDA"):
        runtime.choose_precision("auto", CPU, recorded="fp16")
    # Checkpoints of 0.1 record nothing: their auto was fp32 on every CPU.
    assert runtime.precision_of_saved_run(None, CPU) == "fp32"
    assert runtime.precision_of_saved_run("bf16", CPU) == "bf16"
    assert runtime.precision_of_saved_run(None, torch.device("cuda")) is None


@pytest.mark.skipif(not Path("/proc/cpuinfo").is_file(), reason="needs Linux's /proc/cpuinfo to compare against")
def test_native_bf16_detection_agrees_with_the_kernels_cpu_flags():
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    expected = bool(flags & {"avx512_bf16", "amx_bf16"}) and torch.backends.mkldnn.is_available()
    assert runtime.cpu_has_native_bf16() is expected


@pytest.mark.slow
def test_resume_keeps_the_precision_the_run_started_with(tiny_model_dir, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, run_dir,
                                                           train={"precision": "auto", "max_steps": 4, "eval_every": 2}))
    # A machine (or a later recall) where auto picks bf16 on this CPU.
    monkeypatch.setattr(runtime, "cpu_auto_precision", lambda: ("bf16", "auto: picks bf16 here"))
    assert "recall: starting, 4 steps, device=cpu precision=bf16 (auto: picks bf16 here) " in finetune(str(recipe))
    assert trainer_state(run_dir)["precision"] == "bf16"
    assert json.loads((run_dir / "summary.json").read_text())["precision"] == "bf16"
    # Under autocast the weights, theta* and the optimizer's moments stay fp32.
    assert {t.dtype for t in load_file(str(run_dir / "last" / "model.safetensors")).values()} == {torch.float32}
    assert {t.dtype for t in load_file(str(run_dir / "anchor.safetensors")).values()} == {torch.float32}
    moments = torch.load(run_dir / "last" / "optimizer.pt", weights_only=True)["optimizer"]["state"]
    assert {v.dtype for s in moments.values() for v in s.values() if torch.is_tensor(v) and v.dim()} == {torch.float32}

    # Resumed where auto would pick fp32: it goes on in bf16.
    monkeypatch.setattr(runtime, "cpu_auto_precision", lambda: ("fp32", "auto: picks fp32 here"))
    set_max_steps(run_dir, 6)
    resumed = finetune("--resume", str(run_dir))
    assert "recall: resuming at step 4, 6 steps, device=cpu precision=bf16 (auto, as the run started) " in resumed
    assert trainer_state(run_dir)["step"] == 6 and trainer_state(run_dir)["precision"] == "bf16"

    # A checkpoint written by recall 0.1 (no precision recorded) was trained in fp32 on a CPU:
    # it resumes in fp32 even where auto now picks bf16, and records fp32 from then on.
    state = trainer_state(run_dir)
    del state["precision"]
    (run_dir / "last" / "trainer_state.json").write_text(json.dumps(state))
    monkeypatch.setattr(runtime, "cpu_auto_precision", lambda: ("bf16", "auto: picks bf16 here"))
    set_max_steps(run_dir, 8)
    old = finetune("--resume", str(run_dir))
    assert "recall: resuming at step 6, 8 steps, device=cpu precision=fp32 (auto, as the run started) " in old
    assert trainer_state(run_dir)["precision"] == "fp32"
    assert json.loads((run_dir / "summary.json").read_text())["precision"] == "fp32"
