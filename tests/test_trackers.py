"""train.report_to: a tiny run reported to TensorBoard, MLflow and W&B (offline), each read back with
its own reader (TensorBoard's EventAccumulator, MlflowClient on a local store, W&B's offline run
file parsed with W&B's own protobuf Record), and the numbers compared with metrics.jsonl and
summary.json; a resumed run continues the same tracker run without a step twice; a missing package
is refused before anything is written; merge --report-to."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from conftest import make_run, tiny_recipe, write_recipe
from typer.testing import CliRunner

from recall_cli import trackers
from recall_cli.rundir import read_metrics
from recall_cli.cli import app
from recall_cli.training.progress import Reporter
from recall_cli.recipe import flatten, load_recipe
from recall_cli.training.loop import finetune

runner = CliRunner()
ALL = ["tensorboard", "mlflow", "wandb"]
FAST_PROBES = {"num_texts": 24, "num_pairs": 24, "max_length": 32, "probes": ["cka", "drift", "sts"]}
CURVES = {"train": ("loss", "lambda", "distance", "lr"), "eval": ("main", "accuracy"), "probe": ("sts_retained", "cka")}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Every tracker offline, writing under one temporary folder (the working directory too: MLflow
    puts its artifacts in ./mlruns); one MLflow database for the module (it takes seconds to create)."""
    root = tmp_path_factory.mktemp("trackers")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_DIR", str(root))
        mp.setenv("WANDB_SILENT", "true")
        mp.setenv("WANDB_PROJECT", "recall-tests")
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
        mp.setenv("MLFLOW_EXPERIMENT_NAME", "recall-tests")
        mp.delenv("RANK", raising=False)
        yield root


@pytest.fixture(scope="module")
def tracked_run(stores, tiny_model_dir) -> Path:
    train = {"max_steps": 8, "log_every": 2, "eval_every": 4, "report_to": ALL}
    recipe = write_recipe(stores / "recipe.yaml",
                          tiny_recipe(tiny_model_dir, stores / "run", train=train, probe=FAST_PROBES))
    result = runner.invoke(app, ["finetune", str(recipe), "--plain"])
    assert result.exit_code == 0, result.output
    return stores / "run"


def jsonl_curve(run: Path, split: str, key: str) -> list[tuple[int, float]]:
    return [(r["step"], r[key]) for r in read_metrics(run) if r["split"] == split and isinstance(r.get(key), (int, float))]


def summary_numbers(run: Path) -> dict[str, float]:
    summary = json.loads((run / "summary.json").read_text())
    return trackers.numbers(trackers.summary_values(summary))


def saved_state(run: Path) -> dict:
    return json.loads((run / trackers.STATE_FILE).read_text())


# ---- readers: each tracker's own ------------------------------------------------------------------


