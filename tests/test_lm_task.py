"""The causal-LM task type (tasks/causal_lm.py, tasks/generation.py) on a tiny random Llama: the loss mask,
truncation, the completion loss and exact match against a hand-written greedy loop, the files a user gives,
and the run end to end through the CLI (finetune, evaluate, predict, best/ reloaded with from_pretrained)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

from recall_cli.cli import app
from recall_cli.errors import DataError
from recall_cli.recipe import TaskConfig
from recall_cli.tasks import Examples, load_split, task_for

from conftest import GLUE
from lm_tiny import lm_recipe, sst2_words, tiny_llama, tiny_llama_dir, word_tokenizer

runner = CliRunner()


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer(sst2_words())


def sst2_lm(**task):
    return TaskConfig(name="sst2_lm", data_dir=str(GLUE / "SST-2"), **task)


def test_sst2_as_instructions_reads_the_glue_rows_as_prompts_and_label_words():
    examples = load_split(sst2_lm(), "train", 3)
    assert examples.texts[0] == ("hide new secretions from the parental units ",)
    assert examples.labels == [" negative", " negative", " positive"]
    assert task_for(sst2_lm()).prompt_text("a fine film") == "Review: a fine film\nSentiment:"


def test_the_loss_mask_covers_the_prompt_and_the_padding(tokenizer):
    kind = task_for(sst2_lm())
    examples = Examples([("great",), ("the cat sat on a mat",)], [" positive", " negative"], "test")
    features = kind.tokenize(examples, tokenizer, 64)
    ids = tokenizer("Review: great\nSentiment:")["input_ids"]
    completion = [*tokenizer(" positive", add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
    assert features.input_ids[0] == ids + completion and features.labels[0] == len(ids)
    batch = kind.collate(features, [0, 1], tokenizer.pad_token_id)
    labels, width = batch["labels"], batch["input_ids"].shape[1]
    assert labels[0, : len(ids)].eq(-100).all() and labels[0, len(ids) : len(ids) + 2].tolist() == completion
    assert labels[0, len(ids) + 2 :].eq(-100).all() and batch["attention_mask"][0].sum() == len(ids) + 2 < width
    n = features.labels[1]
    assert labels[1, :n].eq(-100).all() and labels[1, n:].tolist() == features.input_ids[1][n:]


def test_a_long_row_loses_the_start_of_its_prompt_not_its_completion(tokenizer):
    kind = task_for(sst2_lm())
    features = kind.tokenize(Examples([("the cat sat " * 20,)], [" positive"], "test"), tokenizer, 12)
    row, n = features.input_ids[0], features.labels[0]
    assert len(row) == 12 and n == 10 and row[n:] == [*tokenizer(" positive", add_special_tokens=False)["input_ids"],
                                                      tokenizer.eos_token_id]
    assert tokenizer.decode(row[:n]).endswith("Sentiment:")


def _greedy_by_hand(model, prompt: list[int], steps: int) -> list[int]:
    ids = list(prompt)
    for _ in range(steps):
        logits = model(torch.tensor([ids])).logits[0, -1]
        ids.append(int(logits.argmax()))
    return ids[len(prompt):]


def test_completion_loss_and_exact_match_are_what_a_hand_loop_computes(tokenizer):
    from recall_cli.tasks.generation import completion_outputs

    torch.manual_seed(0)
    model = tiny_llama(len(tokenizer)).eval()
    kind = task_for(sst2_lm())
    examples = load_split(sst2_lm(), "dev", 6)
    features = kind.tokenize(examples, tokenizer, 64)
    # Make two rows' references what the model generates, so that exact match is neither 0 nor 1.
    with torch.no_grad():
        for i in (1, 4):
            n = features.labels[i]
            features.input_ids[i] = features.input_ids[i][:n] + _greedy_by_hand(model, features.input_ids[i][:n], 2)
    rows = completion_outputs(model, features, 4, torch.device("cpu"), tokenizer.pad_token_id)
    with torch.no_grad():
        for i, row in enumerate(features.input_ids):
            n = features.labels[i]
            logits = model(torch.tensor([row])).logits[0, :-1]
            nll = torch.nn.functional.cross_entropy(logits[n - 1 :], torch.tensor(row[n:]), reduction="sum")
            assert rows[i, 0] == pytest.approx(float(nll), rel=1e-4) and rows[i, 1] == len(row) - n
            assert rows[i, 2] == float(_greedy_by_hand(model, row[:n], len(row) - n) == row[n:])
    assert rows[[1, 4], 2].tolist() == [1.0, 1.0] and rows[:, 2].sum() == 2
    metrics = kind.metrics(rows, np.asarray(features.labels))
    loss = rows[:, 0].sum() / rows[:, 1].sum()
    assert metrics == pytest.approx({"exact_match": 2 / 6, "loss": loss, "perplexity": np.exp(loss), "main": 2 / 6})


def _custom(tmp_path: Path, train: str, name: str = "train.jsonl", **task) -> TaskConfig:
    (tmp_path / name).write_text(train, encoding="utf-8")
    return TaskConfig(name="custom_lm", train_file=str(tmp_path / name), dev_file=str(tmp_path / name), **task)


def test_custom_files_give_prompt_and_completion_or_chat_messages(tmp_path, tokenizer):
    rows = [{"prompt": "The cat", "completion": " sat"},
            {"messages": [{"role": "user", "content": "The"}, {"role": "assistant", "content": "cat"}]}]
    cfg = _custom(tmp_path, "".join(json.dumps(r) + "\n" for r in rows))
    examples = load_split(cfg, "train")
    assert examples.texts[0] == ("The cat",) and examples.labels == [" sat", "cat"]
    assert examples.texts[1][0].messages == ({"role": "user", "content": "The"},)
    csv = _custom(tmp_path, 'q,a\n"The cat", sat\n', "train.csv", text_fields=["q"], label_field="a")
    assert load_split(csv, "train").texts == [("The cat",)] and load_split(csv, "train").labels == [" sat"]


@pytest.mark.parametrize("text, error", [
    ('{"prompt": "The cat"}\n', "line 1: no field 'completion' (fields: 'prompt')"),
    ('{"prompt": "The cat", "completion": " "}\n', "line 1: the completion is empty"),
    ('{"messages": [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]}\n',
     "line 1: the last message is the user's"),
])
def test_a_bad_custom_row_is_one_line_naming_it(tmp_path, text, error):
    with pytest.raises(DataError) as raised:
        load_split(_custom(tmp_path, text), "train")
    assert error in str(raised.value) and "\n" not in str(raised.value)


# ---- the run, through the CLI ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("lm")
    model = tiny_llama_dir(tmp / "model")
    recipe = tmp / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(lm_recipe(model, tmp / "out", train={"log_every": 2})), encoding="utf-8")
    result = runner.invoke(app, ["finetune", str(recipe), "--plain"])
    assert result.exit_code == 0, result.output
    return tmp / "out"


@pytest.mark.slow
def test_a_few_steps_lower_the_completion_loss(lm_run):
    from recall_cli.rundir import read_metrics

    records = read_metrics(lm_run)
    train = [r["loss"] for r in records if r["split"] == "train"]
    evals = [r for r in records if r["split"] == "eval"]
    assert train[-1] < train[0] - 0.5
    assert set(evals[0]) == {"step", "split", "exact_match", "loss", "perplexity", "main"}
    assert evals[-1]["loss"] < evals[0]["loss"] and evals[-1]["perplexity"] == pytest.approx(np.exp(evals[-1]["loss"]))
    card = (lm_run / "best" / "README.md").read_text(encoding="utf-8")
    assert "pipeline_tag: text-generation" in card and "AutoModelForCausalLM" in card


@pytest.mark.slow
def test_best_reloads_with_from_pretrained_and_evaluate_agrees(lm_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recall_cli.model import load_checkpoint_model

    best = lm_run / "best"
    model = AutoModelForCausalLM.from_pretrained(best).eval()
    ours = load_checkpoint_model(best, task_for(sst2_lm())).eval()
    ids = AutoTokenizer.from_pretrained(best)("Review: the cat sat\nSentiment:", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ours(ids).logits)
    result = runner.invoke(app, ["evaluate", str(lm_run), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads((lm_run / "summary.json").read_text())
    assert json.loads(result.output)["metrics"]["loss"] == pytest.approx(summary["best"]["loss"], rel=1e-5)


@pytest.mark.slow
def test_predict_writes_the_greedy_completions(lm_run, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = tmp_path / "rows.tsv"
    source.write_text("sentence\nthe cat sat\na fine film\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["predict", str(lm_run), "--split", str(source), "--out", str(out), "--max-new-tokens", "3"])
    assert result.exit_code == 0, result.output
    written = [json.loads(line) for line in out.read_text().splitlines()]
    model = AutoModelForCausalLM.from_pretrained(lm_run / "best").eval()
    tokenizer = AutoTokenizer.from_pretrained(lm_run / "best")
    for row, sentence in zip(written, ("the cat sat", "a fine film")):
        prompt = tokenizer(f"Review: {sentence}\nSentiment:")["input_ids"]
        with torch.no_grad():
            new = _greedy_by_hand(model, prompt, 3)
        if tokenizer.eos_token_id in new:
            new = new[: new.index(tokenizer.eos_token_id)]
        assert row["prediction"] == tokenizer.decode(new, skip_special_tokens=True) and row["prediction"]


def test_a_chat_row_is_rendered_with_the_chat_template_and_refused_without_one(tmp_path):
    rows = [{"messages": [{"role": "user", "content": "The cat"}, {"role": "assistant", "content": " sat"}]}]
    cfg = _custom(tmp_path, "".join(json.dumps(r) + "\n" for r in rows))
    kind, examples = task_for(cfg), load_split(cfg, "train")
    plain = word_tokenizer(sst2_words())
    with pytest.raises(DataError, match="no chat template"):
        kind.tokenize(examples, plain, 64)
    plain.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }} {% endfor %}assistant:"
    features = kind.tokenize(examples, plain, 64)
    prompt = plain.apply_chat_template(list(examples.texts[0][0].messages), add_generation_prompt=True, tokenize=True)
    prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    assert features.labels[0] == len(prompt) and features.input_ids[0][: len(prompt)] == prompt
    assert features.input_ids[0][len(prompt):] == [*plain(" sat", add_special_tokens=False)["input_ids"], plain.eos_token_id]


@pytest.mark.slow
def test_a_custom_lm_task_trains_scores_and_predicts_from_its_files(tmp_path):
    rows = [{"prompt": f"the cat sat on {w}", "completion": f" {w}"} for w in ("a", "the", "mat", "dog") * 6]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "dev.csv").write_text("prompt,completion\nthe cat sat on a, a\nthe cat sat on the, the\n", encoding="utf-8")
    model = tiny_llama_dir(tmp_path / "model")
    task = {"name": "custom_lm", "data_dir": None, "train_file": str(tmp_path / "train.jsonl"),
            "dev_file": str(tmp_path / "dev.csv"), "max_seq_length": 32}
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(lm_recipe(model, tmp_path / "out", task=task)), encoding="utf-8")
    result = runner.invoke(app, ["finetune", str(tmp_path / "r.yaml"), "--plain"])
    assert result.exit_code == 0, result.output
    final = json.loads((tmp_path / "out" / "summary.json").read_text())["final"]
    assert final["main"] == final["exact_match"] and final["loss"] > 0
    out = tmp_path / "p.jsonl"
    result = runner.invoke(app, ["predict", str(tmp_path / "out"), "--split", str(tmp_path / "dev.csv"), "--out", str(out),
                                 "--max-new-tokens", "2"])
    assert result.exit_code == 0, result.output
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["label"] for r in written] == [" a", " the"] and all(len(r["prediction"].split()) <= 2 for r in written)
    long = runner.invoke(app, ["predict", str(tmp_path / "out"), "--split", str(tmp_path / "dev.csv"), "--out",
                               str(tmp_path / "long.jsonl"), "--max-new-tokens", "500"])  # past the 128 positions
    assert long.exit_code == 0, long.output
    assert all(len(json.loads(line)["prediction"].split()) <= 128 - 6 for line in (tmp_path / "long.jsonl").open())
    refused = runner.invoke(app, ["predict", str(tmp_path / "out"), "--split", "test", "--out", str(tmp_path / "t.tsv")])
    assert refused.exit_code == 2 and "a custom_lm task has no test split" in refused.output


class _TwoRanks:
    """Two ranks as threads: all_gather_object meets at a barrier, as gloo's would across processes."""

    def __init__(self, rank: int, shared: dict, barrier):
        self.rank, self.world_size, self.shared, self.barrier = rank, 2, shared, barrier

    def all_gather_object(self, obj):
        self.shared[self.rank] = obj
        self.barrier.wait(timeout=60)
        return [self.shared[r] for r in range(self.world_size)]


