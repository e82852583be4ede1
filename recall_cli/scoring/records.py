"""Scored records: a checkpoint that `recall finetune` did not produce as it stands (a `recall merge`
output, a WiSE-FT interpolation, another run's encoder under an older head) scored on its task's dev
split and probed against θ*, written as a small run record that compare, tradeoff and forgetting read
beside the training runs:

    OUT/config.yaml     the recipe of the run the checkpoint's head came from, plus a `record` section:
                        what was scored (checkpoint, merge method, weights, the tasks merged with)
    OUT/metrics.jsonl   one eval record and one probe record, both at the source run's last step
    OUT/summary.json    finished, the final metrics, distance and probe; no weights are copied

The `record` keys take part in grouping (`record.merge`, `record.weights`, `record.with`) except the
ones that name files (`record.checkpoint`, `record.models`), which differ from seed to seed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .. import rundir
from ..errors import RecordError
from ..names import OPTIMIZERS
from ..rundir import RECORD_SECTION, Located, Summary
# Record keys that name files: they differ per seed and must not split a setting into one row per run
# (report.NOT_SETTINGS takes them from here).
RECORD_PATH_KEYS = ("record.checkpoint", "record.models", "record.against")


def _recipe_dict(source: Located) -> dict[str, Any]:
    from ..recipe.file import read_yaml

    config = source.recipe_file
    if config is None or not config.is_file():
        raise RecordError(f"{source.folder}: no recipe says which task its head was trained on (no {rundir.SOURCE_RECIPE_FILE}): "
                          "record checkpoints that recall finetune or recall merge wrote")
    raw = read_yaml(config)
    raw.pop(RECORD_SECTION, None)
    return raw


def _merge_section(folder: Path, merge: dict[str, Any] | None) -> dict[str, Any]:
    """What the merge did, as settings: method, the weights (linear), and the tasks merged with."""
    if merge is None:
        return {"merge": None}
    inputs = merge.get("inputs") or []
    me = next((i for i in inputs if Path(merge.get("outputs", {}).get(i["name"], "")).name == folder.name), None)
    if me is None:
        raise RecordError(f"{folder} is not one of the outputs its merge.json names: score a folder that recall merge wrote")
    others = [i for i in inputs if i is not me]
    section: dict[str, Any] = {
        "merge": merge.get("method"),
        # What the other inputs are, by how they were trained ("pretrained" for θ*): free of seeds and of
        # tasks, so that one merge recipe is one row of `recall compare` with the tasks as its columns.
        "with": sorted(_kind_of(i) for i in others),
        "models": [i.get("model") for i in inputs],
    }
    if merge.get("weights") is not None:
        section["weights"] = [round(float(w), 6) for w in merge["weights"]]
    for key in ("temperature", "gamma_rule", "lambda", "density"):
        if merge.get(key) is not None:
            section[key] = merge[key]
    return section


METHOD_KINDS = {name: o.kind for name, o in OPTIMIZERS.items()}  # how a merge input was trained


def _kind_of(item: dict[str, Any]) -> str:
    """'vanilla' / 'recadam' for a merge input that a recall run trained, 'pretrained' for any other model."""
    from ..recipe import OptimizerConfig
    from ..recipe.file import read_yaml

    if item.get("optimizer"):  # recorded by the merge itself (merges before this field: read below)
        return METHOD_KINDS.get(item["optimizer"], item["optimizer"])
    if not item.get("task"):
        return "pretrained"
    model = Path(str(item.get("model") or ""))
    for config in (model / rundir.CONFIG_FILE, model.parent / rundir.CONFIG_FILE, model / rundir.SOURCE_RECIPE_FILE):
        if config.is_file():
            name = ((read_yaml(config).get("optimizer") or {}).get("name")) or OptimizerConfig.name
            return METHOD_KINDS.get(name, name)
    return "fine-tuned"


def _distance(folder: Path, against: str) -> float:
    """‖θ − θ*‖ over the encoder's parameters that θ* has (the head has no θ*), in float64."""
    import torch

    from ..model import load_encoder
    from ..optim.distance import distance_to_theta_star

    theta = dict(load_encoder(folder).named_parameters())
    star = dict(load_encoder(against).named_parameters())
    shared = [n for n in theta if n in star and theta[n].shape == star[n].shape]
    if not shared:
        raise RecordError(f"{folder} and {against} share no parameter: is {against} the model it was fine-tuned from?")
    with torch.no_grad():
        return distance_to_theta_star([theta[n] for n in shared], [star[n] for n in shared])


def write_record(path: Path, out: Path, *, against: str | None = None, probe: bool = True,
                 device: str = "auto", overwrite: bool = False) -> dict[str, Any]:
    """Score ``path`` (a run directory's best/, or a checkpoint folder such as a merge output) and
    write the record to ``out``; returns its summary. Nothing is left at ``out`` if anything fails,
    and a second command writing the same ``out`` meanwhile is refused (rundir.output_lock)."""
    path, out = Path(path), Path(out)
    with rundir.output_lock(out, "another recall evaluate --record", "--record folder"):
        return _write_record(path, out, against=against, probe=probe, device=device, overwrite=overwrite)


