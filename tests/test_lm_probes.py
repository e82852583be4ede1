"""The causal-LM probes (probes/lm.py): perplexity of general prose and the KL divergence from θ*'s
next-token distributions, each with a kept share; in a run and after it with `recall probe`, on a tiny Llama."""

from __future__ import annotations

import json
import math

import pytest
import torch
import yaml
from typer.testing import CliRunner

from recall_cli.cli import app
from recall_cli.probes.lm import lm_record, lm_side
from recall_cli.probes.runner import Prober, ProbeInputs, _Batches
from recall_cli.probes.sets import DEFAULT_LM_TEXTS, load_texts
from recall_cli.rundir import read_metrics

from lm_tiny import lm_recipe, sst2_words, tiny_llama, tiny_llama_dir, word_tokenizer

runner = CliRunner()


def test_the_bundled_prose_is_disjoint_from_the_bundled_task():
    from conftest import GLUE

    prose = set(load_texts(DEFAULT_LM_TEXTS))
    sst2 = (GLUE / "SST-2" / "train.tsv").read_text(encoding="utf-8") + (GLUE / "SST-2" / "dev.tsv").read_text(encoding="utf-8")
    assert len(prose) == 60 and not any(line in sst2 for line in prose)


def test_loss_and_kl_are_what_a_hand_computation_gives():
    tokenizer = word_tokenizer(sst2_words())
    texts = ["the cat sat on a mat", "a fine film , and a long one", "The cat", "it is a dull movie"]
    batches = _Batches(tokenizer, texts, 32, 3)
    star, theta = tiny_llama(len(tokenizer), seed=1).eval(), tiny_llama(len(tokenizer), seed=2).eval()
    record = lm_record(lm_side(theta, batches, torch.device("cpu")), lm_side(star, batches, torch.device("cpu")),
                       ["lm", "kl"])
    nll = {0: [], 1: []}
    kls = []
    with torch.no_grad():
        for text in texts:
            ids = torch.tensor([tokenizer(text)["input_ids"]])
            mid = ids.shape[1] // 2 - 1
            logp = {}
            for side, model in enumerate((theta, star)):
                logits = model(ids).logits[0]
                nll[side].append(torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:], reduction="none"))
                logp[side] = torch.log_softmax(logits[mid].double(), -1)
            kls.append(float((logp[1].exp() * (logp[1] - logp[0])).sum()))
    loss, loss_ref = float(torch.cat(nll[0]).mean()), float(torch.cat(nll[1]).mean())
    assert record["lm_loss"] == pytest.approx(loss, rel=1e-5) and record["lm_loss_ref"] == pytest.approx(loss_ref, rel=1e-5)
    assert record["lm_kept"] == pytest.approx(loss_ref / loss, rel=1e-5) and record["lm_ppl"] == pytest.approx(math.exp(loss), rel=1e-4)
    assert record["kl"] == pytest.approx(sum(kls) / 4, rel=1e-4) and record["kl_kept"] == pytest.approx(math.exp(-sum(kls) / 4), rel=1e-4)


def test_theta_star_against_itself_keeps_everything_and_an_encoder_is_skipped():
    tokenizer = word_tokenizer(sst2_words())
    inputs = ProbeInputs([], None, lm_texts=load_texts(DEFAULT_LM_TEXTS, 8))
    model = tiny_llama(len(tokenizer))
    record = Prober(["lm", "kl"], inputs, tokenizer, model, torch.device("cpu")).measure(model)
    assert record["lm_kept"] == pytest.approx(1.0) and record["kl"] == pytest.approx(0.0, abs=1e-9) and record["kl_kept"] == 1.0
    encoder = Prober(["lm", "kl"], inputs, tokenizer, model.model, torch.device("cpu"))
    assert encoder.probes == [] and encoder.notes == ["lm, kl: skipped, LlamaModel is not a causal LM"]


@pytest.mark.slow
def test_a_run_records_the_lm_probes_and_recall_probe_measures_them_after(tmp_path):
    model = tiny_llama_dir(tmp_path / "model")
    recipe = lm_recipe(model, tmp_path / "out", probe={"enabled": True, "probes": ["lm", "kl"], "num_texts": 16})
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
    result = runner.invoke(app, ["finetune", str(tmp_path / "r.yaml"), "--plain"])
    assert result.exit_code == 0, result.output
    probes = [r for r in read_metrics(tmp_path / "out") if r["split"] == "probe"]
    assert [r["step"] for r in probes] == [0, 6, 12]
    assert probes[0]["lm_kept"] == pytest.approx(1.0) and probes[0]["kl"] == pytest.approx(0.0, abs=1e-9)
    assert probes[-1]["kl"] > 0 and probes[-1]["kl_kept"] < 1 and probes[-1]["lm_loss_ref"] == probes[0]["lm_loss"]
    after = runner.invoke(app, ["probe", str(tmp_path / "out"), "--probes", "lm,kl", "--num-texts", "16",
                                "--max-length", "64", "--json"])
    assert after.exit_code == 0, after.output
    row = json.loads(after.output)[0]
    best = json.loads((tmp_path / "out" / "summary.json").read_text())["best"]["step"]
    at_best = next(r for r in probes if r["step"] == best)
    assert row["lm_loss_ref"] == pytest.approx(probes[0]["lm_loss"], rel=1e-5)
    assert row["lm_kept"] == pytest.approx(at_best["lm_kept"], rel=1e-4) and row["kl"] == pytest.approx(at_best["kl"], rel=1e-3)
