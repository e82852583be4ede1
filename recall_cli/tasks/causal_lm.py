"""Causal language modelling: a prompt in, a completion generated (sst2_lm: SST-2 as instructions; custom_lm: a
user's prompt/completion or chat `messages` files). The model is the checkpoint's own LM head, no new head.

- Rows: (prompt,) and the completion as the "label". A task with a prompt template (names.Task.prompt_template)
  fills it with the row's text at tokenizing time and takes a class's name after a space as the completion,
  so `recall predict` on GLUE's test.tsv or a file of sentences sees the same prompts training did.
- Tokens: the prompt's then the completion's, then the end-of-sequence token (the model learns to stop, which
  greedy generation's exact match needs). Features.labels holds each row's prompt length: the batch's labels
  are its input ids with -100 on the prompt and the padding, so the loss is the completion's alone.
- Scores (tasks/generation.py): the completions' mean token NLL ("loss") and its exp ("perplexity"), and the
  share of rows whose greedy completion is the reference's tokens up to its end ("exact_match", the main one).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

from ..errors import DataError
from ..plugins.tasks import register_task_type
from .base import PREDICT_FIX, ChatPrompt, Examples, Features, Prediction, TaskType
from .files import json_scalar, jsonl_objects, non_empty, read_text, table_records
from .glue import load_glue_hub, load_glue_tsv

_EMPTY_FIX = "every row needs a completion to learn (a prompt alone teaches nothing): fill it in or remove the row"


class CausalLM(TaskType):
    name = "causal_lm"
    auto_class = "AutoModelForCausalLM"
    peft_task_type = "CAUSAL_LM"
    pipeline_tag = "text-generation"
    pipeline_title = "Text Generation"
    stratum = "stratum"

    def __init__(self, spec) -> None:
        super().__init__(spec)
        names = spec.class_names or spec.labels or ()
        # A label as the GLUE files write it ("1"), or as its class is called ("positive") -> " positive".
        self._completions = {value: f" {name}" for value, name in zip(spec.labels or (), names)}
        self._completions.update({name: f" {name}" for name in names})

    @property
    def num_labels(self) -> int:
        return 0  # no classifier head: the checkpoint's LM head predicts every token

    def head_config(self) -> dict[str, Any]:
        return {}

    # ---- reading -----------------------------------------------------------------------------------

    def read(self, task_cfg: Any, split: str) -> Examples:
        if self.spec.name == "custom_lm":
            return self._read_files(task_cfg, split)
        if task_cfg.data_dir:
            return load_glue_tsv(self, Path(task_cfg.data_dir), split)
        return load_glue_hub(self, split)

    def parse_label(self, value: str, where: str, fix: str = "", *, predicting: bool = False) -> str | None:
        if self._completions:  # a task made from a labelled one: its label values or class names
            key = value.strip()
            if predicting and not key:
                return None
            if key not in self._completions:
                raise DataError(f"{where}: label '{key}' is not one of {', '.join(self._completions)}: "
                                f"{PREDICT_FIX if predicting else fix}")
            return self._completions[key]
        if not value.strip():
            if predicting:
                return None
            raise DataError(f"{where}: the completion is empty: {_EMPTY_FIX}")
        return value

    def hub_labels(self, values: list[Any], source: str) -> list[str]:
        return [self.parse_label(str(v), source, "") for v in values]

    def _read_files(self, task_cfg: Any, split: str) -> Examples:
        key = "train_file" if split == "train" else "dev_file"
        filename = getattr(task_cfg, key)
        if not filename:
            raise DataError(f"custom_lm task: task.{key} is not set: point it at a .csv, .tsv or .jsonl file")
        path = Path(filename)
        suffix = path.suffix.lower()
        if suffix not in (".csv", ".tsv", ".jsonl"):
            raise DataError(f"{path}: unknown file type '{suffix}': use a .csv, .tsv or .jsonl file")
        text = read_text(path, f"check task.{key}={filename}")
        prompt, completion = self.spec.text_fields[0], self.spec.label_field
        fix = (f"name the columns {prompt} and {completion} (or set task.text_fields=[PROMPT] and "
               "task.label_field=COMPLETION), or give JSONL rows a chat `messages` list")
        texts: list[tuple[str, ...]] = []
        completions: list[str] = []
        for line, row in self._rows(path, text, suffix, fix):
            where = f"{path} line {line}"
            if "messages" in row and prompt not in row:
                first, last = _chat_turns(row["messages"], where)
            else:
                missing = [c for c in (prompt, completion) if c not in row]
                if missing:
                    existing = ", ".join(repr(k) for k in row)
                    raise DataError(f"{where}: no field '{missing[0]}' (fields: {existing}): {fix}")
                first = json_scalar(row[prompt], path, line, prompt, text_only=True)
                last = json_scalar(row[completion], path, line, completion, text_only=True)
            texts.append((first,))
            completions.append(self.parse_label(last, where))
        return non_empty(Examples(texts, completions, str(path)))

    @staticmethod
    def _rows(path: Path, text: str, suffix: str, fix: str):
        """(line, {column: value}) for each row of a .jsonl, .csv or .tsv file."""
        if suffix == ".jsonl":
            yield from jsonl_objects(path, text)
            return
        yield from table_records(path, text, suffix)[1]

    # ---- tokenizing and batching -------------------------------------------------------------------

    def prompt_text(self, text: str) -> str:
        template = self.spec.prompt_template
        return template.format(text) if template and not isinstance(text, ChatPrompt) else text

    def tokenize(self, examples: Examples, tokenizer: Any, max_seq_length: int) -> Features:
        from .generation import tokenize_rows  # transformers' tokenizer calls: imported when a run tokenizes

        prompts = [self.prompt_text(row[0]) for row in examples.texts]
        completions = [c if isinstance(c, str) else "" for c in examples.labels]  # predict's rows have none
        return tokenize_rows(prompts, completions, tokenizer, max_seq_length)

    def collate(self, features: Features, indices: Sequence[int], pad_token_id: int,
                pad_to_multiple_of: int | None = None, max_length: int | None = None) -> dict[str, Any]:
        from .batches import pad_inputs

        batch = pad_inputs(features, indices, pad_token_id, pad_to_multiple_of, max_length)
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        for b, i in enumerate(indices):
            labels[b, : features.labels[i]] = -100  # the prompt: read, not learnt
        batch["labels"] = labels
        return batch

    # ---- scoring -----------------------------------------------------------------------------------

    def outputs(self, model: Any, features: Features, batch_size: int, device: Any, pad_token_id: int,
                autocast: Any = None, *, tokenizer: Any = None, max_new_tokens: int | None = None) -> Any:
        """Scoring (no ``tokenizer``): per row [completion NLL summed, its tokens, 1 if the greedy completion
        is the reference]. Predicting (a ``tokenizer``): each row's greedy completion as text."""
        from .generation import completion_outputs, generate_texts

        if tokenizer is not None:
            return generate_texts(model, features, tokenizer, batch_size, device, pad_token_id, autocast,
                                  max_new_tokens or 64)
        return completion_outputs(model, features, batch_size, device, pad_token_id, autocast)

    def metrics(self, predictions, labels) -> dict[str, float]:
        """``predictions``: :meth:`outputs`' rows [nll, tokens, match]."""
        import math

        import numpy as np

        rows = np.asarray(predictions, dtype=np.float64).reshape(-1, 3)
        tokens = rows[:, 1].sum()
        loss = float(rows[:, 0].sum() / tokens) if tokens else math.nan
        metrics = {"exact_match": float(rows[:, 2].mean()) if len(rows) else math.nan, "loss": loss,
                   "perplexity": math.exp(loss) if loss < 700 else math.inf}
        metrics["main"] = metrics[self.spec.main_metric]
        return metrics

    def strata(self, labels: Sequence[Any]) -> list[Hashable]:
        return [0] * len(labels)  # one stratum: a completion is free text, not a class

    def predictions(self, outputs) -> list[Prediction]:
        return [Prediction(text, text) for text in outputs]

    def submission(self, outputs) -> list[str]:
        # A TSV cell: the completion on one line (json.dumps keeps tabs and line breaks visible).
        return [json.dumps(text, ensure_ascii=False)[1:-1] for text in outputs]


def _chat_turns(messages: Any, where: str) -> tuple[ChatPrompt, str]:
    """(the prompt: every message before the last, the last's content): the last must be the assistant's."""
    if (not isinstance(messages, list) or len(messages) < 2
            or not all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                       for m in messages)):
        raise DataError(f"{where}: `messages` must be a list of at least two {{\"role\", \"content\"}} objects "
                        "(the prompt's turns, then the assistant's answer)")
    if messages[-1]["role"] != "assistant":
        raise DataError(f"{where}: the last message is the {messages[-1]['role']}'s: end each conversation with the "
                        "assistant's answer, the completion to learn")
    return ChatPrompt([{"role": m["role"], "content": m["content"]} for m in messages[:-1]]), messages[-1]["content"]


register_task_type(CausalLM)
