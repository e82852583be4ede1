"""`recall sweep --backend ray`: the same cells, folders, records and sweep.json as the local backend, from
a local Ray on this machine's CPUs; a cell whose Ray worker dies (its node leaving) is run again and
resumes from the last/ its child saved; the options refused in one line before anything is made."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recall_cli.cli import app

from conftest import tiny_recipe, write_recipe

runner = CliRunner()
# Timings differ between any two runs; every other field of a record must be equal.
TIMING = {"train_seconds", "samples_per_s", "probe_seconds", "seconds", "eval_seconds", "elapsed_s", "updated"}


def records(path: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING}
            for line in path.read_text().splitlines()]


def weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(path / "last" / "model.safetensors")


@pytest.mark.slow
@pytest.mark.long  # a Ray cluster started and stopped: make test's second step runs it
def test_a_ray_sweep_equals_the_local_sweep_record_for_record(tiny_model_dir, tmp_path, monkeypatch):
    pytest.importorskip("ray", reason="recall-finetune[dev] installs ray; this checks the ray backend")
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(
        tiny_model_dir, tmp_path / "unused", train={"max_steps": 6, "eval_every": 3, "log_every": 2}))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # each local child's share, as each Ray task's --cpus-per-cell 1
    monkeypatch.chdir(tmp_path)
    common = ["sweep", "recipe.yaml", "--grid", "optimizer.anneal_k=0.1,1"]
    local = runner.invoke(app, [*common, "--out", "local", "--jobs", "2"])
    assert local.exit_code == 0, local.output
    ray = runner.invoke(app, [*common, "--out", "onray", "--backend", "ray", "--cpus-per-cell", "1"])
    assert ray.exit_code == 0, ray.output
    assert "2 cells sent to Ray (1 CPU each)" in ray.stdout

    index = {name: json.loads((tmp_path / name / "sweep.json").read_text()) for name in ("local", "onray")}
    for a, b in zip(index["local"]["cells"], index["onray"]["cells"], strict=True):
        assert (a["name"], a["state"], a["exit_code"], a["settings"], a["main"]) == \
               (b["name"], b["state"], b["exit_code"], b["settings"], b["main"])
        assert b["dir"] == f"onray/{b['name']}" and b["state"] == "finished"
        for record in ("metrics.jsonl",):
            assert records(tmp_path / "local" / a["name"] / record) == records(tmp_path / "onray" / b["name"] / record)
        summaries = [json.loads((tmp_path / side / a["name"] / "summary.json").read_text()) for side in ("local", "onray")]
        assert summaries[0]["final"] == summaries[1]["final"] and summaries[1]["steps"] == 6
        left, right = weights(tmp_path / "local" / a["name"]), weights(tmp_path / "onray" / b["name"])
        assert left.keys() == right.keys() and all(left[k].equal(right[k]) for k in left)
    # Run again: every cell is finished, nothing is sent to Ray.
    again = runner.invoke(app, [*common, "--out", "onray", "--backend", "ray"])
    assert again.exit_code == 0 and "2 of 2 cells already finished" in again.stdout and "sent to Ray" not in again.stdout


@pytest.mark.slow
@pytest.mark.long  # a Ray cluster started and stopped: make test's second step runs it
def test_a_cell_whose_ray_worker_dies_resumes_from_its_last_checkpoint(tiny_model_dir, tmp_path):
    """A node leaving, as the cell sees it: its Ray worker is killed (SIGKILL). The child gets SIGTERM
    (it is tied to the worker) and saves last/; Ray runs the task again, which resumes the cell."""
    pytest.importorskip("ray", reason="recall-finetune[dev] installs ray; this checks the ray backend")
    steps = 200
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(
        tiny_model_dir, tmp_path / "unused", train={"max_steps": steps, "eval_every": 0, "log_every": 1}))
    out = tmp_path / "out"
    sweep = subprocess.Popen([sys.executable, "-m", "recall_cli", "sweep", str(recipe), "--seeds", "1", "--out", str(out),
                              "--backend", "ray"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
    log = out / "logs" / "s1.log"
    deadline = time.monotonic() + 240
    while not (log.is_file() and "split=train" in log.read_text()):
        assert time.monotonic() < deadline and sweep.poll() is None, "the cell never started training"
        time.sleep(0.2)
    worker = int(re.search(r"ray pid=(\d+)", log.read_text()).group(1))
    os.kill(worker, signal.SIGKILL)
    stdout, stderr = sweep.communicate(timeout=600)
    assert sweep.returncode == 0, stdout + stderr

    starts = [line for line in log.read_text().splitlines() if line.startswith("# ") and " ray pid=" in line]
    assert len(starts) == 2 and "--resume" not in starts[0] and f"finetune --resume {out / 's1'} --plain" in starts[1]
    assert int(re.search(r"ray pid=(\d+)", starts[1]).group(1)) != worker
    summary = json.loads((out / "s1" / "summary.json").read_text())
    assert summary["finished"] and summary["steps"] == steps
    resumed_at = int(re.search(r"resuming at step (\d+)", log.read_text()).group(1))
    assert 0 < resumed_at < steps
    # One record per step, as an uninterrupted run writes: the resume continued where last/ left off.
    logged = [r["step"] for r in map(json.loads, (out / "s1" / "metrics.jsonl").read_text().splitlines())
              if r.get("split") == "train"]
    assert logged == list(range(1, steps + 1))
    cell = json.loads((out / "sweep.json").read_text())["cells"][0]
    assert cell["state"] == "finished" and cell["exit_code"] == 0


@pytest.mark.parametrize("args, message", [
    (["--backend", "ray", "--jobs", "2"], "--jobs is the local backend's"),
    (["--gpus-per-cell", "0.5"], "are for --backend ray"),
    (["--backend", "ray", "--gpus-per-cell", "nan"], "--gpus-per-cell must be a number >= 0, got nan"),
    (["--backend", "ray", "--gpus-per-cell", "1.5"], "above 1 it must be a whole number"),
    (["--backend", "ray", "--cpus-per-cell", "-1"], "--cpus-per-cell must be a number >= 0"),
    # Issue 52: a share finer than Ray's unit (0.0001) was Ray's ValueError, exit 1, after sweep.json and logs/ were made.
    (["--backend", "ray", "--cpus-per-cell", "0.00001"], "--cpus-per-cell 1e-05: Ray counts a share in steps of 0.0001, "
                                                          "so this one would be none: give at least 0.0001"),
    (["--backend", "ray", "--gpus-per-cell", "0.00009"], "--gpus-per-cell 9e-05: Ray counts a share in steps of 0.0001, "
                                                          "so this one would be none: give at least 0.0001 (or 0 for no GPU)"),
])
def test_ray_options_are_refused_in_one_line_before_anything_is_made(tiny_model_dir, tmp_path, args, message):
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(tiny_model_dir, tmp_path / "unused"))
    result = runner.invoke(app, ["sweep", str(recipe), "--out", str(tmp_path / "out"), *args])
    assert result.exit_code == 2 and message in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_a_share_ray_refuses_is_one_line_before_the_index_is_written(tiny_model_dir, tmp_path, monkeypatch):
    """Issue 52: the cells' Ray options were made after sweep.json and logs/ were written, so a share Ray refused
    (a rule check_resources does not know, as another Ray may have) was its ValueError, exit 1, and a half-made sweep.
    A stand-in Ray that refuses every share: one line, nothing made, the Ray the sweep started shut down."""
    from recall_cli.sweep import on_ray

    said = []

    class RefusingRay:
        def is_initialized(self):
            return False

        def init(self, **kwargs):
            said.append("init")

        def shutdown(self):
            said.append("shutdown")

        def cluster_resources(self):
            return {"CPU": 2.0}

        def remote(self, function):
            class Options:
                def options(self, **kwargs):
                    raise ValueError(f"num_cpus={kwargs['num_cpus']} is not a share this Ray\ntakes")
            return Options()

    monkeypatch.setattr(on_ray, "import_ray", lambda address=None: RefusingRay())
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(tiny_model_dir, tmp_path / "unused"))
    result = runner.invoke(app, ["sweep", str(recipe), "--out", str(tmp_path / "out"), "--backend", "ray",
                                 "--cpus-per-cell", "0.5"])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.strip().splitlines() == [
        "error: Ray refused the cells' shares (--cpus-per-cell 0.5, --gpus-per-cell 0): num_cpus=0.5 is not a share "
        "this Ray takes; nothing was written"]
    assert said == ["init", "shutdown"] and not (tmp_path / "out").exists()


def test_without_ray_the_backend_names_the_extra(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(tiny_model_dir, tmp_path / "unused"))
    result = runner.invoke(app, ["sweep", str(recipe), "--out", str(tmp_path / "out"), "--backend", "ray"])
    assert result.exit_code == 2 and "pip install 'recall-finetune[ray]'" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.long  # a Ray cluster started and stopped: make test's second step runs it
def test_sigterm_to_a_ray_sweep_saves_its_cells_resumably(tiny_model_dir, tmp_path):
    """A scheduler pre-empting the driver: its tasks are cancelled, each running cell saves last/ and exits
    143, the index says interrupted, exit 143, and the next sweep resumes the cell."""
    pytest.importorskip("ray", reason="recall-finetune[dev] installs ray; this checks the ray backend")
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(
        tiny_model_dir, tmp_path / "unused", train={"max_steps": 5000, "eval_every": 0, "log_every": 1}))
    out = tmp_path / "out"
    sweep = subprocess.Popen([sys.executable, "-m", "recall_cli", "sweep", str(recipe), "--seeds", "1,2", "--out", str(out),
                              "--backend", "ray", "--cpus-per-cell", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    log = out / "logs" / "s1.log"
    deadline = time.monotonic() + 240
    while not (log.is_file() and "split=train" in log.read_text()):
        assert time.monotonic() < deadline and sweep.poll() is None, "the first cell never started training"
        time.sleep(0.2)
    sweep.send_signal(signal.SIGTERM)
    _, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 143, err
    assert "run the same recall sweep command again to resume" in err
    cells = {c["name"]: c for c in json.loads((out / "sweep.json").read_text())["cells"]}
    assert cells["s1"]["state"] == "interrupted" and cells["s1"]["exit_code"] == 143
    # On 2 CPUs (this project's machine) s2 never started; with more, it was stopped like s1.
    assert cells["s2"]["state"] in ("pending", "interrupted")
    assert (out / "s1" / "last" / "trainer_state.json").is_file() and "stopped by SIGTERM" in log.read_text()
    commands = runner.invoke(app, ["sweep", str(recipe), "--seeds", "1,2", "--out", str(out), "--print-commands"])
    assert commands.stdout.splitlines()[0] == f"recall finetune --resume {out / 's1'} --plain"


# ---- issue 52: an address, a share or a TMPDIR Ray cannot use is one line, and nothing is made ----------------


@pytest.mark.parametrize("address", ["", " ", "ray://", "head", "head:abc", "http://head:6379", "head:70000",
                                     "ray://head:10001/x"])
def test_a_malformed_address_is_refused_before_anything_is_made(tiny_model_dir, tmp_path, address):
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(tiny_model_dir, tmp_path / "unused"))
    result = runner.invoke(app, ["sweep", str(recipe), "--out", str(tmp_path / "out"), "--backend", "ray",
                                 "--address", address])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.strip().splitlines() == [
        f"error: --address {address!r}: not an address of a Ray cluster: give auto (the cluster this machine's `ray "
        "start` joined), HOST:PORT (the head's GCS port, 6379 by default) or ray://HOST:PORT (Ray Client, 10001), or "
        "leave --address out to start Ray on this machine"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", [" ", "http://head:6379", "head"])
def test_a_malformed_ray_address_variable_is_refused_by_name(tiny_model_dir, tmp_path, monkeypatch, value):
    """Ray's own RAY_ADDRESS, read by ray.init when no --address (or auto) is given, is checked as --address is, named
    as the variable; and the sweep does not take it for a local Ray (it would have set a local Ray's token mode)."""
    from recall_cli.sweep import on_ray

    monkeypatch.setenv("RAY_ADDRESS", value)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    on_ray.quiet_token_warning(None)
    assert "RAY_AUTH_MODE" not in os.environ
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(tiny_model_dir, tmp_path / "unused"))
    for given in ([], ["--address", "auto"]):
        result = runner.invoke(app, ["sweep", str(recipe), "--out", str(tmp_path / "out"), "--backend", "ray", *given])
        assert result.exit_code == 2 and result.stdout == "", result.output
        assert result.stderr.strip().splitlines() == [
            f"error: RAY_ADDRESS={value!r}: not an address of a Ray cluster: give auto (the cluster this machine's `ray "
            "start` joined), HOST:PORT (the head's GCS port, 6379 by default) or ray://HOST:PORT (Ray Client, 10001), or "
            "unset RAY_ADDRESS to start Ray on this machine"]
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("address, reason", [("127.0.0.1:1", "Connection refused"), ("ray://127.0.0.1:1", "Connection refused"),
                                             ("no-such-head.invalid:6379", "")])
