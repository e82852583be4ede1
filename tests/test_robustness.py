"""Kills at awkward moments, signals to the launcher, and runs scored on another machine than they trained on."""

from __future__ import annotations

import json
import os
import shutil
import signal

import pytest
import torch
import yaml
from safetensors.torch import load_file
from typer.testing import CliRunner

from recall_cli.training import checkpoint
from recall_cli import rundir
from recall_cli.cli import app

from conftest import binary_task, tiny_recipe, write_recipe

runner = CliRunner()


def finetune(*args: str):
    return runner.invoke(app, ["finetune", *args, "--plain"])


@pytest.fixture
def short_run(tiny_model_dir, tmp_path):
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, out, train={"max_steps": 3, "eval_every": 0}))
    result = finetune(str(recipe))
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.slow
def test_resume_of_a_run_killed_before_its_first_files_were_written(short_run):
    """Killed after config.yaml and metrics.jsonl, before theta* and any checkpoint: --resume starts over."""
    for path in short_run.iterdir():
        if path.name not in (rundir.CONFIG_FILE, rundir.METRICS_FILE):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    (short_run / rundir.METRICS_FILE).write_text("")
    result = finetune("--resume", str(short_run))
    assert result.exit_code == 0, result.output
    summary = json.loads((short_run / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["finished"] is True
    assert (short_run / checkpoint.ANCHOR_FILE).is_file() and (short_run / "last").is_dir()


@pytest.mark.slow
@pytest.mark.parametrize("precision, dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_evaluate_on_cpu_a_run_trained_in_fp16(short_run, precision, dtype, monkeypatch):
    """A run trained in fp16 (CUDA only) or bf16 whose best/ holds half-precision weights (a model saved
    after .half() or .to(torch.bfloat16)): `recall evaluate --device cpu` loads them upcast to fp32, scores
    fp16 runs in fp32 (fp16 autocast needs CUDA) and bf16 runs under CPU bf16 autocast, and agrees with
    the fp32 weights the half-precision ones were rounded from."""
    from transformers import BertForSequenceClassification

    from recall_cli.scoring import evaluate as evaluate_module
    from recall_cli.model import load_checkpoint_model

    outputs = []  # the logits evaluate computes, caught on their way to the metrics
    predict = evaluate_module.predict

    def spy(model, *args, **kwargs):
        assert next(model.parameters()).dtype == torch.float32
        outputs.append(predict(model, *args, **kwargs))
        return outputs[-1]

    monkeypatch.setattr(evaluate_module, "predict", spy)

    def evaluate() -> dict:
        result = runner.invoke(app, ["evaluate", str(short_run), "--json", "--device", "cpu"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["metrics"]

    best = short_run / "best"
    summary = json.loads((short_run / "summary.json").read_text())
    fp32_metrics = evaluate()
    assert fp32_metrics["accuracy"] == summary["best"]["accuracy"]

    fp32 = BertForSequenceClassification.from_pretrained(best, dtype=torch.float32)
    rounded = {k: v.to(dtype).float() for k, v in fp32.state_dict().items()}
    assert not all(torch.equal(rounded[k], v) for k, v in fp32.state_dict().items())  # rounding changes them
    fp32.to(dtype).save_pretrained(best)
    saved = load_file(str(best / "model.safetensors"))
    assert {t.dtype for t in saved.values()} == {dtype}  # really half-precision weights on disk
    config = yaml.safe_load((short_run / "config.yaml").read_text())
    config["train"]["precision"] = precision
    (short_run / "config.yaml").write_text(yaml.safe_dump(config))

    loaded = load_checkpoint_model(best, binary_task()).state_dict()  # what evaluate scores: the rounded weights in fp32
    assert {v.dtype for v in loaded.values()} == {torch.float32}
    assert all(torch.equal(loaded[k], rounded[k]) for k in rounded)
    metrics = evaluate()

    # The logits: rounding the weights to fp16 (scored in fp32) moves them by ~0.1% of their scale,
    # to bf16 (scored under bf16 autocast) by ~0.6%; allowed: 1% and 3% of the largest fp32 logit.
    fp32_logits, half_logits = outputs
    assert fp32_logits.shape == half_logits.shape == (40, 2)
    scale = float(abs(fp32_logits).max())
    error = float(abs(half_logits - fp32_logits).max())
    assert 0 < error <= {"fp16": 0.01, "bf16": 0.03}[precision] * scale, (error, scale)
    # Predictions whose fp32 margin exceeds that error cannot flip; here none is closer, so the metrics agree.
    margin = abs(fp32_logits[:, 1] - fp32_logits[:, 0])
    assert (margin > 2 * error).all(), (margin.min(), error)
    assert (half_logits.argmax(1) == fp32_logits.argmax(1)).all()
    assert metrics == fp32_metrics


def test_fp16_on_cpu_is_a_usage_error(tiny_model_dir, tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "never",
                                                          train={"precision": "fp16", "device": "cpu"}))
    result = finetune(str(recipe))
    assert result.exit_code == 2
    assert "error: train.precision=fp16 needs a CUDA device (on CPU use fp32 or bf16)" in result.output
    assert not (tmp_path / "never").exists()


def test_swap_when_only_the_old_checkpoint_survived_a_kill(tmp_path):
    """A kill between the two renames leaves last.old/ alone; the next save must never leave no complete
    checkpoint: the new one goes in place before last.old/ is deleted."""
    old = tmp_path / "last.old"
    old.mkdir()
    (old / checkpoint.TRAINER_STATE_FILE).write_text('{"step": 5}')
    assert rundir.find_checkpoint(tmp_path) == old
    with rundir.staged_folder(tmp_path / "last") as staging:
        (staging / checkpoint.TRAINER_STATE_FILE).write_text('{"step": 10}')
    assert rundir.find_checkpoint(tmp_path) == tmp_path / "last"
    assert json.loads((tmp_path / "last" / checkpoint.TRAINER_STATE_FILE).read_text()) == {"step": 10}
    assert not old.exists() and not staging.exists()


def test_stale_staging_folders_are_removed_from_checkpoints_too(tmp_path):
    (tmp_path / ".last.tmp-abc").mkdir()
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / ".step-7.tmp-xyz").mkdir()
    (tmp_path / "checkpoints" / "step-5").mkdir()
    rundir.remove_stale_staging(tmp_path)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["checkpoints", "step-5"]


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 1)])
def test_nproc_launcher_exit_code_follows_the_signal(monkeypatch, sig, code):
    """Only SIGTERM makes the workers save last/ before exiting: only it may be reported as 143."""
    import torch.distributed.launcher.api as launcher_api
    from torch.distributed.elastic.multiprocessing.api import SignalException

    from recall_cli.distributed import launch

    def fake_elastic_launch(config, entrypoint):
        def run(*args):
            raise SignalException(f"Process {os.getpid()} got signal: {sig}", sigval=sig)
        return run

    monkeypatch.setattr(launcher_api, "elastic_launch", fake_elastic_launch)
    assert launch(2, ["finetune", "r.yaml"]) == code


