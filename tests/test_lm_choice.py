"""The causal-LM `choice` probe (probes/choice.py): multiple-choice items scored by log-likelihood, θ's
accuracy against θ*'s above chance; its items file (data/probe/lm_choice.jsonl), a user's file and its
refusals; in `recall probe` and in a run, on a tiny Llama."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest
import torch
import yaml
from typer.testing import CliRunner

from recall_cli.cli import app
from recall_cli.errors import ProbeError
from recall_cli.probes.choice import DEFAULT_CHOICES, ChoiceBatches, choice_record, choice_side, load_choices
from recall_cli.probes.runner import Prober, ProbeInputs
from recall_cli.rundir import read_metrics

from conftest import GLUE
from lm_tiny import lm_recipe, sst2_words, tiny_llama, tiny_llama_dir, word_tokenizer

runner = CliRunner()

ITEMS = [
    {"prompt": "The cat sat", "choices": [" a", " the", " it"], "answer": 1},
    {"prompt": "Review: a fine film Sentiment:", "choices": [" positive", " negative"], "answer": 0},
    {"prompt": "Review: a dull movie Sentiment:", "choices": [" positive", " negative"], "answer": 1},
    {"prompt": "it is a", "choices": [" long film", " cat", " dull movie , and"], "answer": 2},
    {"prompt": "The", "choices": [" cat sat", " film"], "answer": 0},
]


def _write(path, items):
    path.write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    return path


def test_each_choice_scores_its_summed_log_probability_after_the_prompt(tmp_path):
    tokenizer = word_tokenizer(sst2_words())
    items = load_choices(_write(tmp_path / "c.jsonl", ITEMS))
    model = tiny_llama(len(tokenizer), seed=4).eval()
    scores = choice_side(model, ChoiceBatches(tokenizer, items, 32, 3), torch.device("cpu"))
    with torch.no_grad():
        for i, item in enumerate(ITEMS):
            for j, choice in enumerate(item["choices"]):
                head = tokenizer(item["prompt"])["input_ids"]
                tail = tokenizer(choice, add_special_tokens=False)["input_ids"]
                ids = torch.tensor([head + tail])
                logp = torch.log_softmax(model(ids).logits[0].double(), -1)
                hand = sum(float(logp[len(head) - 1 + k, t]) for k, t in enumerate(tail))
                assert float(scores[i, j]) == pytest.approx(hand, rel=1e-4, abs=1e-4)
            assert all(math.isinf(float(s)) for s in scores[i, len(item["choices"]):])


def test_accuracy_and_the_kept_share_above_chance(tmp_path):
    items = load_choices(_write(tmp_path / "c.jsonl", ITEMS))
    chance = (1 / 3 + 1 / 2 + 1 / 2 + 1 / 3 + 1 / 2) / 5
    assert items.chance == pytest.approx(chance)
    ninf = -math.inf
    ref = torch.tensor([[0, 1, 0], [1, 0, ninf], [0, 1, ninf], [0, 0, 1], [1, 0, ninf]], dtype=torch.float64)
    mine = torch.tensor([[0, 1, 0], [0, 1, ninf], [0, 1, ninf], [1, 0, 0], [1, 0, ninf]], dtype=torch.float64)
    record = choice_record(mine, ref, items)
    assert record["choice_acc_ref"] == 1.0 and record["choice_acc"] == pytest.approx(0.6)
    assert record["choice_kept"] == pytest.approx((0.6 - chance) / (1 - chance))
    assert record["choice_items"] == 5 and record["choice_chance"] == pytest.approx(chance)
    guessing = choice_record(mine, torch.zeros_like(ref), items)  # θ* ties everywhere: the first choice, 2 of 5
    assert guessing["choice_acc_ref"] == pytest.approx(0.4) and 0.4 < chance and math.isnan(guessing["choice_kept"])


def test_theta_star_keeps_all_of_its_skill_and_an_encoder_is_skipped(tmp_path):
    tokenizer = word_tokenizer(sst2_words())
    inputs = ProbeInputs([], None, choices=load_choices(_write(tmp_path / "c.jsonl", ITEMS * 2)))
    model = tiny_llama(len(tokenizer), seed=7)
    prober = Prober(["choice"], inputs, tokenizer, model, torch.device("cpu"))
    record = prober.measure(model)
    assert record["choice_acc"] == record["choice_acc_ref"] and record["choice_items"] == 10
    assert record["choice_kept"] == pytest.approx(1.0) or math.isnan(record["choice_kept"])
    encoder = Prober(["kl", "choice"], inputs, tokenizer, model.model, torch.device("cpu"))
    assert encoder.probes == [] and encoder.notes == ["kl, choice: skipped, LlamaModel is not a causal LM"]


def test_the_bundled_items_are_what_their_script_writes_and_none_is_from_the_task():
    spec = importlib.util.spec_from_file_location("make_choices", DEFAULT_CHOICES.with_name("make_choices.py"))
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    written = [json.loads(line) for line in DEFAULT_CHOICES.read_text(encoding="utf-8").splitlines()]
    assert written == script.items() and len(written) == 255
    items = load_choices(None)
    assert len(items) == 255 and 0.25 < items.chance < 0.27
    assert sorted({a for a in items.answers}) == [0, 1, 2, 3]  # shuffled: the right choice is not always first
    sst2 = (GLUE / "SST-2" / "train.tsv").read_text(encoding="utf-8")
    assert not any(p in sst2 for p in items.prompts if len(p) > 20)


@pytest.mark.parametrize("line, says", [
    ("not json", "not JSON"),
    ('["a"]', "a JSON list, not an object"),
    ('{"prompt": "", "choices": [" a", " b"], "answer": 0}', '"prompt" must be non-empty text'),
    ('{"prompt": "p", "choices": [" a"], "answer": 0}', '"choices" must be a list of at least 2'),
    ('{"prompt": "p", "choices": [" a", " a"], "answer": 0}', "two choices are the same text"),
    ('{"prompt": "p", "choices": [" a", " b"], "answer": 2}', '"answer" must be the right choice\'s index, 0 to 1, got 2'),
    ('{"prompt": "p", "choices": [" a", " b"], "answer": true}', "got True"),
    ('{"prompt": "p", "choices": [" a", " b"], "answer": NaN}', "got nan"),
])
def test_a_bad_item_is_named_by_its_line(tmp_path, line, says):
    path = _write(tmp_path / "c.jsonl", ITEMS[:2])
    path.write_text(path.read_text() + line + "\n", encoding="utf-8")
    with pytest.raises(ProbeError) as err:
        load_choices(path)
    assert "c.jsonl:3: " in str(err.value) and says in str(err.value)


def test_too_few_items_a_missing_file_and_latin1_are_refused(tmp_path):
    with pytest.raises(ProbeError, match="2 items; the choice probe needs at least 4"):
        load_choices(_write(tmp_path / "c.jsonl", ITEMS[:2]))
    with pytest.raises(ProbeError, match="multiple-choice file not found"):
        load_choices(tmp_path / "none.jsonl")
    (tmp_path / "l.jsonl").write_bytes(b'{"prompt": "caf\xe9"}\n')
    with pytest.raises(ProbeError, match="not UTF-8 text"):
        load_choices(tmp_path / "l.jsonl")


@pytest.mark.slow
def test_recall_probe_measures_choice_and_refuses_a_bad_file_in_one_line(tmp_path):
    theta_star, theta = tiny_llama_dir(tmp_path / "star", seed=1), tiny_llama_dir(tmp_path / "theta", seed=2)
    items = _write(tmp_path / "c.jsonl", ITEMS * 3)
    result = runner.invoke(app, ["probe", str(theta), "--against", str(theta_star), "--probes", "choice,kl",
                                 "--choices", str(items), "--num-texts", "8", "--json"])
    assert result.exit_code == 0, result.output
    row = json.loads(result.output)[0]
    assert row["choices"] == 15 and row["choice_items"] == 15 and 0 <= row["choice_acc"] <= 1 and row["kl"] > 0
    table = runner.invoke(app, ["probe", str(theta), "--against", str(theta_star), "--probes", "choice",
                                "--choices", str(items)])
    assert table.exit_code == 0 and "choice" in table.output
    (tmp_path / "bad.jsonl").write_text('{"prompt": "p"}\n', encoding="utf-8")
    bad = runner.invoke(app, ["probe", str(theta), "--against", str(theta_star), "--probes", "choice",
                              "--choices", str(tmp_path / "bad.jsonl")])
    assert bad.exit_code == 2 and "bad.jsonl:1: \"choices\" must be a list" in bad.output
    assert "Traceback" not in bad.output


def test_a_recipe_naming_a_missing_items_file_is_refused_before_training(tmp_path):
    model = tiny_llama_dir(tmp_path / "model")
    recipe = lm_recipe(model, tmp_path / "out", probe={"enabled": True, "probes": ["choice"],
                                                        "choices_file": str(tmp_path / "none.jsonl")})
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
    result = runner.invoke(app, ["finetune", str(tmp_path / "r.yaml"), "--plain"])
    assert result.exit_code == 2 and "probe.choices_file: file not found" in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_a_run_records_the_choice_probe_at_each_evaluation(tmp_path):
    model = tiny_llama_dir(tmp_path / "model")
    items = _write(tmp_path / "c.jsonl", ITEMS * 4)
    recipe = lm_recipe(model, tmp_path / "out", probe={"enabled": True, "probes": ["choice"],
                                                        "choices_file": str(items)})
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
    result = runner.invoke(app, ["finetune", str(tmp_path / "r.yaml"), "--plain"])
    assert result.exit_code == 0, result.output
    probes = [r for r in read_metrics(tmp_path / "out") if r["split"] == "probe"]
    assert [r["step"] for r in probes] == [0, 6, 12]
    assert probes[0]["choice_acc"] == probes[0]["choice_acc_ref"] == probes[-1]["choice_acc_ref"]
    assert all(r["choice_items"] == 20 for r in probes)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["probe"]["choice_acc"] == probes[-1]["choice_acc"]


@pytest.mark.slow
def test_forgetting_shows_a_causal_lm_s_probes_in_their_own_columns(tmp_path):
    for name, kl, acc in (("a", 0.01, 0.8), ("b", 0.02, 0.7)):
        run = tmp_path / name
        run.mkdir()
        (run / "config.yaml").write_text("model: {name_or_path: x}\ntask: {name: sst2_lm}\noptimizer: {name: adamw}\n"
                                         f"train: {{seed: {1 if name == 'a' else 2}}}\n")
        probe = {"lm_loss": 4.0, "lm_loss_ref": 3.9, "lm_kept": 0.975, "kl": kl, "kl_kept": math.exp(-kl),
                 "choice_acc": acc, "choice_acc_ref": 0.85, "choice_kept": (acc - 0.26) / (0.85 - 0.26)}
        lines = [{"step": 0, "split": "probe", **probe, "kl": 0.0}, {"step": 8, "split": "train", "loss": 1.0},
                 {"step": 8, "split": "eval", "exact_match": 0.8, "main": 0.8}, {"step": 8, "split": "probe", **probe}]
        (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = runner.invoke(app, ["forgetting", str(tmp_path / "a"), str(tmp_path / "b"), "--out",
                                 str(tmp_path / "f.png")], env={"COLUMNS": "150"})
    assert result.exit_code == 0, result.output
    table = result.output[result.output.index("a causal LM's probes"):]
    assert "STS" not in table and "choice" in table
    row_b = next(line for line in table.splitlines() if line.strip("| ").startswith("b "))
    assert "0.0200" in row_b and "0.700" in row_b and f"{(0.7 - 0.26) / 0.59:.3f}" in row_b


def test_preflight_names_the_files_the_probes_read():
    from recall_cli.probes.runner import input_names

    assert input_names(["lm", "kl", "choice"], None, None, None) == "the default LM prose and the default choice items"
    assert input_names(["cka", "drift", "sts", "mlm"], None, None, None) == "the default texts and the default STS pairs"
    assert input_names(["kl", "choice", "sts"], "mine.txt", None, "c.jsonl") == "mine.txt, c.jsonl and the default STS pairs"


@pytest.mark.slow
def test_recall_probe_measures_what_the_run_probed_unless_told(tmp_path):
    model = tiny_llama_dir(tmp_path / "model")
    recipe = lm_recipe(model, tmp_path / "out", train={"max_steps": 4, "eval_every": 4},
                       probe={"enabled": True, "probes": ["kl", "choice"], "num_texts": 8})
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
    assert runner.invoke(app, ["finetune", str(tmp_path / "r.yaml"), "--plain"]).exit_code == 0
    result = runner.invoke(app, ["probe", str(tmp_path / "out"), "--json"])  # the run's probes, 8 texts, 64 tokens
    assert result.exit_code == 0, result.output
    row = json.loads(result.output)[0]
    assert "choice_acc" in row and "kl" in row and "cka" not in row and "lm_loss" not in row and row["texts"] == 8
    assert "as the runs' recipes probe (probe.probes=kl,choice, probe.num_texts=8, probe.max_length=64)" in row["notes"][-1]
    last = [r for r in read_metrics(tmp_path / "out") if r["split"] == "probe"][-1]
    assert row["choice_acc"] == last["choice_acc"] and row["kl"] == pytest.approx(last["kl"], rel=1e-5)
    told = json.loads(runner.invoke(app, ["probe", str(tmp_path / "out"), "--probes", "kl", "--num-texts", "4",
                                          "--json"]).output)[0]
    assert "choice_acc" not in told and told["texts"] == 4 and told["kl"] != row["kl"]  # a flag wins over the run's
    mixed = runner.invoke(app, ["probe", str(model), str(tmp_path / "out"), "--probes", "kl", "--json"])
    assert json.loads(mixed.output)[1]["texts"] == 60  # a model name beside the run: the command's defaults
