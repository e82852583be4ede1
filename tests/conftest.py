"""Shared fixtures: a tiny pretrained-looking BERT on disk, the bundled GLUE files, recipe writing; and the
guard that keeps the inner loop (`pytest -m "not slow"`) from training in a fixture."""

from __future__ import annotations

import os

# Tests run offline: fail fast instead of retrying the hub. Must be set before transformers is imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import shlex  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import typer.testing  # noqa: E402
import yaml  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from recall_cli.testing import tiny_bert_dir, tokenizer_path  # noqa: E402
from recall_cli.training.progress import Reporter  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
GLUE = REPO / "data" / "glue"


# ---- Ctrl-C and SIGTERM stop the suite -----------------------------------------------------------
# Tests run recall's commands in-process (CliRunner), and a command turns Ctrl-C or SIGTERM into its exit
# code (130, 143): pytest never saw the signal and went on to the next test (a stopped `make test` ran for
# minutes). Every SIGINT/SIGTERM handler installed while tests run is wrapped to note the signal first; after
# the test it arrived in, the session ends with 128 + the signal.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_arrived: list[int] = []
_sent_to_self: list[int] = []  # a test's own signal (send_to_self) is what it tests, not a stop
_install = signal.signal


def _noting(signum, handler):
    if signum in _STOP_SIGNALS and callable(handler) and not getattr(handler, "_notes_signal", False):
        inner = handler

        def handler(sig, frame, inner=inner):
            if sig in _sent_to_self:
                _sent_to_self.remove(sig)
            else:
                _arrived.append(sig)
            return inner(sig, frame)

        handler._notes_signal = True
    return _install(signum, handler)


def send_to_self(sig: int) -> None:
    """Signal this process as a test of signal handling does: the suite does not stop for it."""
    _sent_to_self.append(sig)
    os.kill(os.getpid(), sig)


signal.signal = _noting
# Ctrl-C's own handler (pytest's KeyboardInterrupt) noted too; SIGTERM stays as it is (its default ends the
# process at once when no command has installed a handler).
if callable(signal.getsignal(signal.SIGINT)):
    signal.signal(signal.SIGINT, signal.getsignal(signal.SIGINT))


def _exit_if_stopped() -> None:
    if _arrived:
        pytest.exit(f"stopped by signal {_arrived[0]}", returncode=128 + _arrived[0])


