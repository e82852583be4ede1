"""RecAdam in the Hugging Face Trainer: a callback that logs λ(t), the penalty weight and ‖θ − θ*‖.

The optimizer goes in as ``Trainer(optimizers=(optimizer, scheduler))``; this callback adds what
RecAdam does to the Trainer's own log, so that every ``report_to`` integration (TensorBoard, W&B,
MLflow, ...) and ``trainer.state.log_history`` receive it. Importing this module imports transformers.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from .api import anchor_distance, unwrap

__all__ = ["RecAdamCallback"]

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
