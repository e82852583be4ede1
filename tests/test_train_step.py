"""The training step as a function of the set-up run (recall_cli/training/loop.py, setup.py)."""

from __future__ import annotations

import pytest
import torch

from recall_cli.training import compiled
from recall_cli import rundir
from recall_cli.distributed import Distributed
from recall_cli.training.progress import Reporter
from recall_cli.recipe import recipe_from_dict
from recall_cli.training.loop import micro_batches, optimizer_step, train_step
from recall_cli.training.setup import Start, prepare, set_up

from conftest import tiny_recipe


@pytest.fixture()
def training(tiny_model_dir, tmp_path):
    raw = tiny_recipe(tiny_model_dir, tmp_path / "run", train={"grad_accum": 2}, probe={"enabled": False})
    recipe = recipe_from_dict(raw, "test")
    prepared = prepare(recipe, Distributed(), Start.NEW, Reporter())
    return set_up(prepared, Reporter(), rundir.NewRunDir(tmp_path / "run"))


@pytest.mark.slow
def test_set_up_writes_the_run_directory_before_the_first_step(training, tmp_path):
    run = tmp_path / "run"
    # .recall.lock: the writer's lock, held for the run's life (finetune removes it at the end)
    assert sorted(p.name for p in run.iterdir()) == [".recall.lock", "anchor.safetensors", "config.yaml", "metrics.jsonl",
                                                      "start.safetensors"]  # the new head as it began (a teacher's)
    assert training.state.step == 0 and training.total_steps == 12 and not training.resumed
    assert len(training.pairs) == len([n for n, _ in training.model.named_parameters() if n.startswith("bert.")])


@pytest.mark.slow
def test_train_step_returns_the_loss_tensor_without_reading_it_on_the_host(training, monkeypatch):
    batches, samples = micro_batches(training)
    assert (len(batches), samples, training.state.micro_step) == (2, 16, 2)
    rng = torch.get_rng_state()

    def host_read(*_, **__):
        raise AssertionError("the step read a tensor on the host")

    with monkeypatch.context() as patch:
        for name in ("item", "tolist", "__float__"):
            patch.setattr(torch.Tensor, name, host_read)
        loss = train_step(training, batches)
    assert loss.shape == () and loss.device == training.device and not loss.requires_grad

    # The same micro-batches with the same dropout draws, by hand: the mean of the two micro-batch losses.
    torch.set_rng_state(rng)
    with torch.no_grad():
        by_hand = sum(training.model(**batch).loss for batch, *_ in batches) / 2
    assert loss.item() == pytest.approx(by_hand.item(), rel=1e-6)
    assert all(p.grad is not None for p in training.compute.params)

    before = [p.detach().clone() for p in training.compute.params]
    norm = optimizer_step(training)
    assert torch.isfinite(norm) and norm.item() > 0
    assert all(p.grad is None for p in training.compute.params)
    assert any(not torch.equal(b, p) for b, p in zip(before, training.compute.params))


@pytest.mark.slow
def test_gradients_owned_after_the_first_micro_batch_train_as_the_plain_step(tiny_model_dir, tmp_path, monkeypatch):
    """Under CUDA graphs the step copies the gradients out of the graphs' memory after its first
    micro-batch (compiled.own_gradients). Here, on the CPU, the path runs with that copy forced:
    the same weights as without it over two steps of two micro-batches, a fresh storage for each
    gradient with its values, and None kept for a parameter that got no gradient."""
    def build(name: str):
        raw = tiny_recipe(tiny_model_dir, tmp_path / name, train={"grad_accum": 2}, probe={"enabled": False})
        prepared = prepare(recipe_from_dict(raw, name), Distributed(), Start.NEW, Reporter())
        return set_up(prepared, Reporter(), rundir.NewRunDir(tmp_path / name))

    plain, owned = build("plain"), build("owned")
    assert not plain.compute.graph_grads  # eager on CPU
    owned.compute.graph_grads, owned.compute.forward = True, lambda **batch: owned.model(**batch)  # as a compiled forward would be
    copies = []
    real = compiled.own_gradients

    def spy(params):
        before = {id(p): (p.grad.data_ptr(), p.grad.clone()) for p in params if p.grad is not None}
        real(params)
        copies.append(all(p.grad.data_ptr() != before[id(p)][0] and torch.equal(p.grad, before[id(p)][1])
                          for p in params if p.grad is not None))

    monkeypatch.setattr(compiled, "own_gradients", spy)
    for _ in range(2):
        for t in (plain, owned):
            torch.manual_seed(0)  # the same dropout masks in both
            train_step(t, micro_batches(t)[0])
            optimizer_step(t)
    assert copies == [True, True]  # once per step, after the first of its two micro-batches
    for a, b in zip(plain.compute.params, owned.compute.params):
        assert torch.equal(a, b)
    # A parameter that got no gradient keeps None (the optimizer skips it, as in an eager step).
    used, unused = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
    used.grad = torch.full((3,), 2.0)
    real([used, unused])
    assert unused.grad is None and torch.equal(used.grad, torch.full((3,), 2.0))
