"""`recall continual`: each stage an ordinary run directory started from the previous stage's weights,
the matrix read with each task's own head, the stages checked together before anything is written, and a
sequence stopped in a stage finishing with the same continual.json as one never stopped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from conftest import GLUE, StopAfter, tiny_recipe, write_recipe
from recall_cli.cli import app
from recall_cli.errors import RecipeError, RunDirError
from recall_cli.sequence.runner import run_continual

TASKS = (("mrpc", "MRPC"), ("sst2", "SST-2"), ("cola", "CoLA"))


def stage_files(root: Path, model_dir: Path, tasks=TASKS, **sections) -> list[Path]:
    files = []
    for name, folder in tasks:
        recipe = tiny_recipe(model_dir, root / "unused", task={"name": name, "data_dir": str(GLUE / folder),
                                                                "max_seq_length": 32, "max_train_examples": 48,
                                                                "max_eval_examples": 24},
                             optimizer={"name": "adamw", "lr": 1e-3},
                             train={"batch_size": 8, "max_steps": 4, "log_every": 2, "eval_every": 0})
        recipe["probe"]["enabled"] = False
        for section, values in sections.items():
            recipe.setdefault(section, {}).update(values)
        files.append(write_recipe(root / f"{name}.yaml", recipe))
    return files


def without_seconds(record: dict) -> dict:
    record = json.loads(json.dumps(record))
    record.pop("row0_seconds", None)
    for stage in record["stages"]:
        stage.pop("seconds", None)
    return record


@pytest.fixture(scope="module")
def finished(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("continual")
    files = stage_files(root, tiny_model_dir)
    out = root / "seq"
    record = run_continual(files, [], out)
    return files, out, record


@pytest.mark.slow
def test_stages_chain_and_the_matrix_reads_each_tasks_head(finished):
    files, out, record = finished
    assert record["tasks"] == ["mrpc", "sst2", "cola"] and record["finished"] is True
    dirs = [out / s["run_dir"] for s in record["stages"]]
    assert [d.name for d in dirs] == ["01-mrpc", "02-sst2", "03-cola"]
    # stage i+1 starts from stage i's last/ (its config.yaml says so), with a fresh head of its own
    import yaml

    for before, after in zip(dirs, dirs[1:]):
        config = yaml.safe_load((after / "config.yaml").read_text())
        assert config["model"]["name_or_path"] == str(before / "last")
    # the diagonal is each stage's own final evaluation (the same weights, rows and head)
    for i, d in enumerate(dirs, 1):
        summary = json.loads((d / "summary.json").read_text())
        assert record["matrix"][i][i - 1] == pytest.approx(summary["final"]["main"], abs=1e-9)
    # classifier stages: no row 0, nothing above the diagonal, hence no FWT
    m = record["matrix"]
    assert m[0] is None and m[1][1:] == [None, None] and m[2][2] is None and record["fwt"] is None
    # ACC and BWT are the matrix's
    assert record["acc"] == pytest.approx(sum(m[3]) / 3)
    assert record["bwt"] == pytest.approx(((m[3][0] - m[1][0]) + (m[3][1] - m[2][1])) / 2)
    assert (out / "matrix.png").stat().st_size > 1000


@pytest.mark.slow
def test_an_earlier_task_is_scored_with_its_own_head_on_the_later_encoder(finished):
    """R[3][1] by hand: stage 3's encoder weights under stage 1's head, scored on MRPC's dev rows."""
    from recall_cli.model import load_checkpoint_model, load_tokenizer
    from recall_cli.scoring.evaluate import evaluate_checkpoint

    files, out, record = finished
    s1, s3 = out / "stages/01-mrpc/last", out / "stages/03-cola/last"
    mixed = out.parent / "mixed"
    w1, w3 = load_file(s1 / "model.safetensors"), load_file(s3 / "model.safetensors")
    assert not torch.equal(w1["bert.encoder.layer.0.attention.self.query.weight"],
                           w3["bert.encoder.layer.0.attention.self.query.weight"])
    from recall_cli.tasks import task_spec, task_type_for
    from recall_cli.recipe import load_recipe

    kind = task_type_for(task_spec(load_recipe(files[0]).task))
    model = load_checkpoint_model(s1, kind)
    model.load_state_dict({k: v for k, v in w3.items() if k.startswith("bert.")}, strict=False)
    model.save_pretrained(mixed)
    load_tokenizer(str(s1)).save_pretrained(mixed)
    (mixed / "recall_recipe.yaml").write_text((out / "stages/01-mrpc/config.yaml").read_text())
    scored = evaluate_checkpoint(mixed, device="cpu")
    assert record["matrix"][3][0] == pytest.approx(scored["metrics"]["main"], abs=1e-9)