def tensorboard_events(folder: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    events.Reload()
    return events


def tensorboard_curve(events, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in events.Scalars(tag)]


def tensorboard_hparams(events) -> dict:
    from google.protobuf.json_format import MessageToDict
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    start = HParamsPluginData.FromString(content).session_start_info
    return {key: MessageToDict(value) for key, value in start.hparams.items()}  # a struct Value: the number or text


def mlflow_client():
    from mlflow.tracking import MlflowClient

    return MlflowClient()


def mlflow_curve(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def wandb_records(stores: Path, run_id: str) -> list[list]:
    """Each offline session of W&B run ``run_id`` (a resume adds one), as its protobuf Records. The
    .wandb file is W&B's transaction log: a 7-byte header (":W&B", magic, version), then LevelDB-log
    framed chunks (crc32 4, length 2, type 1; FULL=1, FIRST=2, MIDDLE=3, LAST=4) in 32 KiB blocks."""
    from wandb.proto.wandb_internal_pb2 import Record

    sessions = []
    for path in sorted((stores / "wandb").glob(f"offline-run-*-{run_id}*/run-{run_id}.wandb")):
        data, records, pending, pos = path.read_bytes(), [], b"", 7
        assert data[:4] == b":W&B"
        while pos + 7 <= len(data):
            if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
                pos += 32768 - pos % 32768
                continue
            _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
            pending += data[pos + 7:pos + 7 + length]
            pos += 7 + length
            if kind in (1, 4):
                records.append(Record.FromString(pending))
                pending = b""
            elif kind == 0:
                pending = b""
        sessions.append(records)
    return sessions


def _wandb_items(items) -> dict[str, object]:
    """W&B's items as a dict: an item's nested_key is a path (an image: figures/forgetting -> width)."""
    out: dict[str, object] = {}
    for item in items:
        *parents, last = [item.key] if item.key else list(item.nested_key)
        where = out
        for parent in parents:
            where = where.setdefault(parent, {})
        where[last] = json.loads(item.value_json)
    return out


def wandb_history(records) -> dict[str, list[tuple[int, object]]]:
    curves: dict[str, list] = {}
    for record in records:
        if record.WhichOneof("record_type") == "history":
            row = _wandb_items(record.history.item)
            for key, value in row.items():
                if not key.startswith("_"):
                    curves.setdefault(key, []).append((row["_step"], value))
    return curves


def wandb_summary(records) -> dict[str, object]:
    summary: dict[str, object] = {}
    for record in records:
        if record.WhichOneof("record_type") == "summary":
            summary.update(_wandb_items(record.summary.update))
    return summary


def wandb_run(records):
    return next(r.run for r in records if r.WhichOneof("record_type") == "run")


# ---- one run, three trackers --------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_tensorboard_holds_the_curves_recipe_summary_and_figures(tracked_run):
    events = tensorboard_events(tracked_run / "tensorboard")
    for split, keys in CURVES.items():
        for key in keys:
            expected = jsonl_curve(tracked_run, split, key)
            assert expected, (split, key)
            got = tensorboard_curve(events, f"{split}/{key}")
            assert [s for s, _ in got] == [s for s, _ in expected], (split, key)
            # TensorBoard keeps a scalar as float32
            assert [v for _, v in got] == pytest.approx([v for _, v in expected], rel=1e-6), (split, key)
    for name, value in summary_numbers(tracked_run).items():
        assert tensorboard_curve(events, name)[-1] == (8, pytest.approx(value, rel=1e-6)), name
    params = flatten(load_recipe(tracked_run / "config.yaml").to_dict(as_written=True))  # as config.yaml has it
    hparams = tensorboard_hparams(events)
    assert hparams["optimizer.lr"] == params["optimizer.lr"] == 1e-3
    assert hparams["task.name"] == "mrpc" and hparams["train.max_steps"] == 8
    assert hparams["train.report_to"] == json.dumps(ALL)
    forgetting, probes = events.Images("figures/forgetting"), events.Images("figures/probes")
    assert (forgetting[0].step, forgetting[0].width, forgetting[0].height) == (8, 1300, 400)
    assert probes[0].step == 8 and probes[0].width > 0


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_mlflow_holds_the_curves_params_summary_and_figures(tracked_run):
    client = mlflow_client()
    run = client.get_run(saved_state(tracked_run)["mlflow"]["run_id"])
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    assert client.get_experiment(run.info.experiment_id).name == "recall-tests"
    for split, keys in CURVES.items():
        for key in keys:
            assert mlflow_curve(client, run.info.run_id, f"{split}/{key}") == jsonl_curve(tracked_run, split, key)
    for name, value in summary_numbers(tracked_run).items():
        assert mlflow_curve(client, run.info.run_id, name) == [(8, value)], name
    assert run.data.tags["summary/task"] == "mrpc"
    params = flatten(load_recipe(tracked_run / "config.yaml").to_dict(as_written=True))  # as config.yaml has it
    assert run.data.params == {key: value if isinstance(value, str) else json.dumps(value) for key, value in params.items()}
    figures = {f.path for f in client.list_artifacts(run.info.run_id, "figures")}
    assert figures == {"figures/forgetting.png", "figures/probes.png"}


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_wandb_offline_holds_the_curves_config_summary_and_figures(tracked_run, stores):
    state = saved_state(tracked_run)["wandb"]
    (records,) = wandb_records(stores, state["id"])
    run = wandb_run(records)
    assert (run.project, run.display_name, run.job_type) == ("recall-tests", "run", "finetune")
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    recipe = load_recipe(tracked_run / "config.yaml").to_dict(as_written=True)  # as config.yaml has it
    assert all(config[section] == values for section, values in recipe.items() if isinstance(values, dict))
    history = wandb_history(records)
    for split, keys in CURVES.items():
        for key in keys:
            assert history[f"{split}/{key}"] == jsonl_curve(tracked_run, split, key), (split, key)
    summary = wandb_summary(records)
    for name, value in summary_numbers(tracked_run).items():
        assert summary[name] == pytest.approx(value, rel=1e-12), name
    assert summary["summary/task"] == "mrpc"
    (step, image), = history["figures/forgetting"]
    assert step == 8 and image["_type"] == "image-file" and (image["width"], image["height"]) == (1300, 400)
    (folder,) = (stores / "wandb").glob(f"offline-run-*-{state['id']}*")
    assert (folder / "files" / image["path"]).stat().st_size == image["size"]


# ---- resume -------------------------------------------------------------------------------------


class CrashAt(Reporter):
    """Stops the run at the end of ``step`` as a crash would: after its records, before its checkpoint."""

    def __init__(self, step: int):
        self.at = step

    def step(self, step: int) -> None:
        if step == self.at:
            raise RuntimeError("crash")


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_resumed_run_continues_the_same_tracker_runs_without_a_step_twice(stores, tiny_model_dir):
    train = {"max_steps": 8, "log_every": 2, "eval_every": 4, "save_every": 4, "report_to": ALL}
    path = write_recipe(stores / "resumed.yaml", tiny_recipe(tiny_model_dir, stores / "resumed", train=train,
                                                             probe={"enabled": False}))
    with pytest.raises(RuntimeError, match="crash"):
        finetune(load_recipe(path), reporter=CrashAt(6))  # step 6 is logged; last/ holds step 4
    run = stores / "resumed"
    first = saved_state(run)
    client = mlflow_client()
    assert client.get_run(first["mlflow"]["run_id"]).info.status == "KILLED"
    assert [s for s, _ in mlflow_curve(client, first["mlflow"]["run_id"], "train/loss")] == [2, 4, 6]

    finetune(load_recipe(run / "config.yaml"), resume=True)
    assert saved_state(run) == first  # the same MLflow and W&B runs
    expected = {(split, key): jsonl_curve(run, split, key) for split, key in
                (("train", "loss"), ("train", "lambda"), ("train", "distance"), ("eval", "main"))}
    assert [s for s, _ in expected["train", "loss"]] == [2, 4, 6, 8]
    assert [s for s, _ in expected["eval", "main"]] == [4, 8]

    events = tensorboard_events(run / "tensorboard")  # two sessions' files in one folder
    mlflow_run = client.get_run(first["mlflow"]["run_id"])
    assert mlflow_run.info.status == "FINISHED"
    for (split, key), curve in expected.items():
        got = tensorboard_curve(events, f"{split}/{key}")
        assert [s for s, _ in got] == [s for s, _ in curve], (split, key)  # no step twice
        assert [v for _, v in got] == pytest.approx([v for _, v in curve], rel=1e-6)
        # exact resume: the points the crashed session logged past last/ are the resumed run's numbers
        assert mlflow_curve(client, mlflow_run.info.run_id, f"{split}/{key}") == curve, (split, key)
    assert mlflow_curve(client, mlflow_run.info.run_id, "summary/steps") == [(8, 8.0)]
    assert len(list((run / "tensorboard").glob("events.out.tfevents.*"))) == 2

    crashed, resumed = wandb_records(stores, first["wandb"]["id"])  # one W&B run id, two offline sessions
    assert wandb_run(resumed).run_id == first["wandb"]["id"]
    assert [s for s, _ in wandb_history(crashed)["train/loss"]] == [2, 4, 6]
    assert [s for s, _ in wandb_history(resumed)["train/loss"]] == [6, 8]
    assert wandb_summary(resumed)["summary/steps"] == 8


# ---- refusals and ranks -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_missing_package_is_refused_before_anything_is_written(name, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, name, None)  # `import name` now fails as if not installed
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "out"))
    result = runner.invoke(app, ["finetune", str(recipe), f"train.report_to={name}", "--plain"])
    assert result.exit_code == 2, result.output
    assert f"the {name} package is not installed: pip install 'recall-finetune[{name}]'" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_tracker_that_cannot_start_leaves_nothing_of_the_others(tiny_model_dir, tmp_path, monkeypatch):
    """W&B refusing (no login) after MLflow had made ./mlflow.db and a KILLED run: now W&B starts first,
    and what the others started is discarded; the run directory is not made."""
    from dataclasses import replace

    from recall_cli import trackers
    from recall_cli.plugins import trackers as registry

    def refusing(name, how):  # the registry's entry for ``name``, opening with ``how`` (undone after the test)
        monkeypatch.setitem(registry._TRACKERS.entries, name, replace(registry.trackers()[name], open=how))

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    opened = []

    def refuse(info):
        opened.append(sorted(p.name for p in tmp_path.iterdir()))
        raise trackers.start_failed("wandb", RuntimeError("api_key not configured (no-tty)"), "run `wandb login`")

    refusing("wandb", refuse)
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "out"))
    result = runner.invoke(app, ["finetune", str(recipe), "train.report_to=[tensorboard,mlflow,wandb]", "--plain"])
    assert result.exit_code == 2, result.output
    assert "report_to wandb: cannot start a run (api_key not configured (no-tty)): run `wandb login`" in result.output
    assert opened and not {"mlflow.db", "mlruns"} & set(opened[0])  # W&B was asked first, before MLflow made its store
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml"]  # no mlflow.db, no mlruns/, no out/

    # Refused later (W&B gone from the list, MLflow's start failing after TensorBoard's): nothing either.
    refusing("mlflow", refuse)
    result = runner.invoke(app, ["finetune", str(recipe), "train.report_to=[tensorboard,mlflow]", "--plain"])
    assert result.exit_code == 2, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml"]


