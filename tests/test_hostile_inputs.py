"""Issue 22: merge, probe, evaluate --record and finetune's checks under bad numbers, signals, a full or
read-only disk, corrupt or foreign inputs. Each kind fails with one line and its documented exit code,
and leaves either nothing or the complete output (never a staging folder or poisoned weights)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from recall_cli import rundir
from recall_cli.cli import app
from recall_cli.testing import tiny_bert_dir

from conftest import make_run, send_to_self, tiny_recipe, write_recipe

runner = CliRunner()


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile_runs")
    return {name: make_run(root, name, tiny_model_dir, seed) for name, seed in (("a", 1), ("b", 2))}


def invoke(*args):
    return runner.invoke(app, [*map(str, args)])


def one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)


# ---- 1. numbers: finite and in range, checked where the options are parsed ------------------------


@pytest.mark.parametrize("args, named", [
    (["--method", "linear", "--weights", "nan,1"], "--weights nan,1"),
    (["--method", "linear", "--weights", "1e308,1e308"], "--weights 1e+308,1e+308"),
    (["--method", "task_arithmetic", "--lambda", "inf"], "--lambda inf"),
    (["--method", "ties", "--lambda", "-inf"], "--lambda -inf"),
    (["--method", "ties", "--density", "nan"], "--density nan"),
    (["--temperature", "nan"], "--temperature nan"),
    (["--temperature", "inf"], "--temperature inf"),
    (["--gamma", "nan"], "--gamma nan"),
    (["--gamma", "inf"], "--gamma inf"),
])
@pytest.mark.slow
def test_a_number_that_is_not_finite_is_refused_before_any_work(runs, tmp_path, args, named):
    out = tmp_path / "out"
    result = invoke("merge", runs["a"], runs["b"], "--out", out, "--device", "cpu", *args)
    assert result.exit_code == 2
    line = one_error_line(result)
    assert line.startswith(f"error: {named}: ") and ("finite" in line), line
    assert not out.exists() and leftovers(tmp_path) == []


def test_settings_that_would_write_nan_weights_fail_naming_the_tensor_and_option(runs, tmp_path):
    """A finite --lambda whose product overflows float32: the fused tensor is checked, nothing is written."""
    out = tmp_path / "out"
    result = invoke("merge", runs["a"], runs["b"], "--out", out, "--method", "task_arithmetic", "--lambda", "1e39")
    assert result.exit_code == 2
    line = one_error_line(result)
    assert line.startswith("error: the task_arithmetic merge makes bert.") and "NaN/inf with --lambda 1e+39" in line
    assert line.endswith("though every input's is finite: choose smaller settings (nothing was written)")
    assert not out.exists() and leftovers(tmp_path) == []


@pytest.mark.slow
def test_an_input_with_nan_weights_is_refused_naming_it(runs, tmp_path):
    """No checkpoint from NaN/inf weights (issue 41): a merge used to carry an input's NaN into its output."""
    poisoned = tmp_path / "poisoned"
    shutil.copytree(runs["a"], poisoned)
    weights = load_file(str(poisoned / "best" / "model.safetensors"))
    key = "bert.encoder.layer.0.output.dense.bias"
    weights[key][0] = float("nan")
    save_file(weights, str(poisoned / "best" / "model.safetensors"), metadata={"format": "pt"})
    out = tmp_path / "out"
    result = invoke("merge", poisoned, runs["b"], "--out", out, "--method", "linear", "--json")
    assert result.exit_code == 2, result.output
    assert f"{poisoned}: {key} holds NaN/inf (a run that diverged?)" in result.output
    assert not out.exists() and not list(tmp_path.glob(".out.tmp-*"))


