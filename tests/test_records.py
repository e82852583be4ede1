"""`recall evaluate --record`: a merge output or a run's checkpoint scored into a run record that
compare and tradeoff read beside training runs; the numbers are checked against direct computation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from typer.testing import CliRunner

from recall_cli.cli import app
from recall_cli.testing import tiny_bert

from conftest import make_run, tiny_recipe, write_recipe

runner = CliRunner()
PROBE_SMALL = {"num_texts": 16, "num_pairs": 12, "max_length": 32}


def invoke(*args) -> tuple[int, str, str]:
    result = runner.invoke(app, [*map(str, args)])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def run(tiny_model_dir, tmp_path_factory) -> Path:
    """A hand-made run (the tiny encoder plus noise), with small probes so the module stays fast."""
    run = make_run(tmp_path_factory.mktemp("record_runs"), "a", tiny_model_dir, seed=3, scale=0.05)
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["probe"] = PROBE_SMALL
    (run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (run / "metrics.jsonl").write_text(json.dumps({"step": 12, "split": "eval", "accuracy": 0.5, "main": 0.5}) + "\n")
    return run


def encoder_distance(folder: Path, base: Path) -> float:
    theta, star = load_file(str(folder / "model.safetensors")), load_file(str(base / "model.safetensors"))
    total = sum(float(((theta["bert." + k].double() - v.double()) ** 2).sum()) for k, v in star.items() if "bert." + k in theta)
    return total ** 0.5


def record(source: Path, out: Path, *extra) -> dict:
    code, stdout, stderr = invoke("evaluate", source, "--record", out, "--device", "cpu", "--json", *extra)
    assert code == 0, stdout + stderr
    return json.loads(stdout)


def records_of(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_record_of_a_run_scores_distance_and_probes(run, tiny_model_dir, tmp_path):
    summary = record(run, tmp_path / "rec", "--against", tiny_model_dir)
    evaluation, probe = records_of(tmp_path / "rec")
    code, stdout, _ = invoke("evaluate", run, "--json", "--device", "cpu")
    assert code == 0
    assert {k: v for k, v in evaluation.items() if k not in ("step", "split", "distance")} == json.loads(stdout)["metrics"]
    assert evaluation["step"] == probe["step"] == 12  # the source run's last step
    assert evaluation["distance"] == pytest.approx(encoder_distance(run / "best", tiny_model_dir), rel=1e-9)
    assert summary["final_distance"] == evaluation["distance"] and summary["finished"] is True
    assert probe["split"] == "probe" and 0 < probe["cka"] < 1 and len(probe["cka_layers"]) == 3  # embeddings + 2 blocks
    assert probe["sts_retained"] == pytest.approx(probe["sts"] / probe["sts_ref"])
    config = yaml.safe_load((tmp_path / "rec" / "config.yaml").read_text())
    assert config["record"] == {"checkpoint": str(run / "best"), "against": str(tiny_model_dir), "merge": None}
    assert config["task"]["name"] == "mrpc" and config["output_dir"] == str(tmp_path / "rec")


@pytest.mark.slow
def test_wise_ft_endpoints_are_theta_star_and_the_run(run, tiny_model_dir, tmp_path):
    """alpha = 0 is θ* itself (distance 0, CKA 1, drift 0); alpha = 1 is the run (its record exactly)."""
    alone = record(run, tmp_path / "alone", "--against", tiny_model_dir)
    ends = {}
    for alpha in (0, 1):
        out = tmp_path / f"m{alpha}"
        code, stdout, stderr = invoke("merge", tiny_model_dir, run, "--method", "linear", "--weights", f"{1 - alpha},{alpha}",
                                      "--out", out, "--device", "cpu", "--json")
        assert code == 0, stdout + stderr
        ends[alpha] = record(out / "a", tmp_path / f"rec{alpha}", "--against", tiny_model_dir)
    assert ends[0]["steps"] == ends[1]["steps"] == 12  # the run's last step: the merge's input was the run
    assert ends[0]["final_distance"] == 0.0
    assert ends[0]["probe"]["cka"] == pytest.approx(1.0, abs=1e-9) and ends[0]["probe"]["drift"] == pytest.approx(0.0, abs=1e-6)
    assert ends[1]["final_distance"] == pytest.approx(alone["final_distance"], rel=1e-6)
    assert ends[1]["final"]["main"] == alone["final"]["main"]
    assert ends[1]["probe"]["cka"] == pytest.approx(alone["probe"]["cka"], abs=1e-6)
    config = yaml.safe_load((tmp_path / "rec1" / "config.yaml").read_text())
    assert config["record"]["merge"] == "linear" and config["record"]["weights"] == [0.0, 1.0]
    assert config["record"]["with"] == ["pretrained"]  # the other input has no task: θ*


@pytest.mark.slow
def test_a_merge_of_a_checkpoint_folder_keeps_the_runs_step_and_kind(run, tiny_model_dir, tmp_path):
    """The study merges RUN/last folders: the record still knows the run's step and how it was trained."""
    out = tmp_path / "m"
    assert invoke("merge", tiny_model_dir, run / "best", "--method", "linear", "--out", out, "--device", "cpu")[0] == 0
    merged = json.loads((out / "merge.json").read_text())
    assert [i["optimizer"] for i in merged["inputs"]] == [None, "recadam"]
    rec = record(out / "a", tmp_path / "rec", "--no-probe")
    assert rec["steps"] == 12
    config = yaml.safe_load((tmp_path / "rec" / "config.yaml").read_text())
    assert config["record"]["with"] == ["pretrained"]
    # merge.json files written before the "optimizer" field: the kind is read from the inputs' recipes
    for item in merged["inputs"]:
        del item["optimizer"]
    (out / "merge.json").write_text(json.dumps(merged))
    record(out / "a", tmp_path / "old", "--no-probe")
    assert yaml.safe_load((tmp_path / "old" / "config.yaml").read_text())["record"]["with"] == ["pretrained"]


