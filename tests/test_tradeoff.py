"""`recall tradeoff` on hand-written run directories and records, where every number is known: the
setting --within chooses and why, its JSON, the boundary, the families drawn as lines, the figure's
names, axes and one-class line, and every bad input (one line, exit 2, no figure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from recall_cli.cli import app
from recall_cli.recipe import build_recipe

from conftest import GLUE

runner = CliRunner()
DATA_DIRS = {"mrpc": GLUE / "MRPC", "sst2": GLUE / "SST-2", "cola": GLUE / "CoLA"}
PRETRAINED = "pkg:tiny"


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], terminal_width=200)


def fake(root: Path, name: str, *, main: float, kept: float | None, task="sst2", optimizer="recadam", init="pretrained",
         floor: float | None = None, seed=1, drift=0.2, probes=True, record: dict | None = None,
         holdout: float | None = None, task_keys: dict | None = None, train_keys: dict | None = None,
         sections: dict | None = None) -> Path:
    """A finished run (or, with ``record``, a scored record) whose final eval scores ``main`` and whose
    final probe keeps ``kept`` of the STS skill. With ``holdout``, a run that held out part of train
    (task.holdout): its evaluations scored the holdout (the last one ``holdout``) and dev (``main``) was
    scored once at the end."""
    run = root / name
    run.mkdir(parents=True)
    optim = {"name": optimizer, **({"recall_floor": floor} if floor is not None else {})}
    raw = {"model": {"name_or_path": PRETRAINED, "init": init},
           "task": {"name": task, "data_dir": str(DATA_DIRS[task]), **({"holdout": 0.1} if holdout is not None else {}),
                    **(task_keys or {})},
           "optimizer": optim, "train": {"max_steps": 100, "seed": seed, **(train_keys or {})},
           "output_dir": str(run), **(sections or {})}
    recipe, problems = build_recipe(raw, check_files=False)
    assert not problems, problems
    config = recipe.to_dict()
    if record is not None:
        config["record"] = {"checkpoint": f"merges/{name}", "against": PRETRAINED, **record}
    (run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    metric = "mcc" if task == "cola" else "accuracy"
    scores = lambda v: {metric: v, "main": v}  # noqa: E731
    if holdout is not None:
        lines = [{"step": 50, "split": "eval", "data": "holdout", **scores(holdout - 0.01)},
                 {"step": 100, "split": "eval", "data": "holdout", **scores(holdout)},
                 {"step": 100, "split": "test", "data": "dev", **scores(main)}]
        final = {"step": 100, **scores(main), "holdout": scores(holdout), "dev": scores(main)}
    else:
        lines = [{"step": 100, "split": "eval", **scores(main)}]
        final = {"step": 100, **scores(main)}
    if probes and kept is not None:
        lines.append({"step": 100, "split": "probe", "sts_retained": kept, "cka": 0.5, "drift": drift})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (run / "summary.json").write_text(json.dumps({"task": task, "finished": True, "final": final, "best": final,
                                                  "seed": seed}))
    return run


def seeds(root: Path, name: str, main: float, kept: float, **kwargs) -> None:
    """Three seeds whose medians are exactly ``main`` and ``kept`` (the others around them)."""
    for seed, dm, dk in ((1, -0.002, 0.01), (2, 0.0, 0.0), (3, 0.004, -0.02)):
        fake(root, f"{name}_s{seed}", main=main + dm, kept=kept + dk, seed=seed, **kwargs)


# A floor sweep on SST-2 (seeds 1-3): the floor buys skill with task score. Medians (main, kept):
FLOORS = {0.0: (0.845, 0.72), 0.005: (0.840, 0.80), 0.01: (0.835, 0.86), 0.02: (0.820, 0.95)}


@pytest.fixture
def floor_sweep(tmp_path) -> Path:
    root = tmp_path / "sweep"
    for floor, (main, kept) in FLOORS.items():
        # drift falls as the floor rises, except that 0.02 drifts a little more than 0.01
        seeds(root, f"floor{floor:g}", main, kept, floor=floor, drift={0.0: 0.4, 0.005: 0.3, 0.01: 0.1, 0.02: 0.15}[floor])
    return root


@pytest.mark.slow
def test_within_names_the_setting_that_keeps_the_most_skill(floor_sweep, tmp_path):
    figure = tmp_path / "t.png"
    result = invoke("tradeoff", floor_sweep, "--within", "1.0", "--out", figure, "--json")
    assert result.exit_code == 0, result.output
    (choice,) = json.loads(result.stdout)
    # 84.5 - 83.5 is 1.0000000000000009 in floats: the boundary counts as within.
    assert choice["task"] == "sst2" and choice["settings"] == {"optimizer.recall_floor": 0.01}
    assert choice["main"] == pytest.approx(0.835) and choice["sts_retained"] == pytest.approx(0.86) and choice["n"] == 3
    assert choice["name"] == "RecAdam floor 0.01" and choice["within"] == 1.0
    assert choice["best"]["settings"] == {"optimizer.recall_floor": 0.0} and choice["best"]["main"] == pytest.approx(0.845)
    candidates = {c["settings"]["optimizer.recall_floor"]: c for c in choice["candidates"]}
    assert list(candidates) == [0.0, 0.005, 0.01, 0.02]  # the family's order, weakest first
    for floor, (main, kept) in FLOORS.items():
        c = candidates[floor]
        assert c["main"] == pytest.approx(main) and c["sts_retained"] == pytest.approx(kept) and c["n"] == 3
        assert c["within"] is (floor != 0.02)
    assert figure.is_file()

    text = invoke("tradeoff", floor_sweep, "--within", "1", "--out", figure)
    assert text.exit_code == 0, text.output
    assert text.stdout.splitlines() == [
        ("SST-2: RecAdam floor 0.01 — main 83.5, sts_retained 86.0 (medians of 3 runs): the highest sts_retained of "
         "the 3 of 4 settings whose main is within 1 point of the best, 84.5 (RecAdam)"),
        f"figure: {figure}",
    ]


@pytest.mark.parametrize("within, floor, inside", [
    ("0.99", 0.005, 2),  # 83.5 is 1.0 point below 84.5: out of 0.99
    ("0", 0.0, 1),  # only the best itself
    ("2.5", 0.02, 4),  # 82.0 is 2.5 points below: in
    ("2.49", 0.01, 3),
])
@pytest.mark.slow
def test_within_at_the_boundary(floor_sweep, tmp_path, within, floor, inside):
    result = invoke("tradeoff", floor_sweep, "--within", within, "--out", tmp_path / "t.png", "--json")
    assert result.exit_code == 0, result.output
    (choice,) = json.loads(result.stdout)
    assert choice["settings"] == {"optimizer.recall_floor": floor}
    assert sum(c["within"] for c in choice["candidates"]) == inside


@pytest.mark.slow
def test_a_lower_is_better_y_chooses_the_lowest(floor_sweep, tmp_path):
    result = invoke("tradeoff", floor_sweep, "--y", "drift", "--within", "2.5", "--out", tmp_path / "t.png", "--json")
    assert result.exit_code == 0, result.output
    (choice,) = json.loads(result.stdout)
    assert choice["settings"] == {"optimizer.recall_floor": 0.01} and choice["drift"] == pytest.approx(0.1)
    line = invoke("tradeoff", floor_sweep, "--y", "drift", "--within", "2.5", "--out", tmp_path / "t.png").stdout
    assert "the lowest drift of the 4 of 4 settings" in line and "drift 10.0" in line


@pytest.mark.slow
def test_without_within_each_setting_is_named_as_compare_names_it(floor_sweep, tmp_path):
    result = invoke("tradeoff", floor_sweep, "--out", tmp_path / "t.png")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [  # in the order the folders list: floor0.005_s1 ... floor0_s3
        "sst2 / RecAdam floor 0.005: n=3 median main=0.8400 sts_retained=0.8000",
        "sst2 / RecAdam floor 0.01: n=3 median main=0.8350 sts_retained=0.8600",
        "sst2 / RecAdam floor 0.02: n=3 median main=0.8200 sts_retained=0.9500",
        "sst2 / RecAdam: n=3 median main=0.8450 sts_retained=0.7200",
        f"figure: {tmp_path / 't.png'}",
    ]
    rows = json.loads(invoke("tradeoff", floor_sweep, "--out", tmp_path / "t.png", "--json").stdout)
    assert set(rows[0]) == {"label", "task", "settings", "points", "median"} and len(rows) == 4


# ---- the figure ------------------------------------------------------------------------------------


@pytest.fixture
def study(tmp_path) -> Path:
    """MRPC: vanilla, RecAdam as published and floors 0.01 and 0.002, WiSE-FT at three α and RECALL
    with θ* at three τ (each on disk in no particular order),
    a RECALL merge of three runs; CoLA: vanilla and RecAdam only."""
    root = tmp_path / "study"
    seeds(root, "mrpc/vanilla", 0.76, 0.55, task="mrpc", optimizer="adamw")
    for name, floor, main, kept in (("a", 0.01, 0.75, 0.85), ("b", 0.0, 0.757, 0.58), ("c", 0.002, 0.759, 0.6)):
        seeds(root, f"mrpc/recadam_{name}", main, kept, task="mrpc", floor=floor)
    for alpha, main, kept in ((0.75, 0.755, 0.8), (0.25, 0.70, 0.99), (0.5, 0.73, 0.95)):
        models, weights = [PRETRAINED, "runs/vanilla/last"], [round(1 - alpha, 6), alpha]
        seeds(root, f"mrpc/wise{alpha}", main, kept, task="mrpc", optimizer="adamw",
              record={"merge": "linear", "with": ["pretrained"], "models": models, "weights": weights})
    for tau, main, kept in ((0.2, 0.74, 0.7), (0.01, 0.72, 0.9), (0.05, 0.73, 0.8)):
        seeds(root, f"mrpc/recall{tau}", main, kept, task="mrpc", optimizer="adamw",
              record={"merge": "recall", "with": ["pretrained"], "models": [PRETRAINED, "runs/vanilla/last"],
                      "temperature": tau, "gamma_rule": "hidden"})
    seeds(root, "mrpc/tasks", 0.6, 0.9, task="mrpc", optimizer="adamw",
          record={"merge": "recall", "with": ["vanilla", "vanilla"], "models": ["a", "b", "c"], "temperature": 0.05,
                  "gamma_rule": "hidden"})
    seeds(root, "cola/vanilla", 0.2, 0.6, task="cola", optimizer="adamw")
    seeds(root, "cola/recadam", 0.19, 0.7, task="cola", floor=0.0)
    return root


def spy_figures(monkeypatch) -> dict:
    """What each saved figure holds, read just before it is written."""
    import matplotlib.figure

    drawn = {}
    savefig = matplotlib.figure.Figure.savefig

    def spy(fig, fname, *args, **kwargs):
        legend = fig.legends[0] if fig.legends else None
        drawn[Path(fname).name.removeprefix(".").removesuffix(".tmp")] = {
            "legend": [t.get_text() for t in legend.get_texts()] if legend else [],
            "axes": {ax.get_title(): {"xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
                                      "lines": [(line.get_linestyle(), list(line.get_xdata()), list(line.get_ydata()))
                                                for line in ax.lines], "xlim": ax.get_xlim()} for ax in fig.axes},
        }
        return savefig(fig, fname, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    return drawn


@pytest.mark.slow
def test_families_are_lines_from_weakest_to_strongest(study, tmp_path, monkeypatch):
    from recall_cli.report import dev_label_shares, load_runs

    drawn = spy_figures(monkeypatch)
    result = invoke("tradeoff", study, "--out", tmp_path / "t.png")
    assert result.exit_code == 0, result.output
    fig = drawn["t.png"]
    mrpc, cola = fig["axes"]["MRPC"], fig["axes"]["CoLA"]
    lines = {style: [(round(x, 9), round(y, 9)) for x, y in zip(xs, ys)] for style, xs, ys in mrpc["lines"] if style != "--"}
    # RecAdam floors 0 -> 0.002 -> 0.01; WiSE-FT α 0.25 -> 0.5 -> 0.75 -> 1 (the vanilla runs); RECALL τ 0.01 -> 0.05 -> 0.2.
    assert lines["-"] == [(75.7, 58.0), (75.9, 60.0), (75.0, 85.0)]
    assert lines["-."] == [(70.0, 99.0), (73.0, 95.0), (75.5, 80.0), (76.0, 55.0)]
    assert lines[":"] == [(72.0, 90.0), (73.0, 80.0), (74.0, 70.0)]
    assert len(mrpc["lines"]) == 4  # three families and the one-class line
    # CoLA: RecAdam and vanilla, no family of two; the one-class line at MCC 0 lies 19 points from every
    # run, outside the frame around the points (issue 32: it squeezed them against the edge), so not drawn.
    assert cola["lines"] == [] and 15 < cola["xlim"][0] < 19 and 20 < cola["xlim"][1] < 25
    shares = dev_label_shares(load_runs(study / "mrpc")[0].settings)
    (one_class,) = [xs for style, xs, _ in mrpc["lines"] if style == "--"]
    assert one_class == pytest.approx([100 * max(shares.values())] * 2) and 60 < one_class[0] < 75

    assert mrpc["xlabel"] == "dev accuracy ×100" and cola["xlabel"] == "dev MCC ×100"
    assert mrpc["ylabel"] == "STS skill kept, % of pretrained"
    assert fig["legend"][:12] == [
        "vanilla fine-tuning", "RecAdam", "RecAdam floor 0.002", "RecAdam floor 0.01",
        "WiSE-FT α=0.25", "WiSE-FT α=0.5", "WiSE-FT α=0.75",
        "RECALL τ=0.01 with θ*", "RECALL τ=0.05 with θ*", "RECALL τ=0.2 with θ*", "RECALL merge of 3 runs, τ=0.05",
        "RecAdam floor 0 → 0.01",
    ]
    assert fig["legend"][12:] == ["WiSE-FT α 0.25 → 1 (1: the fine-tuned runs)", "RECALL τ 0.01 → 0.2",
                                  "one class for every example (MCC 0, majority share)"]
    assert not any("merge=" in text or "weights=" in text for text in fig["legend"])


@pytest.mark.slow
def test_within_marks_the_choice_on_the_figure(study, tmp_path, monkeypatch):
    drawn = spy_figures(monkeypatch)
    result = invoke("tradeoff", study, "--within", "0.5", "--out", tmp_path / "t.png", "--json")
    assert result.exit_code == 0, result.output
    cola, mrpc = json.loads(result.stdout)  # the paper's column order
    # MRPC: best 76.0 (vanilla); within 0.5: vanilla, floor 0.002 (75.9), RecAdam (75.7), α 0.75 (75.5).
    assert mrpc["name"] == "WiSE-FT α=0.75" and mrpc["sts_retained"] == pytest.approx(0.8)
    assert mrpc["settings"] == {"optimizer.name": "adamw", "record.merge": "linear",
                                "record.with": ["pretrained"], "record.weights": [0.25, 0.75]}
    assert [c["name"] for c in mrpc["candidates"] if c["within"]] == [
        "vanilla fine-tuning", "RecAdam", "RecAdam floor 0.002", "WiSE-FT α=0.75"]
    # CoLA: RecAdam is 1 point below vanilla, out of 0.5: the best is the only candidate.
    assert cola["name"] == "vanilla fine-tuning" and cola["main"] == pytest.approx(0.2)
    assert [c["within"] for c in cola["candidates"]] == [True, False]
    assert drawn["t.png"]["legend"][-2:] == ["within 0.5 points of the best median",
                                              "chosen: keeps the most skill in the band"]


def test_names_of_settings():
    from recall_cli.report.families import describe, wise_alpha

    vanilla = {"optimizer.name": "adamw", "model.init": "pretrained"}
    recadam = {"optimizer.name": "recadam", "model.init": "random", "optimizer.recall_floor": 0.02}
    wise = {**vanilla, "record.merge": "linear", "record.with": ["pretrained"], "record.weights": [0.75, 0.25]}
    full_wise = {**wise, "record.models": ["runs/x/last", PRETRAINED], "record.against": PRETRAINED}
    assert wise_alpha(full_wise) == 0.75  # θ* is the second model: α is the first weight
    recall = {**vanilla, "record.merge": "recall", "record.with": ["pretrained"], "record.temperature": 0.05,
              "record.gamma_rule": "median"}
    linear3 = {**vanilla, "record.merge": "linear", "record.with": ["vanilla", "vanilla"], "record.weights": [0.5, 0.25, 0.25]}
    wise_of_recadam = {**recadam, "record.merge": "linear", "record.with": ["pretrained"], "record.weights": [0.5, 0.5]}
    names = [d.name for d in describe([(vanilla, vanilla), (recadam, recadam), (wise, full_wise), (recall, recall),
                                       (linear3, linear3), (wise_of_recadam, wise_of_recadam)])]
    assert names == ["vanilla fine-tuning", "RecAdam + RI floor 0.02", "WiSE-FT α=0.75", "RECALL γ=median with θ*",
                     "linear merge of 3 runs, weights=0.5,0.25,0.25", "WiSE-FT α=0.5 of RecAdam + RI floor 0.02"]
    # A sweep of k alone keeps group_label's words; two settings that would read alike get their label.
    assert [d.name for d in describe([({"optimizer.anneal_k": 0.1}, recadam), ({"optimizer.anneal_k": 1.0}, recadam)])] == [
        "k=0.1", "k=1"]


# ---- bad input -------------------------------------------------------------------------------------


def one_line_error(result, *parts):
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for part in parts:
        assert part in lines[0], lines[0]


def test_no_runs(tmp_path):
    (tmp_path / "empty").mkdir()
    one_line_error(invoke("tradeoff", tmp_path / "empty", "--within", "1", "--out", tmp_path / "t.png"),
                   "no recall run directories under")
    assert not (tmp_path / "t.png").exists()


@pytest.mark.slow
def test_a_task_without_probes_is_named(floor_sweep, tmp_path):
    seeds(floor_sweep, "cola", 0.2, 0.6, task="cola", optimizer="adamw", probes=False)
    figure = tmp_path / "t.png"
    one_line_error(invoke("tradeoff", floor_sweep, "--within", "1", "--out", figure),
                   "task cola: none of its 3 finished runs has sts_retained", "probes were off", "probe.enabled false")
    assert not figure.exists()
    assert invoke("tradeoff", floor_sweep, "--out", figure).exit_code == 0  # without --within: as before
    # A probe measure that no run recorded: the runs' probes were off, or without that probe.
    one_line_error(invoke("tradeoff", floor_sweep, "--y", "mlm_ratio", "--within", "1", "--out", tmp_path / "m.png"),
                   "no finished run records both main (eval) and mlm_ratio (probe)", "probes on")


@pytest.mark.parametrize("value", ["-1", "-0.5", "nan", "inf", "-inf"])
def test_within_must_be_a_finite_number_of_points(floor_sweep, tmp_path, value):
    figure = tmp_path / "t.png"
    one_line_error(invoke("tradeoff", floor_sweep, "--within", value, "--out", figure), "--within",
                   "finite number of points >= 0")
    assert not figure.exists()


@pytest.mark.parametrize("option, value, hint", [("--x", "mian", "did you mean 'main'?"),
                                                  ("--y", "sts_retaind", "did you mean 'sts_retained'?"),
                                                  ("--y", "kept", "")])
@pytest.mark.slow
def test_a_misspelt_metric_is_named_with_the_known_ones(floor_sweep, tmp_path, option, value, hint):
    figure = tmp_path / "t.png"
    for extra in ([], ["--within", "1"]):
        one_line_error(invoke("tradeoff", floor_sweep, option, value, "--out", figure, *extra),
                       f"unknown {option} metric '{value}'", hint,
                       "these runs record accuracy, cka, drift, main, sts_retained")
    assert not figure.exists()


def test_forgetting_figure_draws_the_penalty_weight_of_floored_runs(tmp_path, monkeypatch):
    """Runs with a recall_floor log penalty_weight; panel (c) draws it dotted beside lambda(t)."""
    from recall_cli.report import forgetting_groups, load_runs
    from recall_cli.report import plots

    weights = {0.01: [0.5, 0.2, 0.01, 0.01], 0.05: [0.5, 0.2, 0.05, 0.05]}
    for floor, pull in weights.items():
        run = fake(tmp_path / "runs", f"floor{floor:g}_s1", main=0.8, kept=0.9, floor=floor)
        train = [{"step": s, "split": "train", "loss": 0.5, "lambda": 1 - w if w > floor else 0.99, "penalty_weight": w,
                  "distance": 0.1 * s} for s, w in zip((10, 20, 30, 40), pull)]
        with open(run / "metrics.jsonl", "a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in train))
    captured = {}
    monkeypatch.setattr(plots, "save_figure", lambda fig, plt, out, dpi: captured.setdefault("fig", fig) and out)
    plots.forgetting_figure(forgetting_groups(load_runs(tmp_path / "runs")), tmp_path / "f.png")
    ax_lambda = captured["fig"].axes[2]
    dotted = {tuple(line.get_ydata()) for line in ax_lambda.get_lines() if line.get_linestyle() == ":"}
    assert dotted == {tuple(w) for w in weights.values()}
    assert "penalty's weight" in ax_lambda.get_title()


@pytest.mark.slow
def test_several_folders_are_read_as_one_set(floor_sweep, tmp_path):
    """compare and tradeoff take several folders (e.g. two sweeps' --out); a run named twice counts once."""
    other = tmp_path / "vanilla"
    seeds(other, "adamw", 0.85, 0.7, optimizer="adamw")
    result = invoke("tradeoff", floor_sweep, other, floor_sweep / "floor0.01_s1", "--within", "1.0", "--json",
                    "--out", tmp_path / "t.png")
    assert result.exit_code == 0, result.output
    (choice,) = json.loads(result.stdout)
    # vanilla (85.0) is now the best score: floor 0.005 (84.0) is the most skill within 1 point of it
    assert choice["settings"] == {"optimizer.name": "recadam", "optimizer.recall_floor": 0.005}
    names = {c["name"]: c["n"] for c in choice["candidates"]}
    assert names["vanilla fine-tuning"] == 3 and names["RecAdam floor 0.01"] == 3
    table = invoke("compare", floor_sweep, other, "--format", "json", "--stats", "median")
    assert table.exit_code == 0 and {r["n"] for r in json.loads(table.stdout)} == {3}
    assert len(json.loads(table.stdout)) == 5
    missing = invoke("compare", tmp_path / "nope", other)
    assert missing.exit_code == 2 and "nope is not a folder" in missing.output


def test_a_family_has_one_hue_in_every_figure():
    """Colours follow the family, not the position in a legend: RecAdam is blue whether or not a figure
    also holds floors (then its shades, lightest the weakest), vanilla is black, WiSE-FT pink."""
    from recall_cli.report.families import family_colors, hue_family, hues

    HUES = hues()

    vanilla = {"optimizer.name": "adamw"}
    recadam = {"optimizer.name": "recadam", "optimizer.recall_floor": 0.0}
    floor = {"optimizer.name": "recadam", "optimizer.recall_floor": 0.01}
    wise = {"optimizer.name": "adamw", "record.merge": "linear", "record.with": ["pretrained"],
            "record.weights": [0.5, 0.5], "model.name_or_path": "m", "record.models": ["m", "runs/a"]}
    lora = {"optimizer.name": "adamw", "model.lora.r": 8}
    assert [hue_family(f) for f in (vanilla, recadam, floor, wise, lora)] == ["vanilla", "recadam", "recadam", "wise", "lora"]
    alone = family_colors([("v", vanilla), ("r", recadam)])
    assert alone == {"v": HUES["vanilla"], "r": HUES["recadam"]}
    beside = family_colors([("v", vanilla), ("w", wise), ("r", recadam), ("f", floor)])
    assert beside["v"] == HUES["vanilla"] and beside["w"] == HUES["wise"] and beside["f"] == HUES["recadam"]
    assert beside["r"] != beside["f"] and beside["r"].startswith("#")  # the weaker RecAdam: a lighter blue
    assert int(beside["r"][1:3], 16) > int(HUES["recadam"][1:3], 16)
    after_lpft = {**wise, "train.linear_probe_steps": 10}  # a WiSE-FT line of its own, beside vanilla's
    assert hue_family(after_lpft) == "wise_lpft" and family_colors([("a", after_lpft)])["a"] == HUES["wise_lpft"]
    # One setting on two tasks' curves: one colour (the key is the task-free name).
    assert family_colors([("vanilla", vanilla), ("vanilla", vanilla)]) == {"vanilla": HUES["vanilla"]}

