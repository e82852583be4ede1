"""A row of the matrix: after stage i, every task j scored with stage i's encoder under task j's own head
(task-incremental: a classifier sequence keeps a head per task, trained in that task's stage), or, for
causal-LM stages, which share the LM head, stage i's model itself on every task, seen or not (the
cells above the diagonal and row 0 exist there, and with them FWT).

And the kept skill of the *original* pretrained model after each stage (the probes, theta* = stage 1's
starting model), which the stages' own probes do not give: each stage's theta* is the stage before it.
"""

from __future__ import annotations

import math
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

    def precision(self, stage: Stage) -> str:
        """The precision the matrix scores ``stage``'s task in: its recipe's, fp16 read as fp32 off CUDA."""
        from ..runtime import resolve_precision

        tc = stage.recipe.train
        precision = "fp32" if tc.precision == "fp16" and self.device.type != "cuda" else tc.precision
        return resolve_precision(precision, self.device)

    def score(self, model: torch.nn.Module, stage: Stage, tokenizer: Any) -> float:
        from ..runtime import autocast_for
        from ..scoring.evaluate import score

        kind, spec, rows = self._rows(stage, tokenizer)
        tc = stage.recipe.train
        precision = self.precision(stage)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        model.to(self.device).eval()
        with torch.no_grad():
            metrics = score(model, spec, rows, tc.eval_batch_size or 2 * tc.batch_size, self.device, pad_id,
                            autocast_for(precision, self.device))
        return float(metrics["main"])

    def finetune_score(self, stage: Stage, trained: Any, folder: Path) -> float | None:
        """The diagonal cell R[i][i] as the stage's own `recall finetune` already scored it: its evaluation at the
        step ``folder`` (last/ or best/) was saved at, where that is bit for bit the computation ``score`` would
        repeat: the same weights (fp32 ones as saved, no adapter merged into them at saving, the very step), the
        same rows (the same task keys: split, holdout, caps, length; the same tokenizer, saved beside them), the
        same batches, precision and device. Anything else, or a record it cannot find: None (scored again).
        ``trained``: the recipe the stage trained with (its method hooks' keys included)."""
        from ..plugins import methods as registry
        from ..rundir import BEST_DIR, read_metrics, read_summary

        summary = read_summary(stage.run_dir)
        mine, theirs = stage.recipe.train, trained.train
        if (summary is None or not summary.finished or summary.weights != "fp32" or summary.world_size != 1
                or summary.precision != self.precision(stage) or summary.device != str(self.device)
                or registry.active_adapter(trained) is not None or trained.task != stage.recipe.task
                or (theirs.eval_batch_size or 2 * theirs.batch_size) != (mine.eval_batch_size or 2 * mine.batch_size)):
            return None
        step = (summary.best or {}).get("step") if folder.name == BEST_DIR else summary.steps
        data = "holdout" if stage.recipe.task.holdout > 0 else None
        # the latest record of that step (best/'s is followed by later ones; a resumed run's file is cut back to it)
        record = next((r for r in reversed(read_metrics(stage.run_dir))
                       if r.get("split") == "eval" and r.get("step") == step and r.get("data") == data), None)
        main = record.get("main") if record is not None else None
        return float(main) if isinstance(main, (int, float)) and math.isfinite(main) else None

    def row(self, i: int, chosen: list[Path], diagonal: float | None = None) -> list[float | None]:
        """Row i (>= 1): ``chosen`` holds stages 1..i's chosen checkpoint folders; ``diagonal``: R[i][i] where
        it is already known (finetune_score), else scored here. Stage i's model is loaded only where a cell
        needs it (a classifier sequence's row 1 is its diagonal alone)."""
        from ..model import head_parameter_names, load_checkpoint_model, load_tokenizer
        from ..tasks import task_spec, task_type_for

        stages = self.plan.stages
        loaded: dict[str, Any] = {}

        def current() -> tuple[torch.nn.Module, Any]:
            if not loaded:
                own_kind = task_type_for(task_spec(stages[i - 1].recipe.task))
                loaded["tokenizer"] = load_tokenizer(str(chosen[i - 1]))
                loaded["model"] = load_checkpoint_model(chosen[i - 1], own_kind)
            return loaded["model"], loaded["tokenizer"]

        out: list[float | None] = []
        for stage in stages:
            j = stage.index
            if j == i and diagonal is not None:
                out.append(diagonal)
            elif j == i or (not has_head(stage) and not has_head(stages[i - 1])):
                model, tokenizer = current()
                out.append(self.score(model, stage, tokenizer))
            elif j < i:
                encoder, tokenizer = current()
                kind = task_type_for(task_spec(stage.recipe.task))
                model = load_checkpoint_model(chosen[j - 1], kind)  # task j's head as its stage left it
                head = head_parameter_names(model)
                missing, _ = model.load_state_dict({k: v for k, v in encoder.state_dict().items() if k not in head},
                                                   strict=False)
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