@pytest.mark.slow
def test_overwrite_replaces_a_record_never_a_run(run, tiny_model_dir, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    before = sorted(p.relative_to(copy) for p in copy.rglob("*"))
    code, _, stderr = invoke("evaluate", copy, "--record", copy, "--overwrite", "--no-probe", "--device", "cpu")
    assert code == 2 and "not a recall record" in stderr
    assert sorted(p.relative_to(copy) for p in copy.rglob("*")) == before  # weights and all, untouched
    first = record(run, tmp_path / "rec", "--no-probe")
    second = record(run, tmp_path / "rec", "--no-probe", "--overwrite")
    assert first["final_distance"] == second["final_distance"]


@pytest.mark.slow
def test_compare_groups_records_beside_runs_and_reads_distance(run, tiny_model_dir, tmp_path):
    root = tmp_path / "all"
    record(run, root / "plain", "--against", tiny_model_dir, "--no-probe")
    for seed in (1, 2):  # two seeds of one WiSE-FT setting: one row, n = 2
        out = tmp_path / f"m{seed}"
        assert invoke("merge", tiny_model_dir, run, "--method", "linear", "--weights", "0.5,0.5", "--out", out, "--device", "cpu")[0] == 0
        record(out / "a", root / f"wise_s{seed}", "--against", tiny_model_dir, "--no-probe")
    code, stdout, stderr = invoke("compare", root, "--metric", "distance", "--format", "json")
    assert code == 0, stderr
    rows = {r["group"]: r for r in json.loads(stdout)}
    # The plain record's grouping keys are all unset (it is no merge): said so, not "all runs".
    assert set(rows) == {"merge unset, with unset, weights unset", "merge=linear, with=pretrained, weights=0.5,0.5"}
    wise = next(r for r in rows.values() if r["n"] == 2)
    plain = next(r for r in rows.values() if r["n"] == 1)
    # Half-way to θ*: half the distance (the merge is exact in float32).
    assert wise["median"] == pytest.approx(plain["median"] / 2, rel=1e-5)
    code, stdout, _ = invoke("compare", root, "--metric", "distance", "--stats", "median,min,max", "--format", "markdown")
    assert code == 0
    assert "| min |" in stdout and "distance (final eval, lower is better)" in stdout and "x100" not in stdout


@pytest.mark.slow
def test_records_refuse_to_be_resumed_evaluated_or_overwritten(run, tiny_model_dir, tmp_path):
    out = tmp_path / "rec"
    record(run, out, "--against", tiny_model_dir, "--no-probe")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code, _, stderr = invoke("evaluate", run, "--record", out, "--device", "cpu")
    assert code == 2 and "already exists" in stderr and "--overwrite" in stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # untouched
    for args in (("finetune", "--resume", out), ("evaluate", out), ("probe", out, "--device", "cpu")):
        code, _, stderr = invoke(*args)
        assert code == 2, (args, stderr)
        assert "scored record" in stderr and str(run / "best") in stderr and "Traceback" not in stderr
    (tmp_path / "bare").mkdir()
    code, _, stderr = invoke("evaluate", tmp_path / "bare", "--record", tmp_path / "never")
    assert code == 2 and not (tmp_path / "never").exists()
    code, _, stderr = invoke("evaluate", run, "--record", tmp_path / "x", "--task", "rte")
    assert code == 2 and "--record" in stderr and not (tmp_path / "x").exists()


@pytest.mark.slow
def test_a_distance_to_another_architecture_is_refused(run, tmp_path):
    other = tmp_path / "other"
    tiny_bert(vocab_size=50, hidden_size=16, num_layers=1, intermediate_size=8, max_positions=512,
              seed=None).save_pretrained(other)
    code, _, stderr = invoke("evaluate", run, "--record", tmp_path / "r", "--against", other, "--no-probe", "--device", "cpu")
    assert code == 2 and "share no parameter" in stderr and not (tmp_path / "r").exists()


def test_eval_at_carries_the_logged_distance_and_training_time(tmp_path):
    from recall_cli.report import read_run

    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "config.yaml").write_text(yaml.safe_dump({"model": {"name_or_path": "m"}, "task": {"name": "mrpc"},
                                                        "optimizer": {"name": "adamw"}}))
    lines = [{"step": 10, "split": "train", "distance": 1.0}, {"step": 20, "split": "train", "distance": 2.0},
             {"step": 20, "split": "eval", "main": 0.5}, {"step": 30, "split": "train", "distance": 3.0},
             {"step": 40, "split": "train", "distance": 4.0}, {"step": 40, "split": "eval", "main": 0.4}]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (folder / "summary.json").write_text(json.dumps({"finished": True, "final_distance": 4.5, "train_seconds": 12.0}))
    run_ = read_run(folder, "r")
    assert run_.eval_at("best")["distance"] == 2.0  # logged at the best eval's step
    assert run_.eval_at("final")["distance"] == 4.5  # the summary's, measured after the last step
    assert run_.eval_at("final")["train_seconds"] == 12.0


