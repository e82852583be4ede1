"""Probes: CKA against its formulas and properties, drift, pooling, the real MiniLM's STS score, the
MLM probe on a tiny BERT with a head, probe records in a real run, reports, old runs, bad input."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

from recall_cli.rundir import read_metrics
from recall_cli.cli import app
from recall_cli.probes import (Prober, debiased_cka, drift, linear_cka, load_inputs, load_mlm_head, mean_pool,
                               unbiased_hsic)
from recall_cli.probes.sets import load_pairs
from recall_cli.testing import tiny_bert_dir

from conftest import make_run, minilm_path, tiny_recipe, write_recipe

runner = CliRunner()
FAST_PROBES = {"num_texts": 24, "num_pairs": 24, "max_length": 32}


# ---- CKA and friends against their formulas --------------------------------------------------------


def _cka_by_gram(x: np.ndarray, y: np.ndarray) -> float:
    """HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)) with HSIC = tr(K H L H): Kornblith et al.'s eq., float64."""
    n = x.shape[0]
    h = np.eye(n) - np.ones((n, n)) / n
    k, l = x @ x.T, y @ y.T
    hsic = lambda a, b: np.trace(a @ h @ b @ h)  # noqa: E731
    return hsic(k, l) / math.sqrt(hsic(k, k) * hsic(l, l))


def _unbiased_hsic_by_quadruples(k: np.ndarray, l: np.ndarray) -> float:
    """Song et al. (2012): the U-statistic over ordered distinct (i, j, q, r) of k_ij l_ij + k_ij l_qr - 2 k_ij l_iq."""
    n = k.shape[0]
    total, count = 0.0, 0
    for i, j, q, r in itertools.permutations(range(n), 4):
        total += k[i, j] * l[i, j] + k[i, j] * l[q, r] - 2 * k[i, j] * l[i, q]
        count += 1
    return total / count


@pytest.fixture
def reps():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(20, 8, generator=g, dtype=torch.float64)
    y = x[:, :5] @ torch.randn(5, 6, generator=g, dtype=torch.float64) + 0.5 * torch.randn(20, 6, generator=g, dtype=torch.float64)
    return x, y


def test_linear_cka_matches_the_gram_formula_and_its_properties(reps):
    x, y = reps
    value = linear_cka(x, y)
    assert value == pytest.approx(_cka_by_gram(x.numpy(), y.numpy()), abs=1e-12)
    assert 0.2 < value < 0.99  # related, not identical: the test exercises a real value
    assert linear_cka(x, x) == pytest.approx(1.0, abs=1e-12)
    q, _ = torch.linalg.qr(torch.randn(8, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64))
    assert linear_cka(x @ q * 3.7, y) == pytest.approx(value, abs=1e-12)  # orthogonal map and isotropic scale
    assert linear_cka(x + 5.0, y) == pytest.approx(value, abs=1e-12)  # centred inside
    assert linear_cka(x.float(), y.float()) == pytest.approx(value, abs=1e-6)  # float32 input computed in float64
    assert math.isnan(linear_cka(torch.ones(6, 3), y[:6]))


def test_debiased_cka_matches_the_u_statistic(reps):
    x, y = (t[:7] for t in reps)
    k, l = (x @ x.T).numpy(), (y @ y.T).numpy()
    assert unbiased_hsic(torch.from_numpy(k), torch.from_numpy(l)) == pytest.approx(_unbiased_hsic_by_quadruples(k, l), rel=1e-10)
    expected = _unbiased_hsic_by_quadruples(k, l) / math.sqrt(_unbiased_hsic_by_quadruples(k, k) * _unbiased_hsic_by_quadruples(l, l))
    assert debiased_cka(x, y) == pytest.approx(expected, rel=1e-10)
    x, y = reps
    assert debiased_cka(x, x) == pytest.approx(1.0, abs=1e-12)
    q, _ = torch.linalg.qr(torch.randn(8, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64))
    assert debiased_cka(x @ q * 0.3, y) == pytest.approx(debiased_cka(x, y), abs=1e-12)
    with pytest.raises(ValueError):
        unbiased_hsic(torch.eye(3), torch.eye(3))


def test_drift_and_pooling():
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    assert drift(a, a) == pytest.approx(0.0, abs=1e-12)
    assert drift(a, torch.tensor([[0.0, 1.0], [0.0, -1.0]])) == pytest.approx((1.0 + 2.0) / 2)  # orthogonal, opposite
    hidden = torch.arange(12, dtype=torch.float32).reshape(2, 3, 2)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    pooled = mean_pool(hidden, mask)
    assert torch.equal(pooled, torch.stack([hidden[0, :2].mean(0), hidden[1, 0]]))  # padding never counted


