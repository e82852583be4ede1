"""train.distributed=fsdp (training/fsdp.py): FSDP2 on the CPU over gloo, 2 ranks, a tiny BERT.

- the shards: each rank holds half of every parameter, of Adam's moments and of theta* (DTensors: no rank
  holds a full copy), and one sharded RecAdam step equals one process's step;
- a run under torchrun equals one process with the same global batch, loss by loss for 24 steps, and its
  last/ is a consolidated folder that from_pretrained opens;
- SIGTERM to one rank: every rank takes part in the save, exits 143, and --resume ends on the same weights
  and records as the uninterrupted FSDP run;
- what FSDP cannot shard yet is refused by name (exit 2).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from recall_cli.cli import app
from recall_cli.rundir import read_metrics
from recall_cli.testing import tiny_bert, tiny_bert_dir
from recall_cli.training import fsdp

from conftest import GLUE, tiny_recipe, write_recipe

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
NODROP = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


# ---- the shards, in two processes of this test ---------------------------------------------------


def _one_step(model, theta_star, names, sharded: bool = False):
    from recall_cli.optim import RecAdam

    params = [p for _, p in model.named_parameters()]
    opt = RecAdam([{"params": params, "anchors": [theta_star[n] for n in names]}], lr=1e-3, pretrain_cof=100.0,
                  anneal_t0=5)
    theta_star.clear()  # what the set-up does: only the optimizer's copy remains
    if sharded:
        fsdp.shard_anchors(opt)
    torch.manual_seed(11)
    x = torch.randint(0, 1000, (4, 12))
    y = torch.tensor([0, 1, 1, 0])
    model(input_ids=x, labels=y).loss.backward()
    opt.step()
    return opt


def _shard_worker(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        model = tiny_bert(head="classifier", seed=5, vocab_size=1000, **NODROP)
        names = [n for n, _ in model.named_parameters()]
        theta_star = {n: p.detach().clone() for n, p in model.named_parameters()}
        full = sum(p.numel() for p in model.parameters())
        fsdp.shard_model(model, torch.device("cpu"), "fp32")
        opt = _one_step(model, theta_star, names, sharded=True)
        anchors = [s["anchor"] for s in opt.state.values()]
        moments = [s[k] for s in opt.state.values() for k in ("exp_avg", "exp_avg_sq")]
        params = list(model.parameters())
        facts = {"full": full, "params": fsdp.local_numel(params), "anchors": fsdp.local_numel(anchors),
                 "moments": fsdp.local_numel(moments), "all_sharded": all(map(fsdp.is_sharded, params + anchors + moments)),
                 "block_units": len(fsdp.blocks(model))}
        Path(out, f"rank{rank}.json").write_text(json.dumps(facts))
        weights, _ = fsdp.gather(model, None)
        if weights is not None:
            torch.save(dict(weights.named_parameters()), Path(out, "weights.pt"))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.long  # minutes on 2 cores: left to make test's second step (python -m pytest -q -m long)
def test_each_rank_holds_half_of_the_weights_moments_and_theta_star_and_steps_like_one_process(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_shard_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    full = ranks[0]["full"]
    for facts in ranks:
        assert facts["all_sharded"] and facts["block_units"] == 3  # BERT's embeddings, its two layers, then the root
        # dim-0 shards: half of each tensor, give or take a row of the odd-sized ones
        assert abs(facts["params"] - full / 2) <= 0.01 * full
        assert facts["anchors"] == facts["params"]  # theta* placed like its parameter: no full copy anywhere
        assert facts["moments"] == 2 * facts["params"]
    assert sum(f["params"] for f in ranks) == full  # together, every element once
    # the sharded step against one process's, on the same batch
    model = tiny_bert(head="classifier", seed=5, vocab_size=1000, **NODROP)
    names = [n for n, _ in model.named_parameters()]
    _one_step(model, {n: p.detach().clone() for n, p in model.named_parameters()}, names)
    gathered = torch.load(tmp_path / "weights.pt", weights_only=True)
    assert sorted(gathered) == sorted(names)
    for name, p in model.named_parameters():
        assert torch.allclose(gathered[name], p.detach(), rtol=0, atol=1e-6), name


def test_blocks_are_each_models_transformer_layers():
    from transformers import LlamaConfig, LlamaForCausalLM

    bert = [type(b).__name__ for b in fsdp.blocks(tiny_bert(head="classifier"))]
    assert bert == ["BertEmbeddings", "BertLayer", "BertLayer"]  # BERT's _no_split_modules
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                                         num_attention_heads=2, num_key_value_heads=2))
    assert [type(b).__name__ for b in fsdp.blocks(llama)] == ["LlamaDecoderLayer"] * 3


# ---- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("sections, named", [
    ({}, "probe.enabled=false"),
    ({"keep": {"embeddings": 1.0}}, "keep (keep.embeddings) cannot shard yet"),
    ({"model": {"lora": {"r": 4}}, "optimizer": {"name": "adamw"}}, "lora (model.lora.r) cannot shard yet"),
])
def test_what_fsdp_cannot_shard_is_refused_by_name(tiny_model_dir, tmp_path, sections, named):
    from recall_cli.plugins.methods import active
    from recall_cli.recipe import build_recipe
    from recall_cli.training import preflight

    raw = tiny_recipe(tiny_model_dir, tmp_path / "run", train={"distributed": "fsdp"})
    if sections:
        raw["probe"]["enabled"] = False
        for key, values in sections.items():
            raw.setdefault(key, {}).update(values)
    recipe, problems = build_recipe(raw, check_files=False)
    assert not problems
    report = preflight.Preflight()
    preflight.check_fsdp(report, recipe, world_size=2, on=active(recipe))  # the plan's methods, as set-up hands them
    (check,) = report.checks
    assert check.status == "fail" and named in check.message and check.error.exit_code == 2


# ---- a run under torchrun ------------------------------------------------------------------------

STEPS = 24


def _env() -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def _recipe(model_dir: Path, out: Path, batch_size: int, **train) -> dict:
    # 89 rows in global batches of 8 with grad_accum 2: an uneven last batch (rank 1 gets none), no_sync's
    # FSDP counterpart on the first micro-step.
    return tiny_recipe(model_dir, out, task={"max_train_examples": 89, "max_eval_examples": 40},
                       optimizer={"lr": 3e-3},
                       train={"batch_size": batch_size, "grad_accum": 2, "max_steps": STEPS, "log_every": 1,
                              "eval_every": 12, "eval_batch_size": 16, **train},
                       probe={"enabled": False})


def _launch(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "recall_cli", "finetune", *args, "--nproc", "2", "--plain"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=REPO)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("fsdp")
    model_dir = tiny_bert_dir(tmp / "model", seed=1234, **NODROP)
    two = write_recipe(tmp / "two.yaml", _recipe(model_dir, tmp / "two", 4, distributed="fsdp"))
    proc = _launch(str(two))
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stdout + stderr
    one = write_recipe(tmp / "one.yaml", _recipe(model_dir, tmp / "one", 8))
    single = runner.invoke(app, ["finetune", str(one), "--plain"])
    assert single.exit_code == 0, single.output
    return {"tmp": tmp, "model": model_dir, "two": tmp / "two", "one": tmp / "one", "stdout": stdout}


def _train(run_dir: Path) -> list[dict]:
    return [r for r in read_metrics(run_dir) if r["split"] == "train"]


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_fsdp_takes_the_same_steps_as_one_process_with_the_global_batch(runs):
    two, one = _train(runs["two"]), _train(runs["one"])
    assert [r["step"] for r in two] == [r["step"] for r in one] == list(range(1, STEPS + 1))
    for a, b in zip(two, one):
        # the same arithmetic split over two ranks: summation order alone differs
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-5), a["step"]
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4, abs=1e-6), a["step"]
        assert a["distance"] == pytest.approx(b["distance"], rel=1e-4), a["step"]
    wa, wb = (load_file(str(r / "last" / "model.safetensors")) for r in (runs["two"], runs["one"]))
    assert wa.keys() == wb.keys()
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-5
    evals = [(r["step"], r["accuracy"]) for r in read_metrics(runs["two"]) if r["split"] == "eval"]
    assert evals == [(r["step"], r["accuracy"]) for r in read_metrics(runs["one"]) if r["split"] == "eval"]
    assert "processes=2" in runs["stdout"]


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_the_checkpoint_is_one_consolidated_folder_that_from_pretrained_opens(runs):
    from transformers import AutoModelForSequenceClassification

    last = runs["two"] / "last"
    assert sorted(p.name for p in last.glob("*.safetensors")) == ["model.safetensors"]
    model = AutoModelForSequenceClassification.from_pretrained(str(last))
    saved = load_file(str(last / "model.safetensors"))
    assert all(torch.equal(p.detach(), saved[n]) for n, p in model.named_parameters())
    # the optimizer state, consolidated too: full-size moments by parameter name
    state = torch.load(last / "optimizer.pt", weights_only=True)["optimizer"]["state"]
    assert state["classifier.weight"]["exp_avg"].shape == saved["classifier.weight"].shape
    assert config_written(runs["two"])["train"]["distributed"] == "fsdp"


def config_written(run_dir: Path) -> dict:
    import yaml

    return yaml.safe_load((run_dir / "config.yaml").read_text())


@pytest.mark.slow
@pytest.mark.long  # minutes on 2 cores: left to make test's second step (python -m pytest -q -m long)
def test_sigterm_saves_on_every_rank_and_resume_equals_the_uninterrupted_run(runs):
    from test_preemption import _worker_pid, assert_stopped_cleanly, comparable, wait_for_step

    tmp = runs["tmp"]
    stopped = write_recipe(tmp / "s.yaml", _recipe(runs["model"], tmp / "s", 4, distributed="fsdp"))
    proc = _launch(str(stopped))
    wait_for_step(proc, tmp / "s", 5)
    rank1 = _worker_pid(proc.pid, 1)
    assert rank1 is not None
    os.kill(rank1, signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 143, stdout + stderr
    at = assert_stopped_cleanly(tmp / "s", stderr, STEPS)
    resumed = _launch("--resume", str(tmp / "s"))
    stdout, stderr = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, stdout + stderr
    assert f"resuming at step {at}," in stdout
    wa, wb = (load_file(str(r / "last" / "model.safetensors")) for r in (tmp / "s", runs["two"]))
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) == 0.0
    assert comparable(read_metrics(tmp / "s")) == comparable(read_metrics(runs["two"]))