@pytest.mark.slow
def test_an_unreachable_cluster_is_one_line_in_bounded_time_and_nothing_is_made(tiny_model_dir, tmp_path, address,
                                                                                 reason, monkeypatch):
    """Ray's own connection retries went on for minutes; one TCP connection (at most CONNECT_TIMEOUT_S) decides."""
    from recall_cli.sweep import on_ray

    assert on_ray.CONNECT_TIMEOUT_S <= 10
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("Ray was asked to connect"))
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(tiny_model_dir, tmp_path / "unused"))
    started = time.monotonic()
    result = runner.invoke(app, ["sweep", str(recipe), "--out", str(tmp_path / "out"), "--backend", "ray",
                                 "--address", address])
    assert time.monotonic() - started < 60
    assert result.exit_code == 2 and result.stdout == "", result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: --address {address}: no Ray cluster answers there ({reason}")
    assert line.endswith("start it (ray start --head) or check the address; nothing was started or written")
    assert not (tmp_path / "out").exists()


class NotRay:
    """A server on a free local port that is not Ray's: http.server (answers HTTP/1), or a plain TCP listener that takes
    connections and never says a word. Ray's ray.init waited at either for ever, a C++ warning every 5 s."""

    def __init__(self, kind: str):
        import http.server
        import socket
        import threading

        self.kind, self.held = kind, []
        if kind == "http":
            class Quiet(http.server.SimpleHTTPRequestHandler):
                def log_message(self, *args):
                    pass

            self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
            self.port = self.server.server_address[1]
            threading.Thread(target=self.server.serve_forever, daemon=True).start()
        else:
            self.server = socket.create_server(("127.0.0.1", 0))
            self.port = self.server.getsockname()[1]
            threading.Thread(target=self._hold, daemon=True).start()

    def _hold(self):
        try:
            while True:
                self.held.append(self.server.accept()[0])
        except OSError:  # closed
            pass

    def close(self):
        if self.kind == "http":
            self.server.shutdown()
            self.server.server_close()
        else:
            self.server.close()
            for connection in self.held:
                connection.close()


@pytest.fixture(params=["http", "silent"])
def not_ray(request):
    server = NotRay(request.param)
    yield server
    server.close()


@pytest.mark.slow
@pytest.mark.parametrize("scheme, given", [("", "--address"), ("ray://", "--address"), ("", "RAY_ADDRESS"),
                                           ("ray://", "RAY_ADDRESS")])
def test_a_port_that_takes_connections_but_is_not_ray_is_one_line_in_bounded_time(tiny_model_dir, tmp_path, not_ray,
                                                                                    scheme, given, monkeypatch):
    """Issue 52: a port that accepts TCP but is not a Ray GCS (or Ray Client server) passed the TCP check, and ray.init
    waited there for ever (11 minutes until killed, a warning every 5 s). Now the first gRPC call Ray would make,
    within RECALL_RAY_CONNECT_TIMEOUT seconds, decides: one line, exit 2, Ray never asked, nothing made. The same
    for Ray's own RAY_ADDRESS (a Ray job sets it), which ray.init joins when no --address is given."""
    ray = pytest.importorskip("ray")
    limit = 2.0
    monkeypatch.setenv("RECALL_RAY_CONNECT_TIMEOUT", f"{limit:g}")
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("Ray was asked to connect"))
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(tiny_model_dir, tmp_path / "unused"))
    address = f"{scheme}127.0.0.1:{not_ray.port}"
    if given == "RAY_ADDRESS":
        monkeypatch.setenv("RAY_ADDRESS", address)
    started = time.monotonic()
    result = runner.invoke(app, ["sweep", str(recipe), "--out", str(tmp_path / "out"), "--backend", "ray",
                                 *(["--address", address] if given == "--address" else [])])
    seconds = time.monotonic() - started
    assert result.exit_code == 2 and result.stdout == "", result.output
    (line,) = result.stderr.strip().splitlines()
    what, fix = (("a Ray Client server", "give ray://HEAD:10001 (the head's Ray Client port)") if scheme else
                 ("a Ray cluster's GCS", "give HEAD:6379 (the head's GCS port)"))
    named = f"--address {address}" if given == "--address" else f"RAY_ADDRESS={address}"
    if not_ray.kind == "http":  # it answers at once, in another protocol: no need to wait
        assert line.startswith(f"error: {named}: the server there is not {what} (gRPC UNAVAILABLE: ")
        assert "HTTP/2" in line and seconds < limit
    else:
        assert line.startswith(f"error: {named}: the port takes connections, but nothing there answered "
                               f"as {what} within 2 s (RECALL_RAY_CONNECT_TIMEOUT sets the wait): ")
        assert limit <= seconds < 3 * limit
    assert line.endswith(f": {fix}, or start the cluster (ray start --head); nothing was started or written")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize("refusal, said", [
    (None, "the server there is not a Ray cluster's GCS (gRPC UNIMPLEMENTED: Method not found!): give HEAD:6379 (the "
           "head's GCS port), or start the cluster (ray start --head)"),
    ("UNAUTHENTICATED", "the cluster refused this driver's token (gRPC UNAUTHENTICATED): set RAY_AUTH_MODE=token and give "
                        "the cluster's token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)"),
])
def test_a_grpc_server_that_does_not_answer_as_ray_is_named(tiny_model_dir, tmp_path, monkeypatch, refusal, said):
    """A gRPC server that is not the one the address names (a Ray Client port given as a GCS's: no such method), or a
    cluster whose token this driver lacks (Ray's token authentication): each its own line, Ray never asked."""
    ray = pytest.importorskip("ray")
    import grpc
    from concurrent import futures

    class Answer(grpc.GenericRpcHandler):
        def service(self, details):
            if refusal is None:
                return None  # gRPC answers UNIMPLEMENTED
            return grpc.unary_unary_rpc_method_handler(
                lambda request, context: context.abort(getattr(grpc.StatusCode, refusal), "no token"))

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1), handlers=[Answer()])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("Ray was asked to connect"))
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(tiny_model_dir, tmp_path / "unused"))
    try:
        result = runner.invoke(app, ["sweep", str(recipe), "--out", str(tmp_path / "out"), "--backend", "ray",
                                     "--address", f"127.0.0.1:{port}"])
    finally:
        server.stop(grace=None)
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.strip().splitlines() == [
        f"error: --address 127.0.0.1:{port}: {said}; nothing was started or written"]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_sweep_at_a_port_that_is_not_ray_exits_promptly_and_leaves_no_process(tiny_model_dir, tmp_path, not_ray):
    """The same refusal as a user meets it, in a process of its own: it exits (no thread of Ray's keeps it up), its
    stderr is recall's one line (no line of Ray's C++ or Python logging), and no process it started is left."""
    pytest.importorskip("ray")
    import uuid

    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(tiny_model_dir, tmp_path / "unused"))
    mark = uuid.uuid4().hex  # every process the sweep starts inherits it
    env = {**os.environ, "RECALL_RAY_CONNECT_TIMEOUT": "2", "RECALL_TEST_MARK": mark}
    done = subprocess.run([sys.executable, "-m", "recall_cli", "sweep", str(recipe), "--out", str(tmp_path / "out"),
                           "--backend", "ray", "--address", f"127.0.0.1:{not_ray.port}"], capture_output=True,
                          text=True, env=env, timeout=180)
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: --address 127.0.0.1:{not_ray.port}: ")
    assert not (tmp_path / "out").exists()
    left = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"RECALL_TEST_MARK={mark}".encode() in environ.read_bytes():
                left.append(environ.parent.name)
        except OSError:  # gone, or not ours to read
            continue
    assert left == []