def _on_two_ranks(score_one):
    import threading

    shared, barrier, results = {}, threading.Barrier(2), {}

    def run(rank):
        try:
            results[rank] = score_one(_TwoRanks(rank, shared, barrier))
        except Exception as error:  # noqa: BLE001 - what each rank raised is the test's to read
            results[rank] = error

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def test_under_torchrun_each_rank_scores_its_share_of_the_lm_dev_rows_and_all_get_every_row(tokenizer, monkeypatch):
    """Issue 53: every process scored every LM dev row. sharded_outputs gives each rank the batches a single
    process forms, batch b to rank b % 2: each row is scored once, and every rank gets the single process's
    outputs back, row for row (the same batches: the same numbers)."""
    from recall_cli.scoring.evaluate import sharded_outputs

    torch.manual_seed(0)
    model = tiny_llama(len(tokenizer)).eval()
    kind = task_for(sst2_lm())
    features = kind.tokenize(load_split(sst2_lm(), "dev", 11), tokenizer, 64)  # 11 rows in batches of 4: 3 batches
    single = sharded_outputs(kind, model, features, 4, torch.device("cpu"), tokenizer.pad_token_id)

    scored: dict[int, list[int]] = {}
    real = type(kind).outputs

    def counted(self, model, share, *args, **kwargs):
        import threading

        scored.setdefault(threading.current_thread().name, []).append(len(share))
        return real(self, model, share, *args, **kwargs)

    monkeypatch.setattr(type(kind), "outputs", counted)
    results = _on_two_ranks(lambda dist: sharded_outputs(kind, model, features, 4, torch.device("cpu"),
                                                         tokenizer.pad_token_id, dist=dist))
    assert sorted(n for shares in scored.values() for n in shares) == [4, 7]  # batch 1; batches 0 and 2 (4 + 3 rows)
    for rank in (0, 1):
        assert isinstance(results[rank], np.ndarray), results[rank]
        np.testing.assert_allclose(results[rank], single, rtol=1e-6, atol=1e-6)


def test_a_nan_refusal_on_one_rank_is_every_rank_s_with_the_whole_split_s_counts():
    """A rank that finds NaN/inf outputs in its share raises, and so does every other (alone, they would wait
    for it in the gather forever); the counts and the first row are the whole split's."""
    from recall_cli.errors import NonFiniteWeights
    from recall_cli.scoring.evaluate import sharded_outputs
    from recall_cli.tasks import Features

    class Diverged:  # rank 1's share holds two NaN rows: its 1st and 2nd
        def outputs(self, model, share, *args):
            if share.labels and share.labels[0] >= 4:
                raise NonFiniteWeights.in_outputs(2, len(share), 1)
            return np.zeros((len(share), 3))

    features = Features(input_ids=[[1] * (i + 1) for i in range(8)], token_type_ids=None, labels=list(range(8)))
    results = _on_two_ranks(lambda dist: sharded_outputs(Diverged(), None, features, 4, "cpu", 0, dist=dist))
    for rank in (0, 1):
        assert isinstance(results[rank], NonFiniteWeights), results[rank]
        assert "NaN/inf on 2 of 8 rows (the first: row 5)" in str(results[rank])