def test_only_rank_zero_reports(tiny_model_dir, tmp_path, monkeypatch):
    recipe = load_recipe(write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "run",
                                                                        train={"report_to": ["tensorboard"]})))
    monkeypatch.setenv("RANK", "1")
    others = trackers.open_run(recipe, tmp_path / "run", resumed=False, start_step=0)
    assert not others
    others.log({"step": 2, "split": "train", "loss": 0.5})
    others.finish({"steps": 2}, tmp_path / "run")
    others.close()
    assert not (tmp_path / "run").exists()
    monkeypatch.setenv("RANK", "0")
    main = trackers.open_run(recipe, tmp_path / "run", resumed=False, start_step=0)
    main.log({"step": 2, "split": "train", "loss": 0.5, "cka_layers": [1.0], "grad_norm": None})
    main.close()
    assert tensorboard_curve(tensorboard_events(tmp_path / "run" / "tensorboard"), "train/loss") == [(2, 0.5)]


def test_record_names():
    record = {"step": 4, "split": "probe", "sts_retained": 0.98, "cka_layers": [1.0, 0.9], "mlm_loss": None}
    assert trackers.record_metrics(record) == {"probe/sts_retained": 0.98}
    summary = {"steps": 8, "finished": True, "task": "mrpc", "best": {"step": 4, "main": 0.6}, "final_distance_by_rank": [1.0]}
    assert trackers.summary_values(summary) == {"summary/steps": 8, "summary/task": "mrpc",
                                                "summary/best/step": 4, "summary/best/main": 0.6}


