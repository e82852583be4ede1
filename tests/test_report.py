"""`recall compare` / `recall forgetting` on hand-written run directories, where every number is known."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from recall_cli.cli import app
from recall_cli.recipe import build_recipe

from conftest import GLUE

runner = CliRunner()

# SST-2 is a large task (67k) and MRPC, RTE small ones: the paper's two averages.
DATA_DIRS = {"mrpc": GLUE / "MRPC", "rte": GLUE / "RTE", "sst2": GLUE / "SST-2", "cola": GLUE / "CoLA", "stsb": GLUE / "STS-B"}


def fake_run(root: Path, name: str, *, task="mrpc", optimizer="recadam", init="pretrained", k=0.5, t0=250, seed=1,
             main=0.8, finished=True, steps=100, distances=None, losses=None, eval_extra=None, max_eval=None) -> Path:
    """A run directory as `recall finetune` writes it (no weights: reports never read them)."""
    run = root / name
    run.mkdir(parents=True)
    raw = {
        "model": {"name_or_path": "org/tiny-bert", "init": init},
        "task": {"name": task, "data_dir": str(DATA_DIRS[task]), "max_eval_examples": max_eval},
        "optimizer": {"name": optimizer, "anneal_k": k, "anneal_t0": t0},
        "train": {"max_steps": steps, "seed": seed, "log_every": 10},
        "output_dir": str(run),
    }
    recipe, problems = build_recipe(raw, check_files=False)
    assert not problems, problems
    (run / "config.yaml").write_text(yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    log_steps = list(range(10, steps + 1, 10))
    distances = distances or [0.1 * i for i in range(1, len(log_steps) + 1)]
    losses = losses or [0.7 - 0.01 * i for i in range(len(log_steps))]
    records = []
    for step, d, loss in zip(log_steps, distances, losses):
        lam = 1.0 if optimizer == "adamw" else 1 / (1 + math.exp(-k * (step - t0)))
        records.append({"step": step, "split": "train", "epoch": 0.1, "loss": loss, "lr": 1e-5, "lambda": lam,
                        "distance": d, "grad_norm": 1.0, "samples_per_s": 10.0})
    last = log_steps[-1] if finished else log_steps[len(log_steps) // 2]
    records = [r for r in records if r["step"] <= last]
    metric = {"cola": "mcc", "stsb": "pearson"}.get(task, "accuracy")
    evaluation = {"step": last, "split": "eval", metric: main, **(eval_extra or {}), "main": main}
    records.append(evaluation)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if finished:
        final = {k: v for k, v in evaluation.items() if k != "split"}
        summary = {"task": task, "optimizer": optimizer, "init": init, "seed": seed, "anneal_k": k, "anneal_t0": t0,
                   "steps": steps, "finished": True, "best": final, "final": final, "final_distance": distances[-1]}
        (run / "summary.json").write_text(json.dumps(summary))
    return run


def invoke(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture
def k_sweep(tmp_path) -> Path:
    """k=0.1: 3 seeds on MRPC and RTE; k=0.5: 2 seeds on MRPC only."""
    root = tmp_path / "sweep"
    for seed, main in zip((1, 2, 3), (0.80, 0.84, 0.82)):
        fake_run(root, f"k0.1_s{seed}", k=0.1, seed=seed, main=main)
        fake_run(root, f"rte_k0.1_s{seed}", task="rte", k=0.1, seed=seed, main=main - 0.2)
    for seed, main in zip((1, 2), (0.70, 0.90)):
        fake_run(root, f"k0.5_s{seed}", k=0.5, seed=seed, main=main)
    return root


def test_compare_json_aggregates_over_seeds(k_sweep):
    result = invoke("compare", str(k_sweep), "--format", "json")
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    by = {(r["optimizer.anneal_k"], r["task"]): r for r in records}
    assert set(by) == {(0.1, "mrpc"), (0.1, "rte"), (0.5, "mrpc")}
    for r in records:
        assert {"optimizer.anneal_k", "task", "metric", "n", "median", "max", "mean", "std", "runs"} <= set(r)
        assert r["metric"] == "main"
    a = by[(0.1, "mrpc")]
    assert a["n"] == 3 and a["median"] == pytest.approx(0.82) and a["max"] == pytest.approx(0.84)
    assert a["mean"] == pytest.approx(0.82) and a["std"] == pytest.approx(0.02)
    assert sorted(Path(p).name for p in a["runs"]) == ["k0.1_s1", "k0.1_s2", "k0.1_s3"]
    b = by[(0.5, "mrpc")]
    assert b["n"] == 2 and b["median"] == pytest.approx(0.80) and b["max"] == pytest.approx(0.90)
    assert b["std"] == pytest.approx(math.sqrt(0.02))
    assert by[(0.1, "rte")]["median"] == pytest.approx(0.62)
    # Only anneal_k differs: the seed and the output directory are not grouping keys.
    assert not any("train.seed" in r or "output_dir" in r for r in records)


def test_compare_markdown_layout_best_and_averages(tmp_path):
    root = tmp_path / "runs"
    for seed in (1, 2):
        for task, van, rec in (("mrpc", 0.80, 0.84), ("rte", 0.60, 0.66), ("sst2", 0.90, 0.89)):
            fake_run(root, f"{task}_adamw_s{seed}", task=task, optimizer="adamw", seed=seed, main=van + 0.01 * seed)
            fake_run(root, f"{task}_rec_s{seed}", task=task, seed=seed, main=rec + 0.01 * seed)
    result = invoke("compare", str(root), "--table", "main", "--format", "markdown")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "|  | stat | SST-2 | MRPC | RTE | Avg | Avg <10k | Avg >10k |"
    # Table 1: median and max rows per method; medians of (x+0.01, x+0.02) are x+0.015.
    assert lines[2] == "| vanilla fine-tuning | median | **91.5** | 81.5 | 61.5 | 78.2 | 71.5 | **91.5** |"
    assert lines[3] == "|  | max | **92.0** | 82.0 | 62.0 | 78.7 | 72.0 | **92.0** |"
    assert lines[4] == "| RecAdam | median | 90.5 | **85.5** | **67.5** | **81.2** | **76.5** | 90.5 |"
    assert lines[5] == "|  | max | 91.0 | **86.0** | **68.0** | **81.7** | **77.0** | 91.0 |"
    assert "n=2 runs per cell" in result.stdout
    assert "Avg <10k: mean over MRPC, RTE" in result.stdout


def test_table_presets_init_and_k(tmp_path):
    root = tmp_path / "runs"
    fake_run(root, "vanilla", optimizer="adamw", main=0.80)
    fake_run(root, "pi", init="pretrained", k=0.1, main=0.82)
    fake_run(root, "ri", init="random", k=0.1, main=0.85)
    result = invoke("compare", str(root), "--table", "init", "--format", "json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["group"] for r in rows] == ["vanilla fine-tuning", "RecAdam + PI", "RecAdam + RI"]
    assert [r["median"] for r in rows] == pytest.approx([0.80, 0.82, 0.85])
    assert rows[0]["optimizer.name"] == "adamw" and rows[2]["model.init"] == "random"

    fake_run(root, "pi_k1", init="pretrained", k=1.0, main=0.81)
    rows = json.loads(invoke("compare", str(root), "--table", "k", "--where", "init=pretrained", "--format", "json").stdout)
    # adamw has no k (null); one row per k after it.
    assert [(r["optimizer.anneal_k"], r["median"]) for r in rows] == [(None, 0.80), (0.1, 0.82), (1.0, 0.81)]
    table = invoke("compare", str(root), "--table", "k", "--where", "model.init=pretrained")
    assert table.exit_code == 0 and "k=0.1" in table.stdout and "vanilla fine-tuning" in table.stdout


def test_degenerate_runs_are_flagged(tmp_path):
    root = tmp_path / "runs"
    fake_run(root, "ok1", seed=1, main=0.75, max_eval=40)
    fake_run(root, "ok2", seed=2, main=0.77, max_eval=40)
    fake_run(root, "nan", seed=3, main=float("nan"), max_eval=40)
    fake_run(root, "cut", seed=4, main=0.99, finished=False, max_eval=40)
    # The first 40 MRPC dev rows: a model that always says "paraphrase" scores their share of class 1.
    labels = [line.split("\t")[0] for line in (GLUE / "MRPC" / "dev.tsv").read_text().splitlines()[1:41]]
    share = labels.count("1") / 40
    fake_run(root, "constant", seed=5, main=share, max_eval=40)
    result = invoke("compare", str(root), "--format", "json")
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)
    assert row["n"] == 3  # nan and unfinished left out, constant kept (the paper's median is robust to it)
    assert row["median"] == pytest.approx(0.75) and row["max"] == pytest.approx(0.77)
    reasons = {Path(f["run"]).name: f["reason"] for f in row["flagged"]}
    assert set(reasons) == {"nan", "cut", "constant"}
    assert "did not finish" in reasons["cut"] and "nan" in reasons["nan"]
    assert "constant predictions" in reasons["constant"] and "class 1" in reasons["constant"]
    table = invoke("compare", str(root))
    assert "75.0*" in table.stdout and "did not finish" in table.stdout

    cola = tmp_path / "cola"
    fake_run(cola, "mcc0", task="cola", main=0.0)
    fake_run(cola, "stsb_nan", task="stsb", main=float("nan"))
    rows = json.loads(invoke("compare", str(cola), "--format", "json").stdout)
    flags = {r["task"]: r["flagged"][0]["reason"] for r in rows}
    assert "MCC 0" in flags["cola"] and "constant predictions" in flags["stsb"]
    assert {r["task"]: r["n"] for r in rows} == {"cola": 1, "stsb": 0}


def test_csv_matches_json(k_sweep):
    rows = list(csv.DictReader(io.StringIO(invoke("compare", str(k_sweep), "--format", "csv").stdout)))
    assert [(r["optimizer.anneal_k"], r["task"], r["n"]) for r in rows] == [("0.1", "mrpc", "3"), ("0.1", "rte", "3"), ("0.5", "mrpc", "2")]
    assert float(rows[0]["median"]) == pytest.approx(0.82) and len(rows[0]["runs"].split(";")) == 3


def test_compare_by_and_metric(k_sweep):
    rows = json.loads(invoke("compare", str(k_sweep), "--by", "k", "--metric", "accuracy", "--format", "json").stdout)
    assert rows[0]["metric"] == "accuracy" and rows[0]["median"] == pytest.approx(0.82)
    rows = json.loads(invoke("compare", str(k_sweep), "--by", "model.init", "--format", "json").stdout)
    assert [(r["model.init"], r["task"], r["n"]) for r in rows] == [("pretrained", "mrpc", 5), ("pretrained", "rte", 3)]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--by", "optimizer.anneal_kk"], "unknown key 'optimizer.anneal_kk' (did you mean 'optimizer.anneal_k'?)"),
        (["--table", "table9"], "unknown --table 'table9'"),
        (["--metric", "bleu"], "unknown --metric 'bleu': these runs record accuracy, distance, main"),
        (["--format", "xml"], "unknown --format 'xml'"),
        (["--table", "k", "--by", "k"], "either --by or --table"),
        (["--where", "model.init=random"], "no runs with model.init=random"),
    ],
)
@pytest.mark.slow
def test_compare_bad_input_is_one_line_exit_2(k_sweep, args, message):
    result = invoke("compare", str(k_sweep), *args)
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {result.stderr.strip()[7:]}" and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_no_runs_and_non_run_folders(tmp_path):
    (tmp_path / "empty" / "notes").mkdir(parents=True)
    result = invoke("compare", str(tmp_path / "empty"))
    assert result.exit_code == 2
    assert "warning:" in result.stderr and "notes is not a recall run directory" in result.stderr
    assert "error: no recall run directories under" in result.stderr
    assert invoke("compare", str(tmp_path / "missing")).exit_code == 2
    assert invoke("forgetting", "--run-dir", str(tmp_path / "empty")).exit_code == 2


@pytest.mark.slow
def test_forgetting_figure_and_table(tmp_path):
    root = tmp_path / "runs"
    # RI: far from theta* at first, pulled in, then drifting away again; adamw: from 0, growing.
    ri = [50.0, 5.0, 0.5, 0.6, 0.8, 1.0, 1.2, 1.4, 1.5, 1.6]
    for seed, scale in ((1, 1.0), (2, 1.2)):
        fake_run(root, f"ri_s{seed}", init="random", k=0.1, t0=30, seed=seed, distances=[d * scale for d in ri])
        fake_run(root, f"adamw_s{seed}", optimizer="adamw", seed=seed, distances=[0.2 * i * scale for i in range(1, 11)])
    out = tmp_path / "fig" / "forgetting.png"
    result = invoke("forgetting", "--run-dir", str(root), "--out", str(out), "--dpi", "50", "--json")
    assert result.exit_code == 0, result.output
    import matplotlib.image

    image = matplotlib.image.imread(out)
    assert image.shape[:2] == (200, 650)  # 13 x 4 inches at 50 dpi
    assert image[..., :3].std() > 0.05  # not a blank canvas
    rows = {Path(r["run"]).name: r for r in json.loads(result.stdout)}
    assert rows["ri_s1"]["min_distance"] == 0.5 and rows["ri_s1"]["min_distance_step"] == 30
    assert rows["ri_s2"]["final_distance"] == pytest.approx(1.6 * 1.2)
    assert rows["adamw_s1"]["min_distance_step"] == 10 and rows["adamw_s1"]["final_loss"] == pytest.approx(0.61)
    assert rows["ri_s1"]["label"] == "RecAdam + RI" and rows["adamw_s1"]["label"] == "vanilla fine-tuning"
    assert rows["ri_s1"]["name"] == "ri_s1"

    svg = tmp_path / "forgetting.svg"
    assert invoke("forgetting", "--run-dir", str(root), "--out", str(svg)).exit_code == 0
    assert svg.read_text().lstrip().startswith("<?xml")
    bad = invoke("forgetting", "--run-dir", str(root), "--out", str(tmp_path / "f.jpg"))
    assert bad.exit_code == 2 and ".png, .svg or .pdf" in bad.stderr
    bad = invoke("forgetting", "--run-dir", str(root), "--label", "optimizer.anneal_kk")
    assert bad.exit_code == 2 and "did you mean 'optimizer.anneal_k'" in bad.stderr


def test_forgetting_groups_seeds_into_median_and_band(tmp_path):
    from recall_cli.report import forgetting_groups, load_runs

    root = tmp_path / "runs"
    for seed, d in ((1, [1.0, 2.0, 3.0]), (2, [2.0, 3.0, 4.0]), (3, [4.0, 5.0, 9.0])):
        fake_run(root, f"k0.1_s{seed}", k=0.1, seed=seed, steps=30, distances=d)
    fake_run(root, "k1_s1", k=1.0, seed=1, steps=30, distances=[0.5, 0.5, 0.5])
    groups = forgetting_groups(load_runs(root))
    assert [g.label for g in groups] == ["k=0.1", "k=1"]
    steps, median, low, high = groups[0].curves("distance")
    assert steps.tolist() == [10, 20, 30]
    assert median.tolist() == [2.0, 3.0, 4.0] and low.tolist() == [1.0, 2.0, 3.0] and high.tolist() == [4.0, 5.0, 9.0]


def test_markdown_shows_n_rows_when_counts_differ(k_sweep):
    lines = invoke("compare", str(k_sweep), "--format", "markdown").stdout.splitlines()
    assert lines[0] == "|  | stat | MRPC | RTE | Avg |"
    assert lines[2:6] == [
        "| k=0.1 | median | **82.0** | 62.0 | 72.0 |",
        "|  | max | 84.0 | 64.0 | 74.0 |",
        "|  | mean ± std | **82.0 ± 2.0** | 62.0 ± 2.0 | 72.0 |",
        "|  | n | 3 | 3 |  |",
    ]
    # k=0.5 has no RTE runs: no value in the RTE and Avg columns, rather than an average of fewer tasks.
    assert lines[6:10] == [
        "| k=0.5 | median | 80.0 |  | – |",
        "|  | max | **90.0** |  | – |",
        "|  | mean ± std | 80.0 ± 14.1 |  | – |",
        "|  | n | 2 |  |  |",
    ]


def test_forgetting_labels_name_every_differing_setting_when_k_is_ambiguous(tmp_path):
    from recall_cli.report import forgetting_groups, load_runs

    root = tmp_path / "runs"
    fake_run(root, "adamw", optimizer="adamw")
    fake_run(root, "pi_k0.1", k=0.1)
    fake_run(root, "pi_k1", k=1.0)
    fake_run(root, "ri_k1", k=1.0, init="random")
    labels = [g.label for g in forgetting_groups(load_runs(root))]
    assert labels == ["vanilla fine-tuning", "RecAdam + PI, k=0.1", "RecAdam + PI, k=1", "RecAdam + RI, k=1"]


@pytest.mark.slow
def test_table_main_selects_the_best_setting_per_task_on_dev(tmp_path):
    """Table 1: RecAdam's row holds, per task, the (k, t0) with the best median over seeds, as the paper
    selects t0 and k on dev; the median and max are those of the selected setting's seeds."""
    root = tmp_path / "runs"
    for seed in (1, 2, 3):
        fake_run(root, f"mrpc_adamw_s{seed}", optimizer="adamw", seed=seed, main=(0.78, 0.80, 0.79)[seed - 1])
        fake_run(root, f"rte_adamw_s{seed}", task="rte", optimizer="adamw", seed=seed, main=0.60)
    mrpc = {(0.1, 250): (0.80, 0.84, 0.82), (0.5, 250): (0.70, 0.90, 0.86), (0.5, 500): (0.81, 0.81, 0.81)}
    rte = {(0.1, 250): (0.66, 0.70, 0.64), (0.5, 250): (0.60, 0.75, 0.62), (0.5, 500): (0.50, 0.50, 0.50)}
    for task, table in (("mrpc", mrpc), ("rte", rte)):
        for (k, t0), values in table.items():
            for seed, main in zip((1, 2, 3), values):
                fake_run(root, f"{task}_k{k}_t{t0}_s{seed}", task=task, k=k, t0=t0, seed=seed, main=main)

    result = invoke("compare", str(root), "--table", "main", "--format", "json")
    assert result.exit_code == 0, result.output
    records = {(r["optimizer.name"], r["task"]): r for r in json.loads(result.stdout)}
    assert len(records) == 4  # one row per method, not per setting
    chosen = records[("recadam", "mrpc")]
    assert chosen["selected"] == {"optimizer.anneal_k": 0.5, "optimizer.anneal_t0": 250}
    assert (chosen["n"], chosen["median"], chosen["max"], chosen["candidates"]) == (3, 0.86, 0.90, 3)
    assert len(chosen["runs"]) == 3 and all("k0.5_t250" in r for r in chosen["runs"])
    chosen = records[("recadam", "rte")]
    assert chosen["selected"] == {"optimizer.anneal_k": 0.1, "optimizer.anneal_t0": 250}
    assert (chosen["median"], chosen["max"]) == (0.66, 0.70)
    vanilla = records[("adamw", "mrpc")]
    assert vanilla["selected"] == {} and vanilla["median"] == 0.79 and vanilla["max"] == 0.80

    table = invoke("compare", str(root), "--table", "main", "--format", "markdown")
    assert table.exit_code == 0, table.output
    assert "| RecAdam | median | **86.0** | **66.0** | **76.0** |" in table.stdout
    assert "RecAdam / MRPC: optimizer.anneal_k=0.5, optimizer.anneal_t0=250 (best median on dev of 3 settings)" in table.stdout


