"""The CUDA paths: fp16 (GradScaler) and bf16 runs that resume, the fused and foreach RecAdam kernels
against the single-tensor one on the GPU, the loop's GradScaler skip path, and the compiled step with
CUDA graphs on length buckets, with gradient accumulation (train.compile; the CPU side is in
test_compiled_step.py and test_train_step.py).

Marked `cuda` and skipped where torch sees no GPU, so CPU-only CI stays green;
`python benchmarks/gpu_check.py OUT` (or `make gpu-check`) runs them on a GPU (`python -m pytest -m cuda`).

CUDA kernels (embedding backward, atomics in reductions) are not bit-reproducible run to run, so a
resumed run is held to an uninterrupted one within a tolerance here, not to max abs diff 0 as on CPU.
"""

from __future__ import annotations

import functools
import json

import pytest
import torch
from safetensors.torch import load_file

from recall_cli.training import loop as train
from recall_cli.rundir import read_metrics
from recall_cli.optim import RecAdam
from recall_cli.recipe import recipe_from_dict

from conftest import StopAfter, tiny_recipe

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (benchmarks/gpu_check.py runs these)")]
DEVICE = "cuda"


def run(recipe: dict, *, resume: bool = False, stop_at: int | None = None) -> None:
    reporter = StopAfter(stop_at)
    if stop_at is None:
        train.finetune(recipe_from_dict(recipe, "test"), resume=resume, reporter=reporter)
    else:
        with pytest.raises(KeyboardInterrupt):
            train.finetune(recipe_from_dict(recipe, "test"), resume=resume, reporter=reporter)


def records(run_dir, split):
    return [r for r in read_metrics(run_dir) if r["split"] == split]


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_mixed_precision_run_resumes_like_an_uninterrupted_one(tiny_model_dir, tmp_path, precision):
    train_cfg = {"device": DEVICE, "precision": precision, "max_steps": 12, "save_every": 3, "eval_every": 6}
    resumed_dir, reference_dir = tmp_path / "resumed", tmp_path / "reference"
    run(tiny_recipe(tiny_model_dir, resumed_dir, train=train_cfg), stop_at=7)
    state = json.loads((resumed_dir / "last" / "trainer_state.json").read_text())
    assert state["step"] == 6 and state["precision"] == precision
    run(tiny_recipe(tiny_model_dir, resumed_dir, train=train_cfg), resume=True)
    run(tiny_recipe(tiny_model_dir, reference_dir, train=train_cfg))

    summary = json.loads((resumed_dir / "summary.json").read_text())
    assert summary["finished"] and summary["precision"] == precision and summary["device"].startswith("cuda")
    a = load_file(str(resumed_dir / "last" / "model.safetensors"))
    b = load_file(str(reference_dir / "last" / "model.safetensors"))
    assert {t.dtype for t in a.values()} == {torch.float32}  # weights stay fp32 under autocast
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-3
    ra, rb = records(resumed_dir, "train"), records(reference_dir, "train")
    assert [r["step"] for r in ra] == [r["step"] for r in rb] == list(range(2, 13, 2))
    for x, y in zip(ra, rb):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-2)
        assert x.get("skipped_steps") == y.get("skipped_steps")
    if precision == "fp16":  # the GradScaler's state went through the checkpoint
        sa = torch.load(resumed_dir / "last" / "optimizer.pt", weights_only=True)["scaler"]
        sb = torch.load(reference_dir / "last" / "optimizer.pt", weights_only=True)["scaler"]
        assert sa["scale"] == sb["scale"] and sa["_growth_tracker"] == sb["_growth_tracker"]


def test_grad_scaler_skip_path_in_the_loop(tiny_model_dir, tmp_path, monkeypatch):
    """A huge initial scale overflows fp16 gradients: those steps are skipped (weights untouched,
    counted in skipped_steps, left out of grad_norm) until the scaler has backed off."""
    monkeypatch.setattr(torch.amp, "GradScaler", functools.partial(torch.amp.GradScaler, init_scale=2.0**40))
    run_dir = tmp_path / "run"
    run(tiny_recipe(tiny_model_dir, run_dir, train={"device": DEVICE, "precision": "fp16", "max_steps": 40,
                                                     "log_every": 2, "eval_every": 0}))
    train_records = records(run_dir, "train")
    skipped = sum(r["skipped_steps"] for r in train_records)
    assert 0 < skipped < 40
    # Windows where every step was skipped log no grad_norm; the others a finite one.
    for r in train_records:
        if r["skipped_steps"] == 2:
            assert r["grad_norm"] is None
        else:
            assert r["grad_norm"] is not None and r["grad_norm"] == r["grad_norm"]
    assert train_records[0]["skipped_steps"] == 2  # 2**40 overflows from the start
    optim_state = torch.load(run_dir / "last" / "optimizer.pt", weights_only=True)
    steps_taken = {int(s["step"]) for s in optim_state["optimizer"]["state"].values() if "step" in s}
    assert steps_taken == {40 - skipped}
    assert optim_state["scaler"]["scale"] < 2.0**40


def mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 3)).to(DEVICE)


def train_kernel(options: dict, steps: int = 40):
    model = mlp()
    body, head = list(model[:4].parameters()), list(model[4].parameters())
    generator = torch.Generator().manual_seed(1)
    anchors = [p.detach() + 0.05 * torch.randn(p.shape, generator=generator).to(DEVICE) for p in body]
    opt = RecAdam([{"params": body, "anchors": anchors, "weight_decay": 0.01}, {"params": head, "weight_decay": 0.0}],
                  lr=1e-3, anneal_k=0.5, anneal_t0=10, pretrain_cof=100.0, **options)
    data = torch.Generator().manual_seed(2)
    for _ in range(steps):
        x = torch.randn(32, 16, generator=data).to(DEVICE)
        y = torch.randint(0, 3, (32,), generator=data).to(DEVICE)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return model, opt


@pytest.mark.parametrize("kernel", [dict(fused=True), dict(foreach=True)], ids=["fused", "foreach"])
def test_fast_kernels_match_single_tensor_on_cuda(kernel):
    single_model, single_opt = train_kernel(dict(foreach=False))
    model, opt = train_kernel(kernel)
    for p, q in zip(single_model.parameters(), model.parameters()):
        assert q.is_cuda
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(opt.state[q]["exp_avg"], single_opt.state[p]["exp_avg"], rtol=1e-5, atol=1e-7)
        # v = b2*v + (1-b2)*g^2 in fp32: the fused kernel contracts it into FMAs, which round once where the
        # single-tensor path rounds twice, so entries differ by a few ulps of the largest ones they are
        # summed with (an H100 showed 6.3e-10 absolute). A few ulps (2^-23 each) of the tensor's largest
        # entry bound that. And after 40 steps the two runs' parameters, hence gradients, differ by up to
        # the 1e-5 relative checked above; v is g squared, so its relative difference is twice that (an H200
        # showed 1.35e-5). A real bug (a wrong b2, a missing square) is off by orders of magnitude more.
        expected = single_opt.state[p]["exp_avg_sq"]
        ulps = 8 * torch.finfo(torch.float32).eps * expected.abs().max().item()
        torch.testing.assert_close(opt.state[q]["exp_avg_sq"], expected, rtol=2e-5, atol=max(ulps, 1e-12))
    # theta* followed the parameters onto the GPU.
    assert all(a.is_cuda for _, a in opt.anchored())


def test_auto_compiles_with_cuda_graphs_on_buckets_and_trains_as_the_eager_step(tiny_model_dir, tmp_path, monkeypatch):
    """train.compile=auto on one GPU with buckets: reduce-overhead, checked against the eager loss
    before it is trusted, a few shapes, bf16 chosen for it; and the run ends where an eager bf16 run
    ends, within what bf16 and CUDA's non-deterministic kernels allow. (A 24-step run would not pay
    for its compiles: the estimate's compile time is set to 0 here.)"""
    from recall_cli.training import compiled

    monkeypatch.setattr(compiled, "COMPILE_SECONDS_PER_LENGTH", 0.0)
    def run(name: str, compile_setting: str) -> dict:
        recipe = recipe_from_dict(tiny_recipe(
            tiny_model_dir, tmp_path / name, task={"pad_to_multiple_of": 16},
            train={"device": DEVICE, "precision": "auto" if compile_setting == "auto" else "bf16", "compile": compile_setting,
                   "max_steps": 24, "eval_every": 12}), name)
        return train.finetune(recipe)

    compiled_summary = run("compiled", "auto")
    record = compiled_summary["compile"]
    assert record["mode"] == "reduce-overhead" and record["fallback"] is None, record
    assert record["reason"].startswith("auto: compiled on CUDA with CUDA graphs (~0 s to compile")
    assert compiled_summary["precision"] == "bf16" and record["seconds"] > 0
    assert record["shapes"] and all(n % 16 == 0 for n in record["shapes"])
    eager_summary = run("eager", "off")
    assert eager_summary["compile"]["mode"] is None
    a, b = (read_metrics(tmp_path / n) for n in ("compiled", "eager"))
    # Dropout draws other masks in a compiled graph: the runs agree on average, not step by step.
    losses = [(x["loss"], y["loss"]) for x, y in zip(a, b) if x["split"] == "train"]
    assert abs(sum(x for x, _ in losses) - sum(y for _, y in losses)) / len(losses) <= 0.05, losses
    assert abs(compiled_summary["final"]["main"] - eager_summary["final"]["main"]) <= 0.1


