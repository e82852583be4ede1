"""A row of the matrix: after stage i, every task j scored with stage i's encoder under task j's own head
(task-incremental: a classifier sequence keeps a head per task, trained in that task's stage), or, for
causal-LM stages, which share the LM head, stage i's model itself on every task, seen or not (the
cells above the diagonal and row 0 exist there, and with them FWT).

And the kept skill of the *original* pretrained model after each stage (the probes, theta* = stage 1's
starting model), which the stages' own probes do not give: each stage's theta* is the stage before it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from .plan import Plan, Stage


def has_head(stage: Stage) -> bool:
    """A task with a head of its own (a classifier or regressor): a causal LM has none (head_config is empty)."""
    from ..tasks import task_type_for, task_spec

    return bool(task_type_for(task_spec(stage.recipe.task)).head_config())


class Scorer:
    """Scores checkpoints on each stage's task, its tokenized evaluation rows read once."""

    def __init__(self, plan: Plan, device: torch.device):
        self.plan, self.device = plan, device
        self.rows: dict[int, Any] = {}

    def _rows(self, stage: Stage, tokenizer: Any) -> tuple[Any, Any, dict[str, Any]]:
        """(the task type, its spec, the rows the matrix reads: holdout where the recipe chooses on it, else dev)."""
        if stage.index not in self.rows:
            from ..scoring.evaluate import held_out_rows
            from ..tasks import load_split, task_spec, task_type_for

            cfg = stage.recipe.task
            spec = task_spec(cfg)
            kind = task_type_for(spec)
            if cfg.holdout > 0:
                rows = {"holdout": held_out_rows(cfg, kind, tokenizer)}
            else:
                rows = {split: kind.tokenize(load_split(cfg, split, cfg.max_eval_examples), tokenizer, cfg.max_seq_length)
                        for split in spec.dev_splits}
            self.rows[stage.index] = (kind, spec, rows)
        return self.rows[stage.index]

    def score(self, model: torch.nn.Module, stage: Stage, tokenizer: Any) -> float:
        from ..runtime import autocast_for, resolve_precision
        from ..scoring.evaluate import score

        kind, spec, rows = self._rows(stage, tokenizer)
        tc = stage.recipe.train
        precision = "fp32" if tc.precision == "fp16" and self.device.type != "cuda" else tc.precision
        precision = resolve_precision(precision, self.device)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        model.to(self.device).eval()
        with torch.no_grad():
            metrics = score(model, spec, rows, tc.eval_batch_size or 2 * tc.batch_size, self.device, pad_id,
                            autocast_for(precision, self.device))
        return float(metrics["main"])

    def row(self, i: int, chosen: list[Path]) -> list[float | None]:
        """Row i (>= 1): ``chosen`` holds stages 1..i's chosen checkpoint folders."""
        from ..model import head_parameter_names, load_checkpoint_model, load_tokenizer
        from ..tasks import task_spec, task_type_for

        stages = self.plan.stages
        tokenizer = load_tokenizer(str(chosen[i - 1]))
        own_kind = task_type_for(task_spec(stages[i - 1].recipe.task))
        current = load_checkpoint_model(chosen[i - 1], own_kind)
        encoder = {k: v for k, v in current.state_dict().items()}
        out: list[float | None] = []
        for stage in stages:
            j = stage.index
            if j == i or (not has_head(stage) and not has_head(stages[i - 1])):
                out.append(self.score(current, stage, tokenizer))
            elif j < i:
                kind = task_type_for(task_spec(stage.recipe.task))
                model = load_checkpoint_model(chosen[j - 1], kind)  # task j's head as its stage left it
                head = head_parameter_names(model)
                missing, _ = model.load_state_dict({k: v for k, v in encoder.items() if k not in head}, strict=False)
                if set(missing) - head:
                    raise RuntimeError(f"stage {i}'s encoder lacks {sorted(set(missing) - head)[:3]} of stage {j}'s model")
                out.append(self.score(model, stage, tokenizer))
            else:
                out.append(None)  # task j's head does not exist before its stage
        return out

    def row_zero(self) -> list[float | None] | None:
        """The starting model on every task: only where no stage has a head of its own (a causal LM's)."""
        if any(has_head(s) for s in self.plan.stages):
            return None
        from ..model import build_model, load_tokenizer, model_location
        from ..tasks import task_spec, task_type_for

        first = self.plan.stages[0].recipe
        kind = task_type_for(task_spec(first.task))
        model = build_model(first.model, kind, first.train.seed).model
        tokenizer = load_tokenizer(model_location(first.model.name_or_path, first.model.gguf_file),
                                   first.model.trust_remote_code)
        return [self.score(model, stage, tokenizer) for stage in self.plan.stages]


class KeptSkill:
    """The probes' measures of a checkpoint against the original pretrained model (stage 1's theta*)."""

    def __init__(self, plan: Plan, device: torch.device):
        from ..model import build_model, load_tokenizer, model_location
        from ..probes.runner import prober_for_run
        from ..tasks import task_spec, task_type_for

        first = plan.stages[0].recipe
        kind = task_type_for(task_spec(first.task))
        built = build_model(first.model, kind, first.train.seed)
        tokenizer = load_tokenizer(model_location(first.model.name_or_path, first.model.gguf_file),
                                   first.model.trust_remote_code)
        built.model.to(device)
        self.prober = prober_for_run(first, built.model, built.theta_star, tokenizer, device, training_texts=[])
        self.device = device

    def measure(self, folder: Path, stage: Stage) -> dict[str, Any]:
        from ..model import load_checkpoint_model
        from ..tasks import task_spec, task_type_for

        model = load_checkpoint_model(folder, task_type_for(task_spec(stage.recipe.task))).to(self.device)
        record = self.prober.measure(model)
        return {k: v for k, v in record.items() if not isinstance(v, list)}


def timed(fn, *args) -> tuple[Any, float]:
    started = time.perf_counter()
    value = fn(*args)
    return value, time.perf_counter() - started
