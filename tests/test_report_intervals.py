"""compare --against (paired bootstrap intervals over seeds), tradeoff --select-on holdout, groupings by
what changes the result only, one name per setting, and tables that fit 80-100 columns — on hand-written
run directories whose every number is known (issues 29 item 2, 32 items 2 and 7)."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml


from test_tradeoff import PRETRAINED, fake, invoke, one_line_error

REPO = Path(__file__).resolve().parents[1]
SEEDS = (1, 2, 3, 4, 5)


def run_dir(root: Path, name: str, *, dev: float, kept: float | None = 0.8, task="mrpc", optimizer="adamw",
            **keys) -> Path:
    """test_tradeoff.fake with this file's defaults (MRPC, adamw): a finished run (a scored record with
    ``record``) whose final dev score is ``dev``, whose last probe keeps ``kept`` of the STS skill (None:
    no probe) and, with ``holdout``, which held out part of train (task.holdout)."""
    return fake(root, name, main=dev, kept=kept, task=task, optimizer=optimizer, **keys)


def direct_interval(d: list[float], level=0.95, resamples=10_000, seed=0) -> tuple[float, float]:
    """The documented procedure, written out: resample the seeds with replacement, mean, percentiles."""
    d = np.asarray(d, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(resamples, len(d)))].mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


# ---- the interval itself ---------------------------------------------------------------------------

VANILLA_DEV = (0.800, 0.820, 0.790, 0.810, 0.830)
METHOD_DEV = (0.795, 0.800, 0.800, 0.805, 0.820)  # d = -0.005, -0.02, +0.01, -0.005, -0.01
VANILLA_KEPT = (0.70, 0.72, 0.69, 0.71, 0.73)
METHOD_KEPT = (0.90, 0.88, 0.91, 0.89, 0.92)  # d = +0.20, +0.16, +0.22, +0.18, +0.19


def test_paired_interval_is_the_bootstrap_of_the_mean_paired_difference():
    from recall_cli.report.intervals import paired_interval

    method = dict(zip(SEEDS, METHOD_DEV))
    vanilla = dict(zip(SEEDS, VANILLA_DEV))
    interval = paired_interval(method, vanilla)
    d = [m - v for m, v in zip(METHOD_DEV, VANILLA_DEV)]
    assert interval.seeds == SEEDS and interval.n == 5
    assert interval.difference == pytest.approx(-0.006)
    assert (interval.low, interval.high) == pytest.approx(direct_interval(d), abs=1e-15)
    # Against the exact bootstrap distribution (all 5^5 = 3125 resamples, each equally likely): the
    # 10,000 random resamples put the ends within 0.1 points of it.
    exact = [float(np.mean(pick)) for pick in itertools.product(d, repeat=5)]
    low, high = np.quantile(exact, [0.025, 0.975])
    assert interval.low == pytest.approx(low, abs=1e-3) and interval.high == pytest.approx(high, abs=1e-3)
    assert interval.low < interval.difference < interval.high
    # A wider level gives a wider interval; the same inputs give the same numbers (a fixed generator).
    wide = paired_interval(method, vanilla, level=0.99)
    assert wide.low <= interval.low and wide.high >= interval.high
    assert paired_interval(method, vanilla) == interval

    # Only the seeds both ran are paired; a seed run twice counts as the mean of its runs.
    partial = paired_interval({1: 0.5, 2: 0.6, 9: 0.9}, {1: 0.4, 2: 0.4, 3: 0.1})
    assert partial.seeds == (1, 2) and partial.difference == pytest.approx(0.15)
    one = paired_interval({1: 0.5, 2: 0.6}, {2: 0.4})
    assert one.low is None and one.high is None and one.difference == pytest.approx(0.2)
    assert "1 seed in common" in one.note and "seed 2" in one.note
    none = paired_interval({1: 0.5}, {2: 0.4})
    assert none.difference is None and none.n == 0 and "no seed in common" in none.note
    from recall_cli.report.intervals import by_seed
    assert by_seed([1, 1, 2], [0.2, 0.4, 0.5]) == {1: pytest.approx(0.3), 2: 0.5}


def test_over_fewer_than_5_seeds_the_interval_is_the_seeds_range_and_is_named_so(tmp_path):
    """Issue 53: a bootstrap over 2-4 seeds is (at 2 and 3 seeds exactly) the range of the per-seed
    differences; it is computed and labelled as that range, never as a 95% CI."""
    from recall_cli.report.intervals import paired_interval

    d = [-0.005, -0.02, 0.01]
    three = paired_interval(dict(zip((1, 2, 3), METHOD_DEV)), dict(zip((1, 2, 3), VANILLA_DEV)))
    assert three.kind == "range" and (three.low, three.high) == pytest.approx((min(d), max(d)))
    # the same numbers the percentile bootstrap gave over 3 seeds: each end is drawn on 1/27 > 2.5 % of resamples
    assert (three.low, three.high) == pytest.approx(direct_interval(d), abs=1e-12)
    assert three.to_dict()["kind"] == "range"
    four = paired_interval(dict(zip((1, 2, 3, 4), METHOD_DEV)), dict(zip((1, 2, 3, 4), VANILLA_DEV)))
    assert four.kind == "range" and (four.low, four.high) == pytest.approx((-0.02, 0.01))
    five = paired_interval(dict(zip(SEEDS, METHOD_DEV)), dict(zip(SEEDS, VANILLA_DEV)))
    assert five.kind == "bootstrap"

    runs = tmp_path / "runs"
    wise = {"merge": "linear", "with": ["pretrained"], "models": [PRETRAINED, "runs/vanilla/last"], "weights": [0.25, 0.75]}
    for seed, vd, md_, vk, mk in list(zip(SEEDS, VANILLA_DEV, METHOD_DEV, VANILLA_KEPT, METHOD_KEPT))[:3]:
        run_dir(runs, f"vanilla/s{seed}", dev=vd, kept=vk, seed=seed)
        run_dir(runs, f"wise/s{seed}", dev=md_, kept=mk, seed=seed, record=wise)
    md = invoke("compare", runs, "--against", "vanilla", "--stats", "median", "--format", "markdown").stdout
    assert f"|  | range | [{100 * min(d):+.1f}, {100 * max(d):+.1f}] |" in md and "95% CI" not in md
    assert "range: the lowest and highest per-seed difference (fewer than 5 seeds" in md


@pytest.fixture
def paired(tmp_path) -> Path:
    """MRPC, seeds 1-5: vanilla and WiSE-FT α 0.75; a third setting (RecAdam) ran seed 1 only."""
    root = tmp_path / "runs"
    wise = {"merge": "linear", "with": ["pretrained"], "models": [PRETRAINED, "runs/vanilla/last"], "weights": [0.25, 0.75]}
    for seed, (vd, md, vk, mk) in zip(SEEDS, zip(VANILLA_DEV, METHOD_DEV, VANILLA_KEPT, METHOD_KEPT)):
        run_dir(root, f"vanilla/s{seed}", dev=vd, kept=vk, seed=seed)
        run_dir(root, f"wise/s{seed}", dev=md, kept=mk, seed=seed, record=wise)
    run_dir(root, "recadam/s1", dev=0.81, kept=0.75, seed=1, optimizer="recadam")
    return root


@pytest.mark.slow
def test_compare_against_gives_each_setting_its_interval_in_json_and_csv(paired):
    result = invoke("compare", paired, "--against", "vanilla", "--format", "json")
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert set(rows) == {"vanilla fine-tuning", "WiSE-FT α=0.75", "RecAdam"}
    assert rows["WiSE-FT α=0.75"]["group"] == "vanilla fine-tuning, merge=linear, with=pretrained, weights=0.25,0.75"
    assert rows["vanilla fine-tuning"]["against"]["reference"] is True
    against = rows["WiSE-FT α=0.75"]["against"]
    assert against["name"] == "vanilla fine-tuning" and against["level"] == 0.95
    assert against["resamples"] == 10_000 and against["bootstrap_seed"] == 0
    for metric, a, b in (("main", METHOD_DEV, VANILLA_DEV), ("sts_retained", METHOD_KEPT, VANILLA_KEPT)):
        d = [x - y for x, y in zip(a, b)]
        interval = against[metric]
        assert interval["n"] == 5 and interval["seeds"] == [1, 2, 3, 4, 5]
        assert interval["difference"] == pytest.approx(np.mean(d))
        assert (interval["low"], interval["high"]) == pytest.approx(direct_interval(d), abs=1e-15)
    assert against["sts_retained"]["low"] > 0.15  # kept more on every resample
    lone = rows["RecAdam"]["against"]["main"]
    assert lone["n"] == 1 and lone["low"] is None and "1 seed in common" in lone["note"]
    assert rows["RecAdam"]["seeds"] == [1] and rows["vanilla fine-tuning"]["seeds"] == [1, 2, 3, 4, 5]

    csv_text = invoke("compare", paired, "--against", "vanilla", "--format", "csv").stdout
    import csv
    import io

    table = {r["name"]: r for r in csv.DictReader(io.StringIO(csv_text))}
    low, high = direct_interval([x - y for x, y in zip(METHOD_DEV, VANILLA_DEV)])
    assert float(table["WiSE-FT α=0.75"]["main_low"]) == pytest.approx(low)
    assert float(table["WiSE-FT α=0.75"]["main_high"]) == pytest.approx(high)
    assert table["WiSE-FT α=0.75"]["main_seeds"] == "1;2;3;4;5" and table["RecAdam"]["main_low"] == ""


@pytest.mark.slow
def test_compare_against_in_the_table_and_markdown(paired, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    result = invoke("compare", paired, "--against", "vanilla", "--stats", "median")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    low, high = direct_interval([x - y for x, y in zip(METHOD_DEV, VANILLA_DEV)])
    klow, khigh = direct_interval([x - y for x, y in zip(METHOD_KEPT, VANILLA_KEPT)])
    wise = lines.index(next(line for line in lines if line.startswith("WiSE-FT α=0.75")))
    cells = [re.split(r"\s{2,}", line.strip()) for line in lines[wise:wise + 6]]
    assert cells == [["WiSE-FT α=0.75", "median", "80.0"], ["n", "5"], ["Δ main", "-0.6"],
                     ["95% CI", f"[{100 * low:+.1f}, {100 * high:+.1f}]"], ["Δ kept", "+19.0"],
                     ["95% CI", f"[{100 * klow:+.1f}, {100 * khigh:+.1f}]"]]
    recadam = lines.index(next(line for line in lines if line.startswith("RecAdam")))
    assert re.split(r"\s{2,}", lines[recadam + 3].strip()) == ["95% CI", "n/a"]
    assert "paired bootstrap percentile interval, 10,000 resamples" in result.stdout
    assert "every interval: paired over seeds 1-5 (n=5)" in result.stdout
    assert "RecAdam / MRPC (main): n/a: 1 seed in common with the reference (seed 1)" in result.stdout
    assert all(len(line) <= 80 for line in lines[:lines.index(next(x for x in lines if x.startswith("Δ:")))])

    md = invoke("compare", paired, "--against", "vanilla", "--stats", "median", "--format", "markdown").stdout
    assert f"|  | 95% CI | [{100 * low:+.1f}, {100 * high:+.1f}] |" in md
    # markdown names rows by their keys unless told: the committed study's tables are made so
    assert "| vanilla fine-tuning, merge=linear, with=pretrained, weights=0.25,0.75 | median | 80.0 |" in md
    named = invoke("compare", paired, "--stats", "median", "--format", "markdown", "--labels", "names").stdout
    assert "| WiSE-FT α=0.75 | median | 80.0 |" in named and "merge=" not in named


@pytest.mark.parametrize("args, message", [
    (["--against", "nothing"], "--against 'nothing': no setting is called that; the settings are: vanilla fine-tuning;"),
    (["--against", "a"], "--against 'a' names"),
    (["--against", "vanilla", "--ci", "1.5"], "--ci 1.5: give the interval's level as a fraction in (0, 1)"),
    (["--ci", "0.9"], "--ci sets the level of --against's intervals: give --against SETTING too"),
    (["--labels", "short"], "unknown --labels 'short'"),
])
def test_compare_against_bad_input_is_one_line_exit_2(paired, args, message):
    one_line_error(invoke("compare", paired, *args), message)


@pytest.mark.slow
def test_against_matches_names_before_labels(paired):
    # "vanilla" starts the label of the WiSE-FT rows too ("vanilla fine-tuning, merge=linear, ..."): the
    # name decides. A label given whole works, and so does a name's α without "=".
    for setting in ("vanilla", "Vanilla Fine-Tuning", "wise-ft α 0.75",
                    "vanilla fine-tuning, merge=linear, with=pretrained, weights=0.25,0.75"):
        result = invoke("compare", paired, "--against", setting, "--format", "json")
        assert result.exit_code == 0, (setting, result.output)
    rows = json.loads(invoke("compare", paired, "--against", "α 0.75", "--format", "json").stdout)
    assert {r["against"]["name"] for r in rows} == {"WiSE-FT α=0.75"}


# ---- tradeoff --select-on holdout -----------------------------------------------------------------

# MRPC, seeds 1-5 (medians: dev, holdout, kept):
#   vanilla      80.0  78.0  70    the best on dev and on the holdout
#   floor 0.01   79.5  76.0  90    within 1 point on dev, 2 points below on the holdout
#   floor 0.05   78.0  77.5  85    2 points below on dev, within 1 point on the holdout
HOLDOUT_STUDY = {
    "vanilla": dict(optimizer="adamw", dev=(0.800, 0.804, 0.796, 0.802, 0.798), holdout=(0.780, 0.784, 0.776, 0.782, 0.778),
                    kept=(0.70, 0.71, 0.69, 0.72, 0.68)),
    "floor0.01": dict(optimizer="recadam", floor=0.01, dev=(0.795, 0.793, 0.797, 0.799, 0.791),
                      holdout=(0.760, 0.762, 0.758, 0.761, 0.759), kept=(0.90, 0.91, 0.89, 0.92, 0.88)),
    "floor0.05": dict(optimizer="recadam", floor=0.05, dev=(0.780, 0.786, 0.774, 0.782, 0.778),
                      holdout=(0.775, 0.777, 0.773, 0.776, 0.774), kept=(0.85, 0.86, 0.84, 0.87, 0.83)),
}


@pytest.fixture
def holdout_study(tmp_path) -> Path:
    root = tmp_path / "study"
    for name, spec in HOLDOUT_STUDY.items():
        for i, seed in enumerate(SEEDS):
            run_dir(root, f"{name}/s{seed}", dev=spec["dev"][i], holdout=spec["holdout"][i], kept=spec["kept"][i],
                    seed=seed, optimizer=spec["optimizer"], floor=spec.get("floor"))
    return root


@pytest.mark.slow
def test_select_on_holdout_chooses_another_setting_than_dev_and_reports_dev(holdout_study, tmp_path):
    on_dev = invoke("tradeoff", holdout_study, "--within", "1", "--json", "--out", tmp_path / "d.png")
    assert on_dev.exit_code == 0, on_dev.output
    (dev_choice,) = json.loads(on_dev.stdout)
    assert dev_choice["name"] == "RecAdam floor 0.01" and "select_on" not in dev_choice  # today's choice, as before

    result = invoke("tradeoff", holdout_study, "--within", "1", "--select-on", "holdout", "--json", "--out", tmp_path / "h.png")
    assert result.exit_code == 0, result.output
    (choice,) = json.loads(result.stdout)
    assert choice["select_on"] == "holdout" and choice["name"] == "RecAdam floor 0.05"
    assert choice["holdout"]["main"] == pytest.approx(0.775)  # what chose it
    assert choice["main"] == pytest.approx(0.78) and choice["sts_retained"] == pytest.approx(0.85)  # what is reported: dev
    assert choice["best"]["name"] == "vanilla fine-tuning" and choice["best"]["holdout"]["main"] == pytest.approx(0.78)
    inside = {c["name"]: c["within"] for c in choice["candidates"]}
    assert inside == {"vanilla fine-tuning": True, "RecAdam floor 0.01": False, "RecAdam floor 0.05": True}
    against = choice["against"]
    assert against["name"] == "vanilla fine-tuning" and against["margin"] == 1.0 and against["resamples"] == 10_000
    spec, ref = HOLDOUT_STUDY["floor0.05"], HOLDOUT_STUDY["vanilla"]
    d = [a - b for a, b in zip(spec["dev"], ref["dev"])]
    assert against["main"]["seeds"] == [1, 2, 3, 4, 5] and against["main"]["difference"] == pytest.approx(np.mean(d))
    assert (against["main"]["low"], against["main"]["high"]) == pytest.approx(direct_interval(d), abs=1e-15)
    k = [a - b for a, b in zip(spec["kept"], ref["kept"])]
    assert (against["sts_retained"]["low"], against["sts_retained"]["high"]) == pytest.approx(direct_interval(k), abs=1e-15)
    assert against["main"]["low"] < -0.01 and choice["non_inferior"] is False  # ~2 points below vanilla on dev

    text = invoke("tradeoff", holdout_study, "--within", "1", "--select-on", "holdout", "--out", tmp_path / "h.png")
    first, second, figure = text.stdout.splitlines()
    assert first.startswith("MRPC: RecAdam floor 0.05 — chosen on the holdout: main 77.5 (holdout median of 5 runs), "
                            "sts_retained 85.0: the highest sts_retained of the 2 of 3 settings whose holdout main is "
                            "within 1 point of the best, 78.0 (vanilla fine-tuning)")
    low, high = direct_interval(d)
    assert second == (f"  on dev: main 78.0 (median); against vanilla fine-tuning, paired over seeds 1-5 (n=5): main "
                      f"{100 * np.mean(d):+.1f} [{100 * low:+.1f}, {100 * high:+.1f}], sts_retained "
                      f"{100 * np.mean(k):+.1f} [{100 * direct_interval(k)[0]:+.1f}, {100 * direct_interval(k)[1]:+.1f}] "
                      f"(95% paired bootstrap, 10,000 resamples): not shown non-inferior at margin 1 (the interval's "
                      f"end {100 * low:+.1f} is below -1)")
    assert "non-inferior at margin 1" not in second.replace("not shown non-inferior at margin 1", "")

    # Within 3 points of the holdout's best, floor 0.01 (76.0) is in the band and keeps the most: it is
    # half a point below vanilla on dev, and its interval's lower end is above -3.
    wide = invoke("tradeoff", holdout_study, "--within", "3", "--select-on", "holdout", "--json", "--out", tmp_path / "w.png")
    (choice,) = json.loads(wide.stdout)
    d = [a - b for a, b in zip(HOLDOUT_STUDY["floor0.01"]["dev"], ref["dev"])]
    assert choice["name"] == "RecAdam floor 0.01" and choice["non_inferior"] is True
    assert choice["against"]["main"]["low"] == pytest.approx(direct_interval(d)[0]) and direct_interval(d)[0] > -0.03
    line = invoke("tradeoff", holdout_study, "--within", "3", "--select-on", "holdout", "--out", tmp_path / "w.png").stdout
    assert line.splitlines()[1].endswith(": non-inferior at margin 3")


@pytest.mark.slow
def test_select_on_holdout_when_vanilla_is_the_pick(holdout_study, tmp_path):
    result = invoke("tradeoff", holdout_study, "--within", "0.1", "--select-on", "holdout", "--json", "--out", tmp_path / "h.png")
    (choice,) = json.loads(result.stdout)
    assert choice["name"] == "vanilla fine-tuning" and choice["non_inferior"] is None
    assert choice["against"]["note"] == "the pick is vanilla fine-tuning itself"
    text = invoke("tradeoff", holdout_study, "--within", "0.1", "--select-on", "holdout", "--out", tmp_path / "h.png")
    assert "no interval against vanilla: the pick is vanilla fine-tuning itself" in text.stdout


@pytest.mark.slow
def test_select_on_holdout_refuses_runs_without_a_holdout(holdout_study, tmp_path):
    run_dir(holdout_study, "old/s1", dev=0.9, kept=0.5, seed=1, optimizer="recadam", floor=0.1)  # no task.holdout
    figure = tmp_path / "h.png"
    one_line_error(invoke("tradeoff", holdout_study, "--within", "1", "--select-on", "holdout", "--out", figure),
                   "--select-on holdout: 1 of the 16 runs have no holdout main (trained without task.holdout)",
                   "old/s1", "choose on dev (--select-on dev)")
    assert not figure.exists()
    one_line_error(invoke("tradeoff", holdout_study, "--select-on", "holdout", "--out", figure),
                   "--select-on holdout chooses with --within W")
    one_line_error(invoke("tradeoff", holdout_study, "--within", "1", "--select-on", "test", "--out", figure),
                   "unknown --select-on 'test'")
    assert not figure.exists()


@pytest.mark.slow
def test_holdout_runs_report_dev_everywhere(holdout_study, tmp_path):
    """Under task.holdout the final number of compare, forgetting and tradeoff is dev's (the test record),
    not the holdout's last evaluation; the holdout's 'data' field is no metric."""
    rows = json.loads(invoke("compare", holdout_study, "--format", "json").stdout)
    assert {r["name"]: r["median"] for r in rows} == pytest.approx(
        {"vanilla fine-tuning": 0.80, "RecAdam floor 0.01": 0.795, "RecAdam floor 0.05": 0.78})
    rows = json.loads(invoke("forgetting", holdout_study / "vanilla", "--json", "--out", tmp_path / "f.png").stdout)
    assert sorted(r["main"] for r in rows) == list(sorted(HOLDOUT_STUDY["vanilla"]["dev"]))
    bad = invoke("compare", holdout_study, "--metric", "dat")
    assert bad.exit_code == 2 and "data" not in bad.stderr.split("these runs record")[1]


# ---- groupings: what changes the result only ---------------------------------------------------


def test_bookkeeping_keys_do_not_split_a_setting(tmp_path):
    root = tmp_path / "runs"
    run_dir(root, "a", dev=0.80, seed=1, train_keys={"report_to": ["tensorboard"], "log_every": 5, "device": "cpu"})
    run_dir(root, "b", dev=0.82, seed=2, train_keys={"eval_every": 50, "save_every": 50, "keep_last": 2, "compile": "off"},
            sections={"probe": {"num_pairs": 64, "every": 10}})
    run_dir(root, "c", dev=0.84, seed=3, task_keys={"pad_to_multiple_of": 8}, train_keys={"eval_batch_size": 7, "save": "final"})
    rows = json.loads(invoke("compare", root, "--format", "json").stdout)
    assert len(rows) == 1 and rows[0]["n"] == 3 and rows[0]["group"] == "all runs"
    assert rows[0]["median"] == pytest.approx(0.82)
    # ... unless asked for
    rows = json.loads(invoke("compare", root, "--by", "train.report_to", "--format", "json").stdout)
    assert sorted(r["n"] for r in rows) == [1, 2]
    # What changes the dev score makes a setting: the dev rows scored.
    run_dir(root, "d", dev=0.70, seed=1, task_keys={"max_eval_examples": 40})
    rows = json.loads(invoke("compare", root, "--format", "json").stdout)
    assert sorted((r["group"], r["n"]) for r in rows) == [("task.max_eval_examples unset", 3),
                                                          ("task.max_eval_examples=40", 1)]


def test_none_is_left_out_of_every_label_and_old_runs_read_at_the_defaults(tmp_path):
    from recall_cli.report import NOT_SETTINGS, load_runs

    root = tmp_path / "runs"
    for opt in ("adamw", "recadam"):
        run_dir(root, f"{opt}_all", dev=0.8, optimizer=opt)
        run_dir(root, f"{opt}_1000", dev=0.7, optimizer=opt, task_keys={"max_train_examples": 1000})
    groups = [r["group"] for r in json.loads(invoke("compare", root, "--format", "json").stdout)]
    assert "RecAdam" in groups and "RecAdam, task.max_train_examples=1000" in groups
    assert "vanilla fine-tuning" in groups and not any("None" in g for g in groups)

    # A run made before the methods existed (no keep section, no model.lora) is one setting with a new
    # run that leaves them off.
    old = run_dir(root / "old", "s1", dev=0.8, seed=1)
    config = yaml.safe_load((old / "config.yaml").read_text())
    del config["keep"], config["model"]["lora"], config["task"]["holdout"]
    (old / "config.yaml").write_text(yaml.safe_dump(config))
    run_dir(root / "old", "s2", dev=0.82, seed=2)
    (run,) = [r for r in load_runs(root / "old") if r.name == "s1"]
    assert run.settings["keep.embeddings"] == 0.0 and run.settings["model.lora.r"] == 0
    rows = json.loads(invoke("compare", root / "old", "--format", "json").stdout)
    assert len(rows) == 1 and rows[0]["n"] == 2
    assert {"train.report_to", "train.device", "output_dir", "train.seed"} <= NOT_SETTINGS


# ---- one name per setting, tables that fit -----------------------------------------------------


def test_compare_table_names_settings_as_the_figures_do(paired, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    result = invoke("compare", paired)
    assert result.exit_code == 0, result.output
    assert "WiSE-FT α=0.75" in result.stdout and "merge=linear" not in result.stdout
    assert "**" not in result.stdout and "|" not in result.stdout
    keys = invoke("compare", paired, "--labels", "keys")
    assert "vanilla fine-tuning, merge=" in keys.stdout  # cut to fit, but the keys' words


@pytest.mark.slow
@pytest.mark.parametrize("width", [80, 100])
def test_tables_fit_80_and_100_columns(paired, tmp_path, monkeypatch, width):
    """compare (with the averages of three tasks), forgetting and the probe tables: no line wider than the
    terminal, no markdown markup; what was left out is said under the table."""
    monkeypatch.setenv("COLUMNS", str(width))
    root = tmp_path / "wide"
    for task in ("cola", "sst2", "mrpc"):
        for seed in (1, 2):
            run_dir(root, f"a_rather_long_folder_name_for_{task}_vanilla_s{seed}", dev=0.5 + seed / 100, task=task, seed=seed)
            run_dir(root, f"a_rather_long_folder_name_for_{task}_wise_s{seed}", dev=0.4, task=task, seed=seed,
                    record={"merge": "recall", "with": ["vanilla", "vanilla"], "models": ["a", "b", "c"],
                            "temperature": 0.07, "gamma_rule": "median"})
    outputs = [invoke("compare", root, "--stats", "median,min,max,mean"),
               invoke("compare", root, "--against", "vanilla"),
               invoke("forgetting", root, "--out", tmp_path / "f.png")]
    for result in outputs:
        assert result.exit_code == 0, result.output
        table = [line for line in result.stdout.splitlines() if not line.startswith(("*", "Avg", "Δ:", "every", "figure"))]
        assert all(len(line) <= width for line in table), "\n".join(line for line in table if len(line) > width)
        assert not re.search(r"\*\*\S", result.stdout) and not any(line.startswith("|") for line in table)
    if width == 80:
        assert "(not shown at 80 columns: " in outputs[2].stdout
        assert "…" in outputs[2].stdout  # the folder names lose their start


def test_probe_table_fits_and_keeps_the_target_folder():
    from recall_cli.report.probe_tables import probe_plain
    from recall_cli.report.text import render

    rows = [{"target": f"/very/long/path/to/some/experiments/runs/study/mrpc/recadam_floor0.02/s{i}/best",
             "reference": "sentence-transformers/all-MiniLM-L6-v2", "sts": 0.71, "sts_retained": 0.84, "cka": 0.61,
             "cka_debiased": 0.55, "drift": 0.1234, "mlm_loss": 2.5, "mlm_ratio": 1.07} for i in (1, 2)]
    for width in (80, 100):
        text = render(probe_plain(rows), width)
        assert all(len(line) <= width for line in text.splitlines()), text
        assert "s1/best" in text and "0.840" in text and "**" not in text
    assert render(probe_plain(rows), 200).count("…") == 0


@pytest.mark.slow
def test_the_same_characters_on_a_terminal_and_in_a_pipe(paired):
    """A terminal gets bold where a pipe gets none; the characters are the same."""
    import io

    from rich.console import Console

    from recall_cli.cli.runs import show_table
    from recall_cli.report import compare, load_runs
    from recall_cli.report.tables import plain_table, rich_table

    result = compare(load_runs(paired), stats=["median", "max"])
    printed = {}
    for terminal in (True, False):
        buffer = io.StringIO()
        console = Console(file=buffer, width=80, force_terminal=terminal, color_system="standard" if terminal else None,
                          highlight=False)
        show_table(plain_table(result), lambda: rich_table(result), console=console)
        printed[terminal] = buffer.getvalue()
    assert "\x1b[1m" in printed[True] and "\x1b[" not in printed[False]
    assert re.sub(r"\x1b\[[0-9;]*m", "", printed[True]) == printed[False]


@pytest.mark.slow
def test_the_committed_study_renders_as_committed(tmp_path, monkeypatch):
    """docs/study's committed tables were made by these commands (COLUMNS=200, piped): the same bytes now."""
    monkeypatch.setenv("COLUMNS", "200")
    table = (REPO / "docs/study/tables/main_main.md").read_text()
    command, text = table.split("\n", 1)
    args = command.removeprefix("<!-- recall ").removesuffix(" -->").split()
    monkeypatch.chdir(REPO)
    assert invoke(*args).stdout == text
    committed = (REPO / "docs/study/tables/forgetting_sst2.txt").read_text().splitlines()
    result = invoke("forgetting", "--run-dir", "docs/study/runs/main/sst2", "--out", tmp_path / "f.png")
    assert result.stdout.splitlines()[:-2] == committed[1:-2]


