"""The model card (README.md) of a checkpoint folder: the Hub's format, and what the model kept.

A card opens with YAML metadata that the Hub and model browsers read (``base_model``, ``datasets``,
``metrics``, ``model-index`` with the dev results, ``library_name: transformers``, ``tags``), then
says how the checkpoint was trained (the recipe's key settings), its dev metrics, and what no other
card says: how much of the pretrained model's skill it kept (the probe record at that step and the
distance to θ*). The training loop writes it into best/ and last/ inside the same staged folder as the
weights (checkpoint.save_checkpoint), so a card always describes the weights beside it.

Torch-free: the text is built from the recipe and metrics.jsonl records alone.
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from .plugins import methods as registry
from .rundir.layout import BEST_DIR, LP_DIR
from .names import LM_TASKS, MODEL_LICENSES, OPTIMIZERS, PACKAGED_MODELS, TASKS
from .tasks import TASK_TYPES, TaskType, task_for

CARD_FILE = "README.md"
# A card recall wrote carries this line; a README.md without it is someone else's and is kept
# (as KEPT_FILE) when recall replaces the folder.
MARKER = "<!-- recall model card: written by recall with this folder's weights; replaced with them. -->"
KEPT_FILE = "README.user.md"
TAGS = ("recall",)  # and the optimizer's name (recadam, adamw): a vanilla run is no RecAdam model

# recall's metric names -> (the Hub's metric type, as the evaluate library names it; a reader's name)
_METRICS = {
    "accuracy": ("accuracy", "Accuracy"),
    "f1": ("f1", "F1"),
    "mcc": ("matthews_correlation", "Matthews correlation"),
    "pearson": ("pearsonr", "Pearson"),
    "spearman": ("spearmanr", "Spearman"),
    "exact_match": ("exact_match", "Exact match"),
    "perplexity": ("perplexity", "Perplexity"),
}
_NOT_METRICS = ("step", "split", "main", "distance")


def model_card(recipe: Any, *, checkpoint: str, step: int, total_steps: int, evaluation: dict[str, Any] | None,
               probe: dict[str, Any] | None, distance: float | None, version: str | None = None,
               anneal_t0: float | None = None, methods: Any = None) -> str:
    """The README.md of ``checkpoint`` ("best" or "last") of a run trained with ``recipe`` (a
    recipe.Recipe), saved at ``step``: ``evaluation`` and ``probe`` are the latest eval and probe
    records of metrics.jsonl at or before that step (or None), ``distance`` ‖θ − θ*‖ at that step."""
    if version is None:
        from .names import VERSION as version
    meta = _metadata(recipe, checkpoint, step, evaluation)
    front = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000)
    parts = [f"---\n{front}---\n", MARKER, "", *_body(recipe, checkpoint, step, total_steps, evaluation, probe,
                                                        distance, version, anneal_t0, methods)]
    return "\n".join(parts).rstrip("\n") + "\n"


def write_card(folder: Path, text: str, previous: Path | None = None) -> None:
    """Write ``text`` as ``folder``/README.md (``folder``: the staging folder). ``previous`` is the
    folder it replaces: a README.md there that recall did not write is carried into ``folder`` as
    README.user.md (and one already kept there is carried again), never overwritten or dropped."""
    if previous is not None:
        # The user's texts, oldest first: one kept earlier, and a README.md they wrote since.
        texts = [previous / KEPT_FILE] if (previous / KEPT_FILE).is_file() else []
        texts += sorted(previous.glob("README.user.*.md"), key=lambda p: int(p.name.split(".")[2]))
        theirs = previous / CARD_FILE
        if theirs.is_file() and not is_recall_card(theirs) and not any(_same(theirs, t) for t in texts):
            texts.append(theirs)
        for i, user_text in enumerate(texts):  # README.user.md, then README.user.2.md, ...
            shutil.copy2(user_text, folder / (KEPT_FILE if i == 0 else f"README.user.{i + 1}.md"))
    (folder / CARD_FILE).write_text(text, encoding="utf-8")


def _same(a: Path, b: Path) -> bool:
    return a.read_bytes() == b.read_bytes()


def is_recall_card(path: Path) -> bool:
    try:
        return MARKER in path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


# ---- the YAML metadata ---------------------------------------------------------------------------


def hub_id(name: str) -> str | None:
    """``name`` when it reads as a Hub model id ("bert-base-uncased", "org/name"), a pkg: model's Hub
    id when names.PACKAGED_MODELS knows it; None for a local folder or another package, which the Hub
    cannot link to (the Trainer's cards leave those out too)."""
    if name.startswith("pkg:"):
        return PACKAGED_MODELS.get(name[len("pkg:"):])
    if Path(name).expanduser().exists():
        return None
    return name if re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name) and not name.startswith(".") else None