def test_cuda_graph_step_accumulates_every_micro_batch(tmp_path):
    """Two micro-batches per step through the CUDA-graph forward and backward: the gradients the
    optimizer sees are the eager step's on the same batches (both micro-batches, not the last one's:
    pytorch #169545, what compiled.own_gradients guards against), fp32 and no dropout."""
    from recall_cli import rundir
    from recall_cli.distributed import Distributed
    from recall_cli.training.progress import Reporter
    from recall_cli.testing import tiny_bert_dir
    from recall_cli.training.setup import Start, prepare, set_up

    model_dir = tiny_bert_dir(tmp_path / "still", seed=1234, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    raw = tiny_recipe(model_dir, tmp_path / "run", task={"pad_to_multiple_of": 16}, probe={"enabled": False},
                      train={"device": DEVICE, "precision": "fp32", "compile": "on", "grad_accum": 2})
    prepared = prepare(recipe_from_dict(raw, "graphs"), Distributed(), Start.NEW, Reporter())
    t = set_up(prepared, Reporter(), rundir.NewRunDir(tmp_path / "run"))
    assert t.compute.compile_record.mode == "reduce-overhead" and t.compute.graph_grads
    for _ in range(3):  # warm-up, recording, then replays
        batches, _ = train.micro_batches(t)
        graph_loss = train.train_step(t, batches).item()
        graph_grads = [p.grad.clone() for p in t.compute.params]
        t.optimizer.zero_grad(set_to_none=False)
        compiled_forward, t.compute.forward = t.compute.forward, t.model
        eager_loss = train.train_step(t, batches).item()
        t.compute.forward = compiled_forward
        assert abs(graph_loss - eager_loss) <= 1e-4 * max(1.0, abs(eager_loss))
        for g, p in zip(graph_grads, t.compute.params):
            torch.testing.assert_close(g, p.grad, rtol=1e-3, atol=1e-5)
        train.optimizer_step(t)


# ---- the methods on a GPU: the anchor's cache, LP-FT's phase switch and LoRA's adapters on CUDA ------


@pytest.mark.parametrize("method", ["keep", "keep_pool", "lp_ft", "lora", "corda", "osf"])
def test_each_method_trains_and_resumes_exactly_on_cuda(tiny_model_dir, tmp_path, method):
    """The same run on CUDA interrupted after step 4 and resumed ends with the weights of an
    uninterrupted one (fp32); the anchor's records carry its loss parts. CorDA's calibration sentences go
    to the model's device (the first H200 run of it stopped on a CPU tensor)."""
    extra = {"keep": {"keep": {"embeddings": 1.0}},
             "keep_pool": {"keep": {"embeddings": 1.0, "texts": "pool", "batch_size": 4}},
             "lp_ft": {"train": {"linear_probe_steps": 3}},
             "lora": {"model": {"lora": {"r": 4, "dropout": 0.0}}},
             "corda": {"model": {"lora": {"r": 4, "dropout": 0.0, "init": "corda", "corda_samples": 16}}},
             "osf": {"model": {"osf": {"rank": 4}}}}[method]

    def recipe(name):
        raw = tiny_recipe(tiny_model_dir, tmp_path / name, optimizer={"name": "adamw"}, probe={"enabled": False},
                          train={"device": DEVICE, "max_steps": 8, "save_every": 2, "precision": "fp32"})
        for section, values in extra.items():
            for key, value in values.items():
                if isinstance(value, dict):
                    raw.setdefault(section, {}).setdefault(key, {}).update(value)
                else:
                    raw.setdefault(section, {})[key] = value
        return raw

    run(recipe("whole"))
    run(recipe("cut"), stop_at=4)
    run(recipe("cut"), resume=True)
    a = load_file(str(tmp_path / "whole" / "last" / "model.safetensors"))
    b = load_file(str(tmp_path / "cut" / "last" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    if method.startswith("keep"):
        assert all("loss_keep" in r for r in records(tmp_path / "whole", "train"))
    if method in ("lora", "corda"):
        assert (tmp_path / "whole" / "last" / "adapter" / "adapter_model.safetensors").is_file()
