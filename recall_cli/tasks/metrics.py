"""Evaluation metrics for GLUE and custom tasks, computed with scikit-learn and SciPy.

``compute_metrics`` always returns a ``"main"`` entry: the number the paper reports for the task
(Matthews correlation for CoLA, Pearson for STS-B, accuracy elsewhere), which model selection and
summaries use. Which metrics a GLUE task reports is written in names.TASKS (main_metric, extra_metrics).
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

import numpy as np
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

if TYPE_CHECKING:
    from ..names import Task


def compute_metrics(task: Task, predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Score raw model outputs against the gold labels.

    ``predictions`` are logits of shape [n, num_labels] (a 1-D array is taken as predicted class
    ids), or for regression scores of shape [n, 1] or [n].
    """
    predictions = np.asarray(predictions)
    labels = np.asarray(labels)
    if task.is_regression:
        metrics = _regression(predictions.reshape(-1).astype(np.float64), labels.reshape(-1).astype(np.float64))
    else:
        predicted = predictions.argmax(axis=-1) if predictions.ndim > 1 else predictions
        metrics = _classification(task, predicted.astype(np.int64), labels.reshape(-1).astype(np.int64))
    metrics["main"] = metrics[task.main_metric]
    return metrics


def _classification(task: Task, predicted: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    _check_lengths(predicted, labels)
    metrics = {"accuracy": float(accuracy_score(labels, predicted))}
    if "f1" in task.extra_metrics or (task.name == "custom" and task.num_labels == 2):
        # F1 of class 1 (GLUE's "paraphrase"/"duplicate"); 0.0 rather than a warning when it is never predicted.
        metrics["f1"] = float(f1_score(labels, predicted, pos_label=1, average="binary", zero_division=0))
    if "mcc" in task.extra_metrics:
        with warnings.catch_warnings():
            # Constant predictions make MCC's denominator 0; sklearn returns 0.0, which is what we want.
            warnings.simplefilter("ignore", RuntimeWarning)
            metrics["mcc"] = float(matthews_corrcoef(labels, predicted))
    return metrics


def _regression(predicted: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    _check_lengths(predicted, labels)
    return {
        "pearson": _correlation(stats.pearsonr, predicted, labels),
        "spearman": _correlation(stats.spearmanr, predicted, labels),
    }


def _correlation(fn, predicted: np.ndarray, labels: np.ndarray) -> float:
    # A correlation is undefined for fewer than two points or a constant input (e.g. a model that
    # collapsed to one score early in training): report nan instead of failing the run.
    if len(labels) < 2:
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy's ConstantInputWarning / degenerate-input warnings
        value = fn(predicted, labels)[0]
    return float(value)


def _check_lengths(predicted: np.ndarray, labels: np.ndarray) -> None:
    if len(predicted) != len(labels):
        raise ValueError(f"{len(predicted)} predictions for {len(labels)} labels")
