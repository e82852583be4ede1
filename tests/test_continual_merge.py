"""Merge after each stage (`recall continual ... continual.merge=...`): RECALL's sequential scenario. From stage 2
on, the stage's weights are merged with the previous merged model by `recall merge`'s own code, the next stage
starts from the merged weights and the row is read on them; a finished merge is never redone, an interrupted one
is redone from its inputs; wrong keys are one line, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from recall_cli.cli import app
from recall_cli.sequence.runner import run_continual
from test_continual import stage_files, without_seconds

TWO = (("mrpc", "MRPC"), ("sst2", "SST-2"))
LINEAR = ["continual.merge=linear", "continual.merge.weights=0.25,0.75"]


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def encoder(w: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in w.items() if k.startswith("bert.") and not k.endswith("position_ids")}


@pytest.fixture(scope="module")
def merged_seq(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("continual_merge")
    files = stage_files(root, tiny_model_dir)
    out = root / "seq"
    return files, out, run_continual(files, LINEAR, out)


@pytest.mark.slow
def test_each_stage_is_merged_with_the_previous_merge_and_the_next_starts_there(merged_seq):
    import yaml

    from recall_cli.scoring.evaluate import evaluate_checkpoint

    files, out, record = merged_seq
    stages = out / "stages"
    assert [s["scored_on"] for s in record["stages"]] == ["trained", "merged", "merged"]
    assert "merged" not in record["stages"][0]
    assert [s.get("merged") for s in record["stages"][1:]] == ["stages/02-sst2/merged/02-sst2", "stages/03-cola/merged/03-cola"]
    assert record["command"]["continual"]["merge"] == "linear"
    assert record["command"]["continual"]["merge_options"] == {"weights": "0.25,0.75"}
    assert all(s["seconds"]["merge"] > 0 for s in record["stages"][1:]) and "merge" not in record["stages"][0]["seconds"]
    # stage 2: 0.25 x stage 1's weights + 0.75 x stage 2's (the previous merge first, the new stage second)
    previous = [stages / "01-mrpc/last", stages / "02-sst2/merged/02-sst2"]
    for i, (before, task) in enumerate(zip(previous, ("02-sst2", "03-cola")), 2):
        trained, merged = weights(stages / task / "last"), weights(stages / task / "merged" / task)
        earlier = weights(before)
        enc = encoder(merged)
        assert enc and set(enc) == set(encoder(trained))
        for k, v in enc.items():
            torch.testing.assert_close(v, 0.25 * earlier[k] + 0.75 * trained[k], rtol=0, atol=1e-6)
        assert not torch.allclose(enc["bert.encoder.layer.0.attention.self.query.weight"],
                                  trained["bert.encoder.layer.0.attention.self.query.weight"])
        for k in (k for k in trained if k.startswith("classifier.")):  # the stage's own head, never merged
            assert torch.equal(merged[k], trained[k])
        merge = json.loads((stages / task / "merged/merge.json").read_text())
        assert merge["method"] == "linear" and merge["weights"] == [0.25, 0.75]
        assert [Path(s["model"]) for s in merge["inputs"]] == [before, stages / task / "last"]
        # the row is read on the merged model: its diagonal is `recall evaluate` of the merged folder
        scored = evaluate_checkpoint(stages / task / "merged" / task, device="cpu")
        assert record["matrix"][i][i - 1] == pytest.approx(scored["metrics"]["main"], abs=1e-9)
    # stage 3 started from stage 2's merged weights: its config.yaml says so, and its theta* is them, bit for bit
    config = yaml.safe_load((stages / "03-cola/config.yaml").read_text())
    assert config["model"]["name_or_path"] == str(stages / "02-sst2/merged/02-sst2")
    anchor, start = load_file(stages / "03-cola/anchor.safetensors"), encoder(weights(stages / "02-sst2/merged/02-sst2"))
    assert all(torch.equal(anchor[k], v) for k, v in start.items())
    # an earlier task is scored with the last merged encoder under its own head: R[3][2] by hand
    from recall_cli.model import load_checkpoint_model
    from recall_cli.recipe import load_recipe
    from recall_cli.tasks import task_spec, task_type_for

    mixed = out.parent / "mixed"
    model = load_checkpoint_model(stages / "02-sst2/merged/02-sst2", task_type_for(task_spec(load_recipe(files[1]).task)))
    model.load_state_dict(encoder(weights(stages / "03-cola/merged/03-cola")), strict=False)
    model.save_pretrained(mixed)
    for item in (stages / "02-sst2/merged/02-sst2").iterdir():
        if item.suffix in (".json", ".txt", ".yaml") and item.name != "config.json":
            (mixed / item.name).write_bytes(item.read_bytes())
    assert record["matrix"][3][1] == pytest.approx(evaluate_checkpoint(mixed, device="cpu")["metrics"]["main"], abs=1e-9)


@pytest.mark.slow
def test_an_interrupted_merge_is_redone_and_a_finished_one_is_not(merged_seq, tmp_path, monkeypatch):
    """Ctrl-C inside stage 3's merge (while its outputs are written), then a kill -9's leftover staging folder,
    then --resume: stage 2's merge is not redone, stage 3's is redone from its inputs, and continual.json equals
    the uninterrupted sequence's, timings aside."""
    from recall_cli.merge import engine

    files, _, record = merged_seq
    out = tmp_path / "seq"
    real = engine._finish_output
    calls = []

    def interrupted(source, weights, folder, card_text):  # the second output of stage 3's merge is cut short
        calls.append(folder)
        if "03-cola" in str(folder) and len([c for c in calls if "03-cola" in str(c)]) == 2:
            raise KeyboardInterrupt
        return real(source, weights, folder, card_text)

    monkeypatch.setattr(engine, "_finish_output", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_continual(files, LINEAR, out)
    monkeypatch.setattr(engine, "_finish_output", real)
    partial = json.loads((out / "continual.json").read_text())
    assert len(partial["stages"]) == 2 and not (out / "stages/03-cola/merged").exists()
    assert (out / "stages/03-cola/summary.json").is_file()  # trained; only its merge was cut short
    leftover = out / "stages/03-cola/.merged.tmp-killed"
    leftover.mkdir()
    (leftover / "model.safetensors").write_bytes(b"half")
    stamp = (out / "stages/02-sst2/merged/merge.json").stat().st_mtime_ns
    trained = (out / "stages/03-cola/summary.json").stat().st_mtime_ns
    resumed = run_continual([], [], out, resume=True)
    assert (out / "stages/02-sst2/merged/merge.json").stat().st_mtime_ns == stamp
    assert (out / "stages/03-cola/summary.json").stat().st_mtime_ns == trained
    assert not leftover.exists()
    assert without_seconds(resumed) == without_seconds(record) | {"command": resumed["command"]}
    assert resumed["command"]["continual"] == record["command"]["continual"]
    for task in ("02-sst2", "03-cola"):
        a, b = weights(out / f"stages/{task}/merged/{task}"), weights(merged_seq[1] / f"stages/{task}/merged/{task}")
        assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_recall_and_ties_merge_a_sequence(tiny_model_dir, tmp_path):
    """RECALL: the merged block is the per-layer weighted sum merge.json records; TIES: theta* is the original
    model (stage 1's), as `recall merge --base` would take it."""
    from recall_cli.merge.ties import Ties

    files = stage_files(tmp_path, tiny_model_dir, TWO)
    run_continual(files, ["continual.merge=recall", "continual.merge.clusters=4", "continual.merge.pool=24"], tmp_path / "r")
    stages = tmp_path / "r/stages"
    merge = json.loads((stages / "02-sst2/merged/merge.json").read_text())
    assert merge["method"] == "recall" and merge["reference"] == "02-sst2" and merge["clusters"] == 4
    w = merge["layers"][1]["weight"]  # block 0 is layer 1
    assert w[1] > w[0] and sum(w) == pytest.approx(1)
    a, b = weights(stages / "01-mrpc/last"), weights(stages / "02-sst2/last")
    merged = weights(stages / "02-sst2/merged/02-sst2")
    key = "bert.encoder.layer.0.attention.self.query.weight"
    torch.testing.assert_close(merged[key], w[0] * a[key] + w[1] * b[key], rtol=0, atol=1e-6)

    run_continual(files, ["continual.merge=ties", "continual.merge.density=0.5"], tmp_path / "t")
    stages = tmp_path / "t/stages"
    merge = json.loads((stages / "02-sst2/merged/merge.json").read_text())
    assert merge["method"] == "ties" and merge["density"] == 0.5 and merge["theta_star"] == [str(tiny_model_dir)]
    a, b = weights(stages / "01-mrpc/last"), weights(stages / "02-sst2/last")
    base = load_file(Path(tiny_model_dir) / "model.safetensors")
    merged = weights(stages / "02-sst2/merged/02-sst2")
    name = key.removeprefix("bert.")
    expected = Ties(1.0, 0.5).fuse([a[key], b[key]], 1, base.get(name, base.get(key)))
    torch.testing.assert_close(merged[key], expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("given, words", [
    (["continual.merge=linear", "continual.merge.density=0.5"], "continual.merge.density: the linear merge has no option density"),
    (["continual.merge=linear", "continual.merge.weights=1,2,3"], "continual.merge.weights: 3 values; give 2"),
    (["continual.merge.weights=0.5,0.5"], "continual.merge.weights: no merge after each stage (continual.merge=none)"),
    (["continual.merge=recall", "continual.merge.temperature=0"], "--temperature 0: the softmax temperature must be > 0"),
    (["continual.merge=recall", "continual.merge.clusters=many"], "continual.merge.clusters: give an integer, got 'many'"),
    (["continual.merge=recall", "continual.merge.reference=x"], "continual.merge.reference: the reference is always the stage"),
    (["continual.merge=task_arithmetic"], "continual.merge: one of none, recall, linear, ties, got 'task_arithmetic'"),
    (["continual.merge=ties", "continual.merge.base=/nowhere/model"], "continual.merge.base: /nowhere/model: no such"),
    (["continual.theta_star=pretrained"], "continual.theta_star: previous (the weights each stage starts from) or original"),
])
def test_wrong_merge_and_theta_star_keys_are_one_line_and_write_nothing(tiny_model_dir, tmp_path, given, words):
    files = stage_files(tmp_path, tiny_model_dir, TWO)
    out = tmp_path / "seq"
    result = CliRunner().invoke(app, ["continual", *map(str, files), *given, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert words in result.output, result.output
    assert "Traceback" not in result.output and not out.exists()


@pytest.mark.slow
def test_the_dry_run_shows_the_merge_and_theta_star(tiny_model_dir, tmp_path):
    files = stage_files(tmp_path, tiny_model_dir, TWO)
    result = CliRunner().invoke(app, ["continual", *map(str, files), *LINEAR, "continual.theta_star=original",
                                      "--dry-run", "--out", str(tmp_path / "seq")])
    assert result.exit_code == 0, result.output
    assert "merge=linear weights=0.25,0.75 theta_star=original" in result.output
    assert not (tmp_path / "seq").exists()
