"""Sequence classification: a text (or a pair) -> one of the task's classes (GLUE's CoLA, SST-2, MRPC, QQP,
MNLI, QNLI, RTE, WNLI; a custom task with task.label_names or task.num_labels >= 2)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from ..errors import DataError
from ..plugins.tasks import register_task_type
from ..names import Task
from .base import PREDICT_FIX, Prediction
from .sequence import SequenceTask


class Classification(SequenceTask):
    name = "classification"
    label_dtype = "long"

    def __init__(self, spec: Task) -> None:
        super().__init__(spec)
        # Built once: parse_label runs per row. A file writes a label as the TSV does ("1"); a row to
        # predict may also name its class as config.json's id2label does ("positive").
        self._ids = {name: i for i, name in enumerate(spec.label_names or ())}
        self._named = dict(self._ids)
        for i, name in enumerate(spec.class_names or ()):
            self._named.setdefault(name, i)

    @property
    def num_labels(self) -> int:
        return len(self.spec.labels or ())

    def parse_label(self, value: str, where: str, fix: str = "", *, predicting: bool = False) -> int | None:
        value = value.strip()
        if predicting and not value:
            return None
        ids = self._named if predicting else self._ids
        if value not in ids:
            raise DataError(f"{where}: label '{value}' is not one of {', '.join(ids)}: {PREDICT_FIX if predicting else fix}")
        return ids[value]

    def hub_labels(self, values: list[Any], source: str) -> list[int]:
        ids = [int(v) for v in values]
        bad = [v for v in ids if not 0 <= v < self.num_labels]
        if bad:  # the hub marks unlabelled (test) rows with -1; train/validation should have none
            raise DataError(f"{source}: {len(bad)} rows have label {bad[0]}, outside 0..{self.num_labels - 1}")
        return ids

    def head_config(self) -> dict[str, Any]:
        names = self.spec.id2label or ()
        return {"num_labels": self.num_labels, "problem_type": "single_label_classification",
                "id2label": dict(enumerate(names)), "label2id": {name: i for i, name in enumerate(names)}}

    def metrics(self, predictions, labels) -> dict[str, float]:
        """Accuracy, plus F1 of class 1 for the paraphrase tasks (and a custom binary task) and MCC for
        CoLA. ``predictions``: logits [n, num_labels], or a 1-D array of predicted class ids."""
        import numpy as np

        from .metrics import classification_scores

        predictions = np.asarray(predictions)
        predicted = predictions.argmax(axis=-1) if predictions.ndim > 1 else predictions
        spec = self.spec
        metrics = classification_scores(
            predicted.astype(np.int64), np.asarray(labels).reshape(-1).astype(np.int64),
            f1="f1" in spec.extra_metrics or (spec.name == "custom" and self.num_labels == 2),
            mcc="mcc" in spec.extra_metrics)
        metrics["main"] = metrics[spec.main_metric]
        return metrics

    def strata(self, labels: Sequence[Any]) -> list[Hashable]:
        return list(labels)  # each class gives its share

    def submission(self, outputs) -> list[str]:
        """The class as the task's files write its label: GLUE's own values, which its server reads (0/1 for
        CoLA, SST-2, MRPC, QQP and WNLI; entailment/not_entailment for RTE and QNLI; MNLI's three words),
        not the class names of predictions (SST-2's positive)."""
        values = self.spec.labels or tuple(str(i) for i in range(self.num_labels))
        return [values[i] for i in outputs.argmax(axis=1)]

    def predictions(self, outputs) -> list[Prediction]:
        """The class's name (SST-2's "positive", as config.json's id2label), with every class's probability."""
        from .metrics import softmax

        classes = self.spec.id2label or tuple(str(i) for i in range(self.num_labels))
        names = [classes[i] for i in outputs.argmax(axis=1)]
        return [Prediction(name, name, [float(p) for p in row]) for name, row in zip(names, softmax(outputs))]


register_task_type(Classification)
