"""torchrun + DDP on CPU (gloo): a real 2-process run against a 1-process run with the same global batch.

Every torchrun here is `python -m torch.distributed.run --standalone --nproc_per_node 2`, as a user
would start it, running the real `recall finetune` in each worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file
from typer.testing import CliRunner

from recall_cli.rundir import read_metrics
from recall_cli.cli import app
from recall_cli.distributed import shard
from recall_cli.testing import tiny_bert_dir

from conftest import GLUE, tiny_recipe, write_recipe

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]


def torchrun_env() -> dict[str, str]:
    # One thread per worker: two workers share this machine's cores, as torchrun would arrange.
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def torchrun(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "-m", "recall_cli", *args],
        capture_output=True, text=True, env=torchrun_env(), cwd=REPO, timeout=timeout,
    )


@pytest.fixture(scope="session")
def nodrop_model_dir(tmp_path_factory) -> Path:
    """The conftest tiny BERT with dropout 0. Dropout draws differ per rank (each rank has its own RNG
    stream, and a 1-process run draws one mask over the whole batch), so with dropout the 2-process
    and 1-process runs would be equally valid but not equal; without it they must agree to float error."""
    return tiny_bert_dir(tmp_path_factory.mktemp("tiny_bert_nodrop"), seed=1234,
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def ddp_recipe(model_dir: Path, out: Path, batch_size: int, **train) -> dict:
    # 89 examples in global batches of 8: the last batch of each epoch has one example, so rank 1 gets
    # an empty shard there (the weighting of uneven shards is exercised). grad_accum=2 uses no_sync().
    return tiny_recipe(
        model_dir, out,
        task={"max_train_examples": 89, "max_eval_examples": 60},
        optimizer={"lr": 3e-3},
        train={"batch_size": batch_size, "grad_accum": 2, "max_steps": 16, "log_every": 2, "eval_every": 4,
               "eval_batch_size": 16, "seed": 7, "device": "cpu", **train},
    )


@pytest.fixture(scope="module")
def runs(nodrop_model_dir, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("ddp")
    two = write_recipe(tmp / "two.yaml", ddp_recipe(nodrop_model_dir, tmp / "two", batch_size=4))
    one = write_recipe(tmp / "one.yaml", ddp_recipe(nodrop_model_dir, tmp / "one", batch_size=8))
    proc = torchrun("finetune", str(two), "--plain")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    single = runner.invoke(app, ["finetune", str(one), "--plain"])
    assert single.exit_code == 0, single.output
    return {"two": tmp / "two", "one": tmp / "one", "stdout": proc.stdout, "stderr": proc.stderr}


def test_shard_splits_a_global_batch_in_order():
    assert [shard(list(range(5)), r, 2) for r in range(2)] == [[0, 1, 2], [3, 4]]
    assert [shard([9], r, 2) for r in range(2)] == [[9], []]
    assert sum((shard(list(range(10)), r, 4) for r in range(4)), []) == list(range(10))


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_two_processes_take_the_same_steps_as_one_with_the_global_batch(runs):
    a = load_file(str(runs["two"] / "last" / "model.safetensors"))
    b = load_file(str(runs["one"] / "last" / "model.safetensors"))
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-5

    two, one = read_metrics(runs["two"]), read_metrics(runs["one"])
    assert [(r["step"], r["split"]) for r in two] == [(r["step"], r["split"]) for r in one]
    for r2, r1 in zip(two, one):
        if r2["split"] == "train":  # the global mean loss, the global grad norm, the global distance
            for key in ("loss", "grad_norm", "distance", "lambda", "lr", "epoch"):
                assert r2[key] == pytest.approx(r1[key], rel=1e-5, abs=1e-7), (r2["step"], key)
        elif r2["split"] == "probe":  # rank 0 probes its replica: the same weights to 1e-5
            for key, value in r1.items():
                if key != "probe_seconds" and isinstance(value, float):
                    assert r2[key] == pytest.approx(value, rel=1e-4, abs=1e-4), (r2["step"], key)
        else:
            assert r2 == r1  # dev metrics over the whole dev set, gathered across ranks

    summary = json.loads((runs["two"] / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["global_batch_size"] == 16
    # Each rank steps a full replica with its own theta*: the distances agree exactly.
    by_rank = summary["final_distance_by_rank"]
    assert len(by_rank) == 2 and by_rank[0] == by_rank[1] == summary["final_distance"]
    state = json.loads((runs["two"] / "last" / "trainer_state.json").read_text())
    assert state["world_size"] == 2 and state["step"] == 16
    assert (runs["two"] / "last" / "rng_state.pt").is_file() and (runs["two"] / "last" / "rng_state_rank1.pt").is_file()


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_only_rank_0_writes_and_reports(runs):
    records = read_metrics(runs["two"])
    keys = [(r["step"], r["split"]) for r in records]
    assert len(keys) == len(set(keys)) == 8 + 4 + 5  # train every 2 steps, eval every 4, none twice
    assert [s for s, split in keys if split == "probe"] == [0, 4, 8, 12, 16]  # step 0, then each eval
    assert runs["stdout"].count("recall: starting") == 1
    assert runs["stdout"].count("recall: done") == 1
    assert runs["stdout"].count("split=eval") == 4
    assert "processes=2 global_batch=16" in runs["stdout"]
    assert "error" not in runs["stderr"].lower()


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_sharded_eval_equals_single_process_scoring_of_the_same_weights(runs):
    """The 2-process run's last eval, recomputed by `recall evaluate` in one process from last/."""
    final = [r for r in read_metrics(runs["two"]) if r["split"] == "eval"][-1]
    result = runner.invoke(app, ["evaluate", str(runs["two"] / "last"), "--json", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.output)["metrics"]
    assert metrics == {k: v for k, v in final.items() if k not in ("step", "split")}


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_resume_with_another_world_size_is_refused(runs):
    result = runner.invoke(app, ["finetune", "--resume", str(runs["two"]), "--plain"])
    assert result.exit_code == 2, result.output
    assert "was trained with 2 processes and this is 1" in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_a_data_error_under_torchrun_prints_one_line_and_exits_2(nodrop_model_dir, tmp_path):
    """The error surfaces while loading data, after the recipe was accepted: every rank meets it
    before the process group exists, so none waits for the others; rank 0 alone prints it, and the
    --nproc launcher passes the workers' exit code on."""
    bad = tmp_path / "MRPC"
    bad.mkdir()
    (bad / "dev.tsv").write_text((GLUE / "MRPC" / "dev.tsv").read_text(encoding="utf-8-sig"), encoding="utf-8")
    rows = (GLUE / "MRPC" / "train.tsv").read_text(encoding="utf-8-sig").splitlines()
    rows[3] = "7\t" + rows[3].split("\t", 1)[1]  # label 7 on line 4
    (bad / "train.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    recipe = ddp_recipe(nodrop_model_dir, tmp_path / "out", batch_size=4)
    recipe["task"]["data_dir"] = str(bad)
    path = write_recipe(tmp_path / "bad.yaml", recipe)

    # 19 s on a quiet 2-core machine; one loaded to 8 took over 120.
    proc = subprocess.run([sys.executable, "-m", "recall_cli", "finetune", str(path), "--nproc", "2", "--plain"],
                          capture_output=True, text=True, env=torchrun_env(), cwd=REPO, timeout=400)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {bad / 'train.tsv'} line 4: label '7' is not one of 0, 1: fix or remove the row"]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.long  # minutes on 2 cores: left to make test's second step (python -m pytest -q -m long)
def test_two_processes_with_the_compiled_step_take_the_same_steps_as_one_eager(runs, nodrop_model_dir, tmp_path):
    """DDP with train.compile=on (plain inductor under DDP, no CUDA graphs) and length buckets: the
    same weights as the eager single process, within fp32 reordering; the record says what ran."""
    recipe = ddp_recipe(nodrop_model_dir, tmp_path / "two_compiled", batch_size=4, compile="on")
    recipe["task"]["pad_to_multiple_of"] = 16
    proc = torchrun("finetune", str(write_recipe(tmp_path / "c.yaml", recipe)), "--plain", timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    a = load_file(str(tmp_path / "two_compiled" / "last" / "model.safetensors"))
    b = load_file(str(runs["one"] / "last" / "model.safetensors"))
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-4
    record = json.loads((tmp_path / "two_compiled" / "summary.json").read_text())["compile"]
    assert record["mode"] == "default" and record["fallback"] is None
    assert record["shapes"] and all(n % 16 == 0 for n in record["shapes"])
