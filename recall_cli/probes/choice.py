"""The `choice` probe: a causal LM's multiple-choice skill by log-likelihood, against θ*'s.

    choice_acc, choice_acc_ref   share of items where θ (θ*) gives the right choice the highest log-likelihood
    choice_chance                the share a guess gets: the mean of 1 / (choices per item)
    choice_kept                  (acc(θ) − chance) / (acc(θ*) − chance): the share of θ*'s skill above chance
                                 that θ kept (1: all of it; 0: down to guessing; NaN when θ* is at chance)
    choice_items                 how many items the numbers rest on

Each choice is scored as the summed log-probability of its tokens after the prompt (the prompt tokenized
with the tokenizer's special tokens, the choice without, the ids joined: a choice's tokens are the same
whatever the prompt). Summing favours short choices; the bundled items keep the choices of an item
alike in length. The items are data/probe/lm_choice.jsonl (255 written for recall, data/probe/SOURCES.md)
or a user's JSONL file of {"prompt", "choices", "answer"} lines.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..errors import ProbeError
from .sets import read_lines

DEFAULT_CHOICES = Path(__file__).resolve().parents[2] / "data" / "probe" / "lm_choice.jsonl"
FIX = 'one JSON object a line: {"prompt": "...", "choices": [" a", " b"], "answer": 0}'


@dataclass(frozen=True)
class ChoiceSet:
    prompts: list[str]
    choices: list[list[str]]
    answers: list[int]
    source: str

    def __len__(self) -> int:
        return len(self.prompts)

    @property
    def chance(self) -> float:
        return sum(1 / len(c) for c in self.choices) / len(self.choices)


def load_choices(path: str | Path | None) -> ChoiceSet:
    """The items of a JSONL file (the bundled ones by default); each line checked, the first bad one named."""
    path = Path(path) if path else DEFAULT_CHOICES
    lines = read_lines(path, "multiple-choice file", f"probe.choices_file: {FIX}", f"the items as UTF-8, {FIX}")
    prompts, choices, answers = [], [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        prompt, options, answer = _item(line, f"{path}:{number}")
        prompts.append(prompt)
        choices.append(options)
        answers.append(answer)
    if len(prompts) < 4:
        raise ProbeError(f"{path}: {len(prompts)} items; the choice probe needs at least 4 (a few hundred is usual)")
    return ChoiceSet(prompts, choices, answers, str(path))


def _item(line: str, where: str) -> tuple[str, list[str], int]:
    try:
        item = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ProbeError(f"{where}: not JSON ({exc.msg}): {FIX}") from None
    if not isinstance(item, dict):
        raise ProbeError(f"{where}: a JSON {type(item).__name__}, not an object: {FIX}")
    prompt, options, answer = item.get("prompt"), item.get("choices"), item.get("answer")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ProbeError(f"{where}: \"prompt\" must be non-empty text: {FIX}")
    if (not isinstance(options, list) or len(options) < 2
            or not all(isinstance(o, str) and o.strip() for o in options)):
        raise ProbeError(f"{where}: \"choices\" must be a list of at least 2 non-empty texts: {FIX}")
    if len(set(options)) < len(options):
        raise ProbeError(f"{where}: two choices are the same text: give each item distinct choices")
    if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < len(options):
        raise ProbeError(f"{where}: \"answer\" must be the right choice's index, 0 to {len(options) - 1}, "
                         f"got {answer!r}")
    return prompt, options, answer


class ChoiceBatches:
    """Every (item, choice) as one row of prompt ids + choice ids, tokenized once and batched by length.
    A prompt longer than ``max_length`` less its choice loses its start: the choice is always whole."""

    def __init__(self, tokenizer, items: ChoiceSet, max_length: int, batch_size: int):
        self.items = items
        self.width = max(len(c) for c in items.choices)
        rows = []  # (item, choice, ids, where the choice's tokens start)
        for i, (prompt, options) in enumerate(zip(items.prompts, items.choices)):
            context = tokenizer(prompt)["input_ids"]
            for j, option in enumerate(options):
                tail = tokenizer(option, add_special_tokens=False)["input_ids"]
                if not tail:
                    raise ProbeError(f"{items.source}: item {i + 1}'s choice {option!r} has no tokens: give it text")
                keep = max(max_length - len(tail), 1)
                head = context[-keep:]
                rows.append((i, j, head + tail, len(head)))
        rows.sort(key=lambda r: len(r[2]))
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.batches = []
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            width = max(len(r[2]) for r in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            scored = torch.zeros((len(chunk), width), dtype=torch.bool)  # positions whose token is the choice's
            for row, (_, _, seq, begin) in enumerate(chunk):
                ids[row, : len(seq)] = torch.tensor(seq)
                mask[row, : len(seq)] = 1
                scored[row, begin : len(seq)] = True
            where = torch.tensor([[r[0], r[1]] for r in chunk])
            self.batches.append((where, ids, mask, scored))


@torch.no_grad()
def choice_side(model: torch.nn.Module, batches: ChoiceBatches, device: torch.device) -> torch.Tensor:
    """[items, most choices] summed log-probabilities of each choice (−inf where an item has fewer), CPU float64."""
    scores = torch.full((len(batches.items), batches.width), -math.inf, dtype=torch.float64)
    for where, ids, mask, scored in batches.batches:
        ids, mask = ids.to(device), mask.to(device)
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
        picked = torch.gather(F.log_softmax(logits, dim=-1), 2, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        total = (picked.double().cpu() * scored[:, 1:]).sum(dim=1)  # the token at t+1 is read from the logits at t
        scores[where[:, 0], where[:, 1]] = total
    return scores


def choice_record(mine: torch.Tensor, ref: torch.Tensor, items: ChoiceSet) -> dict[str, float]:
    answers = torch.tensor(items.answers)
    acc = float((mine.argmax(dim=1) == answers).double().mean())
    acc_ref = float((ref.argmax(dim=1) == answers).double().mean())
    chance = items.chance
    kept = (acc - chance) / (acc_ref - chance) if acc_ref > chance else math.nan
    return {"choice_acc": acc, "choice_acc_ref": acc_ref, "choice_chance": chance, "choice_kept": kept,
            "choice_items": len(items)}

