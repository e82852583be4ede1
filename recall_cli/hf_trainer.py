"""RecAdam in the Hugging Face Trainer: a callback that logs λ(t), the penalty weight and ‖θ − θ*‖.

The optimizer goes in as ``Trainer(optimizers=(optimizer, scheduler))``; this callback adds what
RecAdam does to the Trainer's own log, so that every ``report_to`` integration (TensorBoard, W&B,
MLflow, ...) and ``trainer.state.log_history`` receive it. Importing this module imports transformers.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from .api import anchor_distance, unwrap

__all__ = ["LinearProbeCallback", "RecAdamCallback", "add_loss_terms"]

LOGGED = ("lambda", "penalty_weight", "distance")  # the names recall's own train records use


class RecAdamCallback(TrainerCallback):
    """After each of the Trainer's training logs (every ``logging_steps``), logs RecAdam's
    ``lambda`` (λ(t)), ``penalty_weight`` (max(anneal_w − λ, recall_floor)) and ``distance``
    (‖θ − θ*‖ over the anchored parameters) at the same step through ``trainer.log``::

        trainer = Trainer(model=model, args=args, train_dataset=..., optimizers=(optimizer, scheduler))
        trainer.add_callback(RecAdamCallback(trainer))

    A callback cannot add keys to a log that the Trainer has already handed to the integrations
    before it (they come first in its list), so it logs its own record through the Trainer instead.
    """

    def __init__(self, trainer: Any):
        self.trainer = trainer

    def values(self, optimizer: Any) -> dict[str, float]:
        recadam = unwrap(optimizer)
        return {"lambda": recadam.current_lambda, "penalty_weight": recadam.current_penalty_weight,
                "distance": anchor_distance(recadam)}

    def on_log(self, args, state, control, logs=None, **kwargs):
        # Only a training log (it has the loss); never our own record, nor eval or the final summary.
        if not logs or "loss" not in logs or any(key in logs for key in LOGGED):
            return
        optimizer = kwargs.get("optimizer") or getattr(self.trainer, "optimizer", None)
        if optimizer is None:
            return
        logged = {k: v for k, v in self.values(optimizer).items() if v is not None}
        if logged:
            self.trainer.log(logged)


class LinearProbeCallback(TrainerCallback):
    """LP-FT in the Trainer: the head alone for the first ``steps`` optimizer steps, then everything.

    The encoder is frozen when training begins, after the Trainer has built its optimizer over every
    parameter: a frozen parameter gets no gradient and the optimizer skips it, so it stays bit for bit
    where it was; at step ``steps`` it trains again::

        trainer.add_callback(recall_cli.LinearProbeCallback(steps=100))
    """

    def __init__(self, steps: int):
        if not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps: a whole number >= 1, got {steps!r}")
        self.steps = steps

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        from .methods.lpft.freeze import freeze_encoder

        if state.global_step < self.steps:
            freeze_encoder(model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        from .methods.lpft.freeze import unfreeze_encoder

        if state.global_step == self.steps:
            unfreeze_encoder(model)


def add_loss_terms(trainer: Any, *terms: Any) -> None:
    """The Trainer's loss becomes the task loss plus each term (recall_cli.loss_step, as `recall finetune`
    makes it), e.g. ``add_loss_terms(trainer, recall_cli.embedding_anchor(model, pretrained))``; at each
    training log the parts (``loss_task``, ``loss_<term>``, averaged since the last log) and each term's
    weight (``<term>_weight``) are logged at the same step, for every ``report_to`` integration."""
    from .training.loss import loss_step

    sums: dict[str, float] = {}
    counts = {"n": 0}

    def compute_loss(model, inputs, return_outputs=False, num_items_in_batch=None):  # noqa: ARG001
        step = trainer.state.global_step + 1
        loss, parts, outputs = loss_step(model, inputs, terms, step, return_outputs=True)
        if model.training:
            for name, value in parts.items():
                sums[name] = sums.get(name, 0.0) + float(value)
            counts["n"] += 1
        return (loss, outputs) if return_outputs else loss

    class _Parts(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "loss" not in logs or "loss_task" in logs or not counts["n"]:
                return
            logged = {name: total / counts["n"] for name, total in sums.items()}
            logged.update({f"{term.name}_weight": term.weight(state.global_step) for term in terms})
            sums.clear()
            counts["n"] = 0
            trainer.log(logged)

    trainer.compute_loss = compute_loss
    trainer.add_callback(_Parts())