def _metadata(recipe: Any, checkpoint: str, step: int, evaluation: dict[str, Any] | None) -> dict[str, Any]:
    task = recipe.task.name
    glue = task in TASKS
    meta: dict[str, Any] = {}
    base = hub_id(recipe.model.name_or_path)
    if base and recipe.model.init == "pretrained":
        meta["base_model"] = base
    if base in MODEL_LICENSES:  # fine-tuned weights inherit the base model's licence
        meta["license"] = MODEL_LICENSES[base]
    if glue or task in LM_TASKS:
        meta["datasets"] = ["glue"]
    if not task_for(recipe.task).num_labels:  # the Hub reads a classifier's task from its architecture; an LM's says it
        meta["pipeline_tag"] = task_for(recipe.task).pipeline_tag
    # Only dev numbers go to model-index (the Hub reads them as the validation split's): a holdout's are the
    # training rows' share that chose best/, reported in the body under their own name.
    on_dev = evaluation is not None and evaluation.get("data", "dev") != "holdout"
    results = _results(recipe, evaluation) if on_dev and evaluation.get("step") == step else []
    metrics = list(dict.fromkeys(m["type"] for r in results for m in r["metrics"]))
    if metrics:
        meta["metrics"] = metrics
    meta["library_name"] = "transformers"
    meta["tags"] = [*TAGS, recipe.optimizer.name]
    if results:  # only numbers measured on these weights
        meta["model-index"] = [{"name": f"{Path(recipe.output_dir).name}-{checkpoint}", "results": results}]
    return meta


def _results(recipe: Any, evaluation: dict[str, Any]) -> list[dict[str, Any]]:
    """One model-index result per dev split (MNLI's mismatched metrics carry the split's suffix:
    accuracy_mismatched), finite values only."""
    task = recipe.task.name
    spec = TASKS.get(task) or LM_TASKS.get(task)
    task_type = task_for(recipe.task)
    splits = spec.dev_splits if spec else ("dev",)
    suffixes = ["", *("_" + s.rsplit("_", 1)[-1] for s in splits[1:])]
    results = []
    for split, suffix in zip(splits, suffixes):
        metrics = []
        for key, value in _dev_metrics(evaluation).items():
            base, of = _split_key(key, suffixes[1:])
            if of == suffix and base in _METRICS and _finite(value):
                kind, label = _METRICS[base]
                metrics.append({"type": kind, "value": round(float(value), 6), "name": label})
        if not metrics:
            continue
        if spec:
            hub_split = _hub_split(split)
            config = next(t.name for t in TASKS.values() if t.folder == spec.folder)  # sst2_lm reads GLUE's sst2
            dataset = {"name": f"GLUE {spec.title}", "type": "glue", "config": config, "split": hub_split, "args": config}
        else:
            dataset = {"name": Path(recipe.task.dev_file or "dev").name, "type": "custom", "split": "dev"}
        results.append({"task": {"type": task_type.pipeline_tag, "name": task_type.pipeline_title},
                        "dataset": dataset, "metrics": metrics})
    return results


def _hub_split(split: str) -> str:
    """A GLUE dev split as the Hub names it: dev -> validation, dev_matched -> validation_matched."""
    return "validation" if split == "dev" else split.replace("dev", "validation")


def _split_key(key: str, suffixes: list[str]) -> tuple[str, str]:
    """("accuracy_mismatched", ["_mismatched"]) -> ("accuracy", "_mismatched"); a first-split key keeps ""."""
    for suffix in suffixes:
        if key.endswith(suffix):
            return key[: -len(suffix)], suffix
    return key, ""


# ---- the text ------------------------------------------------------------------------------------