# ---- the real MiniLM's zero-shot STS ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_sts_probe_reproduces_minilm_pretrained_score():
    from scipy.stats import spearmanr
    from transformers import AutoModel, AutoTokenizer

    torch.set_num_threads(max(1, torch.get_num_threads()))
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    model = AutoModel.from_pretrained(minilm_path()).eval()
    prober = Prober(["sts"], load_inputs(["sts"], None, None, None, None), tokenizer, model, torch.device("cpu"),
                    max_length=128, batch_size=128)
    assert prober.n_pairs == 1500
    assert prober.ref["sts"] == pytest.approx(0.867, abs=0.001)  # FINDINGS.md: 0.867 on the STS-B dev pairs

    # An independent, plain computation on a sample: one pair at a time, no batching or sorting.
    pairs = load_pairs(None, 60)
    sims = []
    with torch.no_grad():
        for a, b in zip(pairs.first, pairs.second):
            emb = []
            for text in (a, b):
                enc = tokenizer(text, return_tensors="pt", truncation=True, max_length=128)
                h = model(**enc).last_hidden_state[0]
                emb.append(h.mean(0).double())
            sims.append(float(torch.nn.functional.cosine_similarity(emb[0], emb[1], dim=0)))
    expected = spearmanr(sims, pairs.gold).statistic
    small = Prober(["sts"], load_inputs(["sts"], None, None, None, 60), tokenizer, model, torch.device("cpu"), max_length=128)
    assert small.ref["sts"] == pytest.approx(expected, abs=1e-9)
    assert small.measure(model)["sts_retained"] == pytest.approx(1.0, abs=1e-12)


# ---- MLM on a tiny BERT with a masked-LM head -------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_mlm_dir(tmp_path_factory) -> Path:
    return tiny_bert_dir(tmp_path_factory.mktemp("tiny_mlm"), head="mlm", seed=99)


@pytest.mark.slow
def test_mlm_probe_on_a_tiny_bert_with_a_head(tiny_mlm_dir, tiny_model_dir):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, BertForMaskedLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_mlm_dir)
    head, note = load_mlm_head(str(tiny_mlm_dir))
    assert head is not None and note is None
    mlm = BertForMaskedLM.from_pretrained(tiny_mlm_dir).eval()
    inputs = load_inputs(["mlm"], None, None, 16, None)
    prober = Prober(["mlm", "cka"], inputs, tokenizer, mlm, torch.device("cpu"), mlm_head=head, batch_size=64)
    # theta*'s loss equals the MLM model's own loss on the same fixed masks (one batch holds all 16 texts).
    (ids, mask, targets), = prober.masked
    assert (targets != -100).sum() >= 16
    with torch.no_grad():
        own = mlm(input_ids=ids, attention_mask=mask, labels=targets).loss
    assert prober.ref["mlm"] == pytest.approx(float(own), rel=1e-5)

    # A fine-tune-shaped classifier from the same checkpoint, its encoder nudged: the loss moves.
    clf = AutoModelForSequenceClassification.from_pretrained(tiny_mlm_dir, num_labels=2).eval()
    same = prober.measure(clf)
    assert same["mlm_ratio"] == pytest.approx(1.0, abs=1e-6) and same["cka"] == pytest.approx(1.0, abs=1e-9)
    with torch.no_grad():
        for p in clf.base_model.encoder.parameters():
            p.add_(0.05 * torch.randn_like(p))
    moved = prober.measure(clf)
    assert moved["cka"] < 1.0 and moved["mlm_loss"] != prober.ref["mlm"]
    # Independently: the MLM model itself with theta's blocks (embeddings, tied to the decoder, untouched).
    import copy

    mixed = copy.deepcopy(mlm)
    mixed.bert.encoder.load_state_dict(clf.base_model.encoder.state_dict())
    with torch.no_grad():
        theirs = mixed(input_ids=ids, attention_mask=mask, labels=targets).loss
    assert moved["mlm_loss"] == pytest.approx(float(theirs), rel=1e-5)
    assert moved["mlm_ratio"] == pytest.approx(float(theirs) / float(own), rel=1e-5)
    assert len(moved["cka_layers"]) == 3  # embeddings + 2 blocks

    # No head in the checkpoint: skipped with one note, not a crash.
    none, why = load_mlm_head(str(tiny_model_dir))
    assert none is None and "no pretrained masked-LM head" in why
    skipped = Prober(["mlm", "drift"], load_inputs(["mlm", "drift"], None, None, 8, None), tokenizer, clf,
                     torch.device("cpu"), mlm_head=None, mlm_note=why)
    assert skipped.probes == ["drift"] and skipped.notes == [why]
    assert "mlm_ratio" not in skipped.measure(clf)


# ---- a real short run, its reports, old runs ---------------------------------------------------------


