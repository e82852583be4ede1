"""The task types' metrics (tasks/classification.py, tasks/regression.py) against values worked out by hand."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from recall_cli.names import TASKS as GLUE_TASKS
from recall_cli.names import custom_task
from recall_cli.tasks import task_type_for

CUSTOM_BINARY = custom_task(("text",), "label", ("neg", "pos"))
CUSTOM_THREE = custom_task(("text",), "label", ("a", "b", "c"))
CUSTOM_REGRESSION = custom_task(("a", "b"), "score", None)


def compute_metrics(spec, predictions, labels) -> dict[str, float]:
    """What evaluate asks of a task: its type's metrics."""
    return task_type_for(spec).metrics(predictions, labels)


def logits_for(classes: list[int], num_labels: int = 2) -> np.ndarray:
    """Logits whose argmax is ``classes`` (with distracting non-zero values elsewhere)."""
    logits = np.random.default_rng(0).uniform(-1, 0, size=(len(classes), num_labels)).astype(np.float32)
    logits[np.arange(len(classes)), classes] = 2.0
    return logits


# TP=3, FN=2, FP=1, TN=4 with class 1 as positive.
LABELS = np.array([1, 1, 1, 1, 1, 0, 0, 0, 0, 0])
PREDICTED = [1, 1, 1, 0, 0, 1, 0, 0, 0, 0]
TP, FN, FP, TN = 3, 2, 1, 4


def test_binary_confusion_matrix():
    mcc = (TP * TN - FP * FN) / math.sqrt((TP + FP) * (TP + FN) * (TN + FP) * (TN + FN))
    f1 = 2 * TP / (2 * TP + FP + FN)
    accuracy = (TP + TN) / 10

    cola = compute_metrics(GLUE_TASKS["cola"], logits_for(PREDICTED), LABELS)
    assert set(cola) == {"accuracy", "mcc", "main"}
    assert cola["mcc"] == pytest.approx(mcc) and cola["main"] == cola["mcc"]
    assert cola["accuracy"] == pytest.approx(accuracy)

    for task in ("mrpc", "qqp"):
        scores = compute_metrics(GLUE_TASKS[task], logits_for(PREDICTED), LABELS)
        assert set(scores) == {"accuracy", "f1", "main"}
        assert scores["f1"] == pytest.approx(f1) and scores["accuracy"] == pytest.approx(accuracy)
        assert scores["main"] == scores["accuracy"]

    for task in ("sst2", "qnli", "rte", "wnli"):
        scores = compute_metrics(GLUE_TASKS[task], logits_for(PREDICTED), LABELS)
        assert scores == {"accuracy": pytest.approx(accuracy), "main": pytest.approx(accuracy)}

    custom = compute_metrics(CUSTOM_BINARY, logits_for(PREDICTED), LABELS)
    assert custom == {"accuracy": pytest.approx(accuracy), "f1": pytest.approx(f1), "main": pytest.approx(accuracy)}
    # The values are plain floats, ready for json.dumps.
    assert all(type(v) is float for scores in (cola, custom) for v in scores.values())


def test_multiclass():
    labels = np.array([0, 1, 2, 2, 1, 0])
    predicted = [0, 2, 2, 2, 1, 1]
    mnli = compute_metrics(GLUE_TASKS["mnli"], logits_for(predicted, 3), labels)
    assert mnli == {"accuracy": pytest.approx(4 / 6), "main": pytest.approx(4 / 6)}
    custom = compute_metrics(CUSTOM_THREE, logits_for(predicted, 3), labels)
    assert set(custom) == {"accuracy", "main"}  # no binary F1 for three classes


def test_perfect_predictions():
    labels = np.array([0, 1, 1, 0, 1])
    logits = logits_for(labels.tolist())
    assert compute_metrics(GLUE_TASKS["cola"], logits, labels) == {"accuracy": 1.0, "mcc": 1.0, "main": 1.0}
    assert compute_metrics(GLUE_TASKS["mrpc"], logits, labels) == {"accuracy": 1.0, "f1": 1.0, "main": 1.0}

    scores = np.array([0.0, 1.5, 2.0, 4.75, 5.0])
    stsb = compute_metrics(GLUE_TASKS["stsb"], scores[:, None] * 2 + 1, scores)  # a linear map: r = 1
    assert stsb["pearson"] == pytest.approx(1.0) and stsb["spearman"] == pytest.approx(1.0)
    assert stsb["main"] == stsb["pearson"]


def test_regression_by_formula():
    predictions = np.array([1.0, 2.0, 3.0, 4.0, 10.0], dtype=np.float32)
    labels = np.array([2.0, 1.0, 4.0, 3.0, 5.0])
    p, y = predictions - predictions.mean(), labels - labels.mean()
    pearson = float((p * y).sum() / math.sqrt((p * p).sum() * (y * y).sum()))
    # Ranks differ by d = (-1, 1, -1, 1, 0): spearman = 1 - 6 * sum(d^2) / (n (n^2 - 1)) = 0.8.
    spearman = 1 - 6 * 4 / (5 * (25 - 1))

    for shape in [(5,), (5, 1)]:
        scores = compute_metrics(GLUE_TASKS["stsb"], predictions.reshape(shape), labels)
        assert set(scores) == {"pearson", "spearman", "main"}
        assert scores["pearson"] == pytest.approx(pearson)
        assert scores["spearman"] == pytest.approx(spearman)
        assert scores["main"] == scores["pearson"]
        assert all(type(v) is float for v in scores.values())

    custom = compute_metrics(CUSTOM_REGRESSION, predictions[:, None], labels)
    assert custom == {
        "pearson": pytest.approx(pearson),
        "spearman": pytest.approx(spearman),
        "main": pytest.approx(pearson),
    }


def test_constant_predictions_do_not_crash_or_warn():
    labels = np.array([0, 1, 1, 0, 1, 0])
    constant = logits_for([1] * 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning leaking out of compute_metrics fails the test
        cola = compute_metrics(GLUE_TASKS["cola"], constant, labels)
        mrpc = compute_metrics(GLUE_TASKS["mrpc"], logits_for([0] * 6), labels)  # class 1 never predicted
        stsb = compute_metrics(GLUE_TASKS["stsb"], np.full((6, 1), 2.5), labels.astype(float))
    assert cola == {"accuracy": 0.5, "mcc": 0.0, "main": 0.0}
    assert mrpc["f1"] == 0.0 and mrpc["accuracy"] == 0.5
    assert math.isnan(stsb["pearson"]) and math.isnan(stsb["spearman"]) and math.isnan(stsb["main"])
    assert type(stsb["pearson"]) is float


def test_class_ids_and_length_mismatch():
    labels = np.array([1, 0, 1])
    # Already-argmaxed predictions (1-D) are accepted as class ids.
    assert compute_metrics(GLUE_TASKS["sst2"], np.array([1, 1, 1]), labels)["accuracy"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="2 predictions for 3 labels"):
        compute_metrics(GLUE_TASKS["sst2"], logits_for([1, 0]), labels)
