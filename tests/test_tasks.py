"""The task seam (recall_cli/tasks/): every task names a registered type, the types answer what the stages
ask of them, the one label parser reads training files and `recall predict`'s rows, and a new type is one
class plus one registry entry."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from recall_cli.errors import DataError
from recall_cli.names import TASKS, custom_task
from recall_cli.tasks import TASK_TYPES, Classification, Regression, TaskType, task_type_for

SST2, STSB, MNLI = (task_type_for(TASKS[name]) for name in ("sst2", "stsb", "mnli"))


def test_every_task_names_a_registered_type_and_the_custom_ones_follow_their_labels():
    assert {name: TASK_TYPES[t.task_type].name for name, t in TASKS.items()} == {
        name: "regression" if name == "stsb" else "classification" for name in TASKS}
    assert isinstance(task_type_for(custom_task(("text",), "label", ("a", "b"))), Classification)
    assert isinstance(task_type_for(custom_task(("text",), "score", None)), Regression)


def test_the_registry_loads_no_torch():
    """The card and the reports read a type's names: importing the registry must stay light."""
    code = ("import sys, recall_cli.tasks; heavy = [m for m in ('torch', 'numpy', 'sklearn', 'transformers') "
            "if m in sys.modules]; assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_what_the_model_and_the_card_ask():
    assert (SST2.num_labels, MNLI.num_labels, STSB.num_labels) == (2, 3, 1)
    assert SST2.head_config() == {"num_labels": 2, "problem_type": "single_label_classification",
                                  "id2label": {0: "negative", 1: "positive"}, "label2id": {"negative": 0, "positive": 1}}
    assert STSB.head_config() == {"num_labels": 1, "problem_type": "regression"}
    for kind in (SST2, STSB):
        assert (kind.auto_class, kind.peft_task_type) == ("AutoModelForSequenceClassification", "SEQ_CLS")
        assert (kind.pipeline_tag, kind.pipeline_title) == ("text-classification", "Text Classification")


def test_one_label_parser_for_training_rows_and_rows_to_predict():
    assert SST2.parse_label(" 1 ", "f line 2", "fix it") == 1
    with pytest.raises(DataError, match=r"^f line 2: label 'positive' is not one of 0, 1: fix it$"):
        SST2.parse_label("positive", "f line 2", "fix it")  # a training file writes the TSV's values
    assert SST2.parse_label("positive", "f line 2", predicting=True) == 1  # a row to predict may name the class
    assert SST2.parse_label("", "f line 2", predicting=True) is None
    with pytest.raises(DataError, match=r"not one of 0, 1, negative, positive: fix the row, or leave the label empty$"):
        SST2.parse_label("maybe", "f line 2", predicting=True)

    assert STSB.parse_label("3.5", "f line 3") == 3.5
    with pytest.raises(DataError, match=r"^f line 3: label 'nan' is not a finite number: a regression task \(num_labels=1\)"):
        STSB.parse_label("nan", "f line 3", "ignored: a score has no classes to list")
    assert STSB.parse_label(" ", "f line 3", predicting=True) is None
    with pytest.raises(DataError, match=r"not a finite number: fix the row, or leave the label empty$"):
        STSB.parse_label("high", "f line 3", predicting=True)


def test_strata_and_predictions():
    assert SST2.strata([1, 0, 1]) == [1, 0, 1]
    assert STSB.strata([0.1 * i for i in range(10)][::-1]) == [4, 4, 3, 3, 2, 2, 1, 1, 0, 0]  # quintiles
    logits = np.array([[2.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    first, second = SST2.predictions(logits)
    assert (first.value, first.text, second.value) == ("negative", "negative", "positive")
    assert first.probabilities == pytest.approx([1 / (1 + np.exp(-2)), 1 - 1 / (1 + np.exp(-2))])
    [score] = STSB.predictions(np.array([[3.14159265]], dtype=np.float32))
    assert (score.text, score.probabilities) == ("3.14159", None) and isinstance(score.value, float)


def test_a_new_task_type_is_one_class_and_one_registry_entry():
    """What a later type (a token classifier, a causal LM) costs: the stages find it through the task's name."""
    from recall_cli.plugins.tasks import register_task_type, unregister_task_type

    class Echo(Regression):
        name = "echo"
        pipeline_tag = "feature-extraction"

    register_task_type(Echo)
    try:
        spec = custom_task(("text",), "score", None)
        kind = task_type_for(type(spec)(**{**spec.__dict__, "task_type": "echo"}))
        assert isinstance(kind, Echo) and isinstance(kind, TaskType) and kind.pipeline_tag == "feature-extraction"
    finally:
        unregister_task_type("echo")
