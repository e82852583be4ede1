"""`recall predict` (GLUE-submission TSVs for a test or dev split, JSONL for a user's file) and `recall recipes`
(the shipped recipes, listed and copied, from a clone and from the built wheel).

The trained SST-2 run is the issue's check: the dev TSV's accuracy is `recall evaluate`'s to the digit.
The option and file errors run on a hand-made run directory (no training): one line, exit 2, nothing written.
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

from recall_cli.cli import app

from conftest import GLUE, REPO, make_run, tiny_recipe, write_recipe

runner = CliRunner()
SST2_CLASSES = ("negative", "positive")


def predict(*args: str):
    return runner.invoke(app, ["predict", *map(str, args)])


def read_tsv(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def dev_labels(task_dir: str, limit: int | None = None, column: str = "label") -> list[int]:
    with open(GLUE / task_dir / "dev.tsv", encoding="utf-8-sig") as f:  # MRPC's header starts with a BOM
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [int(r[column]) for r in rows][:limit]


def sst2_sentences(n: int) -> list[str]:
    with open(GLUE / "SST-2" / "dev.tsv", encoding="utf-8") as f:
        return [r["sentence"] for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)][:n]


def assert_one_line_error(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for needle in needles:
        assert needle in lines[0], lines[0]


def nothing_written(folder: Path) -> bool:
    return not [p for p in folder.iterdir() if p.name.startswith(".") or p.suffix in (".tsv", ".jsonl")]


# ---- a trained SST-2 run: the predictions against `recall evaluate` ---------------------------------

EVAL_ROWS = 200


@pytest.fixture(scope="module")
def sst2_run(tiny_model_dir, tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("sst2")
    recipe = tiny_recipe(tiny_model_dir, tmp / "run",
                         task={"name": "sst2", "data_dir": str(GLUE / "SST-2"), "max_eval_examples": EVAL_ROWS},
                         train={"max_steps": 8, "eval_every": 8, "log_every": 4})
    result = runner.invoke(app, ["finetune", str(write_recipe(tmp / "sst2.yaml", recipe)), "--plain"])
    assert result.exit_code == 0, result.output
    return tmp / "run"


@pytest.mark.slow
def test_dev_tsv_has_glue_labels_and_the_accuracy_recall_evaluate_prints(sst2_run, tmp_path):
    out = tmp_path / "dev.tsv"
    result = predict(sst2_run, "--split", "dev", "--out", out, "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert f"{EVAL_ROWS} predictions for sst2 dev" in result.output
    rows = read_tsv(out)
    assert rows[0] == ["index", "prediction"]
    rows = rows[1:]
    assert [r[0] for r in rows] == [str(i) for i in range(EVAL_ROWS)]  # one row per scored dev example
    assert {r[1] for r in rows} <= {"0", "1"}  # SST-2's labels as GLUE writes them (its server reads these)
    predicted = [int(r[1]) for r in rows]
    accuracy = float(np.mean(np.asarray(predicted) == np.asarray(dev_labels("SST-2", EVAL_ROWS))))

    scored = runner.invoke(app, ["evaluate", str(sst2_run), "--json", "--device", "cpu"])
    assert scored.exit_code == 0, scored.output
    evaluated = json.loads(scored.output)
    assert evaluated["examples"] == {"dev": EVAL_ROWS}
    assert accuracy == evaluated["metrics"]["accuracy"]  # exactly: the same rows, batches and precision


@pytest.mark.slow
def test_a_users_jsonl_gets_probabilities_that_agree_with_the_prediction(sst2_run, tmp_path):
    sentences = sst2_sentences(12)
    labels = dev_labels("SST-2", 12)
    source = tmp_path / "mine.jsonl"
    with source.open("w", encoding="utf-8") as f:
        for i, text in enumerate(sentences):
            # labels optional: as the file writes them (1), as the class is called (negative), or none
            record = {"sentence": text, "id": f"r{i}"}
            if i % 3 == 1:
                record["label"] = str(labels[i])
            elif i % 3 == 2:
                record["label"] = SST2_CLASSES[labels[i]]
            f.write(json.dumps(record) + "\n")
    out = tmp_path / "preds.jsonl"
    result = predict(sst2_run, "--split", source, "--out", out)
    assert result.exit_code == 0, result.output
    records = read_jsonl(out)
    assert [r["index"] for r in records] == list(range(12))
    for i, r in enumerate(records):
        assert r["prediction"] in ("0", "1")  # SST-2's labels as its files write them, as the TSV
        probs = r["probabilities"]
        assert len(probs) == 2 and math.isclose(sum(probs), 1.0, abs_tol=1e-9)
        assert str(int(np.argmax(probs))) == r["prediction"]
        # a label given as "1" or as "negative" comes back in the prediction's form
        assert r.get("label") == (None if i % 3 == 0 else str(labels[i]))

    # The same sentences through the dev split, as JSONL: the same model, the same probabilities.
    dev_out = tmp_path / "dev.jsonl"
    assert predict(sst2_run, "--split", "dev", "--out", dev_out).exit_code == 0
    dev_records = read_jsonl(dev_out)[:12]
    assert [r["label"] for r in dev_records] == [str(label) for label in labels]
    for mine, dev in zip(records, dev_records):
        assert mine["probabilities"] == pytest.approx(dev["probabilities"], abs=1e-5)


@pytest.mark.slow
def test_the_glue_test_split_keeps_its_index_column(sst2_run, tmp_path):
    folder = tmp_path / "SST-2"
    folder.mkdir()
    sentences = sst2_sentences(7)
    (folder / "test.tsv").write_text("index\tsentence\n" + "".join(f"{i + 100}\t{s}\n" for i, s in enumerate(sentences)),
                                     encoding="utf-8")
    out = tmp_path / "SST-2.tsv"
    result = predict(sst2_run, "--split", "test", "--data-dir", folder, "--out", out)
    assert result.exit_code == 0, result.output
    rows = read_tsv(out)
    assert rows[0] == ["index", "prediction"]
    assert [r[0] for r in rows[1:]] == [str(i + 100) for i in range(7)]
    assert {r[1] for r in rows[1:]} <= {"0", "1"}


# ---- a hand-made run: formats, the test split, every refusal ----------------------------------------


@pytest.fixture(scope="module")
def mrpc_run(tiny_model_dir, tmp_path_factory) -> Path:
    return make_run(tmp_path_factory.mktemp("mrpc"), "run", tiny_model_dir, seed=3)


def test_the_test_split_of_a_folder_without_test_tsv_is_one_line_and_no_file(mrpc_run, tmp_path):
    out = tmp_path / "MRPC.tsv"
    result = predict(mrpc_run, "--split", "test", "--out", out)
    assert_one_line_error(result, str(GLUE / "MRPC" / "test.tsv"), "no such file", "--data-dir", "--split FILE")
    assert not out.exists() and nothing_written(tmp_path)


@pytest.mark.slow
def test_refusals_are_one_line_exit_2_and_write_nothing(mrpc_run, tmp_path):
    out = tmp_path / "p.tsv"
    no_text = tmp_path / "no_text.csv"
    no_text.write_text("text,label\nhello,1\n", encoding="utf-8")
    cases = [
        (["--split", "train"], ["--split train", "test, dev"]),
        (["--split", "notes.txt"], [".csv, .tsv or .jsonl"]),
        (["--split", "dev_matched"], ["no split 'dev_matched'"]),
        (["--split", "test_mismatched"], ["no split 'test_mismatched'"]),
        (["--split", "dev", "--batch-size", "0"], ["--batch-size 0"]),
        (["--split", str(tmp_path / "missing.jsonl")], ["missing.jsonl", "file not found"]),
        (["--split", str(no_text)], ["no_text.csv line 1", "'#1 String'+'#2 String'", "'sentence1'+'sentence2'",
                                     "columns: 'text', 'label'"]),
        (["--split", "dev", "--device", "tpu"], ["--device tpu"]),
    ]
    for args, needles in cases:
        assert_one_line_error(predict(mrpc_run, *args, "--out", out), *needles)
        assert not out.exists()
    assert_one_line_error(predict(tmp_path / "nowhere", "--split", "dev", "--out", out), "no such run directory")
    assert nothing_written(tmp_path)

    # An existing --out is kept unless --overwrite; a folder is never taken.
    out.write_text("mine\n", encoding="utf-8")
    assert_one_line_error(predict(mrpc_run, "--split", "dev", "--out", out), "already exists", "--overwrite")
    assert out.read_text(encoding="utf-8") == "mine\n"
    assert_one_line_error(predict(mrpc_run, "--split", "dev", "--out", tmp_path, "--overwrite"), "is a folder")
    result = predict(mrpc_run, "--split", "dev", "--out", out, "--overwrite")
    assert result.exit_code == 0, result.output
    assert len(read_tsv(out)) == 1 + 40  # the run's task.max_eval_examples, as recall evaluate scores
    assert not list(tmp_path.glob(".*"))  # no staging file left


def test_a_stop_while_writing_leaves_no_file_and_no_staging_file(mrpc_run, tmp_path, monkeypatch):
    import recall_cli.rundir as rundir

    def stop(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(rundir.writing.os, "replace", stop)  # Ctrl-C between staging the file and renaming it
    result = predict(mrpc_run, "--split", "dev", "--out", tmp_path / "p.tsv")
    assert result.exit_code == 130 and "nothing was written" in result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_users_csv_with_the_hubs_column_names_and_a_tsv_out(mrpc_run, tmp_path):
    """MRPC's GLUE header is '#1 String'; a file exported from the hub says sentence1: both are read."""
    source = tmp_path / "pairs.csv"
    source.write_text('sentence1,sentence2,Quality\n"A man, walking.",A man walks.,1\nCats sleep.,"Dogs bark, loudly.",\n',
                      encoding="utf-8")
    out = tmp_path / "pairs.jsonl"
    assert predict(mrpc_run, "--split", source, "--out", out).exit_code == 0
    records = read_jsonl(out)
    assert [r["index"] for r in records] == [0, 1]
    assert records[0]["label"] == "1" and "label" not in records[1]
    assert all(r["prediction"] in ("0", "1") for r in records)
    tsv = tmp_path / "pairs.tsv"  # the --out suffix picks the format
    assert predict(mrpc_run, "--split", source, "--out", tsv).exit_code == 0
    rows = read_tsv(tsv)
    # Both hold MRPC's own labels (0/1, what GLUE's server reads).
    assert rows[0] == ["index", "prediction"] and [r[1] for r in rows[1:]] == [r["prediction"] for r in records]