# ---- merge --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_merge_reports_its_settings_and_scores(stores, tiny_model_dir):
    runs = [make_run(stores / "merge_runs", name, tiny_model_dir, seed) for name, seed in (("a", 1), ("b", 2))]
    out = stores / "merged"
    result = runner.invoke(app, ["merge", *map(str, runs), "--out", str(out), "--method", "linear", "--evaluate",
                                 "--device", "cpu", "--json", "--report-to", "tensorboard", "--report-to", "mlflow"])
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout)["scores"]  # stdout alone: MLflow logs its set-up on stderr
    expected = {f"merge/{row['model']}/{column}": row[column] for row in scores for column in ("individual", "merged")}
    expected["merge/average/merged"] = sum(row["merged"] for row in scores) / len(scores)
    events = tensorboard_events(out / "tensorboard")
    client = mlflow_client()
    (run,) = client.search_runs([client.get_experiment_by_name("recall-tests").experiment_id],
                                filter_string="tags.`recall.kind` = 'merge'")
    assert run.data.params["method"] == "linear" and run.data.params["inputs"] == '["a", "b"]'
    for name, value in expected.items():
        assert tensorboard_curve(events, name) == [(0, pytest.approx(value, rel=1e-6))], name
        assert run.data.metrics[name] == value, name