@pytest.mark.slow
def test_best_under_a_holdout_says_whose_score_it_is(holdout_study):
    result = invoke("compare", holdout_study, "--at", "best", "--format", "markdown")
    assert result.exit_code == 0, result.output
    assert "--at best: 15 of the runs held out part of train (task.holdout)" in result.stdout
    assert "task.holdout" not in invoke("compare", holdout_study, "--format", "markdown").stdout


@pytest.mark.slow
def test_select_on_holdout_compares_settings_over_vanilla_s_seeds_only(holdout_study, tmp_path):
    """A setting that ran on one seed with the best holdout score is not chosen for it: its median is
    over other data. It is listed as not eligible, with its seeds, and the line says so."""
    run_dir(holdout_study, "lucky/s2", dev=0.70, holdout=0.95, kept=0.99, seed=2, optimizer="recadam", floor=0.2)
    result = invoke("tradeoff", holdout_study, "--within", "1", "--select-on", "holdout", "--json", "--out", tmp_path / "h.png")
    assert result.exit_code == 0, result.output
    (choice,) = json.loads(result.stdout)
    assert choice["name"] == "RecAdam floor 0.05" and choice["best"]["name"] == "vanilla fine-tuning"  # as without it
    (lucky,) = [c for c in choice["candidates"] if c["name"] == "RecAdam floor 0.2"]
    assert lucky["eligible"] is False and lucky["seeds"] == [2] and lucky["within"] is False
    assert all("eligible" not in c for c in choice["candidates"] if c is not lucky)
    shown = invoke("tradeoff", holdout_study, "--within", "1", "--select-on", "holdout", "--out", tmp_path / "h2.png")
    assert "1 setting on other seeds than the reference not compared (e.g. RecAdam floor 0.2: seed 2)" in shown.stdout