def test_probe_sizes_are_checked_for_every_caller(runs, tmp_path):
    from recall_cli.errors import ProbeError
    from recall_cli.probes.targets import probe_targets

    for kwargs, named in (({"num_texts": -1}, "--num-texts -1"), ({"num_pairs": 2}, "--num-pairs 2"),
                          ({"max_length": 0}, "--max-length 0"), ({"batch_size": 0}, "--batch-size 0")):
        with pytest.raises(ProbeError, match=f"^{named}: give a whole number"):
            probe_targets([str(runs["a"])], probes=["drift"], device="cpu", **kwargs)
    result = invoke("probe", runs["a"], "--probes", "drift", "--max-length", "100000", "--device", "cpu")
    assert result.exit_code == 2
    assert one_error_line(result).startswith("error: --max-length 100000 is more than the 128 positions of θ* ")


# ---- 2. signals: SIGTERM is Ctrl-C with its own code, the staging folder is removed ---------------


@pytest.fixture(scope="module")
def wide_runs(tmp_path_factory):
    """Runs big enough (hidden 256: ~40 MB of weights each) that writing the outputs takes a while."""
    root = tmp_path_factory.mktemp("wide_runs")
    base = tiny_bert_dir(root / "base", hidden_size=256, num_heads=4, intermediate_size=512, seed=3)
    return {name: make_run(root, name, base, seed) for name, seed in (("a", 1), ("b", 2))}


