"""The sequence's plan: every stage's recipe built and checked before stage 1 starts, and the keys of
the sequence itself (``continual.*``), which apply to no single stage.

A stage is an ordinary recipe file; the command line's overrides apply to every stage, as finetune's do.
What the runner adds to stage i's recipe is written into its config.yaml, so that each stage is a run
directory `recall finetune --resume`, `evaluate` and `probe` read as they read any other:

    output_dir          DIR/stages/NN-TASK
    model.name_or_path  stage i-1's chosen weights (stage 1: its recipe's model)
    ewc.previous        stage i-1's run directory, where EWC is on (methods/ewc)
    replay.previous     every earlier stage's run directory, where replay is on (methods/replay)
    model.theta_star    stage 1's model, under continual.theta_star=original (stages 2..T)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import RecallError, RecipeError
from ..rundir import SEQUENCE_DEFAULTS

# The values of the sequence's own keys (continual.KEY=VALUE; their defaults: rundir's SEQUENCE_DEFAULTS).
WEIGHTS = ("last", "best")
MERGES = ("none", "recall", "linear", "ties")
THETA_STARS = ("previous", "original")
STAGES_DIR = "stages"
MATRIX_PNG = "matrix.png"


@dataclass(frozen=True)
class Settings:
    """continual.weights: which checkpoint of a stage the next stage starts from and the matrix scores
    (last, or best on the stage's dev/holdout); continual.probe: measure the original model's kept skill
    after each stage (null: as stage 1's probe.enabled says); continual.merge: none, or the `recall merge`
    method that merges each stage's weights (from stage 2) with the previous merged model (merging.py),
    continual.merge.NAME its options; continual.theta_star: what RecAdam, the anchor and EWC keep in stages
    2..T, the previous stage's weights (each stage's start) or the original pretrained model (stage 1's)."""

    weights: str = "last"
    probe: bool | None = None
    merge: str = "none"
    theta_star: str = "previous"
    merge_options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Stage:
    index: int  # from 1
    file: Path
    recipe: Any  # as checked (its own model; output_dir set)
    run_dir: Path

    @property
    def task(self) -> str:
        return self.recipe.task.name


@dataclass
class Plan:
    out: Path
    stages: list[Stage]
    overrides: list[str]  # the stages' (continual.* taken out)
    settings: Settings
    seed: int | None
    files: list[str] = field(default_factory=list)

    def command(self) -> dict[str, Any]:
        """What continual.json records of the command, which --resume reads back."""
        s = self.settings
        own = {"weights": s.weights, "probe": s.probe, "merge": s.merge, "theta_star": s.theta_star}
        if s.merge_options:
            own["merge_options"] = dict(s.merge_options)
        return {"stages": self.files, "overrides": self.overrides, "seed": self.seed, "continual": own}


def split_overrides(overrides: list[str]) -> tuple[list[str], Settings, list[str]]:
    """(the stages' overrides, the sequence's settings, problems with continual.* keys)."""
    from ..recipe.build import parse_override
    from .merging import OPTION_PREFIX, check_options

    stage, values, problems, options = [], dict(SEQUENCE_DEFAULTS), [], {}
    for text in overrides:
        if not text.strip().startswith("continual."):
            stage.append(text)
            continue
        try:
            key, value = parse_override(text)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        name = key.split(".", 1)[1]
        if name.startswith(OPTION_PREFIX):  # continual.merge.NAME: the merge's own option, checked below
            options[name[len(OPTION_PREFIX):]] = value
        elif name not in SEQUENCE_DEFAULTS:
            problems.append(f"unknown key '{key}' (the sequence's keys: {', '.join('continual.' + k for k in SEQUENCE_DEFAULTS)})")
        elif name == "weights" and value not in WEIGHTS:
            problems.append(f"continual.weights: last or best, got {value!r}")
        elif name == "merge" and value not in MERGES:
            problems.append(f"continual.merge: one of {', '.join(MERGES)}, got {value!r}")
        elif name == "theta_star" and value not in THETA_STARS:
            problems.append(f"continual.theta_star: previous (the weights each stage starts from) or original (stage 1's "
                            f"model), got {value!r}")
        elif name == "probe" and not isinstance(value, bool) and value is not None:
            problems.append(f"continual.probe: true, false or null (stage 1's probe.enabled), got {value!r}")
        else:
            values[name] = value
    merge_options, merge_problems = check_options(values["merge"], options) if values["merge"] in MERGES else ({}, [])
    return stage, Settings(**values, merge_options=merge_options), problems + merge_problems


def stage_dir(out: Path, index: int, task: str) -> Path:
    return out / STAGES_DIR / f"{index:02d}-{task}"


def build_plan(files: list[Path], overrides: list[str], out: Path, seed: int | None) -> Plan:
    """Every stage's recipe built and checked against stage 1's model, before anything is written: one
    RecipeError listing each problem (unknown keys, missing files, another model family, width or
    tokenizer), exit 2."""
    from ..recipe import load_recipe
    from .merging import original_model

    if not files:
        raise RecipeError("recall continual", ["give at least one stage recipe (recall continual A.yaml B.yaml --out DIR)"])
    stage_overrides, settings, problems = split_overrides(overrides)
    extra = [f"train.seed={seed}"] if seed is not None else []
    stages: list[Stage] = []
    for index, file in enumerate(files, 1):
        if not Path(file).is_file():
            problems.append(f"stage {index}: {file}: no such recipe file (check the path)")
            continue
        # continual.theta_star=original: a later stage's recipe gets stage 1's model as model.theta_star (the
        # runner's key), checked here with the rest (LoRA refuses it) before anything is written
        mine = extra + ([f"model.theta_star={original_model(stages[0].recipe)}"]
                        if settings.theta_star == "original" and index > 1 and stages else [])
        try:
            recipe = load_recipe(file, stage_overrides + mine)
        except RecipeError as exc:
            problems += [f"stage {index} ({file}): {p}" for p in exc.problems]
            continue
        except RecallError as exc:
            problems.append(f"stage {index} ({file}): {exc}")
            continue
        run_dir = stage_dir(Path(out), index, recipe.task.name)
        import dataclasses

        stages.append(Stage(index, Path(file), dataclasses.replace(recipe, output_dir=str(run_dir)), run_dir))
    if not problems:
        problems += same_model(stages)
    if problems:
        raise RecipeError("recall continual", problems, where="in the stages")
    return Plan(Path(out), stages, stage_overrides, settings, seed, [str(Path(f).resolve()) for f in files])


def same_model(stages: list[Stage]) -> list[str]:
    """Each later stage's model is stage 1's family, width and tokenizer: stage i+1 starts from stage i's
    weights, so a recipe naming another model would be silently ignored, or would not fit."""
    from ..model import load_config, load_tokenizer, model_location

    def describe(recipe: Any) -> tuple[Any, ...]:
        source = model_location(recipe.model.name_or_path, recipe.model.gguf_file)
        config = load_config(source, recipe.model.trust_remote_code)
        tokenizer = load_tokenizer(source, recipe.model.trust_remote_code)
        return (getattr(config, "model_type", None), getattr(config, "hidden_size", None),
                (type(tokenizer).__name__, len(tokenizer)))

    problems: list[str] = []
    try:
        first = describe(stages[0].recipe)
    except RecallError as exc:
        return [f"stage 1: {exc}"]
    names = ("model family (model_type)", "width (hidden_size)", "tokenizer (class, vocabulary size)")
    for stage in stages[1:]:
        try:
            mine = describe(stage.recipe)
        except RecallError as exc:
            problems.append(f"stage {stage.index}: {exc}")
            continue
        for name, a, b in zip(names, first, mine):
            if a != b:
                problems.append(f"stage {stage.index} ({stage.file}): its {name} is {b}, stage 1's is {a}: every stage "
                                "fine-tunes the previous stage's weights (give each stage stage 1's model)")
    return problems
