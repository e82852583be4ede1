"""θ*'s side of the probes kept in recall's cache (probes/cache.py): a second prober of the same model and setting
makes no forward pass of θ* and records the same numbers; another weight, setting or input misses; a corrupt
file is passed over with one note; a run's step 0 (θ* itself) reuses θ*'s side; two runs of one recipe."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from recall_cli.cache import cache_root
from recall_cli.probes.cache import flatten, unflatten
from recall_cli.probes.runner import Prober, ProbeInputs, load_inputs
from recall_cli.rundir import read_metrics
from recall_cli.testing import tiny_bert, wordpiece_tokenizer

from conftest import tiny_recipe, write_recipe

CPU = torch.device("cpu")
ENCODER_PROBES = ["cka", "drift", "sts", "mlm"]


class Forwards:
    """Counts the forward passes of a module (a hook) while held."""

    def __init__(self, module: torch.nn.Module):
        self.module, self.count = module, 0

    def __enter__(self):
        self.handle = self.module.register_forward_hook(lambda *_: setattr(self, "count", self.count + 1))
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def numbers(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in ("probe_seconds", "notes")}


def same(a: dict, b: dict) -> bool:
    """Equal field by field, NaN equal to NaN, lists item by item."""
    def eq(x, y):
        if isinstance(x, list):
            return isinstance(y, list) and len(x) == len(y) and all(eq(i, j) for i, j in zip(x, y))
        return (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)) or x == y
    return a.keys() == b.keys() and all(eq(a[k], b[k]) for k in a)


def entries() -> list[Path]:
    folder = cache_root() / "probes"
    return sorted(folder.glob("*.safetensors")) if folder.is_dir() else []


@pytest.fixture
def mlm_bert():
    return tiny_bert(head="mlm", seed=5).eval()


def encoder_prober(model, *, num_texts=12, num_pairs=12, max_length=32, probes=ENCODER_PROBES, **kwargs) -> Prober:
    inputs = load_inputs(probes, None, None, num_texts, num_pairs)
    head = model.cls  # θ*'s masked-LM head
    return Prober(probes, inputs, wordpiece_tokenizer(), model, CPU, max_length=max_length, mlm_head=head, **kwargs)


def nudged(model, scale=0.05, seed=0):
    import copy

    other = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.bert.encoder.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return other


@pytest.mark.slow
def test_the_second_prober_reads_theta_stars_side_and_records_the_same_numbers(mlm_bert):
    with Forwards(mlm_bert.bert) as first:
        computed = encoder_prober(mlm_bert)
    assert first.count > 0 and not computed.ref_cached and len(entries()) == 1
    with Forwards(mlm_bert.bert) as second:
        cached = encoder_prober(mlm_bert)
    assert second.count == 0 and cached.ref_cached and cached.probes == ENCODER_PROBES
    assert cached.ref_seconds == pytest.approx(computed.ref_seconds)  # what computing it took, kept with it
    theta = nudged(mlm_bert)
    one, two = computed.measure(theta), cached.measure(theta)
    assert same(numbers(one), numbers(two))
    assert 0 < one["cka"] < 1 and one["drift"] > 0 and one["mlm_ratio"] != 1.0 and one["sts_pairs"] == 12


def test_the_causal_probes_sides_are_cached_too():
    from lm_tiny import sst2_words, tiny_llama, word_tokenizer

    from recall_cli.probes.choice import ChoiceSet, load_choices
    from recall_cli.probes.sets import DEFAULT_LM_TEXTS, load_texts

    tokenizer = word_tokenizer(sst2_words())
    star = tiny_llama(len(tokenizer), seed=1).eval()
    items = load_choices(None)
    items = ChoiceSet(items.prompts[:24], items.choices[:24], items.answers[:24], items.source)
    inputs = ProbeInputs([], None, lm_texts=load_texts(DEFAULT_LM_TEXTS, 8), choices=items)
    probes = ["lm", "kl", "choice"]
    with Forwards(star) as first:
        computed = Prober(probes, inputs, tokenizer, star, CPU, max_length=32)
    with Forwards(star) as second:
        cached = Prober(probes, inputs, tokenizer, star, CPU, max_length=32)
    assert first.count > 0 and second.count == 0 and cached.ref_cached
    assert torch.equal(cached.ref["choice"], computed.ref["choice"])
    assert torch.equal(cached.ref["lm"]["midpoints"], computed.ref["lm"]["midpoints"])
    theta = tiny_llama(len(tokenizer), seed=2).eval()
    one, two = computed.measure(theta), cached.measure(theta)
    assert same(numbers(one), numbers(two)) and one["kl"] > 0 and one["choice_items"] == 24


@pytest.mark.slow
def test_another_weight_setting_or_input_misses_the_cache(mlm_bert):
    encoder_prober(mlm_bert)
    misses = {"a weight": lambda: encoder_prober(nudged(mlm_bert, scale=1e-3)),
              "max_length": lambda: encoder_prober(mlm_bert, max_length=24),
              "batch_size": lambda: encoder_prober(mlm_bert, batch_size=5),
              "num_texts": lambda: encoder_prober(mlm_bert, num_texts=10),
              "num_pairs": lambda: encoder_prober(mlm_bert, num_pairs=10),
              "probes": lambda: encoder_prober(mlm_bert, probes=["cka", "drift"])}
    for n, (what, build) in enumerate(misses.items(), start=2):
        prober = build()
        assert not prober.ref_cached, what
        assert len(entries()) == n, what
    assert encoder_prober(mlm_bert).ref_cached  # the first is still there
    assert not encoder_prober(mlm_bert, cache=False).ref_cached  # cache=False reads none


@pytest.mark.slow
def test_a_corrupt_entry_is_passed_over_with_one_note_and_written_again(mlm_bert):
    encoder_prober(mlm_bert)
    (path,) = entries()
    for garbage in (b"not a safetensors file", path.read_bytes()[:40]):
        path.write_bytes(garbage)
        again = encoder_prober(mlm_bert)
        assert not again.ref_cached
        notes = [n for n in again.notes if n.startswith("probe cache:")]
        assert len(notes) == 1 and str(path) in notes[0] and "computed again" in notes[0] and "\n" not in notes[0]
        assert encoder_prober(mlm_bert).ref_cached  # rewritten whole


@pytest.mark.slow
def test_an_unwritable_cache_is_one_note_and_the_probe_goes_on(mlm_bert, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("RECALL_CACHE", str(blocker))
    prober = encoder_prober(mlm_bert)
    assert [n for n in prober.notes if n.startswith("probe cache:")] and prober.measure(mlm_bert)["cka"] == pytest.approx(1.0)


@pytest.mark.slow
def test_a_plugin_probes_side_is_never_cached(mlm_bert, monkeypatch):
    from recall_cli.plugins.probes import probes

    with monkeypatch.context() as patch:
        patch.setattr(type(probes()["drift"]), "cacheable", False)
        encoder_prober(mlm_bert, probes=["cka", "drift"])
    assert entries() == []
    encoder_prober(mlm_bert, probes=["cka", "drift"])  # the same probes, all recall's own: their side is kept
    assert len(entries()) == 1


@pytest.mark.slow
def test_theta_star_itself_takes_theta_stars_side_without_a_forward(mlm_bert):
    prober = encoder_prober(mlm_bert, cache=False)
    with Forwards(mlm_bert.bert) as reused:
        record = prober.measure(mlm_bert, may_be_reference=True)
    assert reused.count == 0
    assert same(numbers(record), numbers(prober.measure(mlm_bert)))  # what computing it again gives
    assert record["cka"] == pytest.approx(1.0) and record["drift"] == pytest.approx(0.0, abs=1e-6)
    theta = nudged(mlm_bert, scale=1e-6)
    with Forwards(theta.bert) as computed:
        prober.measure(theta, may_be_reference=True)
    assert computed.count > 0  # one bit off is another model


@pytest.mark.slow
def test_the_answer_is_kept_for_one_model_until_a_probed_weight_changes(mlm_bert, monkeypatch):
    """The start line's estimate and step 0's measurement both ask whether the step-0 model is θ*: its weights
    are hashed once, and again only after a probed tensor changed in place, or for another model object."""
    import copy

    prober = encoder_prober(mlm_bert, cache=False)
    hashed = []
    digest = prober._digest
    monkeypatch.setattr(prober, "_digest", lambda m: hashed.append(m) or digest(m))
    step0 = copy.deepcopy(mlm_bert)
    assert prober.is_reference(step0) and prober.is_reference(step0) and len(hashed) == 1
    with torch.no_grad():
        step0.bert.encoder.layer[0].output.dense.weight[0, 0] += 1e-3  # an optimizer step's in-place update
    assert not prober.is_reference(step0) and len(hashed) == 2
    assert prober.is_reference(copy.deepcopy(mlm_bert)) and len(hashed) == 3  # another model is hashed anew


def test_a_side_round_trips_through_the_file_format():
    t = torch.arange(6.0).reshape(2, 3)
    side = {"cka": [t, t + 1], "drift": t, "sts": float("nan"), "mlm": 2.5, "lm": {"nll": -math.inf, "tokens": 7,
                                                                                  "midpoints": None}}
    skeleton, tensors = flatten(side)
    assert len(tensors) == 2  # drift's tensor is cka's first layer: kept once
    back = unflatten(skeleton, tensors)
    assert back["drift"] is back["cka"][0] and torch.equal(back["cka"][1], t + 1)
    assert math.isnan(back["sts"]) and back["lm"] == {"nll": -math.inf, "tokens": 7, "midpoints": None}


@pytest.mark.slow
def test_two_runs_of_one_recipe_record_the_same_probes_and_the_second_computes_only_its_own(tiny_model_dir, tmp_path,
                                                                                         monkeypatch):
    from recall_cli.cli import app
    from recall_cli.cli.console import PlainReporter

    calls = []
    real = Prober._features
    monkeypatch.setattr(Prober, "_features", lambda self, model: calls.append(1) or real(self, model))
    monkeypatch.setattr(PlainReporter, "say_after", 0.0)  # every set-up phase says itself, as a slow one would
    runs, outputs = [], []
    for name in ("first", "second"):
        recipe = write_recipe(tmp_path / f"{name}.yaml", tiny_recipe(
            tiny_model_dir, tmp_path / name, probe={"num_texts": 24, "num_pairs": 24, "max_length": 32},
            train={"max_steps": 6, "eval_every": 3}))
        calls.clear()
        result = CliRunner().invoke(app, ["finetune", str(recipe), "--plain"])
        assert result.exit_code == 0, result.output
        runs.append(([r for r in read_metrics(tmp_path / name) if r["split"] == "probe"], len(calls)))
        outputs.append(result.stdout.splitlines())
    (first, first_calls), (second, second_calls) = runs
    assert [r["step"] for r in first] == [0, 3, 6]
    # the first computes θ*'s side once, the step-0 model being θ* takes it; the second only steps 3 and 6
    assert (first_calls, second_calls) == (3, 2)
    assert all(same(numbers(a), numbers(b)) for a, b in zip(first, second)) and len(first) == len(second)
    assert first[0]["cka"] == pytest.approx(1.0) and first[-1]["cka"] < 1.0
    assert len(entries()) == 1 and os.environ["RECALL_CACHE"] in str(entries()[0])
    for lines, when in zip(outputs, ("in set-up", "when it was cached")):
        start = next(i for i, line in enumerate(lines) if line.startswith("recall: starting"))
        said = [line for line in lines[:start] if line.startswith("recall: set-up: ")]
        assert [line.split(" ")[2] for line in said] == ["tokenizing", "loading", "θ*'s", "starting"], said
        # steps 3 and 6 (step 0's model is θ*), each as long as θ*'s side took
        assert "probe=2 measurements × ~" in lines[start] and f"θ*'s side took {when}" in lines[start]


def test_one_cache_folder_for_every_kind(tmp_path, monkeypatch):
    from recall_cli.merge.gguf_source import gguf_cache_root

    monkeypatch.setenv("RECALL_CACHE", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "mine" and gguf_cache_root() == tmp_path / "mine" / "gguf"
    monkeypatch.delenv("RECALL_CACHE")
    assert cache_root() == tmp_path / "xdg" / "recall" and gguf_cache_root() == tmp_path / "xdg" / "recall" / "gguf"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "recall"
