"""A recipe's checks across fields: every problem of a built recipe, each one line naming the key and
the fix, reported at once (build.build_recipe calls check_recipe). Each method's keys are checked in its
own room (plugins/methods.py's check loops over them)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..plugins.methods import check as check_methods
from ..plugins.tasks import files_tasks
from ..plugins.trackers import trackers
from ..names import GLUE_TASK_NAMES, LM_TASKS, OPTIMIZERS
from ..plugins.probes import probe_names

if TYPE_CHECKING:
    from .schema import OptimizerConfig, ProbeConfig, Recipe, TaskConfig


def check_recipe(recipe: Recipe, check_files: bool = True) -> list[str]:
    problems: list[str] = []
    m, t, o, tr = recipe.model, recipe.task, recipe.optimizer, recipe.train

    def need(condition: bool, message: str) -> None:
        if not condition:
            problems.append(message)

    paths = {"output_dir": recipe.output_dir, "model.name_or_path": m.name_or_path, "task.data_dir": t.data_dir,
             "task.train_file": t.train_file, "task.dev_file": t.dev_file, "probe.texts_file": recipe.probe.texts_file,
             "probe.pairs_file": recipe.probe.pairs_file, "probe.choices_file": recipe.probe.choices_file}
    for key, value in paths.items():  # first: the file checks below cannot even ask about such a path
        need(value is None or "\x00" not in value, f"{key}: a path cannot hold a NUL byte (\\0): remove it")
    if problems:
        return problems

    problems += _check_task(t, check_files)
    if check_files:
        problems += _check_model_path(m.name_or_path)
    problems += _check_optimizer(o)

    need(tr.batch_size >= 1, f"train.batch_size: must be >= 1, got {tr.batch_size}")
    need(tr.eval_batch_size is None or tr.eval_batch_size >= 1,
         f"train.eval_batch_size: must be >= 1, got {tr.eval_batch_size}")
    need(tr.grad_accum >= 1, f"train.grad_accum: must be >= 1, got {tr.grad_accum}")
    need((tr.max_steps is None) != (tr.epochs is None),
         "train.max_steps / train.epochs: set exactly one of them (the other null, e.g. train.epochs=null)")
    need(tr.max_steps is None or tr.max_steps >= 1, f"train.max_steps: must be >= 1, got {tr.max_steps}")
    need(tr.epochs is None or tr.epochs > 0, f"train.epochs: must be > 0, got {tr.epochs}")
    for key in ("warmup_steps", "log_every", "eval_every", "save_every", "keep_last"):
        need(getattr(tr, key) >= 0, f"train.{key}: must be >= 0, got {getattr(tr, key)}")
    need(tr.log_every >= 1, f"train.log_every: must be >= 1, got {tr.log_every}")
    need(0 <= t.holdout < 0.5, f"task.holdout: a fraction of the training rows in (0, 0.5), or 0 for none, got {t.holdout}")
    need(t.pad_to_multiple_of is None or 1 <= t.pad_to_multiple_of <= t.max_seq_length,
         f"task.pad_to_multiple_of: must be in [1, max_seq_length = {t.max_seq_length}] or null (dynamic padding), "
         f"got {t.pad_to_multiple_of}")
    known = trackers()
    unknown = [name for name in tr.report_to if name not in known]
    need(not unknown, f"train.report_to: unknown tracker {', '.join(map(repr, unknown))} "
         f"(choose from {', '.join(known)}, or none)")
    need(tr.max_grad_norm >= 0, f"train.max_grad_norm: must be >= 0 (0 disables clipping), got {tr.max_grad_norm}")
    # numpy and torch seed with 32 bits: a larger seed fails deep inside them, or wraps silently.
    need(0 <= tr.seed < 2**32, f"train.seed: must be in [0, 2^32), got {tr.seed}")

    problems += _check_probe(recipe.probe, check_files)
    problems += check_methods(recipe)
    return problems


def _collector() -> tuple[list[str], Any]:
    problems: list[str] = []

    def need(condition: bool, message: str) -> None:
        if not condition:
            problems.append(message)

    return problems, need


def _check_task(t: TaskConfig, check_files: bool) -> list[str]:
    problems, need = _collector()
    plugins = files_tasks()  # task types of installed packages: their own files' task.name
    need(t.name in GLUE_TASK_NAMES or t.name in LM_TASKS or t.name in ("custom", "custom_lm") or t.name in plugins,
         f"task.name: unknown task '{t.name}' (GLUE: {', '.join(GLUE_TASK_NAMES)}; causal LM: {', '.join(LM_TASKS)}; "
         f"or 'custom' / 'custom_lm'{''.join(f' / {n!r}' for n in plugins)} with train_file/dev_file)")
    need(t.max_seq_length >= 8, f"task.max_seq_length: must be >= 8, got {t.max_seq_length}")
    for key in ("max_train_examples", "max_eval_examples"):
        value = getattr(t, key)
        need(value is None or value >= 1, f"task.{key}: must be >= 1 or null, got {value}")
    cap = t.max_holdout_examples
    need(cap is None or (isinstance(cap, int) and cap >= 2), f"task.max_holdout_examples: must be >= 2 or null (all), got {cap}")
    need(cap is None or t.holdout > 0, "task.max_holdout_examples: caps the holdout's rows; set task.holdout too "
                                       "(e.g. task.holdout=0.1), or drop it")
    if t.name == "custom" or t.name in plugins:
        for key in ("train_file", "dev_file", "text_fields", "label_field", "num_labels"):
            need(getattr(t, key) is not None, f"task.{key}: required for a custom task")
        if t.text_fields is not None:
            need(1 <= len(t.text_fields) <= 2, f"task.text_fields: one or two columns, got {len(t.text_fields)}")
        if t.num_labels is not None:
            need(t.num_labels >= 1, f"task.num_labels: must be >= 1 (1 = regression), got {t.num_labels}")
            if t.label_names is not None:
                need(len(t.label_names) == t.num_labels,
                     f"task.label_names: {len(t.label_names)} names for num_labels={t.num_labels}")
        if check_files:
            for key in ("train_file", "dev_file"):
                path = getattr(t, key)
                if path is not None:
                    need(Path(path).is_file(), f"task.{key}: file not found: {path}")
                    if Path(path).is_file() and t.text_fields is not None and t.label_field is not None:
                        problems += _check_columns(key, Path(path), [*t.text_fields, t.label_field])
    if t.name == "custom_lm":
        for key in ("train_file", "dev_file"):
            need(getattr(t, key) is not None, f"task.{key}: required for a custom_lm task")
            path = getattr(t, key)
            if check_files and path is not None:
                need(Path(path).is_file(), f"task.{key}: file not found: {path}")
        if t.text_fields is not None:
            need(len(t.text_fields) == 1, f"task.text_fields: a custom_lm task has one prompt column, got {len(t.text_fields)}")
    if t.data_dir is not None and check_files:
        # The shipped recipes name the repository's copy of GLUE, which a pip-installed recall does not have.
        shipped = Path(t.data_dir).as_posix().startswith("data/glue/")
        need(Path(t.data_dir).is_dir(),
             f"task.data_dir: folder not found: {t.data_dir} (a GLUE task folder with train.tsv and dev.tsv, "
             "or null to load from the hub" + ("; data/glue/ comes with a clone of the recall repository, not "
                                                "with the pip package: run from the clone's root" if shipped else "") + ")")
    return problems


def _check_optimizer(o: OptimizerConfig) -> list[str]:
    problems, need = _collector()
    need(o.lr > 0, f"optimizer.lr: must be > 0, got {o.lr}")
    need(o.weight_decay >= 0, f"optimizer.weight_decay: must be >= 0, got {o.weight_decay}")
    need(o.eps >= 0, f"optimizer.eps: must be >= 0, got {o.eps}")
    need(len(o.betas) == 2 and all(0 <= b < 1 for b in o.betas),
         f"optimizer.betas: two numbers in [0, 1), got {o.betas}")
    need(o.anneal_k > 0, f"optimizer.anneal_k: must be > 0, got {o.anneal_k}")
    need(0 <= o.anneal_w <= 1, f"optimizer.anneal_w: must be in [0, 1], got {o.anneal_w}")
    need(o.pretrain_cof > 0, f"optimizer.pretrain_cof: must be > 0, got {o.pretrain_cof}")
    need(0 <= o.recall_floor <= o.anneal_w,
         f"optimizer.recall_floor: must be in [0, anneal_w = {o.anneal_w:g}] (a fraction of pretrain_cof; "
         f"0 is the paper's schedule), got {o.recall_floor}")
    t0 = o.anneal_t0
    need((0 < t0 < 1) or (t0 >= 1 and float(t0).is_integer()),
         f"optimizer.anneal_t0: a step count (integer >= 1) or a fraction of the run in (0, 1), got {t0}")
    if OPTIMIZERS[o.name].anchored:
        # Each step with lambda near 0 multiplies theta - theta* by (1 - lr * gamma): above 1 it overshoots.
        need(o.lr * o.pretrain_cof < 1,
             f"optimizer.lr x optimizer.pretrain_cof = {o.lr * o.pretrain_cof:g} must be < 1, or the recall "
             "penalty overshoots theta* (lower lr or pretrain_cof)")
    return problems


def _check_probe(p: ProbeConfig, check_files: bool) -> list[str]:
    known = probe_names()
    problems = [f"probe.probes: unknown probe '{name}' (choose from {', '.join(known)})"
                for name in p.probes if name not in known]
    for key in ("num_texts", "num_pairs"):
        value = getattr(p, key)
        if value is not None and value < 4:
            problems.append(f"probe.{key}: must be >= 4 or null (all), got {value}")
    if p.max_length < 8:
        problems.append(f"probe.max_length: must be >= 8, got {p.max_length}")
    if p.batch_size < 1:
        problems.append(f"probe.batch_size: must be >= 1, got {p.batch_size}")
    if p.every < 0:
        problems.append(f"probe.every: must be >= 0 (0: at each evaluation), got {p.every}")
    if check_files and p.enabled:
        for key in ("texts_file", "pairs_file", "choices_file"):
            path = getattr(p, key)
            if path is not None and not Path(path).is_file():
                problems.append(f"probe.{key}: file not found: {path}")
    return problems


def looks_like_path(name: str) -> bool:
    """Whether model.name_or_path was meant as a folder: hub ids are "name" or "org/name"."""
    import os

    return name.startswith((".", "/", "~")) or name.count("/") > 1 or (os.sep != "/" and os.sep in name)


def _check_model_path(name: str) -> list[str]:
    """A model folder that is not there, found before torch loads (model.py's loader says the same later)."""
    from ..model_source import package_problem

    problem = package_problem(name)
    if problem:
        return [problem]
    folder = Path(name).expanduser()
    if name.startswith("pkg:") or not (looks_like_path(name) or folder.is_dir()):
        return []  # a package or a hub id: model.check_hub and the loader answer for those
    if not folder.is_dir():
        return [f"model.name_or_path: folder not found: {name} (a folder with config.json, a hub id, or pkg:MODULE)"]
    return []


def _check_columns(key: str, path: Path, columns: list[str]) -> list[str]:
    """The custom task's columns against the file's header (its first record, for JSONL), read alone: a
    misspelt column is one line before torch loads, not after (tasks/files.py reads every row later)."""
    from ..errors import DataError
    from ..tasks.files import header_of

    try:
        header = header_of(path)
    except DataError:
        return []  # an unreadable file: the full read names its line
    missing = [c for c in columns if c not in header]
    if not missing or header is None:
        return []
    existing = ", ".join(repr(c) for c in header) or "none"
    return [f"task.{key}: {path} has no column {', '.join(map(repr, missing))} (columns: {existing}): set "
            "task.text_fields and task.label_field to columns of the file"]