@pytest.mark.slow
def test_a_merge_whose_tracker_cannot_start_is_kept_with_one_warning(stores, tiny_model_dir, monkeypatch):
    """OUT is complete when the trackers start: one that cannot (a login, an unreachable server)
    is a warning, the merge exits 0 and its --evaluate scores are printed."""
    runs = [make_run(stores / "merge_runs_b", name, tiny_model_dir, seed) for name, seed in (("a", 1), ("b", 2))]
    out = stores / "merged_b"

    def cannot_start(*args, **kwargs):
        raise ConnectionError("could not reach the tracking server\n(pages of detail)")

    monkeypatch.setattr(trackers, "open_merge_run", cannot_start)
    result = runner.invoke(app, ["merge", *map(str, runs), "--out", str(out), "--method", "linear", "--evaluate",
                                 "--device", "cpu", "--json", "--report-to", "mlflow"])
    assert result.exit_code == 0, result.output
    assert (f"warning: {out} is written, but --report-to could not report it: ConnectionError: could not reach the "
            "tracking server (the scores are in the output and merge.json)") in result.stderr
    assert "pages of detail" not in result.output + result.stderr
    assert len(json.loads(result.stdout)["scores"]) == 2 and (out / "merge.json").is_file()


class Recorder:
    """A tracker that keeps what it is told, or fails on its first record."""

    def __init__(self, fails: bool = False):
        self.fails, self.logged, self.closed = fails, [], None

    def log(self, metrics, step):
        if self.fails:
            raise OSError(28, "No space left on device")
        self.logged.append((step, metrics))

    def close(self, finished):
        self.closed = finished


def test_a_tracker_that_fails_mid_run_is_dropped_with_one_warning():
    warnings = []
    good, broken = Recorder(), Recorder(fails=True)
    fanout = trackers.Trackers({"mlflow": broken, "tensorboard": good}, warn=warnings.append)
    fanout.log({"step": 2, "split": "train", "loss": 0.5})
    fanout.log({"step": 4, "split": "train", "loss": 0.25})
    fanout.close()
    assert good.logged == [(2, {"train/loss": 0.5}), (4, {"train/loss": 0.25})]
    assert warnings == [("report_to mlflow: [Errno 28] No space left on device; not reporting to it for the rest "
                         "of the run (metrics.jsonl has every record)")]
    assert (good.closed, broken.closed) == (False, False)  # no finish(): the run stopped before its end


