"""The task seam: what every stage asks of a kind of task, and the containers its rows travel in.

A task type (sequence classification, regression, a causal LM; a token classifier later) is one class
that implements :class:`TaskType` and ``register_task_type`` (plugins/tasks.py); a task (a names.Task: its files,
columns, labels and metrics) names its type. The stages ask the type, never the task's label count:

    reading       read, parse_label                     (training set-up, evaluate, predict)
    batching      tokenize, collate                     (the set-up, the loop's step)
    the model     auto_class, head_config, num_labels,  (model.build_model, load_checkpoint_model,
                  peft_task_type                         preflight's head and memory, LoRA)
    scoring       outputs, metrics, strata, predictions (evaluate, the holdout, `recall predict`)
    the card      pipeline_tag, pipeline_title          (card.py's model-index)

Torch-free: the card and the reports read a type's names; what needs torch imports it when called.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..names import Task

if TYPE_CHECKING:  # annotations only: numpy and torch load when a method needs them
    import numpy as np
    import torch

# What `recall predict` tells the user about a label it cannot read: its labels are optional.
PREDICT_FIX = "fix the row, or leave the label empty"


@dataclass
class Examples:
    """One split: texts (1 or 2 strings per example) and labels (class ids or regression targets)."""

    texts: list[tuple[str, ...]]
    labels: list[int] | list[float]
    source: str  # file path or hub id, for messages

    def __len__(self) -> int:
        return len(self.texts)


class ChatPrompt(str):
    """A chat row's prompt: its messages before the last assistant turn (read as plain text where a string
    is wanted, e.g. the probes' overlap check), rendered with the tokenizer's chat template when tokenized."""

    messages: tuple[dict[str, str], ...]

    def __new__(cls, messages: Sequence[dict[str, str]]) -> ChatPrompt:
        prompt = super().__new__(cls, "\n".join(m["content"] for m in messages))
        prompt.messages = tuple(messages)
        return prompt


@dataclass
class Features:
    """A tokenized split, unpadded: padding happens per batch (the task type's collate)."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None  # None for models without segment ids (e.g. RoBERTa)
    labels: list[int] | list[float]

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass(frozen=True)
class Prediction:
    """One row of `recall predict`'s file."""

    value: Any  # JSONL's "prediction": a class's name, a score
    text: str  # the TSV's prediction column
    probabilities: list[float] | None = None  # JSONL's "probabilities", one per class (None: no classes)


class TaskType(ABC):
    """A kind of task, bound to one task (``spec``). Subclasses set the class attributes and implement
    the methods; an instance is cheap (the parsing tables are built once in ``__init__``)."""

    name: ClassVar[str]  # its key in the task types' registry (plugins/tasks.py), and names.Task.task_type
    auto_class: ClassVar[str]  # the transformers Auto class that builds and loads its model
    peft_task_type: ClassVar[str]  # peft's TaskType member for LoRA (which head modules train in full)
    pipeline_tag: ClassVar[str]  # the Hub's task of a model card's model-index ("text-classification")
    pipeline_title: ClassVar[str]  # the same as a reader names it ("Text Classification")
    stratum: ClassVar[str] = "label"  # what the holdout's error calls one stratum
    # A plugin type's task.name for a user's own files (as custom and custom_lm are recall's): described by
    # task.text_fields, label_field, num_labels and label_names as custom is, or by a classmethod
    # files_spec(task_cfg) -> names.Task of the type's own. None: its tasks are names.Task entries.
    files_task: ClassVar[str | None] = None

    def __init__(self, spec: Task) -> None:
        self.spec = spec

    # ---- reading -----------------------------------------------------------------------------------

    @abstractmethod
    def read(self, task_cfg: Any, split: str) -> Examples:
        """Every row of ``split`` ("train" or one of spec.dev_splits), labels parsed (parse_label)."""

    @abstractmethod
    def parse_label(self, value: str, where: str, fix: str = "", *, predicting: bool = False) -> Any:
        """A label as a file writes it -> what the model learns (a class id, a score); a DataError
        naming ``where`` and ending in ``fix`` otherwise. ``predicting``: a row of `recall predict`,
        whose label is optional (empty: None) and may be a class's name as config.json gives it."""

    # ---- tokenizing and batching -------------------------------------------------------------------

    @abstractmethod
    def tokenize(self, examples: Examples, tokenizer: Any, max_seq_length: int) -> Features:
        """Every example tokenized, truncated to ``max_seq_length`` tokens, unpadded."""

    @abstractmethod
    def collate(self, features: Features, indices: Sequence[int], pad_token_id: int,
                pad_to_multiple_of: int | None = None, max_length: int | None = None) -> dict[str, torch.Tensor]:
        """The rows ``indices`` as one padded batch, labels included, as the model's forward takes it."""

    # ---- the model ---------------------------------------------------------------------------------

    @property
    @abstractmethod
    def num_labels(self) -> int:
        """The head's outputs."""

    @abstractmethod
    def head_config(self) -> dict[str, Any]:
        """What the model's config gets for this task's head (from_pretrained's keyword arguments)."""

    # ---- scoring -----------------------------------------------------------------------------------

    def outputs(self, model: Any, features: Features, batch_size: int, device: Any, pad_token_id: int,
                autocast: Any = None, *, tokenizer: Any = None, max_new_tokens: int | None = None) -> Any:
        """The raw outputs of a type whose scores are not one forward's logits (a causal LM's completion
        loss and greedy generation; with ``tokenizer``, the texts `recall predict` writes), or None: the
        logits, which scoring.evaluate.predict computes for every other type."""
        return None

    @abstractmethod
    def metrics(self, predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
        """The task's metrics of the model's raw outputs, plus "main" (spec.main_metric's value)."""

    @abstractmethod
    def strata(self, labels: Sequence[Any]) -> list[Hashable]:
        """Each row's stratum, which the holdout (task.holdout) samples evenly from."""

    @abstractmethod
    def predictions(self, outputs: np.ndarray) -> list[Prediction]:
        """What `recall predict` writes for each row of the model's raw outputs."""

    def submission(self, outputs: np.ndarray) -> list[str]:
        """Each row's prediction as the task's own files write labels: what a GLUE-style TSV submission
        holds (a class's name where the files use names; a score as predictions write it)."""
        return [p.text for p in self.predictions(outputs)]
