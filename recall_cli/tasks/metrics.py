"""The scores the task types report, computed with scikit-learn and SciPy (not by hand).

Which of them a task reports, and which is its "main" one (the number the paper reports: Matthews
correlation for CoLA, Pearson for STS-B, accuracy elsewhere), is written in names.TASKS (main_metric,
extra_metrics) and decided by its type's ``metrics`` (tasks/classification.py, tasks/regression.py).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef


def classification_scores(predicted: np.ndarray, labels: np.ndarray, *, f1: bool, mcc: bool) -> dict[str, float]:
    """Accuracy of predicted class ids; with ``f1``, F1 of class 1; with ``mcc``, Matthews correlation."""
    _check_lengths(predicted, labels)
    metrics = {"accuracy": float(accuracy_score(labels, predicted))}
    if f1:
        # F1 of class 1 (GLUE's "paraphrase"/"duplicate"); 0.0 rather than a warning when it is never predicted.
        metrics["f1"] = float(f1_score(labels, predicted, pos_label=1, average="binary", zero_division=0))
    if mcc:
        with warnings.catch_warnings():
            # Constant predictions make MCC's denominator 0; sklearn returns 0.0, which is what we want.
            warnings.simplefilter("ignore", RuntimeWarning)
            metrics["mcc"] = float(matthews_corrcoef(labels, predicted))
    return metrics


def regression_scores(predicted: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Pearson and Spearman correlation of predicted scores with the gold ones."""
    _check_lengths(predicted, labels)
    return {
        "pearson": _correlation(stats.pearsonr, predicted, labels),
        "spearman": _correlation(stats.spearmanr, predicted, labels),
    }


def softmax(logits: np.ndarray) -> np.ndarray:
    """Each row's class probabilities, in float64."""
    shifted = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


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