@pytest.mark.slow
def test_select_on_holdout_does_not_choose_for_seeds_vanilla_lacks(holdout_study, tmp_path):
    """A setting on vanilla's seeds plus lucky extra ones: its median is over other data, so it is not
    compared either (helper-8's case: worse on the shared seeds, best over all of its own)."""
    for seed in SEEDS:
        run_dir(holdout_study, f"more/s{seed}", dev=0.70, holdout=0.70, kept=0.99, seed=seed, optimizer="recadam", floor=0.3)
    for seed in (6, 7, 8, 9):
        run_dir(holdout_study, f"more/s{seed}", dev=0.95, holdout=0.95, kept=0.99, seed=seed, optimizer="recadam", floor=0.3)
    result = invoke("tradeoff", holdout_study, "--within", "1", "--select-on", "holdout", "--json", "--out", tmp_path / "h.png")
    (choice,) = json.loads(result.stdout)
    assert choice["name"] == "RecAdam floor 0.05"
    (more,) = [c for c in choice["candidates"] if c["name"] == "RecAdam floor 0.3"]
    assert more["eligible"] is False and more["seeds"] == [1, 2, 3, 4, 5, 6, 7, 8, 9]


def test_against_gives_a_causal_lms_kept_skill_its_interval():
    """Runs of a causal LM record lm_kept and kl_kept, not the STS probe: --against intervals lm_kept (the
    committed SmolLM2 records, docs/study/runs/lm_sst2), and its footnote names it."""
    from pathlib import Path

    from typer.testing import CliRunner

    from recall_cli.cli import app

    runs = Path(__file__).resolve().parents[1] / "docs" / "study" / "runs" / "lm_sst2"
    result = CliRunner().invoke(app, ["compare", str(runs), "--against", "vanilla"])
    assert result.exit_code == 0, result.output
    assert result.output.count("Δ LM kept") == 7 and "of the kept skill (lm_kept x100)" in result.output  # 8 settings
    assert "no interval for the kept skill" not in result.output