@pytest.mark.slow
@pytest.mark.parametrize("sig, code, said", [(signal.SIGTERM, 143, "stopped by SIGTERM"), (signal.SIGINT, 130, "interrupted")])
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_a_signal_mid_merge_removes_the_staging_folder(wide_runs, tmp_path, sig, code, said):
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "recall_cli", "merge", str(wide_runs["a"]), str(wide_runs["b"]), "--out", str(out),
         "--method", "linear", "--device", "cpu"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not leftovers(tmp_path) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)  # until the outputs are being written
    assert process.poll() is None, process.communicate()
    process.send_signal(sig)
    _, err = process.communicate(timeout=120)
    assert process.returncode == code, err
    assert err.strip().splitlines()[-1] == f"{said}: nothing was written to {out}; run the same command again"
    assert leftovers(tmp_path) == [] and not out.exists()


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_a_merge_killed_while_staging_leaves_a_folder_the_next_merge_removes(wide_runs, tmp_path):
    """kill -9 cannot be cleaned up after, by the process it kills: the staging folder stays. The next merge
    into the same --out (holding its lock, so no live writer of it exists) removes it (issue 41)."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "recall_cli", "merge", str(wide_runs["a"]), str(wide_runs["b"]), "--out", str(out),
               "--method", "linear", "--device", "cpu"]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not leftovers(tmp_path) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    assert process.poll() is None, process.communicate()
    process.kill()
    process.communicate(timeout=60)
    stale = leftovers(tmp_path)
    assert stale and not out.exists()
    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert leftovers(tmp_path) == [] and (out / "merge.json").is_file()


def _stop_self(*args, **kwargs):
    send_to_self(signal.SIGTERM)  # the handler run_guarded installed raises here
    time.sleep(5)
    raise AssertionError("SIGTERM did not stop the command")


def test_sigterm_in_evaluate_record_and_probe_says_what_fits(runs, tmp_path, monkeypatch):
    import recall_cli.probes.targets

    record = tmp_path / "rec"
    monkeypatch.setattr("recall_cli.scoring.evaluate.evaluate_checkpoint", _stop_self)
    result = invoke("evaluate", runs["a"], "--record", record, "--device", "cpu")
    assert result.exit_code == 143
    assert one_error_line(result) == f"stopped by SIGTERM: no record was written to {record}; run the same command again"
    assert not record.exists() and leftovers(tmp_path) == []

    monkeypatch.setattr(recall_cli.probes.targets, "probe_targets", _stop_self)
    result = invoke("probe", runs["a"], "--device", "cpu")
    assert result.exit_code == 143 and one_error_line(result) == "stopped by SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored after the command


def test_ctrl_c_in_evaluate_record_does_not_talk_about_finetune(runs, tmp_path, monkeypatch):
    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("recall_cli.scoring.evaluate.evaluate_checkpoint", interrupt)
    record = tmp_path / "rec"
    result = invoke("evaluate", runs["a"], "--record", record, "--device", "cpu")
    assert result.exit_code == 130
    assert one_error_line(result) == f"interrupted: no record was written to {record}; run the same command again"


# ---- 3. exit 2 = nothing written: merge --evaluate scores the outputs before they are renamed -----


@pytest.mark.slow
def test_merge_evaluate_that_fails_leaves_no_output(runs, tmp_path, monkeypatch):
    from recall_cli.errors import DataError
    from recall_cli.scoring import evaluate

    real = evaluate.evaluate_checkpoint

    def dev_file_gone_for_merged(path, **kwargs):
        if ".out.tmp-" in str(path):  # the staged output: its evaluation fails
            raise DataError("data/glue/MRPC/dev.tsv: file not found")
        return real(path, **kwargs)

    monkeypatch.setattr(evaluate, "evaluate_checkpoint", dev_file_gone_for_merged)
    out = tmp_path / "out"
    result = invoke("merge", runs["a"], runs["b"], "--out", out, "--method", "linear", "--evaluate", "--device", "cpu")
    assert result.exit_code == 2
    assert one_error_line(result) == (f"error: --evaluate: data/glue/MRPC/dev.tsv: file not found (nothing was written "
                                      f"to {out}: fix this, or merge without --evaluate)")
    assert not out.exists() and leftovers(tmp_path) == []

    monkeypatch.setattr(evaluate, "evaluate_checkpoint", real)
    result = invoke("merge", runs["a"], runs["b"], "--out", out, "--method", "linear", "--weights", "1,0",
                    "--evaluate", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout)["scores"]
    assert [s["model"] for s in scores] == ["a", "b"] and scores[0]["merged"] == scores[0]["individual"]
    assert (out / "merge.json").is_file()


# ---- 4. the environment: exit 4, the path named, checked before the work ---------------------------


@pytest.mark.slow
def test_an_output_path_that_cannot_be_a_folder_is_exit_4_before_the_merge(runs, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    cases = {
        tmp_path / "file" / "out": f"--out {tmp_path / 'file' / 'out'}: {tmp_path / 'file'} is a file, not a folder",
        tmp_path / "dangling": f"--out {tmp_path / 'dangling'} is a dangling symbolic link (to {tmp_path / 'nowhere'})",
    }
    for out, said in cases.items():
        result = invoke("merge", runs["a"], runs["b"], "--out", out, "--method", "linear")
        assert result.exit_code == 4
        assert one_error_line(result).startswith(f"error: {said}: remove it, or choose another path")
    monkeypatch.setattr(rundir.writing, "_read_only", lambda folder: True)
    result = invoke("merge", runs["a"], runs["b"], "--out", tmp_path / "ro", "--method", "linear")
    assert result.exit_code == 4
    assert one_error_line(result) == (f"error: --out {tmp_path / 'ro'}: {tmp_path} is on a read-only file system: "
                                      "write to a folder on a writable one")
    monkeypatch.undo()
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    result = invoke("merge", runs["a"], runs["b"], "--out", tmp_path / "full", "--method", "linear")
    assert result.exit_code == 4
    assert "has 0.0 MiB free: free space there, or choose another folder" in one_error_line(result)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "file"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permissions")
def test_an_output_folder_without_write_permission_is_exit_4(runs, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    result = invoke("merge", runs["a"], runs["b"], "--out", locked / "out", "--method", "linear")
    assert result.exit_code == 4 and "(permission denied)" in one_error_line(result)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["header", "tensor"])
def test_a_disk_that_fills_during_the_write_is_exit_4_and_leaves_nothing(runs, tmp_path, monkeypatch, where):
    """What a full disk raises while a merge streams its outputs (merge/writer.py): an OSError naming the file,
    when the header is written or in the middle of a tensor's bytes; the half-written file is removed."""
    from recall_cli.merge import writer

    def full(path):
        Path(path).write_bytes(b"\0" * 1000)  # half-written, as a full disk leaves it
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    if where == "header":
        monkeypatch.setattr(writer._File, "__init__", lambda self, path, planned, metadata: full(path))
    else:
        monkeypatch.setattr(writer._File, "put", lambda self, key, tensor: full(self.path))
    out = tmp_path / "out"
    result = invoke("merge", runs["a"], runs["b"], "--out", out, "--method", "linear")
    assert result.exit_code == 4, result.output
    assert one_error_line(result) == (f"error: {out / 'a' / 'model.safetensors'}: no space left on the device: "
                                      "free space there, or write somewhere else"), result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_record_and_finetune_outputs_are_checked_before_the_work(runs, tiny_model_dir, tmp_path):
    (tmp_path / "file").write_text("x")
    record = tmp_path / "file" / "rec"
    result = invoke("evaluate", runs["a"], "--record", record, "--device", "cpu")
    assert result.exit_code == 4
    assert one_error_line(result).startswith(f"error: --record {record}: {tmp_path / 'file'} is a file, not a folder")

    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "file" / "run"))
    said = f"error: output_dir {tmp_path / 'file' / 'run'}: {tmp_path / 'file'} is a file, not a folder"
    dry = invoke("finetune", recipe, "--dry-run", "--json")
    assert dry.exit_code == 4 and json.loads(dry.stdout)["ok"] is False
    assert one_error_line(dry).startswith(said)
    run = invoke("finetune", recipe, "--plain")
    assert run.exit_code == 4 and run.stderr.strip().splitlines()[-1].startswith(said)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "r.yaml"]