@pytest.mark.slow
def test_a_jsonls_prediction_and_label_compare(mrpc_run, tmp_path):
    """One form for both (issue 53): `prediction == label` counts the right rows, and a label named as
    its class ("equivalent") comes back as the file writes it ("1")."""
    out = tmp_path / "dev.jsonl"
    assert predict(mrpc_run, "--split", "dev", "--out", out).exit_code == 0
    records = read_jsonl(out)
    truth = dev_labels("MRPC", len(records), "Quality")
    assert [r["label"] for r in records] == [str(label) for label in truth]
    predicted = [int(np.argmax(r["probabilities"])) for r in records]
    assert sum(r["prediction"] == r["label"] for r in records) == sum(p == t for p, t in zip(predicted, truth))
    source = tmp_path / "named.jsonl"
    source.write_text(json.dumps({"sentence1": "A cat.", "sentence2": "A cat.", "label": "equivalent"}) + "\n",
                      encoding="utf-8")
    assert predict(mrpc_run, "--split", source, "--out", tmp_path / "named_out.jsonl").exit_code == 0
    [named] = read_jsonl(tmp_path / "named_out.jsonl")
    assert named["label"] == "1" and named["prediction"] == str(int(np.argmax(named["probabilities"])))


@pytest.mark.slow
def test_a_regression_task_predicts_floats(tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer, BertForSequenceClassification

    run = tmp_path / "stsb"
    torch.manual_seed(0)
    BertForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=1).save_pretrained(run / "best")
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(run / "best")
    recipe = tiny_recipe(tiny_model_dir, run, task={"name": "stsb", "data_dir": str(GLUE / "STS-B"), "max_eval_examples": 9})
    (run / "config.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
    (run / "metrics.jsonl").write_text("", encoding="utf-8")
    out = tmp_path / "STS-B.tsv"
    assert predict(run, "--split", "dev", "--out", out).exit_code == 0
    rows = read_tsv(out)[1:]
    assert len(rows) == 9 and all(math.isfinite(float(r[1])) for r in rows)
    jsonl = tmp_path / "STS-B.jsonl"
    assert predict(run, "--split", "dev", "--out", jsonl).exit_code == 0
    records = read_jsonl(jsonl)
    assert all(set(r) == {"index", "prediction", "label"} and isinstance(r["prediction"], float) for r in records)
    assert [f"{r['prediction']:.6g}" for r in records] == [r[1] for r in rows]


def test_the_hubs_test_split_when_the_task_has_no_data_dir(monkeypatch):
    from recall_cli.scoring import predict as predicting
    from recall_cli.recipe import TaskConfig

    class Split(dict):
        @property
        def column_names(self):
            return list(self)

    seen = {}

    def load_dataset(path, name, split):
        seen.update(path=path, name=name, split=split)
        texts = {"sentence": ["good", "bad"]} if name == "sst2" else {"premise": ["a", "b"], "hypothesis": ["c", "d"]}
        return Split(**texts, label=[-1, -1], idx=[5, 6])

    monkeypatch.setitem(sys.modules, "datasets", SimpleNamespace(load_dataset=load_dataset))
    rows = predicting.load_rows(TaskConfig(name="sst2"), "test")
    assert seen == {"path": "nyu-mll/glue", "name": "sst2", "split": "test"}
    assert rows.texts == [("good",), ("bad",)] and rows.index == ["5", "6"] and rows.labels is None
    rows = predicting.load_rows(TaskConfig(name="mnli"), "test")
    assert seen["split"] == "test_matched" and rows.texts == [("a", "c"), ("b", "d")]  # as dev means dev_matched


def test_the_runs_precision_summary_then_trainer_state_then_fp32(tmp_path):
    from recall_cli.scoring.predict import run_precision

    cpu = torch.device("cpu")
    auto = SimpleNamespace(train=SimpleNamespace(precision="auto"))
    run, folder = tmp_path / "run", tmp_path / "run" / "best"
    folder.mkdir(parents=True)
    assert run_precision(auto, run, folder, cpu) == "fp32"  # nothing recorded
    (folder / "trainer_state.json").write_text(json.dumps({"precision": "bf16"}), encoding="utf-8")
    assert run_precision(auto, run, folder, cpu) == "bf16"
    (run / "summary.json").write_text(json.dumps({"precision": "fp16"}), encoding="utf-8")
    assert run_precision(auto, run, folder, cpu) == "fp32"  # fp16 is CUDA's: scored in fp32 on a CPU
    assert run_precision(SimpleNamespace(train=SimpleNamespace(precision="bf16")), run, folder, cpu) == "bf16"
    assert run_precision(None, None, folder, cpu) == "bf16"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_gives_the_cpus_predictions(mrpc_run, tmp_path):
    outs = {}
    for device in ("cpu", "cuda"):
        outs[device] = tmp_path / f"{device}.jsonl"
        result = predict(mrpc_run, "--split", "dev", "--out", outs[device], "--device", device, "--batch-size", "7")
        assert result.exit_code == 0, result.output
        assert f", {device}, fp32)" in result.output
    for a, b in zip(read_jsonl(outs["cpu"]), read_jsonl(outs["cuda"])):
        assert a["probabilities"] == pytest.approx(b["probabilities"], abs=1e-4)


# ---- recall recipes ---------------------------------------------------------------------------------


def test_recipes_lists_the_shipped_ones_and_copies_one(tmp_path):
    listed = runner.invoke(app, ["recipes"])
    assert listed.exit_code == 0, listed.output
    first_line = (REPO / "recipes" / "quickstart.yaml").read_text(encoding="utf-8").splitlines()[0].lstrip("# ")
    assert any(line.startswith("quickstart.yaml") and line.endswith(first_line) for line in listed.output.splitlines())
    assert "study/sst2.yaml" in listed.output
    names = {r["name"] for r in json.loads(runner.invoke(app, ["recipes", "--json"]).output)}
    assert names == {p.relative_to(REPO / "recipes").as_posix() for p in (REPO / "recipes").rglob("*.yaml")}

    shipped = (REPO / "recipes" / "quickstart.yaml").read_bytes()
    dest = tmp_path / "my.yaml"
    copied = runner.invoke(app, ["recipes", "quickstart", "--copy", str(dest)])
    assert copied.exit_code == 0, copied.output
    assert dest.read_bytes() == shipped
    dest.write_text("edited\n", encoding="utf-8")
    assert_one_line_error(runner.invoke(app, ["recipes", "quickstart.yaml", "--copy", str(dest)]), "already exists")
    assert dest.read_text(encoding="utf-8") == "edited\n"
    assert runner.invoke(app, ["recipes", "quickstart", "--copy", str(dest), "--overwrite"]).exit_code == 0
    assert dest.read_bytes() == shipped
    assert runner.invoke(app, ["recipes", "study/sst2", "--copy", str(tmp_path)]).exit_code == 0  # into a folder
    assert (tmp_path / "sst2.yaml").read_bytes() == (REPO / "recipes" / "study" / "sst2.yaml").read_bytes()
    assert runner.invoke(app, ["recipes", "quickstart"]).output.encode() == shipped  # printed, as cat would
    assert_one_line_error(runner.invoke(app, ["recipes", "quickstrt"]), "did you mean quickstart.yaml")


@pytest.mark.slow
def test_the_wheel_carries_the_recipes_and_recall_recipes_reads_them_there(tmp_path):
    pytest.importorskip("build", reason="the dev extra installs build")
    dist = tmp_path / "dist"
    built = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(dist), str(REPO)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    [wheel] = dist.glob("*.whl")
    unpacked = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(unpacked)
    assert (unpacked / "recall_cli" / "recipes" / "quickstart.yaml").read_bytes() == \
        (REPO / "recipes" / "quickstart.yaml").read_bytes()
    # recall_cli imported from the unpacked wheel, run from a folder with no recipes/ anywhere above it
    env = {**os.environ, "PYTHONPATH": str(unpacked)}
    command = [sys.executable, "-c", "import recall_cli, recall_cli.cli as c; "
               f"assert recall_cli.__file__.startswith({str(unpacked)!r}), recall_cli.__file__; c.app()"]
    listed = subprocess.run([*command, "recipes"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "quickstart.yaml" in listed.stdout and str(unpacked / "recall_cli" / "recipes") in listed.stdout
    copied = subprocess.run([*command, "recipes", "quickstart", "--copy", "q.yaml"], capture_output=True, text=True,
                            env=env, cwd=tmp_path)
    assert copied.returncode == 0, copied.stderr[-2000:]
    assert (tmp_path / "q.yaml").read_bytes() == (REPO / "recipes" / "quickstart.yaml").read_bytes()


# GLUE's submission format per task, as its server reads it (the labels of GLUE's own files).
GLUE_SUBMISSION_LABELS = {"cola": ("0", "1"), "sst2": ("0", "1"), "mrpc": ("0", "1"), "qqp": ("0", "1"),
                          "wnli": ("0", "1"), "mnli": ("entailment", "neutral", "contradiction"),
                          "qnli": ("entailment", "not_entailment"), "rte": ("entailment", "not_entailment")}


@pytest.mark.parametrize("name", sorted(GLUE_SUBMISSION_LABELS))
def test_the_tsv_holds_each_glue_tasks_own_labels(name):
    """recall predict's TSV and JSONL write the class as GLUE's files do (MRPC's 0/1, not 'equivalent')."""
    from recall_cli.names import TASKS
    from recall_cli.tasks import task_type_for

    task = task_type_for(TASKS[name])
    labels = GLUE_SUBMISSION_LABELS[name]
    outputs = np.eye(len(labels), dtype=np.float32)[[*range(len(labels)), 0]]
    assert task.submission(outputs) == [*labels, labels[0]]
    assert [p.value for p in task.predictions(outputs)] == [*labels, labels[0]]


def test_the_stsb_tsv_holds_the_score():
    from recall_cli.names import TASKS
    from recall_cli.tasks import task_type_for

    task = task_type_for(TASKS["stsb"])
    outputs = np.array([[3.25], [0.5]], dtype=np.float32)
    assert task.submission(outputs) == [p.text for p in task.predictions(outputs)]
    assert [float(v) for v in task.submission(outputs)] == [3.25, 0.5]


def test_a_file_without_the_tasks_text_columns_says_which_to_name(mrpc_run, tmp_path):
    source = tmp_path / "pairs.csv"
    source.write_text("first,second\nA man walks.,A man is walking.\n", encoding="utf-8")
    out = tmp_path / "p.jsonl"
    result = predict(mrpc_run, "--split", source, "--out", out)
    assert_one_line_error(result, "no text columns", "(columns: 'first', 'second')",
                          "rename the file's text columns to '#1 String'+'#2 String' or 'sentence1'+'sentence2'")
    assert not out.exists()