@pytest.mark.slow
def test_the_reused_diagonal_is_a_fresh_score_of_the_same_weights(finished):
    """R[i][i] comes from the stage's own final evaluation (not scored twice): it must be, exactly, what the
    matrix's scorer gives the same last/ weights on the same rows; a stage trained with other eval rows or
    batches is scored again."""
    import dataclasses

    from recall_cli.model import load_checkpoint_model, load_tokenizer
    from recall_cli.sequence.runner import plan_for, stage_recipe
    from recall_cli.sequence.scoring import Scorer
    from recall_cli.tasks import task_spec, task_type_for

    files, out, record = finished
    plan = plan_for(files, [], out, seed=None, resume=False)
    scorer = Scorer(plan, torch.device("cpu"))
    chosen: list[Path] = []
    for stage in plan.stages:
        trained = stage_recipe(plan, stage, chosen)
        folder = stage.run_dir / "last"
        chosen.append(folder)
        kind = task_type_for(task_spec(stage.recipe.task))
        fresh = scorer.score(load_checkpoint_model(folder, kind), stage, load_tokenizer(str(folder)))
        reused = scorer.finetune_score(stage, trained, folder)
        assert reused is not None and reused == fresh
        assert record["matrix"][stage.index][stage.index - 1] == fresh
        # other rows (a cap on the eval rows) or other batches (padding): the record is not these numbers
        other_rows = dataclasses.replace(trained, task=dataclasses.replace(trained.task, max_eval_examples=23))
        other_batch = dataclasses.replace(trained, train=dataclasses.replace(trained.train, eval_batch_size=5))
        assert scorer.finetune_score(stage, other_rows, folder) is None
        assert scorer.finetune_score(stage, other_batch, folder) is None
    # best/ is read at best/'s own step (stage 1 evaluates once, at its last step: best/ is that step)
    assert scorer.finetune_score(plan.stages[0], stage_recipe(plan, plan.stages[0], []),
                                 plan.stages[0].run_dir / "best") == record["matrix"][1][0]


@pytest.mark.slow
def test_a_stage_scores_only_the_cells_its_finetune_did_not(tiny_model_dir, tmp_path, monkeypatch):
    """Two classifier stages: the matrix scores R[2][1] alone (the diagonal is each finetune's final
    evaluation: before this, R[1][1], R[2][1] and R[2][2] were all scored)."""
    from recall_cli.sequence.scoring import Scorer

    calls: list[str] = []
    score = Scorer.score
    monkeypatch.setattr(Scorer, "score", lambda self, model, stage, tok: calls.append(stage.task) or score(self, model, stage, tok))
    files = stage_files(tmp_path, tiny_model_dir, tasks=TASKS[:2])
    record = run_continual(files, [], tmp_path / "seq")
    assert calls == ["mrpc"] and record["matrix"][2][1] is not None and record["matrix"][1][0] is not None


