"""What a causal LM's rows need of torch and transformers: tokenizing prompt and completion apart, the
completions' token NLL, and greedy generation (the exact match and `recall predict`'s text)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import DataError, NonFiniteWeights
from .base import ChatPrompt, Features
from .batches import pad_inputs


def tokenize_rows(prompts: Sequence[str], completions: Sequence[str], tokenizer: Any, max_seq_length: int) -> Features:
    """Each row as the prompt's tokens (with the tokenizer's own special tokens; a chat prompt through its chat
    template) then the completion's and the end-of-sequence token; Features.labels holds the prompt's length.
    A row over ``max_seq_length`` loses the start of its prompt (the end, next to the completion, matters
    most), and the end of its completion when that alone is too long."""
    plain = [i for i, p in enumerate(prompts) if not isinstance(p, ChatPrompt)]
    prompt_ids: list[list[int]] = [[] for _ in prompts]
    if plain:
        for i, ids in zip(plain, tokenizer([prompts[i] for i in plain], padding=False, return_attention_mask=False)["input_ids"]):
            prompt_ids[i] = list(ids)
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, ChatPrompt):
            if not getattr(tokenizer, "chat_template", None):
                raise DataError("the rows hold chat `messages`, but the model's tokenizer has no chat template to render "
                                "them with: write the rows as prompt and completion, or use a chat model's tokenizer")
            ids = tokenizer.apply_chat_template(list(prompt.messages), add_generation_prompt=True, tokenize=True)
            prompt_ids[i] = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    eos = [] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
    encoded = tokenizer(list(completions), add_special_tokens=False, padding=False, return_attention_mask=False)["input_ids"]
    input_ids, prompt_lengths = [], []
    for prompt, completion, text in zip(prompt_ids, encoded, completions):
        completion = [*completion, *eos] if text else []
        completion = completion[: max_seq_length - 1]
        prompt = prompt[max(0, len(prompt) - (max_seq_length - len(completion))):]
        input_ids.append(prompt + completion)
        prompt_lengths.append(len(prompt))
    return Features(input_ids=input_ids, token_type_ids=None, labels=prompt_lengths)


def _batches(features: Features, batch_size: int) -> list[list[int]]:
    order = sorted(range(len(features)), key=lambda i: len(features.input_ids[i]))  # little padding
    return [order[s : s + batch_size] for s in range(0, len(order), batch_size)]


def _prompts(features: Features, indices: Sequence[int], pad_token_id: int, device) -> dict[str, torch.Tensor]:
    """The rows' prompts, left-padded: generation appends to the right end of every row."""
    rows = [features.input_ids[i][: features.labels[i]] for i in indices]
    width = max(1, max(len(r) for r in rows))
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, row in enumerate(rows):
        if row:
            ids[b, width - len(row):] = torch.tensor(row, dtype=torch.long)
            mask[b, width - len(row):] = 1
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}


def _greedy(model, prompts: dict[str, torch.Tensor], max_new_tokens: int, pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(the new tokens of greedy decoding, [rows, up to max_new_tokens], a row that ended padded; per row, True
    where a next-token logit was NaN/inf). Never past the model's positions (a long --max-new-tokens stops there
    rather than fail)."""
    from transformers import LogitsProcessor, LogitsProcessorList

    class NonFiniteWatch(LogitsProcessor):
        # NaN logits argmax to token 0 (often the pad token): a diverged model would "complete" every row with
        # nothing. Noted on the device, row by row, and read once after generation.
        bad: torch.Tensor | None = None

        def __call__(self, input_ids, scores):
            found = ~torch.isfinite(scores).all(dim=-1)
            self.bad = found if self.bad is None else self.bad | found
            return scores

    watch = NonFiniteWatch()
    width = prompts["input_ids"].shape[1]
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if isinstance(limit, int) and limit > width:
        max_new_tokens = min(max_new_tokens, limit - width)
    out = model.generate(**prompts, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, temperature=None,
                         top_p=None, top_k=None, pad_token_id=pad_token_id, logits_processor=LogitsProcessorList([watch]))
    bad = watch.bad if watch.bad is not None else torch.zeros(out.shape[0], dtype=torch.bool, device=out.device)
    return out[:, width:], bad.cpu()


def _refuse_non_finite(bad: np.ndarray) -> None:
    """``bad``: per row of the features, True where the model's logits were NaN/inf: refused as the
    classifiers' outputs are (scoring.evaluate.predict), before a number or a completion is written from them."""
    rows = np.flatnonzero(bad)
    if rows.size:
        raise NonFiniteWeights.in_outputs(rows.size, len(bad), int(rows[0]))