def _body(recipe: Any, checkpoint: str, step: int, total_steps: int, evaluation: dict[str, Any] | None,
          probe: dict[str, Any] | None, distance: float | None, version: str, anneal_t0: float | None,
          methods: Any) -> list[str]:
    o, t, m = recipe.optimizer, recipe.train, recipe.model
    entry = OPTIMIZERS.get(o.name)
    label = entry.label if entry else o.name
    spec = TASKS.get(recipe.task.name) or LM_TASKS.get(recipe.task.name)
    task = spec.title if spec else f"a custom task ({recipe.task.train_file or recipe.task.dev_file})"
    run = Path(recipe.output_dir)
    lines = [f"# {run.name}: {checkpoint}/", ""]
    start = "from its pretrained weights" if m.init == "pretrained" else "from a random initialisation of its architecture"
    holdout = bool(getattr(recipe.task, "holdout", 0))
    best = "the best holdout score" if holdout else "the best dev score"
    which = {BEST_DIR: best, LP_DIR: "the end of LP-FT's head-only phase"}.get(checkpoint, "the latest save")
    glue = "GLUE " if spec else ""
    lines += [(f"`{m.name_or_path}` fine-tuned on {glue}{task} {start} with {label}, by recall {version}. "
               f"This folder is step {step} of {total_steps} ({which}); recall wrote this card with its weights."), ""]

    lines += ["## Recipe", "", "| setting | value |", "|---|---|", f"| optimizer | {label} (`{o.name}`) |"]
    if entry is None or entry.anchored:
        t0 = recipe.anneal_t0_steps(total_steps) if anneal_t0 is None else anneal_t0  # a run passes its plan's
        lines += [f"| γ (`pretrain_cof`) | {_g(o.pretrain_cof)} |",
                  f"| t0 (`anneal_t0`, steps) | {_g(t0)} |",
                  f"| k (`anneal_k`) | {_g(o.anneal_k)} |",
                  f"| annealing | {o.anneal_fun}, w = {_g(o.anneal_w)} |"]
        if o.recall_floor > 0:
            lines.append(f"| floor (`recall_floor`) | {_g(o.recall_floor)} |")
    for method in registry.active(recipe) if methods is None else methods:  # a run passes its plan's
        lines += [f"| {name} | {value} |" for name, value in method.card_rows(recipe)]
    lines += [f"| learning rate | {_g(o.lr)} |",
              f"| steps | {step} of {total_steps} |",
              f"| batch size | {t.batch_size} × {t.grad_accum} (per process × accumulation) |",
              f"| seed | {t.seed} |",
              f"| initialisation | {m.init} |", ""]

    scored_on_holdout = bool(evaluation) and evaluation.get("data") == "holdout"
    if scored_on_holdout:
        lines += ["## Holdout results", "",
                  f"Scored on the holdout ({_g(recipe.task.holdout)} of the training rows, which chose best/), not on "
                  "dev: `recall evaluate` scores these weights on dev.", ""]
    else:
        lines += ["## Dev results", ""]
    dev = _dev_metrics(evaluation) if evaluation else {}
    if not dev:
        lines += ["Not evaluated yet at this step.", ""]
    else:
        at = evaluation.get("step")
        if at != step:
            lines += [f"Last evaluated at step {at}, not on these weights (step {step}).", ""]
        lines += [f"| metric (step {at}) | value |", "|---|---|"]
        lines += [f"| {k} | {_num(v)} |" for k, v in dev.items()]
        lines.append("")

    lines += ["## What it kept", ""]
    kept = _kept(probe, distance)
    if probe is not None and probe.get("step") != step:
        lines += [f"Probed at step {probe.get('step')} (these weights are step {step}); the distance is at step {step}.", ""]
    if kept:
        lines += [(f"Measured against θ* = `{m.name_or_path}`, the pretrained weights ({_probe_inputs(recipe, probe)}); "
                   "a ratio of 1 is θ*'s own skill."), "",
                  "| measure | value | what it says |", "|---|---|---|", *kept, ""]
    if probe is None:
        lines += ["No probe ran (`probe.enabled: false`): `recall probe` measures it after the fact.", ""]

    auto = task_for(recipe.task).auto_class
    lines += ["## Use", "", "```python", f"from transformers import {auto}, AutoTokenizer", "",
              f'model = {auto}.from_pretrained("{run / checkpoint}")',
              f'tokenizer = AutoTokenizer.from_pretrained("{run / checkpoint}")', "```", ""]
    return lines