def test_a_method_s_keys_do_not_name_the_runs_that_leave_it_off(tmp_path):
    """A vanilla run's keep.texts and model.lora.alpha are read by no method it runs: beside an anchor on the
    pool and a LoRA run they neither split nor name it (reports said 'vanilla fine-tuning, keep.texts=task,
    keep.batch_size=0, model.lora.alpha=16, ...')."""
    edits = {"vanilla": {}, "anchor": {"keep": {"embeddings": 1.0, "texts": "pool", "batch_size": 8}},
             "lora": {"model": {"lora": {"r": 8, "alpha": 32}}}}
    for name, sections in edits.items():
        for seed in (1, 2):
            run = fake_run(tmp_path, f"{name}_s{seed}", optimizer="adamw", seed=seed)
            config = yaml.safe_load((run / "config.yaml").read_text())
            for section, values in sections.items():
                for key, value in values.items():
                    if isinstance(value, dict):
                        config[section][key].update(value)
                    else:
                        config[section][key] = value
            (run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    result = invoke("compare", str(tmp_path), "--format", "json")
    assert result.exit_code == 0, result.output
    assert sorted(g["name"] for g in json.loads(result.stdout)) == ["LoRA r=8", "embedding anchor 1", "vanilla fine-tuning"]


@pytest.mark.slow
def test_a_lora_variant_is_named_in_its_label(tmp_path):
    """A DoRA run was 'LoRA r=8' beside plain LoRA (issue 53): each variant (DoRA, PiSSA, CorDA, rsLoRA)
    is in the name; plain LoRA keeps its name."""
    variants = {"plain": {}, "dora": {"use_dora": True}, "pissa": {"init": "pissa"}, "corda": {"init": "corda"},
                "rslora": {"use_rslora": True}, "both": {"init": "pissa", "use_dora": True}}
    for name, lora in variants.items():
        for seed in (1, 2):
            run = fake_run(tmp_path, f"{name}_s{seed}", optimizer="adamw", seed=seed)
            config = yaml.safe_load((run / "config.yaml").read_text())
            config["model"]["lora"].update(r=8, **lora)
            (run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    result = invoke("compare", str(tmp_path), "--format", "json")
    assert result.exit_code == 0, result.output
    assert sorted(g["name"] for g in json.loads(result.stdout)) == [
        "LoRA r=8", "LoRA r=8 CorDA", "LoRA r=8 DoRA", "LoRA r=8 PiSSA", "LoRA r=8 PiSSA DoRA", "LoRA r=8 rsLoRA"]