@pytest.fixture(scope="module")
def probed_run(tiny_model_dir, tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("probed")
    recipe = write_recipe(tmp / "recipe.yaml", tiny_recipe(tiny_model_dir, tmp / "runs" / "on", probe=FAST_PROBES))
    result = runner.invoke(app, ["finetune", str(recipe), "--plain"])
    assert result.exit_code == 0, result.output
    return tmp / "runs" / "on"


@pytest.mark.slow
def test_run_records_probes_at_step_zero_and_each_evaluation(probed_run, tiny_model_dir, tmp_path):
    records = read_metrics(probed_run)
    probes = [r for r in records if r["split"] == "probe"]
    evals = [r["step"] for r in records if r["split"] == "eval"]
    assert [r["step"] for r in probes] == [0] + evals == [0, 6, 12]
    first, last = probes[0], probes[-1]
    assert first["cka"] == pytest.approx(1.0, abs=1e-9) and first["drift"] == pytest.approx(0.0, abs=1e-9)
    assert first["sts_retained"] == pytest.approx(1.0, abs=1e-12)
    assert last["cka"] < 1.0 and last["drift"] > 0 and len(last["cka_layers"]) == 3
    assert "mlm_ratio" not in last  # the tiny encoder has no MLM head: skipped
    summary = json.loads((probed_run / "summary.json").read_text())
    assert summary["probe"]["step"] == 12 and summary["probe"]["cka"] == last["cka"]

    # Probes measure, they do not train: the same run without them takes the same steps.
    off = write_recipe(tmp_path / "off.yaml", tiny_recipe(tiny_model_dir, tmp_path / "off", probe={"enabled": False}))
    assert runner.invoke(app, ["finetune", str(off), "--plain"]).exit_code == 0
    off_records = read_metrics(tmp_path / "off")
    assert not [r for r in off_records if r["split"] == "probe"]
    dist = lambda rs: [r["distance"] for r in rs if r["split"] == "train"]  # noqa: E731
    assert dist(off_records) == dist(records)


@pytest.mark.slow
def test_forgetting_compare_and_tradeoff_read_probes(probed_run, tmp_path):
    root = probed_run.parent
    out = tmp_path / "f.png"
    result = runner.invoke(app, ["forgetting", "--run-dir", str(root), "--out", str(out)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert out.is_file() and (tmp_path / "f_probes.png").stat().st_size > 10_000
    last = [r for r in read_metrics(probed_run) if r["split"] == "probe"][-1]
    assert "kept" in result.output and "CKA-d" in result.output
    assert f"{last['cka']:.3f}" in result.output and f"{last['sts_retained']:.3f}" in result.output

    js = runner.invoke(app, ["forgetting", "--run-dir", str(root), "--out", str(out), "--json"])
    row = json.loads(js.stdout)[0]
    assert row["probe"]["cka"] == last["cka"] and row["probe"]["first_step"] == 0

    cmp = runner.invoke(app, ["compare", str(root), "--metric", "cka", "--format", "json"])
    assert cmp.exit_code == 0, cmp.output
    assert json.loads(cmp.stdout)[0]["median"] == pytest.approx(last["cka"])

    fig = tmp_path / "t.png"
    tr = runner.invoke(app, ["tradeoff", str(root), "--out", str(fig), "--json"])
    assert tr.exit_code == 0, tr.output
    setting = json.loads(tr.stdout)[0]
    assert setting["median"][1] == pytest.approx(last["sts_retained"]) and fig.is_file()


@pytest.mark.slow
def test_old_run_without_probe_section_still_reads(probed_run, tmp_path):
    import shutil

    from recall_cli.sweep import Cell, _check_existing

    old = tmp_path / "old"
    shutil.copytree(probed_run, old, ignore=shutil.ignore_patterns("*.safetensors"))
    config = yaml.safe_load((old / "config.yaml").read_text())
    wanted = json.loads(json.dumps(config))
    del config["probe"]
    (old / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    lines = [r for r in read_metrics(old) if r["split"] != "probe"]
    (old / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    summary = json.loads((old / "summary.json").read_text())
    del summary["probe"]
    (old / "summary.json").write_text(json.dumps(summary))

    for args in (["forgetting", "--run-dir", str(old), "--out", str(tmp_path / "o.png")], ["compare", str(old)]):
        result = runner.invoke(app, args, terminal_width=200)
        assert result.exit_code == 0, result.output
    assert (tmp_path / "o.png").is_file() and not (tmp_path / "o_probes.png").exists()
    # A sweep re-run wants today's recipe, probe section included: the old cell is the same cell.
    wanted["output_dir"] = str(old)
    cell = Cell("old", {}, old)
    assert _check_existing(cell, wanted) is None and cell.state == "finished"
    wanted["probe"]["num_texts"] = 99  # a key both know, changed: still a difference
    config["probe"] = {"num_texts": 24}
    (old / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    assert "other settings" in _check_existing(Cell("old", {}, old), wanted)


# ---- recall probe after the fact, and bad input -----------------------------------------------------


@pytest.mark.slow
def test_recall_probe_cli(tiny_model_dir, tmp_path):
    """`recall probe RUN REFERENCE`: a run directory (a hand-made one: the tiny encoder plus noise in best/,
    since probing after the fact reads weights, not training) measured against its pretrained model."""
    run = make_run(tmp_path, "run", tiny_model_dir, seed=5)
    args = ["--probes", "cka,drift,sts", "--num-texts", "24", "--num-pairs", "24", "--max-length", "32", "--json"]
    result = runner.invoke(app, ["probe", str(run), str(tiny_model_dir), *args])
    assert result.exit_code == 0, result.output
    run_row, ref_row = json.loads(result.stdout)
    assert run_row["theta"].endswith("best") and run_row["reference"] == str(tiny_model_dir)
    assert run_row["cka"] < 1.0 and run_row["drift"] > 0
    assert ref_row["cka"] == pytest.approx(1.0, abs=1e-9) and ref_row["sts_retained"] == pytest.approx(1.0)
    table = runner.invoke(app, ["probe", str(tiny_model_dir), *args[:-1]], terminal_width=200)
    assert table.exit_code == 0 and "kept" in table.output and "1.000" in table.output


@pytest.mark.parametrize("case", ["missing target", "pairs without score", "unknown probe", "empty texts"])
def test_bad_probe_input_is_one_line_exit_2(case, tiny_model_dir, tmp_path):
    bad_pairs = tmp_path / "pairs.tsv"
    bad_pairs.write_text("sentence1\tsentence2\nA cat.\tA dog.\n")
    empty = tmp_path / "texts.txt"
    empty.write_text("\n\n")
    args = {"missing target": ["probe", str(tmp_path / "nope")],
            "pairs without score": ["probe", str(tiny_model_dir), "--pairs", str(bad_pairs)],
            "unknown probe": ["probe", str(tiny_model_dir), "--probes", "cka,svcca"],
            "empty texts": ["probe", str(tiny_model_dir), "--texts", str(empty)]}[case]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output
    assert {"pairs without score": "missing column score", "unknown probe": "unknown probe 'svcca'",
            "empty texts": "0 sentences", "missing target": "nope"}[case] in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs.tsv", "texts.txt"]


def test_finetune_with_a_malformed_pair_file_creates_nothing(tiny_model_dir, tmp_path):
    bad = tmp_path / "pairs.csv"
    bad.write_text("a,b,score\nx,y,1\n")
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "out", probe={"pairs_file": str(bad)}))
    result = runner.invoke(app, ["finetune", str(recipe), "--plain"])
    assert result.exit_code == 2 and "missing columns sentence1, sentence2" in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_one_probe_setting_for_a_run_the_command_and_the_library(tiny_model_dir, monkeypatch):
    """Issue 53: a run's probe section, `recall probe` without flags and the library's probe() read the same
    sentences, pairs and tokens (names.py's PROBE_* constants), so their numbers for one model agree; 0 asks
    the command for all of them."""
    import inspect

    from recall_cli import names
    from recall_cli.api import probe
    from recall_cli.probes import targets
    from recall_cli.recipe.schema import ProbeConfig

    section = ProbeConfig()
    assert (section.num_texts, section.num_pairs, section.max_length, section.batch_size) == \
        (names.PROBE_NUM_TEXTS, names.PROBE_NUM_PAIRS, names.PROBE_MAX_LENGTH, names.PROBE_BATCH_SIZE) == (128, None, 64, 64)
    library = {k: v.default for k, v in inspect.signature(probe).parameters.items()}
    assert (library["num_texts"], library["num_pairs"], library["max_length"], library["batch_size"]) == \
        (section.num_texts, section.num_pairs, section.max_length, section.batch_size)

    seen = []

    class Stop(Exception):
        pass

    def capture(theta_star, probes, inputs, tokenizer, device, *, max_length, batch_size, **_):
        seen.append((len(inputs.texts), None if inputs.pairs is None else len(inputs.pairs), max_length, batch_size))
        raise Stop

    monkeypatch.setattr(targets, "theta_star_prober", capture)
    for flags in ([], ["--num-texts", "0"]):
        result = CliRunner().invoke(app, ["probe", str(tiny_model_dir), "--device", "cpu", "--json", *flags])
        assert "Stop" in result.output, result.output  # stopped where θ*'s side would be computed
    all_texts = len(load_inputs(["cka"], None, None, None, None).texts)
    assert all_texts > 128
    assert seen == [(128, 1500, 64, 64), (all_texts, 1500, 64, 64)]