_LM_FIELDS = ("lm_kept", "kl", "choice_kept")


def _probe_inputs(recipe: Any, probe: dict[str, Any] | None = None) -> str:
    p = getattr(recipe, "probe", None)
    if any(_finite((probe or {}).get(k)) for k in _LM_FIELDS):  # a causal LM's probes read no STS pairs
        if p is None:
            return "recall's general prose and multiple-choice items"
        prose = "all" if p.num_texts is None else f"the first {p.num_texts}"
        items = (f", the items of {p.choices_file or 'data/probe/lm_choice.jsonl'}"
                 if _finite((probe or {}).get("choice_kept")) else "")
        return f"{prose} passages of {p.texts_file or 'data/probe/lm_text.txt'}{items}, {p.max_length} tokens"
    texts = "all probe sentences" if p.num_texts is None else f"{p.num_texts} probe sentences"
    pairs = "all STS pairs" if p.num_pairs is None else f"{p.num_pairs} STS pairs"
    return f"{texts}, {pairs}, {p.max_length} tokens"


def _kept(probe: dict[str, Any] | None, distance: float | None) -> list[str]:
    rows = []
    p = probe or {}
    if _finite(p.get("sts_retained")):
        rows.append(f"| `sts_retained` | {p['sts_retained']:.3f} | zero-shot STS Spearman ρ(θ)/ρ(θ*) "
                    f"({_num(p.get('sts'))} / {_num(p.get('sts_ref'))}) |")
    if _finite(p.get("cka")):
        rows.append(f"| CKA | {p['cka']:.3f} | linear CKA of last-layer sentence representations with θ*'s |")
    if _finite(p.get("cka_debiased")):
        rows.append(f"| CKA (debiased) | {p['cka_debiased']:.3f} | the same, the less optimistic estimator |")
    # A causal LM's probes (probes/lm.py, probes/choice.py), as its records name them.
    if _finite(p.get("lm_kept")):
        rows.append(f"| `lm_kept` | {p['lm_kept']:.3f} | LM loss on general prose kept, L(θ*)/L(θ) "
                    f"({_num(p.get('lm_loss_ref'))} / {_num(p.get('lm_loss'))}; 1: all of it) |")
    if _finite(p.get("kl")):
        kept = f", exp(−KL) {p['kl_kept']:.3f}" if _finite(p.get("kl_kept")) else ""
        rows.append(f"| `kl` | {p['kl']:.4f} | KL(θ* ‖ θ) of the next token halfway through each text (0: θ predicts "
                    f"as θ* did{kept}) |")
    if _finite(p.get("choice_kept")):
        rows.append(f"| `choice_kept` | {p['choice_kept']:.3f} | multiple-choice skill above chance kept, "
                    f"(acc(θ) − chance) / (acc(θ*) − chance) ({_num(p.get('choice_acc'))} vs "
                    f"{_num(p.get('choice_acc_ref'))}, chance {_num(p.get('choice_chance'))}) |")
    if _finite(p.get("drift")):
        rows.append(f"| drift | {p['drift']:.4f} | mean 1 − cos between θ's and θ*'s sentence embeddings (0: none) |")
    if _finite(p.get("mlm_ratio")):
        rows.append(f"| `mlm_ratio` | {p['mlm_ratio']:.3f} | masked-LM loss under θ*'s head, θ / θ* (> 1: worse) |")
    if _finite(distance):
        rows.append(f"| distance to θ* | {distance:.4f} | ‖θ − θ*‖ over the parameters with a pretrained counterpart |")
    return rows


def _dev_metrics(evaluation: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (evaluation or {}).items() if k not in _NOT_METRICS and isinstance(v, (int, float))}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _num(value: Any) -> str:
    return f"{value:.4f}" if _finite(value) else "–"


def _g(value: float) -> str:
    return f"{value:g}"


# ---- merge outputs -------------------------------------------------------------------------------