def test_an_os_error_of_the_environment_is_one_line_at_the_boundary(capsys):
    import typer

    from recall_cli.cli.common import run_guarded

    def read_only():
        raise OSError(errno.EROFS, "Read-only file system", "/data/runs/.m.tmp-ab12/a/config.json")

    with pytest.raises(typer.Exit) as stopped:
        run_guarded(read_only)
    assert stopped.value.exit_code == 4
    assert capsys.readouterr().err.strip() == "error: /data/runs/m/a/config.json: read-only file system: write to a folder on a writable one"


# ---- 5. corrupt or foreign inputs: exit 2, the file named -----------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated", "not safetensors"])
def test_unreadable_weights_are_a_user_error_naming_the_file(runs, tmp_path, damage):
    broken = tmp_path / "broken"
    shutil.copytree(runs["a"], broken)
    weights = broken / "best" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000] if damage == "truncated" else b"<html>not found</html>")
    out = tmp_path / "out"
    for command in (["merge", runs["b"], broken, "--out", out, "--method", "linear"],
                    ["probe", broken, "--probes", "drift", "--device", "cpu"]):
        result = invoke(*command)
        assert result.exit_code == 2, result.output
        line = one_error_line(result)
        assert line.startswith(f"error: {weights}: not a readable safetensors file (Error while deserializing header")
        assert line.endswith("it is truncated or in another format; copy or save it again")
    assert not out.exists()


@pytest.mark.slow
def test_probe_against_a_model_of_another_width_is_refused(runs, tmp_path):
    wide = tiny_bert_dir(tmp_path / "wide", hidden_size=64, seed=3)
    result = invoke("probe", runs["a"], "--against", wide, "--probes", "drift", "--device", "cpu")
    assert result.exit_code == 2
    assert one_error_line(result) == (f"error: {runs['a']}: embeddings.word_embeddings.weight has shape [30522, 32], "
                                      f"θ* {wide} [30522, 64]: give the model it was fine-tuned from as --against")