@pytest.mark.slow
@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_a_wait_for_the_head_that_is_not_a_number_of_seconds_is_refused(tiny_model_dir, tmp_path, monkeypatch, value):
    monkeypatch.setenv("RECALL_RAY_CONNECT_TIMEOUT", value)
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(tiny_model_dir, tmp_path / "unused"))
    result = runner.invoke(app, ["sweep", str(recipe), "--out", str(tmp_path / "out"), "--backend", "ray",
                                 "--address", "127.0.0.1:1"])
    assert result.exit_code == 2 and result.stderr.strip().splitlines() == [
        f"error: RECALL_RAY_CONNECT_TIMEOUT={value!r}: give the seconds to wait for a Ray cluster's head, a number above "
        "0 (unset: 10)"]
    assert not (tmp_path / "out").exists()


def test_a_cell_with_no_cpu_is_refused(tiny_model_dir, tmp_path):
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(tiny_model_dir, tmp_path / "unused"))
    result = runner.invoke(app, ["sweep", str(recipe), "--out", str(tmp_path / "out"), "--backend", "ray",
                                 "--cpus-per-cell", "0"])
    assert result.exit_code == 2 and result.stderr.strip().splitlines() == [
        "error: --cpus-per-cell must be more than 0 (each cell's finetune uses at least one CPU), got 0"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("length, fits", [(20, True), (64, False), (80, False)])
def test_a_local_ray_keeps_its_sockets_where_their_paths_fit(monkeypatch, length, fits):
    from recall_cli.errors import SweepError
    from recall_cli.sweep import on_ray

    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    monkeypatch.setenv("TMPDIR", "/" + "t" * (length - 1))
    assert on_ray.local_temp_dir() == (None if fits else "/tmp/ray")
    monkeypatch.setenv("RAY_TMPDIR", "/" + "r" * 79)
    assert on_ray.local_temp_dir() == "/tmp/ray"
    monkeypatch.setattr(on_ray.os, "access", lambda *a: False)  # /tmp cannot be written: refused, naming the variable
    with pytest.raises(SweepError, match=r"RAY_TMPDIR=/r{79} is 80 characters: the Unix socket paths a local Ray makes "
                                         r"under it would pass 107 bytes, and /tmp cannot be written: set RAY_TMPDIR to "
                                         r"a shorter folder \(at most 36 characters\)"):
        on_ray.local_temp_dir()


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray (2 CPUs, no GPU) for the module's refusals: a sweep joins a Ray already started and leaves it."""
    ray = pytest.importorskip("ray", reason="recall-finetune[dev] installs ray; this checks the ray backend")
    from recall_cli.sweep import on_ray

    # Started as recall starts a local Ray (RAY_AUTH_MODE=token, on_ray.quiet_token_warning). Ray reads its auth
    # mode at import and caches it: after an earlier Ray of the suite's process read another mode, its raylet and
    # this driver disagreed on the token, so the cache is read afresh, and again once the mode is put back.
    before = os.environ.get("RAY_AUTH_MODE")
    on_ray.quiet_token_warning(None)
    reset_ray_auth_cache()
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
    os.environ.pop("RAY_AUTH_MODE", None)
    if before is not None:
        os.environ["RAY_AUTH_MODE"] = before
    reset_ray_auth_cache()


def reset_ray_auth_cache() -> None:
    try:
        from ray._private.authentication_test_utils import reset_auth_token_state
    except ImportError:  # another Ray: no such cache to reset
        return
    reset_auth_token_state()


@pytest.mark.slow
@pytest.mark.parametrize("args, said", [
    (["--cpus-per-cell", "3"], "--cpus-per-cell 3: the Ray cluster has 2 CPUs in all, so no cell could ever start: ask "
                               "for at most 2; nothing was written"),
    (["--gpus-per-cell", "0.5"], "--gpus-per-cell 0.5: the Ray cluster has 0 GPUs in all, so no cell could ever start: "
                                 "ask for at most 0 (or run on a cluster with GPUs); nothing was written"),
])
def test_a_share_larger_than_the_whole_cluster_is_refused_not_left_waiting(local_ray, tiny_model_dir, tmp_path, args, said):
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(tiny_model_dir, tmp_path / "unused"))
    result = runner.invoke(app, ["sweep", str(recipe), "--out", str(tmp_path / "out"), "--backend", "ray", *args])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.strip().splitlines() == [f"error: {said}"]
    assert not (tmp_path / "out").exists() and local_ray.is_initialized()