@pytest.mark.parametrize("worker_codes, code", [
    ([2], 2), ([3], 3), ([4], 4), ([143], 143),  # what a worker chooses (usage, diverged, full disk, SIGTERM)
    ([1], 1), ([7], 1), ([-9], 1),  # a bug, a code recall never chooses, a worker killed by a signal
    ([4, -15], 4),  # the ranks the agent stopped after the first failure died by its signal: not the cause
    ([1, 4], 1), ([4, 1], 4),  # the first failure decides
])
def test_nproc_launcher_passes_a_workers_chosen_exit_code_through(monkeypatch, worker_codes, code):
    """A worker stopped by a full disk exits 4 alone: under --nproc the launcher says 4 too, as it does for
    usage errors, divergence and pre-emption; anything else is a failure (1)."""
    import torch.distributed.launcher.api as launcher_api
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    from recall_cli.distributed import launch

    failures = {}
    for rank, exitcode in enumerate(worker_codes):
        failures[rank] = ProcessFailure(local_rank=rank, pid=1000 + rank, exitcode=exitcode, error_file="")
        failures[rank].timestamp = 1_700_000_000 + rank  # they failed in the order given

    def fake_elastic_launch(config, entrypoint):
        def run(*args):
            raise ChildFailedError("recall_cli", failures)
        return run

    monkeypatch.setattr(launcher_api, "elastic_launch", fake_elastic_launch)
    assert launch(len(worker_codes), ["finetune", "r.yaml"]) == code