# ---- 6. --dry-run runs the run's own checks, probe files included ---------------------------------


@pytest.mark.parametrize("probe, said", [
    ({"pairs_file": "empty.tsv"}, "empty.tsv: no rows (need a header and sentence1, sentence2, score columns)"),
    ({"texts_file": "binary.txt"}, "binary.txt: not UTF-8 text (byte 128): save the probe texts as UTF-8, one sentence a line"),
])
@pytest.mark.slow
def test_dry_run_and_run_refuse_the_same_probe_files(tiny_model_dir, tmp_path, probe, said):
    (tmp_path / "empty.tsv").write_text("")
    (tmp_path / "binary.txt").write_bytes(bytes(range(256)) * 8)
    probe = {key: str(tmp_path / name) for key, name in probe.items()}
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "out", probe=probe))
    dry = invoke("finetune", recipe, "--dry-run", "--json")
    assert dry.exit_code == 2
    report = json.loads(dry.stdout)
    assert report["ok"] is False
    assert [c for c in report["checks"] if c["status"] != "ok"] == [
        {"name": "probe files", "status": "fail", "message": f"{tmp_path}/{said}"}]
    assert one_error_line(dry) == f"error: {tmp_path}/{said}"
    run = invoke("finetune", recipe, "--plain")
    assert run.exit_code == 2 and run.stderr.strip().splitlines()[-1] == f"error: {tmp_path}/{said}"
    assert not (tmp_path / "out").exists()


# ---- 7. strict JSON; STS pairs whose scores cannot rank -------------------------------------------


def _strict(text: str):
    def refuse(constant):
        raise AssertionError(f"{constant} in --json output")
    return json.loads(text, parse_constant=refuse)


def test_every_json_is_strict_with_null_for_nan(runs, monkeypatch):
    row = {"target": "a", "theta": "a", "reference": "r", "texts": 4, "pairs": 0, "cka": float("nan"),
           "drift": float("inf"), "notes": []}
    monkeypatch.setattr("recall_cli.probes.targets.probe_targets", lambda *a, **k: [row])
    result = invoke("probe", runs["a"], "--json", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert _strict(result.stdout) == [{**row, "cka": None, "drift": None}]

    scored = {"checkpoint": "a", "task": "stsb", "splits": ["dev"], "examples": {"dev": 3},
              "metrics": {"pearson": float("nan"), "main": float("nan")}}
    monkeypatch.setattr("recall_cli.scoring.evaluate.evaluate_checkpoint", lambda *a, **k: scored)
    result = invoke("evaluate", runs["a"], "--json", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert _strict(result.stdout)["metrics"] == {"pearson": None, "main": None}


@pytest.mark.parametrize("scores, said", [
    (["1.0", "nan", "2.0", "3.0"], "row 3: score 'nan' is not a finite number: give every pair a real score"),
    (["2.5", "2.5", "2.5", "2.5"], "all 4 pairs score 2.5: a Spearman correlation needs scores that differ"),
])
def test_sts_pairs_whose_scores_cannot_rank_are_refused(runs, tmp_path, scores, said):
    pairs = tmp_path / "pairs.tsv"
    rows = [f"a sentence {i}\tanother sentence {i}\t{s}" for i, s in enumerate(scores)]
    pairs.write_text("sentence1\tsentence2\tscore\n" + "\n".join(rows) + "\n", encoding="utf-8")
    result = invoke("probe", runs["a"], "--probes", "sts", "--pairs", pairs, "--device", "cpu")
    assert result.exit_code == 2
    assert one_error_line(result).startswith(f"error: {pairs}: {said}")


# ---- 8. messages that name the user's own option ---------------------------------------------------


def test_did_you_mean_knows_other_trainers_names_and_merge_names_its_device(runs, tiny_model_dir, tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "out"))
    result = invoke("finetune", recipe, "optimizer.learning_rate=1e-4", "--dry-run")
    assert result.exit_code == 2 and "unknown key 'optimizer.learning_rate' (did you mean 'optimizer.lr'?)" in result.stderr
    if torch.cuda.is_available():
        return
    result = invoke("merge", runs["a"], runs["b"], "--out", tmp_path / "m", "--device", "cuda")
    assert result.exit_code == 2
    assert one_error_line(result) == ("error: --device cuda but no CUDA device is visible (check CUDA_VISIBLE_DEVICES, "
                                      "or use --device cpu)")


def test_an_override_with_a_line_break_is_refused_not_folded(tiny_model_dir, tmp_path):
    """YAML folds a line break in a plain scalar into a space: output_dir=a<newline>b became 'a b'."""
    from typer.testing import CliRunner

    from recall_cli.cli import app

    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "out"))
    result = CliRunner().invoke(app, ["finetune", str(recipe), "output_dir=a\nb", "--dry-run"])
    assert result.exit_code == 2
    assert "override output_dir: the value holds a line break" in result.output