@pytest.mark.slow  # starts a process (a Python subprocess, or wandb's service)
def test_a_sweeps_cells_share_a_group(stores, tiny_model_dir):
    sweep = stores / "sweep_r"
    (sweep / "k0.1_s1").mkdir(parents=True)  # the loop opens the trackers in a run directory that exists
    (sweep / "sweep.json").write_text("{}")
    recipe = load_recipe(write_recipe(stores / "cell.yaml", tiny_recipe(tiny_model_dir, sweep / "k0.1_s1",
                                                                         train={"report_to": ["mlflow", "wandb"]})))
    opened = trackers.open_run(recipe, sweep / "k0.1_s1", resumed=False, start_step=0)
    opened.close()
    state = saved_state(sweep / "k0.1_s1")
    assert mlflow_client().get_run(state["mlflow"]["run_id"]).data.tags["recall.sweep"] == "sweep_r"
    (records,) = wandb_records(stores, state["wandb"]["id"])
    assert (wandb_run(records).run_group, wandb_run(records).display_name) == ("sweep_r", "k0.1_s1")


def test_every_tracker_has_its_extra_and_the_tests_install_them():
    from recall_cli.plugins.trackers import trackers

    TRACKERS = trackers()

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+ (CI's is 3.11)

    extras = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for tracker in TRACKERS.values():
        assert extras[tracker.extra], tracker.name  # what the refusal's pip command installs
    (everything,) = extras["trackers"]
    assert set(everything.removeprefix("recall-finetune[").removesuffix("]").split(",")) == {t.extra for t in TRACKERS.values()}
    assert "recall-finetune[trackers]" in extras["dev"]  # CI runs these tests, it does not skip them


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")  # the thread's traceback, as pytest sees it
def test_a_tensorboard_write_failing_in_its_thread_is_one_warning_without_a_traceback(tmp_path, capfd):
    """TensorBoard's disk full mid-run: its writer thread's traceback was printed; now the run's next
    write names it in one warning and the tracker is dropped (metrics.jsonl keeps every record)."""
    import errno
    import time

    from recall_cli import trackers
    from recall_cli.trackers import tensorboard_tracker
    from recall_cli.trackers import RunInfo

    info = RunInfo(name="run", folder=tmp_path, params={"a": 1}, config={"a": 1})
    tracker = tensorboard_tracker.open_tracker(info)
    worker = tracker.writer.file_writer.event_writer._async_writer._worker

    def full(data):
        raise OSError(errno.ENOSPC, "No space left on device")

    worker._record_writer.write = full
    warnings: list[str] = []
    fan = trackers.Trackers({"tensorboard": tracker}, warn=warnings.append)
    deadline = time.monotonic() + 10
    while fan and time.monotonic() < deadline:
        fan.log({"step": 1, "split": "train", "loss": 0.5})
        time.sleep(0.05)
    fan.close()
    assert len(warnings) == 1 and warnings[0].startswith("report_to tensorboard: ") and "No space left" in warnings[0]
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception in thread" not in err


@pytest.mark.parametrize("optimizer, logged", [("adamw", False), ("recadam", True)])
def test_adamw_runs_do_not_log_recadams_keys(tmp_path, monkeypatch, tiny_model_dir, optimizer, logged):
    """An AdamW run never reads anneal_* or pretrain_cof: its tracker runs leave them out (config.yaml keeps
    the recipe as written); a RecAdam run logs them."""
    seen = []
    monkeypatch.setattr(trackers, "_open", lambda names, info, state, warn: seen.append(info) or trackers.Trackers())
    monkeypatch.setattr(trackers, "_is_rank_zero", lambda: True)
    recipe = load_recipe(write_recipe(tmp_path / "r.yaml", tiny_recipe(
        tiny_model_dir, tmp_path / "out", optimizer={"name": optimizer}, train={"report_to": ["tensorboard"]})))
    trackers.open_run(recipe, tmp_path / "out", resumed=False, start_step=0)
    params = seen[0].params
    assert params["optimizer.name"] == optimizer and "optimizer.lr" in params
    for key in ("optimizer.anneal_k", "optimizer.anneal_t0", "optimizer.pretrain_cof", "optimizer.anneal_w"):
        assert (key in params) is logged, key
    assert ("anneal_k" in seen[0].config["optimizer"]) is logged
