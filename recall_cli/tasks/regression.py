"""Regression: a text (or a pair) -> one score (GLUE's STS-B; a custom task with task.num_labels=1)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

from ..errors import DataError
from ..plugins.tasks import register_task_type
from .base import PREDICT_FIX, Prediction
from .sequence import SequenceTask

# What a training file's row that holds no number needs.
_NUMBER_FIX = "a regression task (num_labels=1) needs a number in the label column"


class Regression(SequenceTask):
    name = "regression"
    label_dtype = "float32"
    stratum = "stratum"

    @property
    def num_labels(self) -> int:
        return 1

    def parse_label(self, value: str, where: str, fix: str = "", *, predicting: bool = False) -> float | None:
        value = value.strip()
        if predicting and not value:
            return None
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise DataError(f"{where}: label '{value}' is not a finite number: {PREDICT_FIX if predicting else _NUMBER_FIX}")
        return number

    def hub_labels(self, values: list[Any], source: str) -> list[float]:
        return [float(v) for v in values]

    def head_config(self) -> dict[str, Any]:
        return {"num_labels": 1, "problem_type": "regression"}

    def metrics(self, predictions, labels) -> dict[str, float]:
        """Pearson and Spearman of the scores ([n, 1] or [n]) with the gold ones."""
        import numpy as np

        from .metrics import regression_scores

        metrics = regression_scores(np.asarray(predictions).reshape(-1).astype(np.float64),
                                    np.asarray(labels).reshape(-1).astype(np.float64))
        metrics["main"] = metrics[self.spec.main_metric]
        return metrics

    def strata(self, labels: Sequence[Any]) -> list[Hashable]:
        """The label's quintile: the holdout takes its share of low, middle and high scores alike."""
        ranks = sorted(range(len(labels)), key=lambda i: labels[i])
        quintiles = [0] * len(labels)
        for rank, i in enumerate(ranks):
            quintiles[i] = min(4, 5 * rank // max(1, len(labels)))
        return quintiles

    def predictions(self, outputs) -> list[Prediction]:
        """The score, written with 6 significant digits in a TSV."""
        return [Prediction(score, f"{score:.6g}") for score in (float(v) for v in outputs[:, 0])]


register_task_type(Regression)