def test_the_dry_run_reads_the_dev_split_as_the_run_does(tiny_model_dir, tmp_path):
    """--dry-run is the run's own set-up: a dev label the task does not have fails it (it passed, and the
    run then failed with exit 2)."""
    from typer.testing import CliRunner

    from recall_cli.cli import app

    (tmp_path / "train.tsv").write_text("sentence\tlabel\nfoo bar\tpos\nbaz qux\tneg\nfoo baz\tpos\nqux bar\tneg\n")
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\nfoo bar\tpos\nbaz qux\tmaybe\n")
    task = {"name": "custom", "data_dir": None, "train_file": str(tmp_path / "train.tsv"),
            "dev_file": str(tmp_path / "dev.tsv"), "text_fields": ["sentence"], "label_field": "label",
            "num_labels": 2, "label_names": ["neg", "pos"], "max_train_examples": None, "max_eval_examples": None}
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "out", task=task))
    result = CliRunner().invoke(app, ["finetune", str(recipe), "--dry-run"])
    assert result.exit_code == 2, result.output
    assert "dev.tsv line 3: label 'maybe' is not one of neg, pos" in result.output
    assert not (tmp_path / "out").exists()


@pytest.fixture
def small_disk(tmp_path):
    """A real 26 MiB tmpfs (root only): room for a tiny run's first checkpoint, not for a second beside it."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=26M", "tmpfs", str(mount)],
                                          capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_a_full_disk_at_a_later_checkpoint_is_exit_4_naming_the_file_and_last_survives(tiny_model_dir, tmp_path, small_disk):
    """torch's zip writer reports a full disk as "[enforce fail at inline_container.cc] unexpected pos"
    (exit 1, no path): now exit 4 naming the file; the checkpoint saved before it is whole, and resumes."""
    run = small_disk / "run"
    recipe = tiny_recipe(tiny_model_dir, run, train={"max_steps": 12, "eval_every": 6}, probe={"enabled": False})
    result = runner.invoke(app, ["finetune", str(write_recipe(tmp_path / "r.yaml", recipe)), "--plain"])
    assert result.exit_code == 4, result.output
    assert "Traceback" not in result.output  # the recall-phase warning comes first; the error is one line
    assert result.stderr.strip().splitlines()[-1] == (f"error: {run / 'last' / 'optimizer.pt'}: no space left on "
                                                      "the device: free space there, or write somewhere else")
    state = json.loads((run / "last" / "trainer_state.json").read_text())
    assert state["step"] == 6 and not [p for p in run.iterdir() if p.name.startswith(".")]
    moved = tmp_path / "moved"  # room again: the same run, elsewhere, continues from step 6
    shutil.copytree(run, moved)
    resumed = runner.invoke(app, ["finetune", "--resume", str(moved), "--plain"])
    assert resumed.exit_code == 0 and "resuming at step 6," in resumed.output, resumed.output
