"""`recall compare` of continual sequences: one row per method (what the command set beyond its stage files), the
medians over seeds of ACC, BWT, FWT, forgetting, the last task and the STS kept, and with --against each measure's
paired difference over the seeds both ran, on hand-made continual.json records of known numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recall_cli.cli import app

SEQ_ACC, SEQ_BWT = [0.50, 0.60, 0.70], [-0.10, -0.20, -0.30]
EWC_ACC, EWC_BWT = [0.55, 0.62, 0.80], [-0.05, -0.10, -0.15]


def write_sequence(folder: Path, seed, acc: float, bwt: float, overrides=(), continual=None, finished=True,
                   kept: float = 0.9) -> None:
    folder.mkdir(parents=True)
    last = [0.7, 0.6, acc * 3 - 1.3]
    record = {"format": 1, "tasks": ["sst2", "mrpc", "cola"], "finished": finished,
              "command": {"stages": ["a.yaml", "b.yaml", "c.yaml"], "overrides": list(overrides), "seed": seed,
                          "continual": continual or {"weights": "last", "probe": True, "merge": "none", "theta_star": "previous"}},
              "matrix": [None, [0.8, None, None], [0.75, 0.7, None], last], "acc": acc, "bwt": bwt, "fwt": None,
              "forgetting": [0.1, 0.1], "forgetting_mean": -bwt,
              "stages": [{"stage": i, "probe": {"sts_retained": kept}} for i in (1, 2, 3)]}
    (folder / "continual.json").write_text(json.dumps(record), encoding="utf-8")
    (folder / "stages/01-sst2").mkdir(parents=True)  # a stage's run directory is not read as a run here


@pytest.fixture
def sequences(tmp_path):
    root = tmp_path / "records"
    for seed, (a, b) in enumerate(zip(SEQ_ACC, SEQ_BWT), 1):
        write_sequence(root / "sequential" / f"s{seed}", seed, a, b)
    for seed, (a, b) in enumerate(zip(EWC_ACC, EWC_BWT), 1):
        # an old record (no theta_star key) and a seed given as train.seed: the same method, paired by seed
        write_sequence(root / "ewc" / f"s{seed}", None, a, b, overrides=["ewc.weight=1e6", f"train.seed={seed}"],
                       continual={"weights": "last", "probe": True, "merge": "none"}, kept=0.95)
    write_sequence(root / "merge/s1", 1, 0.58, -0.02, continual={"weights": "last", "probe": True, "merge": "recall",
                                                                  "theta_star": "previous", "merge_options": {"clusters": 4}})
    write_sequence(root / "ewc/s4", 4, 0.9, 0.0, overrides=["ewc.weight=1e6"], finished=False)
    return root


def test_compare_reads_continual_folders_by_method_with_paired_intervals(sequences):
    result = CliRunner().invoke(app, ["compare", str(sequences), "--against", "sequential", "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = {r["method"]: r for r in data["rows"]}
    assert set(rows) == {"sequential", "ewc.weight=1e6", "continual.merge=recall continual.merge.clusters=4"}
    assert rows["sequential"]["n"] == 3 and rows["ewc.weight=1e6"]["seeds"] == [1, 2, 3]  # the unfinished s4 is not read
    assert rows["sequential"]["median"]["acc"] == pytest.approx(0.60)
    assert rows["ewc.weight=1e6"]["median"]["bwt"] == pytest.approx(-0.10)
    assert rows["ewc.weight=1e6"]["median"]["last"] == pytest.approx(0.62 * 3 - 1.3)
    assert rows["ewc.weight=1e6"]["median"]["kept"] == pytest.approx(0.95)
    acc, bwt = rows["ewc.weight=1e6"]["against"]["acc"], rows["ewc.weight=1e6"]["against"]["bwt"]
    # per seed: ACC +0.05, +0.02, +0.10; BWT +0.05, +0.10, +0.15 -> their mean and (3 seeds) their range
    assert acc["difference"] == pytest.approx(0.17 / 3) and (acc["low"], acc["high"]) == pytest.approx((0.02, 0.10))
    assert bwt["difference"] == pytest.approx(0.10) and (bwt["low"], bwt["high"]) == pytest.approx((0.05, 0.15))
    assert acc["n"] == 3 and acc["kind"] == "range"
    assert rows["ewc.weight=1e6"]["against"]["fwt"]["difference"] is None  # no FWT in a classifier sequence
    merged = rows["continual.merge=recall continual.merge.clusters=4"]["against"]["acc"]
    assert merged["n"] == 1 and merged["difference"] == pytest.approx(0.58 - 0.50) and merged["low"] is None
    assert "against" not in rows["sequential"]
    assert "has not finished" in result.stderr


def test_the_markdown_table_shows_the_medians_and_the_differences(sequences):
    result = CliRunner().invoke(app, ["compare", str(sequences), "--against", "sequential", "--format", "markdown"])
    assert result.exit_code == 0, result.output
    assert "| sequential | 3 | 60.0 | -20.0 | — | 20.0 | 50.0 | 90.0 |" in result.stdout
    assert "| ewc.weight=1e6 | +5.7 [+2.0, +10.0] (n=3) | +10.0 [+5.0, +15.0] (n=3) | — |" in result.stdout


@pytest.mark.parametrize("args, words", [
    (["--against", "nothing"], "--against nothing: no such method among the sequences"),
    (["--table", "main"], "--table: not read for continual sequences"),
    (["--metric", "f1"], "--metric: not read for continual sequences"),
])
def test_wrong_options_for_sequences_are_one_line(sequences, args, words):
    result = CliRunner().invoke(app, ["compare", str(sequences), *args])
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output


@pytest.mark.slow
def test_tradeoff_plots_a_point_per_sequence_and_the_median_per_method(sequences, tmp_path):
    """recall tradeoff of continual folders: --x main / --y sts_retained (its defaults) read as ACC and STS kept,
    one point per finished sequence, the medians per method; --x bwt --y last the other pair."""
    figure = tmp_path / "trade.png"
    result = CliRunner().invoke(app, ["tradeoff", str(sequences), "--out", str(figure), "--json"])
    assert result.exit_code == 0, result.output
    methods = {m["method"]: m for m in json.loads(result.stdout)}
    assert set(methods) == {"sequential", "ewc.weight=1e6", "continual.merge=recall continual.merge.clusters=4"}
    seq, ewc = methods["sequential"], methods["ewc.weight=1e6"]
    assert sorted((p["seed"], p["acc"], p["kept"]) for p in seq["points"]) == [(1, 0.5, 0.9), (2, 0.6, 0.9), (3, 0.7, 0.9)]
    assert seq["median"] == [pytest.approx(0.60), pytest.approx(0.9)]
    # the unfinished ewc/s4 (ACC 0.9) is no point: EWC's three seeds alone
    assert len(ewc["points"]) == 3 and ewc["median"] == [pytest.approx(0.62), pytest.approx(0.95)]
    assert "has not finished" in result.stderr and figure.stat().st_size > 1000

    result = CliRunner().invoke(app, ["tradeoff", str(sequences), "--out", str(figure), "--x", "bwt", "--y", "last"])
    assert result.exit_code == 0, result.output
    # the last task's score is R[3][3] (write_sequence: ACC x 3 - 1.3): sequential's median 0.6 x 3 - 1.3
    assert "sequential: n=3 median bwt=-0.2000 last=0.5000" in result.stdout
    assert "ewc.weight=1e6: n=3 median bwt=-0.1000 last=0.5600" in result.stdout


@pytest.mark.parametrize("args, words", [
    (["--x", "accuracy"], "--x accuracy: a continual sequence has acc, bwt, fwt, forgetting, last, kept"),
    (["--within", "1"], "--within: not read for continual sequences"),
    (["--x", "fwt"], "no finished sequence has both fwt and kept"),
])
def test_tradeoff_refuses_what_sequences_do_not_have_in_one_line(sequences, tmp_path, args, words):
    figure = tmp_path / "trade.png"
    result = CliRunner().invoke(app, ["tradeoff", str(sequences), "--out", str(figure), *args])
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output and not figure.exists()