@pytest.fixture(autouse=True)
def _stop_on_signal():
    yield
    _exit_if_stopped()


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    """recall's cache (θ*'s probe sides, GGUF copies; child processes inherit it) away from the user's, for the
    module fixtures' runs, which start before a test's own (below)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RECALL_CACHE", str(tmp_path_factory.mktemp("recall-cache")))
        yield


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory, monkeypatch):
    """Each test its own recall cache: no test's numbers come from another's run."""
    monkeypatch.setenv("RECALL_CACHE", str(tmp_path_factory.mktemp("recall-cache")))


def minilm_path() -> str:
    return tokenizer_path()


# ---- the CLI built once per app ------------------------------------------------------------------------
# typer's CliRunner builds the click command from the app on every invoke, inspecting each command's signature
# (~85 ms here); the suite invokes the one app hundreds of times. The command is kept per app object and rebuilt
# only when the app gains a command or a group, so what a test invokes is what a fresh build would be.
_built_commands: dict[int, tuple] = {}
_build_command = getattr(typer.testing, "_get_command", None)  # typer's own name for it; another typer: left as it is


def _command_once(app):
    shape = (len(app.registered_commands), len(app.registered_groups), app.registered_callback)
    kept = _built_commands.get(id(app))
    if kept is None or kept[0] is not app or kept[1] != shape:
        kept = _built_commands[id(app)] = (app, shape, _build_command(app))
    return kept[2]


if _build_command is not None:
    typer.testing._get_command = _command_once


# ---- the inner loop trains nothing in set-up ----------------------------------------------------------
# `pytest -m "not slow"` is the inner loop (README: Development). A module- or session-scoped fixture is
# set up by the first test that asks for it: when a fixture that trains or starts `recall`/torchrun served
# a test not marked slow, the inner loop trained anyway (four such set-ups took 4.5 of its 10 minutes on
# a loaded machine), and nothing in the test said so. So the set-up of every test not marked slow runs
# with recall's training loop and recall/torchrun processes refused, and fails naming what it started:
# mark the tests that use the fixture slow, or make the fixture cheap (a hand-made run: make_run).
# Refused where it happens, not found by reading the fixtures' source: training hides behind helpers,
# CliRunner and sweeps that a static check would have to follow, and every recall run passes through
# loop.run (finetune calls it by its module name) and every process through Popen._execute_child. Only
# set-up is watched: a test whose own body trains shows it where its marker is decided.
_RECALL_PROGRAMS = {"recall", "torchrun"}
_RECALL_MODULES = {"recall_cli", "torch.distributed.run"}  # python -m ...


def starts_recall(args) -> bool:
    """Whether a command line (Popen's ``args``) runs recall or torchrun: `recall ...`, `torchrun ...`,
    `python -m recall_cli ...` or `python -m torch.distributed.run ...` (as the --nproc launcher does)."""
    argv = shlex.split(os.fsdecode(args)) if isinstance(args, (str, bytes, os.PathLike)) else [os.fsdecode(a) for a in args]
    modules = {after for before, after in zip(argv, argv[1:]) if before == "-m"}
    return bool(argv) and (Path(argv[0]).name in _RECALL_PROGRAMS or bool(modules & _RECALL_MODULES))


@contextmanager
def training_refused(who: str):
    """Within: recall's training loop and any process that runs recall or torchrun fail ``who`` at once.
    Yields the list of what was refused, so that a failure swallowed on the way up still counts."""
    from recall_cli.training import loop

    refused: list[str] = []
    start_process = subprocess.Popen._execute_child

    def refuse(what: str):
        refused.append(what)
        pytest.fail(f"{who}: its set-up {what}, but it is not marked slow: mark the tests that use this fixture "
                    "@pytest.mark.slow, or make the fixture cheap (tests/conftest.py says why)", pytrace=False)

    def run(*args, **kwargs):
        refuse("trains a model (recall_cli.training.loop.run)")

    def execute_child(self, args, *rest, **kwargs):
        if starts_recall(args):
            refuse(f"starts {args if isinstance(args, str) else ' '.join(map(os.fsdecode, args))}")
        return start_process(self, args, *rest, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loop, "run", run)
        patch.setattr(subprocess.Popen, "_execute_child", execute_child)
        yield refused


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    _exit_if_stopped()  # before a module fixture that a signal interrupted re-raises its error test after test
    if item.get_closest_marker("slow"):
        return (yield)
    with training_refused(item.nodeid) as refused:
        result = yield
    if refused:
        pytest.fail(f"{item.nodeid}: its set-up {refused[0]}, but it is not marked slow", pytrace=False)
    return result


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer, hidden-32 BERT encoder saved like a pretrained checkpoint (no classifier head),
    with the real MiniLM WordPiece tokenizer, so that loading it behaves like loading bert-base."""
    return tiny_bert_dir(tmp_path_factory.mktemp("tiny_bert"), seed=1234)


def tiny_recipe(model_dir: Path, output_dir: Path, **sections) -> dict:
    """A recipe dict for fast runs on real MRPC rows; keyword arguments update its sections."""
    recipe = {
        "model": {"name_or_path": str(model_dir), "init": "pretrained"},
        "task": {"name": "mrpc", "data_dir": str(GLUE / "MRPC"), "max_seq_length": 48,
                 "max_train_examples": 96, "max_eval_examples": 40},
        "optimizer": {"name": "recadam", "lr": 1e-3, "anneal_k": 0.5, "anneal_t0": 5, "pretrain_cof": 100.0},
        # fp32, not auto: the resume, DDP and same-seed tests claim exact (or 1e-5) equality in fp32,
        # which must not depend on what auto picks on the CPU that runs them.
        # save all: many tests read a finished run's optimizer state, RNG state or theta* (exact resume,
        # DDP, kernels), which the default (train.save: final) removes; tests/test_rundir.py holds the default.
        "train": {"batch_size": 8, "max_steps": 12, "log_every": 2, "eval_every": 6, "seed": 7, "device": "cpu",
                  "precision": "fp32", "save": "all"},
        # 256 STS pairs, the default before it became all 1,500: tests measure what a probe records, not the skill.
        "probe": {"num_pairs": 256},
        "output_dir": str(output_dir),
    }
    return with_sections(recipe, sections)


def with_sections(recipe: dict, sections: dict) -> dict:
    """``recipe`` with each keyword's section updated (a dict) or replaced (anything else)."""
    for section, values in sections.items():
        if isinstance(values, dict):
            recipe.setdefault(section, {}).update(values)
        else:
            recipe[section] = values
    return recipe


def binary_task():
    """The type of a two-class task with labels "0" and "1" (MRPC's, as tiny_recipe's runs have): what
    build_model, load_checkpoint_model, preflight and LoRA ask of a task."""
    from recall_cli.names import custom_task
    from recall_cli.tasks import task_type_for

    return task_type_for(custom_task(("sentence",), "label", ("0", "1")))


def write_recipe(path: Path, recipe: dict) -> Path:
    path.write_text(yaml.safe_dump(recipe, sort_keys=False), encoding="utf-8")
    return path


def make_run(root: Path, name: str, base_dir: Path, seed: int, scale: float = 0.02) -> Path:
    """A recall run directory by hand: the tiny encoder plus seeded noise and a fresh head in best/,
    theta* in anchor.safetensors (classifier names), the recipe in config.yaml."""
    from transformers import AutoTokenizer, BertForSequenceClassification

    run = root / name
    torch.manual_seed(seed)
    model = BertForSequenceClassification.from_pretrained(base_dir, num_labels=2)
    anchors = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("bert.")}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn_like(p))
    model.save_pretrained(run / "best")
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(run / "best")
    save_file({k: v.contiguous() for k, v in anchors.items()}, str(run / "anchor.safetensors"))
    (run / "config.yaml").write_text(yaml.safe_dump(tiny_recipe(base_dir, run)), encoding="utf-8")
    (run / "metrics.jsonl").write_text("", encoding="utf-8")
    return run