@torch.no_grad()
def completion_outputs(model, features: Features, batch_size: int, device, pad_token_id: int,
                       autocast: AbstractContextManager | None = None) -> np.ndarray:
    """Per row, in the order of ``features``: [the completion's token NLL summed, its tokens, 1.0 when greedy
    decoding from the prompt gives the completion's tokens (its end-of-sequence token included), else 0.0]."""
    was_training = model.training
    model.eval()
    result = np.zeros((len(features), 3), dtype=np.float64)
    bad = np.zeros(len(features), dtype=bool)
    try:
        for indices in _batches(features, batch_size):
            batch = {k: v.to(device) for k, v in pad_inputs(features, indices, pad_token_id).items()}
            with autocast or nullcontext():
                logits = model(**batch).logits[:, :-1].float()
            finite = torch.isfinite(logits).all(dim=-1) | (batch["attention_mask"][:, :-1] == 0)  # padding aside
            bad[indices] = (~finite.all(dim=1)).cpu().numpy()
            targets = batch["input_ids"][:, 1:].masked_fill(batch["attention_mask"][:, 1:] == 0, -100)
            for b, i in enumerate(indices):
                targets[b, : max(0, features.labels[i] - 1)] = -100  # predicted from the prompt: the completion's alone
            nll = F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=-100, reduction="none")
            result[indices, 0] = nll.sum(dim=1).double().cpu().numpy()
            result[indices, 1] = (targets != -100).sum(dim=1).cpu().numpy()
            references = [features.input_ids[i][features.labels[i]:] for i in indices]
            longest = max(len(r) for r in references)
            if longest == 0:
                continue
            with autocast or nullcontext():
                new, generated_bad = _greedy(model, _prompts(features, indices, pad_token_id, device), longest,
                                             pad_token_id)
            bad[indices] |= generated_bad.numpy()
            new = new.cpu()
            for b, (i, reference) in enumerate(zip(indices, references)):
                result[i, 2] = float(bool(reference) and new[b, : len(reference)].tolist() == reference)
    finally:
        model.train(was_training)
    _refuse_non_finite(bad)
    return result


@torch.no_grad()
def generate_texts(model, features: Features, tokenizer: Any, batch_size: int, device, pad_token_id: int,
                   autocast: AbstractContextManager | None, max_new_tokens: int) -> list[str]:
    """Each row's greedy completion of its prompt, up to ``max_new_tokens`` tokens or its end-of-sequence
    token, as text (special tokens left out), in the order of ``features``."""
    was_training = model.training
    model.eval()
    texts = [""] * len(features)
    bad = np.zeros(len(features), dtype=bool)
    eos = tokenizer.eos_token_id
    try:
        for indices in _batches(features, batch_size):
            with autocast or nullcontext():
                new, generated_bad = _greedy(model, _prompts(features, indices, pad_token_id, device), max_new_tokens,
                                             pad_token_id)
            bad[indices] = generated_bad.numpy()
            new = new.cpu()
            for b, i in enumerate(indices):
                tokens = new[b].tolist()
                if eos is not None and eos in tokens:
                    tokens = tokens[: tokens.index(eos)]
                texts[i] = tokenizer.decode(tokens, skip_special_tokens=True)
    finally:
        model.train(was_training)
    _refuse_non_finite(bad)
    return texts