@pytest.mark.slow
@pytest.mark.long  # minutes on 2 cores: left to make test's second step (python -m pytest -q -m long)
def test_a_ray_sweep_under_a_long_tmpdir_runs_says_which_cell_failed_and_resumes(tiny_model_dir, tmp_path):
    """TMPDIR of 70+ characters: Ray's socket paths under it passed 107 bytes (exit 1); the local Ray now keeps them
    in /tmp/ray. A cell that fails under Ray (its data unreadable) is named with its exit code; the sweep run again
    skips the finished cell and runs the failed one, now that its data is there."""
    pytest.importorskip("ray", reason="recall-finetune[dev] installs ray; this checks the ray backend")
    from conftest import GLUE

    long_tmp = tmp_path / ("t" * max(1, 75 - len(str(tmp_path)) - 1))
    long_tmp.mkdir()
    assert len(str(long_tmp)) >= 70
    bad = tmp_path / "MRPC2"
    bad.mkdir()
    (bad / "train.tsv").write_text("junk\n")
    recipe = write_recipe(tmp_path / "recipe.yaml", tiny_recipe(
        tiny_model_dir, tmp_path / "unused", train={"max_steps": 2, "eval_every": 0, "log_every": 1}))
    out = tmp_path / "out"
    command = [sys.executable, "-m", "recall_cli", "sweep", str(recipe), "--seeds", "1", "--out", str(out), "--backend",
               "ray", "--grid", f"task.data_dir={GLUE / 'MRPC'},{bad}"]
    env = {**os.environ, "TMPDIR": str(long_tmp), "OMP_NUM_THREADS": "1"}
    first = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
    assert first.returncode == 1, first.stdout + first.stderr
    assert "AF_UNIX" not in first.stderr
    (line,) = [x for x in first.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith("error: 1 of 2 cells failed: data_dirMRPC2_s1: exit 2") and "data_dirMRPC2_s1.log" in line
    cells = {c["name"]: c for c in json.loads((out / "sweep.json").read_text())["cells"]}
    assert (cells["data_dirMRPC_s1"]["state"], cells["data_dirMRPC2_s1"]["state"]) == ("finished", "failed")
    assert cells["data_dirMRPC2_s1"]["exit_code"] == 2
    for name in ("train.tsv", "dev.tsv"):
        (bad / name).write_bytes((GLUE / "MRPC" / name).read_bytes())
    finished = (out / "data_dirMRPC_s1" / "last" / "model.safetensors").read_bytes()
    again = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 of 2 cells already finished, skipped" in again.stdout and "1 cells sent to Ray" in again.stdout
    assert (out / "data_dirMRPC_s1" / "last" / "model.safetensors").read_bytes() == finished
    assert all(c["state"] == "finished" for c in json.loads((out / "sweep.json").read_text())["cells"])


PRIORITY = """
import json, os, sys
from pathlib import Path
from recall_cli.sweep.on_ray import run_cell
if sys.argv[2] == "unprivileged":  # as a process without CAP_SYS_NICE (the forked child inherits this os)
    def refused(*args):
        raise PermissionError(13, "Permission denied")
    os.setpriority = refused
driver = os.nice(0)
os.nice(5)  # a Ray worker: started nicer than the driver that sent it the cell
tmp = Path(sys.argv[1])
program = ["python", "-c", "import os; print('child nice', os.nice(0))"]
code, _ = run_cell(program, program, "cell", str(tmp / "cell.log"), str(tmp), "1", driver)
try:
    os.setpriority(os.PRIO_PROCESS, 0, driver)  # whether this machine lets a process lower its own niceness
    lowered = True
except OSError:
    lowered = False
print(json.dumps({"code": code, "driver": driver, "lowered": lowered}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("who", ["as_started", "unprivileged"])
def test_a_cell_runs_at_the_driver_s_niceness_not_its_ray_worker_s(tmp_path, who):
    """Issue 53: Ray starts its workers at nice 15 and each cell's finetune inherited it (a sweep 5x slower than
    --jobs on a shared machine). run_cell gives the child the driver's niceness, without Ray: a process niced
    by 5 stands in for the worker; where lowering needs a privilege, the cell's log says so in one line."""
    done = subprocess.run([sys.executable, "-c", PRIORITY, str(tmp_path), who], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    log = (tmp_path / "cell.log").read_text()
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["code"] == 0
    assert who != "unprivileged" or not said["lowered"]
    if said["lowered"]:
        assert f"child nice {said['driver']}\n" in log and "# nice" not in log, log
    else:
        assert f"child nice {said['driver'] + 5}\n" in log, log
        assert f"not the driver's {said['driver']}: lowering a niceness needs a privilege" in log, log


def test_a_local_ray_starts_its_workers_at_the_driver_s_niceness(monkeypatch):
    """The local Ray's raylet reads RAY_worker_niceness (added to its own niceness, the driver's) when ray.init
    starts it: 0 then, a user's own value kept, nothing set for a cluster, and this process's environment left as
    it was. (A real local Ray under `nice -n 3` ran its workers at 3 with this, and at 6 with RAY_worker_niceness=3:
    the value is added to the driver's.)"""
    from recall_cli.sweep import on_ray

    seen = []

    class FakeRay:
        def init(self, **kwargs):
            seen.append(os.environ.get("RAY_worker_niceness"))

        def is_initialized(self):
            return False

    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    on_ray._start(FakeRay(), None, None)
    assert seen == ["0"] and "RAY_worker_niceness" not in os.environ
    on_ray._start(FakeRay(), "auto", None)  # a cluster's raylets are its own
    assert seen[-1] is None
    monkeypatch.setenv("RAY_worker_niceness", "7")
    on_ray._start(FakeRay(), None, None)
    assert seen[-1] == "7" and os.environ["RAY_worker_niceness"] == "7"