def _write_record(path: Path, out: Path, *, against: str | None, probe: bool, device: str, overwrite: bool) -> dict[str, Any]:
    """write_record's work, under the lock on ``out``."""
    from .evaluate import evaluate_checkpoint
    from ..probes.targets import probe_targets
    from ..recipe import ProbeConfig, recipe_from_dict

    _check_out(out, overwrite)
    rundir.check_writable(out, "--record")  # before the scoring: disk, permissions, a file in the way (exit 4)
    source = rundir.locate(path)
    folder, merge = source.folder, source.merge if source.kind == "merge" else None
    raw = _recipe_dict(source)
    recipe = recipe_from_dict(raw, str(folder), check_files=False)
    theta_star = against or recipe.model.name_or_path
    step = _source_step(source.run_dir, merge, folder)

    scored = evaluate_checkpoint(folder, device=device, holdout=True)
    eval_record = {"step": step, "split": "eval", **scored["metrics"], "distance": _distance(folder, theta_star)}
    held = scored.get("holdout_metrics")
    probe_record = None
    if probe:
        cfg: ProbeConfig = recipe.probe
        probes = [p for p in cfg.probes if p != "mlm"]  # a classifier checkpoint has no MLM head to compare
        row = probe_targets([str(folder)], against=theta_star, probes=probes, texts_file=cfg.texts_file,
                            pairs_file=cfg.pairs_file, choices_file=cfg.choices_file,
                            num_texts=cfg.num_texts, num_pairs=cfg.num_pairs,
                            max_length=cfg.max_length, batch_size=cfg.batch_size, device=device)[0]
        probe_record = {"step": step, "split": "probe",
                        **{k: v for k, v in row.items() if k not in ("target", "theta", "reference", "texts", "pairs", "choices", "notes")}}

    raw["output_dir"] = str(out)
    raw[RECORD_SECTION] = {"checkpoint": str(folder), "against": theta_star, **_merge_section(folder, merge)}
    scores = {k: v for k, v in eval_record.items() if k != "split"}
    scoring = [eval_record]
    if held is not None:  # as a run trained with task.holdout writes them: the holdout's eval, dev as the test
        scores = {**scores, "holdout": held, "dev": dict(scored["metrics"])}
        scoring = [{"step": step, "split": "eval", "data": "holdout", **held, "distance": eval_record["distance"]},
                   {**eval_record, "split": "test", "data": "dev"}]
    summary = Summary(
        record=True, task=recipe.task.name, optimizer=recipe.optimizer.name, init=recipe.model.init,
        seed=recipe.train.seed, steps=step, finished=True, final=scores, best=scores,
        final_distance=eval_record["distance"],
        probe={k: v for k, v in probe_record.items() if k != "split"} if probe_record else None,
        checkpoint=str(folder), against=theta_star,
    )
    _write_atomically(out, raw, scoring + ([probe_record] if probe_record else []), summary, overwrite)
    return summary.to_dict()


def _source_step(run_dir: Path | None, merge: dict[str, Any] | None, folder: Path) -> int:
    """The step the scored weights stand for: the run's best step for best/, else its last step; for
    a merge output, the latest of its inputs' steps."""
    def step_of(run: Path, checkpoint_name: str) -> int:
        summary = rundir.read_summary(run) if checkpoint_name == rundir.BEST_DIR else None
        best_step = ((summary.best if summary else None) or {}).get("step")
        if isinstance(best_step, int):
            return best_step
        records = rundir.read_metrics(run)
        return max((r.get("step", 0) for r in records), default=0)

    if run_dir is not None:
        return step_of(run_dir, folder.name)
    steps = []
    for item in (merge or {}).get("inputs") or []:
        model = Path(item.get("model") or "")
        for run, name in ((model, rundir.BEST_DIR), (model.parent, model.name)):
            if (run / rundir.CONFIG_FILE).is_file():
                steps.append(step_of(run, name))
                break
    return max(steps, default=0)


def _check_out(out: Path, overwrite: bool) -> None:
    """An existing non-empty ``out`` is replaced only with --overwrite, and only when it is a record:
    never a training run (its weights) or anything else."""
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not overwrite:
        raise RecordError(f"{out} already exists: choose another --record folder, or add --overwrite")
    if rundir.scored_record(out) is None:
        raise RecordError(f"{out} exists and is not a recall record: move it away or choose another --record folder")


def _write_atomically(out: Path, config: dict[str, Any], records: list[dict[str, Any]], summary: Summary,
                      overwrite: bool) -> None:
    # Checked again before the rename: another process may have written ``out`` meanwhile.
    with rundir.staged_folder(out, check=lambda: _check_out(out, overwrite)) as staging:
        (staging / rundir.CONFIG_FILE).write_text(
            "# A scored record (recall evaluate --record): no weights; the checkpoint is named under `record`.\n"
            + yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        rundir.write_metrics(staging, records)
        rundir.write_summary(staging, summary)