def merge_card(*, out_name: str, output: str, method: str, settings: dict[str, Any], inputs: list[dict[str, Any]],
               source: dict[str, Any], scores: list[dict[str, Any]] | None = None, version: str | None = None) -> str:
    """The README.md of one output of `recall merge` (OUT/<output>/): the merged encoder with the head
    of input ``output``. ``inputs``: merge.json's inputs; ``source``: that input's recipe (or {}),
    for its task and pretrained model; ``scores``: `--evaluate`'s rows (each input alone and merged),
    whose row for this output becomes the model-index."""
    if version is None:
        from .names import VERSION as version
    model = (source.get("model") or {})
    task = (source.get("task") or {}).get("name")
    spec = TASKS.get(task) if task else None
    task_type = _task_type(source.get("task") or {})
    meta: dict[str, Any] = {}
    base = hub_id(str(model.get("name_or_path") or "")) if model.get("init", "pretrained") == "pretrained" else None
    if base:
        meta["base_model"] = base
    if spec:
        meta["datasets"] = ["glue"]
    row = next((r for r in scores or () if r["model"] == output and _finite(r.get("merged"))), None)
    kind = _METRICS.get(spec.main_metric) if spec else None
    if row is not None and kind is not None:
        meta["metrics"] = [kind[0]]
    meta["library_name"] = "transformers"
    meta["tags"] = [*TAGS, "merge", f"merge-{method}"]
    if row is not None and kind is not None:
        # merge --evaluate scores the task's first dev split (MNLI: matched)
        dataset = {"name": f"GLUE {spec.title}", "type": "glue", "config": task, "split": _hub_split(spec.dev_splits[0]),
                   "args": task}
        meta["model-index"] = [{"name": f"{out_name}-{output}", "results": [{
            "task": {"type": task_type.pipeline_tag, "name": task_type.pipeline_title}, "dataset": dataset,
            "metrics": [{"type": kind[0], "value": round(float(row["merged"]), 6), "name": kind[1]}]}]}]
    front = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000)
    lines = [f"---\n{front}---\n", MARKER, "", f"# {out_name}/{output}", "",
             f"The encoder merged from {len(inputs)} models with `recall merge --method {method}` (recall {version}), "
             f"with the classification head of **{output}**{f' ({spec.title})' if spec else ''}. "
             f"Open it with `{task_type.auto_class}.from_pretrained`.", "",
             "## Inputs", "", "| input | task | trained with | checkpoint |", "|---|---|---|---|"]
    for item in inputs:
        optimizer = OPTIMIZERS[item["optimizer"]].label if item.get("optimizer") in OPTIMIZERS else (item.get("optimizer") or "–")
        lines.append(f"| {item['name']} | {item.get('task') or '–'} | {optimizer} | `{item.get('checkpoint', '')}` |")
    shown = {k: v for k, v in settings.items() if not isinstance(v, (list, dict))}
    if shown:
        lines += ["", "## Settings", "", "| setting | value |", "|---|---|",
                  *(f"| {k} | {v} |" for k, v in shown.items())]
    lines += ["", "## Dev results", ""]
    if scores:
        lines += ["Main metric on each task's dev split, each input alone and with the merged encoder:", "",
                  "| input | task | alone | merged |", "|---|---|---:|---:|",
                  *(f"| {r['model']} | {r['task']} | {_number(r['individual'])} | {_number(r['merged'])} |" for r in scores)]
    else:
        lines.append(f"Not measured: `recall merge ... --evaluate`, or `recall evaluate {out_name}/{output}`.")
    lines += ["", "## What it kept", "",
              f"Not measured here: `recall probe {out_name}/{output}` measures the retained skill (STS), CKA and drift "
              "against the pretrained model."]
    return "\n".join(lines).rstrip("\n") + "\n"


def _task_type(section: dict[str, Any]) -> TaskType | type[TaskType]:
    """The type of the task a merged head was trained on, from its run's recipe (read as a dict); a head
    that no recall run trained is a sequence classifier's, the only kind `recall merge` reads."""
    if not section.get("name"):
        return TASK_TYPES["classification"]
    from .recipe import TaskConfig

    return task_for(TaskConfig(**{k: v for k, v in section.items() if k in TaskConfig.__dataclass_fields__}))


def _number(value: Any) -> str:
    return f"{100 * value:.2f}" if _finite(value) else "–"