# ---- reading runs back (the methods' tests) ----------------------------------------------------------


def train_records(run_dir: Path) -> list[dict]:
    from recall_cli.rundir import read_metrics

    return [r for r in read_metrics(run_dir) if r["split"] == "train"]


def summary(run_dir: Path) -> dict:
    import json

    return json.loads((run_dir / "summary.json").read_text())


def comparable(records):
    """Records without wall-clock throughput, which legitimately differs between runs."""
    return [{k: v for k, v in r.items() if k not in ("samples_per_s", "probe_seconds")} for r in records]


def pretrained_by_name(model_dir: Path) -> dict[str, torch.Tensor]:
    """The tiny encoder's saved weights under the classifier's names (bert.*)."""
    return {(k if k.startswith("bert.") else f"bert.{k}"): v
            for k, v in load_file(str(model_dir / "model.safetensors")).items()}


def encoder(ws: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in ws.items() if k.startswith("bert.")}


def head(ws: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in ws.items() if not k.startswith("bert.")}


class StopAfter(Reporter):
    """Interrupts the run after ``step`` (as Ctrl-C would), once that step's checkpoint (if any) is written."""

    def __init__(self, step: int | None):
        self.stop_at = step

    def step(self, step):
        if step == self.stop_at:
            raise KeyboardInterrupt