@pytest.mark.slow
def test_a_stopped_sequence_resumes_to_the_same_record(finished, tmp_path, monkeypatch):
    """SIGTERM-like stop (Ctrl-C's path) in stage 2, then a crash in stage 3 (as kill -9: nothing after it
    runs), then --resume: the record equals the uninterrupted one, timings aside; stage 1 never retrains."""
    files, _, record = finished
    out = tmp_path / "seq"
    with pytest.raises(KeyboardInterrupt):
        run_continual(files, [], out, reporter_for=lambda s: StopAfter(2 if s.index == 2 else None))
    partial = json.loads((out / "continual.json").read_text())
    assert len(partial["stages"]) == 1 and partial["finished"] is False
    stage1 = (out / "stages/01-mrpc/summary.json").stat().st_mtime_ns

    class Crash(StopAfter):
        def step(self, step):
            if step == 3:
                raise SystemExit(9)

    with pytest.raises(SystemExit):
        run_continual([], [], out, resume=True, reporter_for=lambda s: Crash(3) if s.index == 3 else StopAfter(None))
    resumed = run_continual([], [], out, resume=True)
    assert without_seconds(resumed) == without_seconds(record) | {"command": resumed["command"]}
    assert resumed["matrix"] == record["matrix"]
    assert (out / "stages/01-mrpc/summary.json").stat().st_mtime_ns == stage1  # never retrained


@pytest.mark.slow
def test_a_second_writer_is_refused(finished, tmp_path):
    from recall_cli.rundir import output_lock

    files, _, _ = finished
    out = tmp_path / "seq"
    with output_lock(out, "test", "--out"):
        with pytest.raises(RunDirError, match="being written by process"):
            run_continual(files, [], out)
    assert not (out / "continual.json").exists()


@pytest.mark.slow
def test_every_stage_is_checked_before_anything_is_written(tiny_model_dir, tmp_path):
    from recall_cli.testing import tiny_bert_dir

    files = stage_files(tmp_path, tiny_model_dir)
    wide = tiny_bert_dir(tmp_path / "wide", seed=1, hidden_size=48)
    import yaml

    raw = yaml.safe_load(files[1].read_text())
    raw["model"]["name_or_path"] = str(wide)
    write_recipe(files[1], raw)
    raw = yaml.safe_load(files[2].read_text())
    raw["train"]["bogus"] = 1
    write_recipe(files[2], raw)
    out = tmp_path / "seq"
    result = CliRunner().invoke(app, ["continual", *map(str, files), str(tmp_path / "gone.yaml"), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "stage 3" in result.output and "train.bogus" in result.output
    assert "stage 4" in result.output and "no such recipe file" in result.output
    assert not out.exists()
    # without the two broken stages the model check speaks: another width is one line, exit 2
    result = CliRunner().invoke(app, ["continual", str(files[0]), str(files[1]), "--out", str(out)])
    assert result.exit_code == 2 and "width (hidden_size) is 48, stage 1's is 32" in result.output
    assert not out.exists()
    with pytest.raises(RecipeError, match="continual.merge"):
        run_continual(files[:1], ["continual.merge=sometimes"], out)


@pytest.mark.slow
def test_an_existing_sequence_needs_resume_or_overwrite(finished, tmp_path):
    files, out, _ = finished
    result = CliRunner().invoke(app, ["continual", *map(str, files), "--out", str(out)])
    assert result.exit_code == 2 and "--resume" in result.output


@pytest.mark.slow
def test_the_library_returns_the_sequences_matrix(finished):
    """recall_cli.continual (the library's `recall continual`) on a finished sequence: the matrix of its
    continual.json, stage by stage, and no stage trained again."""
    import recall_cli

    files, out, record = finished
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("stages/*/summary.json")}
    matrix = recall_cli.continual([], [], out, resume=True)  # --resume: the command continual.json recorded
    assert matrix == json.loads((out / "continual.json").read_text())["matrix"] == record["matrix"]
    assert len(matrix) == 4 and all(len(row) == 3 for row in matrix[1:])
    assert {p: p.stat().st_mtime_ns for p in out.glob("stages/*/summary.json")} == stamps