@pytest.mark.slow
def test_record_distance_matches_a_real_runs_final_distance(tiny_model_dir, tmp_path):
    """On a real 4-step run, the record's ‖θ − θ*‖ of last/ equals the distance the run logged."""

    recipe = tiny_recipe(tiny_model_dir, tmp_path / "run", train={"max_steps": 4, "eval_every": 0, "log_every": 2},
                         probe={"enabled": False})
    code, stdout, stderr = invoke("finetune", write_recipe(tmp_path / "r.yaml", recipe), "--plain")
    assert code == 0, stdout + stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    rec = record(tmp_path / "run" / "last", tmp_path / "rec", "--no-probe")
    assert rec["final_distance"] == pytest.approx(summary["final_distance"], rel=1e-6)
    assert rec["final"]["main"] == summary["final"]["main"]
    assert torch.isfinite(torch.tensor(rec["final_distance"]))


@pytest.mark.slow
def test_record_of_a_holdout_run_scores_the_rows_the_run_held_out(tiny_model_dir, tmp_path):
    """A run trained with task.holdout: its record scores dev and the same held-out training rows, and
    writes them as the run did (the holdout's eval, dev as the test), so tradeoff --select-on holdout
    reads a merge output or WiSE-FT point beside the runs. Scoring best/ = the final weights here gives
    the run's own numbers exactly."""
    run_dir = tmp_path / "held"
    recipe = tiny_recipe(tiny_model_dir, run_dir, task={"holdout": 0.25}, optimizer={"name": "adamw"},
                         train={"eval_every": 12}, probe=PROBE_SMALL)
    code, stdout, stderr = invoke("finetune", write_recipe(tmp_path / "r.yaml", recipe), "--plain")
    assert code == 0, stdout + stderr
    trained = json.loads((run_dir / "summary.json").read_text())["final"]
    summary = record(run_dir, tmp_path / "rec", "--against", tiny_model_dir)
    assert summary["final"]["holdout"] == trained["holdout"]
    assert summary["final"]["dev"] == trained["dev"] and summary["final"]["main"] == trained["dev"]["main"]
    held, test, probe = records_of(tmp_path / "rec")
    assert (held["split"], held.get("data"), test["split"], test.get("data"), probe["split"]) == \
        ("eval", "holdout", "test", "dev", "probe")
    code, stdout, stderr = invoke("tradeoff", tmp_path / "rec", "--x", "main", "--y", "sts_retained", "--within", "1",
                                  "--select-on", "holdout", "--json", "--out", tmp_path / "t.png")
    assert code == 0, stdout + stderr
    assert json.loads(stdout)[0]["holdout"]["main"] == trained["holdout"]["main"]


@pytest.mark.slow
def test_a_second_writer_of_the_same_record_is_refused_naming_the_first(run, tmp_path):
    """evaluate --record (and merge --out) hold a lock named after OUT's absolute path (in the temporary
    folder: OUT and its parents need not exist) for their life: another process writing the same OUT
    gets one line with the holder's pid, exit 2, and no OUT; the lock dies with its holder."""
    import subprocess
    import sys
    import time

    import hashlib

    from recall_cli.rundir.lifecycle import lock_folder

    out = tmp_path / "new" / "rec"  # its parent does not exist yet either
    lock = lock_folder() / f"{hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:24]}.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, str(os.getpid()).encode())\n"
        "print('held', flush=True); time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code, _, stderr = invoke("evaluate", run, "--record", out, "--device", "cpu", "--no-probe")
        assert code == 2 and not out.exists()
        assert stderr.strip() == (f"error: {out} is being written by process {holder.pid} (another recall evaluate "
                                  "--record): wait for it to end or stop it, or choose another --record folder; two "
                                  "writers would mix their files")
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)
    code, _, stderr = invoke("evaluate", run, "--record", out, "--device", "cpu", "--no-probe")  # the lock died with it
    assert code == 0, stderr
    assert not lock.exists() and (out / "summary.json").is_file()
