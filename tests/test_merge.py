"""`recall merge` on tiny BERTs: what each method returns, RECALL's weights, the outputs, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from recall_cli.cli import app
from recall_cli.merge.io import layer_of
from recall_cli.merge.ties import Ties, _disjoint_mean, trim
from recall_cli.testing import tiny_bert

from conftest import make_run

runner = CliRunner()


def ties_merge(vectors, density):
    """The merged task vector of the rows of ``vectors`` (N x D), all in memory: the test's oracle for the
    layer-by-layer merge (it was shipped in the package, which never used it)."""
    return _disjoint_mean(trim(vectors, density))


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("merge_runs")
    return {name: make_run(root, name, tiny_model_dir, seed) for name, seed in (("a", 1), ("b", 2))}


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("samples") / "samples.txt"
    rows = ["the film was a delight", "a dull, lifeless script", "He said it would rain.\tIt rained, as he said.",
            "nothing works here", "an instant classic", "the plot is thin but the cast is great"]
    path.write_text("\n".join(rows * 3) + "\n", encoding="utf-8")
    return path


def merge(*args) -> tuple[int, str]:
    result = runner.invoke(app, ["merge", *map(str, args), "--device", "cpu", "--json"])
    return result.exit_code, result.output


def weights(folder: Path) -> dict[str, torch.Tensor]:
    """A folder's tensors, from model.safetensors or from every shard its index names (a sharded input's
    merge is written in shards as its source was)."""
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return load_file(str(folder / "model.safetensors"))
    files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    return {k: v for f in files for k, v in load_file(str(folder / f)).items()}


@pytest.mark.slow
def test_identical_models_merge_to_themselves(runs, samples, tmp_path):
    twin = tmp_path / "a_twin"
    shutil.copytree(runs["a"], twin)
    for method in ("recall", "linear"):
        out = tmp_path / method
        code, output = merge(runs["a"], twin, "--out", out, "--method", method, "--samples", samples, "--clusters", "3")
        assert code == 0, output
        source = weights(runs["a"] / "best")
        for name in ("a", "a_twin"):
            merged = weights(out / name)
            assert merged.keys() == source.keys()
            for key, tensor in source.items():
                assert torch.equal(merged[key], tensor), (method, key)


@pytest.mark.slow
def test_recall_weights_sum_to_one_and_favour_the_reference(runs, samples, tmp_path):
    out = tmp_path / "m"
    code, output = merge(runs["a"], runs["b"], "--out", out, "--samples", samples, "--clusters", "4")
    assert code == 0, output
    record = json.loads((out / "merge.json").read_text())
    assert record == json.loads(output)
    assert record["method"] == "recall" and record["reference"] == "b" and record["clusters"] == 4
    assert len(record["samples_used"]) == 4
    assert [row["layer"] for row in record["layers"]] == [0, 1, 2]  # embeddings + 2 blocks
    for row in record["layers"]:
        assert sum(row["weight"]) == pytest.approx(1.0, abs=1e-9)
        assert row["similarity"][1] == pytest.approx(1.0)  # the reference against itself
        assert row["weight"][1] > row["weight"][0]
        assert 0 < row["similarity"][0] < 1
    # Fusion is the linear rule with each layer's weights; heads stay each model's own.
    a, b = weights(runs["a"] / "best"), weights(runs["b"] / "best")
    merged_a, merged_b = weights(out / "a"), weights(out / "b")
    w = record["layers"][1]["weight"]
    key = "bert.encoder.layer.0.attention.self.query.weight"
    assert torch.allclose(merged_a[key], w[0] * a[key] + w[1] * b[key], atol=1e-6)
    assert torch.equal(merged_a[key], merged_b[key])
    w = record["layers"][2]["weight"]
    key = "bert.pooler.dense.weight"  # the pooler takes the last layer's weights
    assert torch.allclose(merged_a[key], w[0] * a[key] + w[1] * b[key], atol=1e-6)
    assert torch.equal(merged_a["classifier.weight"], a["classifier.weight"])
    assert torch.equal(merged_b["classifier.weight"], b["classifier.weight"])


@pytest.mark.slow
def test_temperature_sharpens_the_weights(runs, samples, tmp_path):
    spread = []
    for tau in ("10", "0.05"):
        code, output = merge(runs["a"], runs["b"], "--out", tmp_path / tau, "--samples", samples, "--clusters", "4",
                             "--temperature", tau)
        assert code == 0, output
        spread.append(max(row["weight"][1] for row in json.loads(output)["layers"]))
    assert spread[0] < 0.53 < spread[1]  # tau 10: nearly uniform; tau 0.05: the reference dominates


@pytest.mark.slow
def test_linear_one_zero_returns_the_first_model(runs, tmp_path):
    out = tmp_path / "m"
    code, output = merge(runs["a"], runs["b"], "--out", out, "--method", "linear", "--weights", "1,0")
    assert code == 0, output
    a, b = weights(runs["a"] / "best"), weights(runs["b"] / "best")
    for key, tensor in weights(out / "a").items():
        assert torch.equal(tensor, a[key]), key
    merged_b = weights(out / "b")
    assert torch.equal(merged_b["bert.embeddings.word_embeddings.weight"], a["bert.embeddings.word_embeddings.weight"])
    assert torch.equal(merged_b["classifier.bias"], b["classifier.bias"])


@pytest.mark.slow
def test_pretrained_encoder_as_an_input_is_wise_ft(runs, tiny_model_dir, tmp_path):
    out = tmp_path / "m"
    code, output = merge(tiny_model_dir, runs["a"], "--out", out, "--method", "linear", "--weights", "1,3")
    assert code == 0, output
    record = json.loads(output)
    assert [i["head"] for i in record["inputs"]] == [False, True]
    pre, a = weights(tiny_model_dir), weights(runs["a"] / "best")
    merged = weights(out / "a")
    key = "encoder.layer.1.output.dense.weight"
    assert torch.allclose(merged["bert." + key], 0.25 * pre[key] + 0.75 * a["bert." + key], atol=1e-6)
    assert set(weights(out / tiny_model_dir.name)) == set(pre)  # an encoder, no head


@pytest.mark.slow
def test_task_arithmetic_lambda_zero_returns_the_base(runs, tiny_model_dir, tmp_path):
    pre = weights(tiny_model_dir)
    for i, base in enumerate((["--base", str(tiny_model_dir)], [])):  # --base, then the runs' anchor.safetensors
        out = tmp_path / f"m{i}"
        code, output = merge(runs["a"], runs["b"], "--out", out, "--method", "task_arithmetic", "--lambda", "0", *base)
        assert code == 0, output
        merged = weights(out / "b")
        for key, tensor in pre.items():
            assert torch.equal(merged["bert." + key], tensor), key


@pytest.mark.slow
def test_ties_matches_a_hand_computed_example(runs, tmp_path):
    vectors = torch.tensor([[3.0, -1.0, 0.5, -2.0], [-1.0, 2.0, 1.0, -4.0]])
    # trim to 2 of 4: [3, 0, 0, -2] and [0, 2, 0, -4]; signs of the sum [1, 1, 0, -1];
    # mean of the agreeing values: [3, 2, 0, (-2 - 4) / 2].
    assert torch.equal(ties_merge(vectors, 0.5), torch.tensor([3.0, 2.0, 0.0, -3.0]))
    base = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    method = Ties(lam=0.5, density=0.5)
    fused = method.fuse([base + vectors[0].reshape(2, 2), base + vectors[1].reshape(2, 2)], 1, base)
    assert torch.equal(fused, base + 0.5 * torch.tensor([[3.0, 2.0], [0.0, -3.0]]))
    out = tmp_path / "m"
    code, output = merge(runs["a"], runs["b"], "--out", out, "--method", "ties", "--density", "1")
    assert code == 0, output
    assert json.loads(output)["density"] == 1.0 and json.loads(output)["lambda"] == 1.0
    # density 1 (nothing trimmed), two models, lambda 1, theta* = the runs' anchor.safetensors: per entry,
    # task vectors of one sign are averaged; of opposite signs, the larger magnitude wins alone.
    anchor = load_file(str(runs["a"] / "anchor.safetensors"))
    a, b = weights(runs["a"] / "best"), weights(runs["b"] / "best")
    assert anchor and set(anchor) < set(a)
    for name, own in (("a", a), ("b", b)):
        written = weights(out / name)
        assert written.keys() == own.keys()
        for key, tensor in written.items():
            if key not in anchor:  # the classifier head: each model keeps its own
                assert torch.equal(tensor, own[key]), (name, key)
                continue
            ta, tb = a[key] - anchor[key], b[key] - anchor[key]
            assert (ta != 0).all() and (tb != 0).all() and (ta.abs() != tb.abs()).all()  # no tie to break
            tau = torch.where(torch.sign(ta) == torch.sign(tb), (ta + tb) / 2, torch.where(ta.abs() > tb.abs(), ta, tb))
            assert torch.equal(tensor, anchor[key] + tau), (name, key)
    # both kinds of entry occur, so both halves of the rule were checked
    key = "bert.encoder.layer.0.attention.self.query.weight"
    same_sign = torch.sign(a[key] - anchor[key]) == torch.sign(b[key] - anchor[key])
    assert same_sign.any() and not same_sign.all()



@pytest.mark.slow
@pytest.mark.long  # minutes on 2 cores: left to make test's second step (python -m pytest -q -m long)
def test_chunked_ties_equals_the_formula_on_all_n_vectors_at_once(runs):
    """The engine fuses TIES in row chunks after a per-model threshold pass; with a tiny chunk every
    tensor spans many chunks, and the result must be the formula on the stacked whole task vectors."""
    from recall_cli.merge import engine
    from recall_cli.merge.io import theta_star_of, read_tensor

    sources = engine.open_sources([str(runs["a"]), str(runs["b"]), str(runs["a"])])
    anchor = theta_star_of(sources[0])
    method = Ties(lam=0.7, density=0.3)
    merged = engine.fuse(sources, method, [anchor], chunk_bytes=256)
    name = "embeddings.word_embeddings.weight"
    rows, cols = sources[0].shapes[name]
    assert 256 // (4 * cols * 3) < rows  # more than one chunk: at most one row per chunk here
    for name in sources[0].shapes:
        base = anchor.read([name])[name]
        vectors = torch.stack([(read_tensor(s, name) - base).reshape(-1) for s in sources])
        expected = base + 0.7 * ties_merge(vectors, 0.3).reshape(base.shape)
        assert torch.equal(merged[name], expected), name

    # Ties in magnitude at the threshold: exactly k entries kept, the first ones in row-major order,
    # however the rows are chunked.
    class OneRowAtATime:
        def __init__(self, tensors):
            self.tensors, self.shape = tensors, tuple(tensors[0].shape)

        def __len__(self):
            return len(self.tensors)

        def __iter__(self):
            return iter(self.tensors)

        def chunks(self):
            for r in range(self.shape[0]):
                yield slice(r, r + 1), [t[r:r + 1] for t in self.tensors]

    base = torch.zeros(3, 2)
    a = torch.tensor([[1.0, -2.0], [2.0, 2.0], [-2.0, 1.0]])  # four entries tied at |2|, k = 3
    b = torch.tensor([[-1.0, 1.0], [1.0, 3.0], [1.0, -1.0]])
    fused = Ties(lam=1.0, density=0.5).fuse(OneRowAtATime([a, b]), 1, base)
    # a keeps -2, 2, 2 (the first three 2s); b keeps 3 and the first two 1s: -1 at [0,0] and 1 at [0,1].
    assert torch.equal(trimmed := ties_merge(torch.stack([a.reshape(-1), b.reshape(-1)]), 0.5).reshape(3, 2), fused)
    assert torch.equal(trimmed, torch.tensor([[-1.0, -2.0], [2.0, 2.5], [0.0, 0.0]]))


@pytest.mark.slow
def test_outputs_open_with_from_pretrained_and_score_with_evaluate(runs, tmp_path):
    from transformers import AutoModelForSequenceClassification

    out = tmp_path / "m"
    code, output = merge(runs["a"], runs["b"], "--out", out, "--method", "linear", "--weights", "1,0")
    assert code == 0, output
    model = AutoModelForSequenceClassification.from_pretrained(out / "a")
    assert model.config.num_labels == 2
    scored = []
    for path in (runs["a"], out / "a"):
        result = runner.invoke(app, ["evaluate", str(path), "--json", "--device", "cpu"])
        assert result.exit_code == 0, result.output
        scored.append(json.loads(result.output))
    assert scored[1]["task"] == "mrpc" and scored[1]["examples"] == {"dev": 40}
    assert scored[1]["metrics"] == scored[0]["metrics"]  # weights (1, 0): model a, scored alike


@pytest.mark.slow
def test_inputs_with_one_name_get_distinct_outputs(runs, tmp_path):
    """a, a and a-2 (runs of different sweeps named alike) become a, a-2 and a-2-2, never one folder twice."""
    import shutil

    other, third = tmp_path / "other" / "a", tmp_path / "a-2"
    shutil.copytree(runs["a"], other)
    shutil.copytree(runs["b"], third)
    code, output = merge(runs["a"], other, third, "--out", tmp_path / "m", "--method", "linear")
    assert code == 0, output
    assert sorted(p.name for p in (tmp_path / "m").iterdir() if p.is_dir()) == ["a", "a-2", "a-2-2"]


def test_layer_index_from_parameter_names():
    assert layer_of("embeddings.word_embeddings.weight", 6) == 0
    assert layer_of("encoder.layer.0.attention.self.query.weight", 6) == 1
    assert layer_of("transformer.layer.5.ffn.lin1.weight", 6) == 6  # DistilBERT
    assert layer_of("pooler.dense.weight", 6) == 6


def test_bad_input_exits_2_and_writes_nothing(runs, samples, tmp_path):
    other = tmp_path / "wide"
    tiny_bert(intermediate_size=40, seed=None).save_pretrained(other)  # tiny_model_dir's shape but a wider FFN
    (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
    (tmp_path / "exists").mkdir()
    a, b = str(runs["a"]), str(runs["b"])
    cases = {
        "one model": [a],
        "no such run": [a, str(tmp_path / "nope")],
        "different shapes": [a, str(other), "--method", "linear"],
        "empty samples": [a, b, "--samples", str(tmp_path / "empty.txt")],
        "missing samples": [a, b, "--samples", str(tmp_path / "missing.txt")],
        "temperature 0": [a, b, "--temperature", "0"],
        "negative temperature": [a, b, "--temperature", "-1"],
    }
    for case, args in cases.items():
        out = tmp_path / "out"
        result = runner.invoke(app, ["merge", *args, "--out", str(out)])
        assert result.exit_code == 2, (case, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (case, result.output)
        assert not out.exists(), case
    result = runner.invoke(app, ["merge", a, b, "--out", str(tmp_path / "exists"), "--method", "linear"])
    assert result.exit_code == 2 and "already exists" in result.output
    assert list((tmp_path / "exists").iterdir()) == []
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left


@pytest.mark.slow
def test_each_output_carries_a_model_card_the_hub_reads_with_what_evaluate_measured(runs, tmp_path):
    """OUT/<name>/README.md: the Hub's metadata (tags, base model, model-index holding --evaluate's
    merged score for that output), the inputs and settings; the sources' own cards are not copied,
    a README someone else wrote is kept beside it as README.user.md."""
    import shutil

    from huggingface_hub import ModelCard

    from recall_cli.card import KEPT_FILE, MARKER
    from recall_cli.merge import run_merge

    a = tmp_path / "a"
    shutil.copytree(runs["a"], a)
    (a / "best" / "README.md").write_text("# my notes on run a\n", encoding="utf-8")
    merged = run_merge([str(a), str(runs["b"])], tmp_path / "m", "linear", {"weights": "0.5,0.5"}, device="cpu",
                       evaluate=True)
    for row in merged.scores:
        card = ModelCard.load(tmp_path / "m" / row["model"] / "README.md")
        assert MARKER in card.text and "linear" in card.text
        assert {"recall", "merge", "merge-linear"} <= set(card.data.tags)
        assert card.data.library_name == "transformers" and card.data.datasets == ["glue"]
        [result] = card.data.eval_results
        assert result.dataset_config == "mrpc" and result.metric_type == "accuracy"  # MRPC's main metric here
        assert result.metric_value == pytest.approx(row["merged"], abs=1e-6)
        assert f"| {row['model']} | mrpc | {100 * row['individual']:.2f} | {100 * row['merged']:.2f} |" in card.text
    assert (tmp_path / "m" / "a" / KEPT_FILE).read_text(encoding="utf-8") == "# my notes on run a\n"
    assert not (tmp_path / "m" / "b" / KEPT_FILE).exists()


# ---- models whose safetensors are split in shards (model-0000i-of-0000N.safetensors + index) ------------


def shard_weights(folder: Path, parts: int = 3) -> None:
    """Split ``folder``'s model.safetensors in ``parts`` files and an index, as save_pretrained does for a
    model past its max_shard_size: tensors in name order, about equal counts a file."""
    from safetensors.torch import save_file

    tensors = load_file(str(folder / "model.safetensors"))
    names = sorted(tensors)
    weight_map = {}
    for i in range(parts):
        file = f"model-{i + 1:05d}-of-{parts:05d}.safetensors"
        chunk = names[i * len(names) // parts:(i + 1) * len(names) // parts]
        save_file({n: tensors[n].contiguous() for n in chunk}, str(folder / file), metadata={"format": "pt"})
        weight_map.update({n: file for n in chunk})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}), encoding="utf-8")
    (folder / "model.safetensors").unlink()


@pytest.mark.parametrize("method, extra", [
    ("linear", ()), ("task_arithmetic", ("--lambda", "0.7")), ("ties", ("--density", "0.5")),
    ("recall", ("--clusters", "3")),
])
@pytest.mark.slow
def test_a_merge_of_sharded_models_equals_the_unsharded_merge_bit_for_bit(runs, samples, tiny_model_dir, tmp_path,
                                                                        method, extra):
    sharded = {}
    for name, run in runs.items():
        sharded[name] = tmp_path / "sharded" / name
        shutil.copytree(run, sharded[name])
        shard_weights(sharded[name] / "best")
        assert not (sharded[name] / "best" / "model.safetensors").exists()
    base = tmp_path / "base"
    shutil.copytree(tiny_model_dir, base)
    shard_weights(base, parts=2)
    common = ["--method", method, *extra, "--samples", samples, *(["--base", base] if method == "ties" else [])]
    code, output = merge(runs["a"], runs["b"], "--out", tmp_path / "plain", *common)
    assert code == 0, output
    code, output = merge(sharded["a"], sharded["b"], "--out", tmp_path / "split", *common)
    assert code == 0, output
    for name in ("a", "b"):
        plain, split = weights(tmp_path / "plain" / name), weights(tmp_path / "split" / name)
        assert plain.keys() == split.keys()
        for key, tensor in plain.items():
            assert torch.equal(split[key], tensor), (method, name, key)
