"""What the sequence task types share: one or two texts in, one label out, from a GLUE folder, the
hub's copy of GLUE or a user's CSV / TSV / JSONL files; a transformers sequence classifier's head."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from .base import Examples, Features, TaskType
from .files import load_custom
from .glue import load_glue_hub, load_glue_tsv


class SequenceTask(TaskType):
    auto_class = "AutoModelForSequenceClassification"
    peft_task_type = "SEQ_CLS"
    pipeline_tag = "text-classification"
    pipeline_title = "Text Classification"
    # The labels tensor's dtype: class ids are "long" (cross-entropy), scores "float32" (MSE).
    label_dtype: ClassVar[str]

    def read(self, task_cfg: Any, split: str) -> Examples:
        if not self.spec.folder:  # a user's own files: custom's, or a plugin type's files task
            return load_custom(task_cfg, self, split)
        if task_cfg.data_dir:
            return load_glue_tsv(self, Path(task_cfg.data_dir), split)
        return load_glue_hub(self, split)

    @abstractmethod
    def hub_labels(self, values: list[Any], source: str) -> list[Any]:
        """The hub's label column (ids, floats for STS-B) as this type's labels."""

    def tokenize(self, examples: Examples, tokenizer: Any, max_seq_length: int) -> Features:
        from .batches import tokenize  # torch: imported when a run tokenizes, not with the registry

        return tokenize(examples, tokenizer, max_seq_length)

    def collate(self, features: Features, indices: Sequence[int], pad_token_id: int,
                pad_to_multiple_of: int | None = None, max_length: int | None = None) -> dict[str, Any]:
        import torch

        from .batches import pad_inputs

        batch = pad_inputs(features, indices, pad_token_id, pad_to_multiple_of, max_length)
        batch["labels"] = torch.tensor([features.labels[i] for i in indices], dtype=getattr(torch, self.label_dtype))
        return batch
