"""The step's loss: the task loss plus the term of every method the recipe turns on, in one function
that the loop (eager or compiled, one process or DDP) and the library share.

With no term the step is exactly what it always was: ``forward(**batch).loss``, no hidden states asked
for, so a run without methods computes bit for bit what earlier versions computed.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

from torch import Tensor


class Term(Protocol):
    """A method's loss term (methods/keep/term.py's EmbeddingAnchor is one; a method's MethodRun hands it over)."""

    name: str  # logged as loss_<name>
    needs_hidden_states: bool

    def weight(self, step: int) -> float: ...
    def __call__(self, outputs: Any, batch: dict[str, Tensor], indices: Tensor | None = None) -> Tensor: ...


def loss_step(forward: Callable[..., Any], batch: dict[str, Tensor], terms: Sequence[Term], step: int,
              indices: Tensor | None = None, *, return_outputs: bool = False, check_labels: bool = True):
    """(the loss to back-propagate, its parts detached: loss_task and loss_<term> unweighted), and the
    model's outputs too with ``return_outputs`` (the Hugging Face Trainer's evaluation reads the logits).

    ``forward`` is the model (or its DDP or compiled wrapper); ``batch`` holds the labels, so the model
    computes the task loss; ``indices`` are the batch's example indices in the training split (what a
    cached term looks its reference rows up by). ``check_labels``: a batch whose every label is -100 (a causal
    LM's rows with no completion token) is a ValueError, not the NaN of a mean over nothing; one host read, which
    recall's own loop (whose rows always hold a completion token) skips with check_labels=False."""
    if check_labels:
        _check_some_label(batch)
    if not terms:
        outputs = forward(**batch)
        _check_task_loss(outputs, batch)
        return (outputs.loss, {}, outputs) if return_outputs else (outputs.loss, {})
    hidden = any(term.needs_hidden_states for term in terms)
    outputs = forward(**batch, output_hidden_states=True) if hidden else forward(**batch)
    _check_task_loss(outputs, batch)
    task = outputs.loss
    total, parts = task, {"loss_task": task.detach()}
    for term in terms:
        value = term(outputs, batch, indices)
        total = total + term.weight(step) * value
        parts[f"loss_{term.name}"] = value.detach()
    return (total, parts, outputs) if return_outputs else (total, parts)


def _check_some_label(batch: dict[str, Tensor]) -> None:
    labels = batch.get("labels")
    if labels is None or not hasattr(labels, "dtype") or labels.dtype.is_floating_point or labels.numel() == 0:
        return  # no labels (_check_task_loss says so), or a regression's scores
    # A causal LM's labels (one per token, rows x positions) are shifted by the model before the loss: the first
    # position's label predicts nothing and is dropped, so a batch labelled only there has no token to learn either.
    read = labels[:, 1:] if labels.dim() == 2 else labels
    if not bool((read != -100).any()):
        shifted = " after the shift that drops each row's first position" if labels.dim() == 2 and bool((labels != -100).any()) else ""
        raise ValueError(f"loss_step: every label the loss reads is -100{shifted} (ignored by the loss, {read.numel()} of "
                         "them): the model's mean loss over no token would be NaN; give each batch at least one label to "
                         "learn (a causal LM's completion tokens, after its first position), or leave the batch out")


def _check_task_loss(outputs: Any, batch: dict[str, Tensor]) -> None:
    """A forward without a loss (a batch without ``labels``) has nothing to back-propagate: say so."""
    if getattr(outputs, "loss", None) is None:
        raise ValueError("loss_step: the model returned no loss: the batch needs its 'labels' (it has "
                         f"{', '.join(sorted(batch)) or 'nothing'}), from which the model computes the task loss")
