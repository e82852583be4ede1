"""The compiled step on CPU (train.compile, recall_cli/training/compiled.py) and its length buckets
(task.pad_to_multiple_of): the shapes it sees, what it records, the same training as the eager step,
resume, and the fallback. The CUDA-graph path is in test_cuda.py."""

from __future__ import annotations

import json
import math
import sys

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from recall_cli.training import compiled, loop as train
from recall_cli.cli import app
from recall_cli.tasks import load_split, task_for
from recall_cli.tasks.batches import padded_length, tokenize
from recall_cli.errors import CompileError
from recall_cli.recipe import load_recipe
from recall_cli.rundir import read_metrics
from recall_cli.testing import tiny_bert_dir

from conftest import GLUE, tiny_recipe, write_recipe

runner = CliRunner()
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def still_model(tmp_path_factory):
    """The tiny BERT without dropout: a compiled and an eager step then compute the same function,
    so that their runs can be compared number for number."""
    return tiny_bert_dir(tmp_path_factory.mktemp("still"), seed=1234, hidden_dropout_prob=0.0,
                         attention_probs_dropout_prob=0.0)


def sst2_recipe(model_dir, out, **sections):
    """SST-2's short sentences: batches of several padded lengths (16, 32, 48 with buckets of 16)."""
    task = {"name": "sst2", "data_dir": str(GLUE / "SST-2"), "max_seq_length": 48, "max_train_examples": 92,
            "pad_to_multiple_of": 16, **sections.pop("task", {})}
    return tiny_recipe(model_dir, out, task=task, probe={"enabled": False}, **sections)


# ---- buckets ---------------------------------------------------------------------------------------


def test_padded_length_rounds_up_to_the_bucket_and_never_past_the_maximum():
    assert [padded_length(n, None) for n in (1, 17, 48)] == [1, 17, 48]
    assert [padded_length(n, 16, 48) for n in (1, 16, 17, 33, 48)] == [16, 16, 32, 48, 48]
    assert padded_length(45, 32, 48) == 48  # a maximum that is no multiple caps the last bucket


@pytest.mark.slow
def test_a_bucketed_batch_holds_the_same_tokens_with_more_padding(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    features = tokenize(load_split(load_recipe_task(), "train", 40), tokenizer, 48)
    indices = list(range(8))
    task = task_for(load_recipe_task())
    dynamic = task.collate(features, indices, tokenizer.pad_token_id)
    bucketed = task.collate(features, indices, tokenizer.pad_token_id, pad_to_multiple_of=16, max_length=48)
    width = dynamic["input_ids"].shape[1]
    assert bucketed["input_ids"].shape[1] == padded_length(width, 16, 48) > width or width % 16 == 0
    for key in ("input_ids", "attention_mask", "token_type_ids"):
        if key in dynamic:
            assert torch.equal(bucketed[key][:, :width], dynamic[key])
            assert not bucketed[key][:, width:].any() or key == "input_ids"
    assert (bucketed["input_ids"][:, width:] == tokenizer.pad_token_id).all()
    assert torch.equal(bucketed["labels"], dynamic["labels"])


def load_recipe_task():
    from recall_cli.recipe import TaskConfig

    return TaskConfig(name="sst2", data_dir=str(GLUE / "SST-2"))


# ---- the decision -----------------------------------------------------------------------------------


def test_auto_stays_eager_on_cpu_and_says_why_off_and_on_are_the_recipes():
    mode, why = compiled.decide("auto", CPU, pad_to_multiple_of=32, world_size=1)
    assert mode is None and "eager on CPU" in why
    assert compiled.decide("off", CPU, pad_to_multiple_of=32, world_size=1) == (None, "off in the recipe")
    assert compiled.decide("on", CPU, pad_to_multiple_of=None, world_size=1) == ("default", "on in the recipe")


def test_auto_on_cuda_compiles_only_with_buckets_and_without_cuda_graphs_under_ddp(monkeypatch):
    monkeypatch.setattr(compiled, "cannot_compile", lambda device: None)
    cuda = torch.device("cuda")
    assert compiled.decide("auto", cuda, pad_to_multiple_of=32, world_size=1)[0] == "reduce-overhead"
    assert compiled.decide("auto", cuda, pad_to_multiple_of=32, world_size=2)[0] == "default"
    mode, why = compiled.decide("auto", cuda, pad_to_multiple_of=None, world_size=1)
    assert mode is None and "task.pad_to_multiple_of=32" in why


def test_auto_on_cuda_compiles_only_where_the_run_pays_for_its_compiles(monkeypatch):
    """The estimate from the H100 measurements: 40 s a padded length against 1.8 ms a layer a
    micro-batch with CUDA graphs (1 ms without, under DDP), compiled when the saving is 1.5x the cost."""
    monkeypatch.setattr(compiled, "cannot_compile", lambda device: None)
    cuda = torch.device("cuda")
    # The MiniLM quick start: 200 steps, 6 layers, 3 lengths: ~2 s saved against ~120 s of compiling.
    mode, why = compiled.decide("auto", cuda, pad_to_multiple_of=32, world_size=1,
                                size=compiled.RunSize(micro_batches=200, lengths=3, layers=6))
    assert mode is None
    assert why == ("auto: eager, compiling would not pay back in this run (~120 s to compile 3 lengths, ~2 s saved "
                   "over 200 micro-batches; train.compile=on compiles anyway)")
    # The paper's MRPC schedule on BERT-base: 11,500 steps, 12 layers, 2 lengths: ~248 s against ~80 s.
    mode, why = compiled.decide("auto", cuda, pad_to_multiple_of=32, world_size=1,
                                size=compiled.RunSize(micro_batches=11_500, lengths=2, layers=12))
    assert mode == "reduce-overhead"
    assert why == ("auto: compiled on CUDA with CUDA graphs (~80 s to compile 2 lengths, ~248 s saved over "
                   "11500 micro-batches)")
    # The break-even point, on both sides of it; under DDP the smaller saving moves it.
    size = lambda n, layers=12: compiled.RunSize(micro_batches=n, lengths=1, layers=layers)  # noqa: E731
    assert compiled.pays_back("reduce-overhead", size(2778))[0] and not compiled.pays_back("reduce-overhead", size(2777))[0]
    assert compiled.decide("auto", cuda, pad_to_multiple_of=32, world_size=2, size=size(2778))[0] is None
    assert compiled.decide("auto", cuda, pad_to_multiple_of=32, world_size=2, size=size(5000))[0] == "default"
    # `on` compiles a short run anyway; CPUs stay eager whatever the length.
    assert compiled.decide("on", cuda, pad_to_multiple_of=32, world_size=1, size=size(10))[0] == "reduce-overhead"
    assert compiled.decide("auto", CPU, pad_to_multiple_of=32, world_size=1, size=size(10**6))[0] is None


@pytest.mark.slow
def test_run_size_counts_the_runs_padded_lengths_and_its_depth(still_model, tmp_path):
    """run_size on SST-2's rows: the lengths of the run's own batches in buckets of 16 (not every
    length a row could make), the micro-batches left, and the layers from the model's config."""
    from transformers import AutoTokenizer

    from recall_cli.tasks.batches import BatchOrder
    from recall_cli.recipe import recipe_from_dict
    from recall_cli.training.setup import load_task_data

    recipe = recipe_from_dict(sst2_recipe(still_model, tmp_path / "run", train={"max_steps": 30, "grad_accum": 2}), "t")
    task = load_task_data(recipe, AutoTokenizer.from_pretrained(still_model))
    lengths = [len(ids) for ids in task.train.input_ids]
    from recall_cli.model import load_config

    config = load_config(str(still_model))
    size = compiled.run_size(recipe, lengths, total_steps=30, done_steps=0, config=config, world_size=1)
    order = BatchOrder(len(task.train), recipe.train.batch_size, recipe.train.seed)
    widths = {padded_length(max(lengths[j] for j in order.batch(i)), 16, 48) for i in range(60)}
    assert size == compiled.RunSize(micro_batches=60, lengths=len(widths), layers=2)
    assert 2 <= size.lengths <= 3 < len({padded_length(n, 16, 48) for n in lengths}) + 1
    # A resumed run weighs only the steps it has left.
    assert compiled.run_size(recipe, lengths, total_steps=30, done_steps=20, config=config,
                             world_size=1).micro_batches == 20


@pytest.mark.slow
def test_dry_run_says_how_the_step_will_run_and_fails_as_the_run_would(tiny_model_dir, tmp_path, monkeypatch):
    recipe = write_recipe(tmp_path / "r.yaml", sst2_recipe(tiny_model_dir, tmp_path / "run", train={"compile": "auto"}))
    result = runner.invoke(app, ["finetune", str(recipe), "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    [step] = [c for c in json.loads(result.output)["checks"] if c["name"] == "step"]
    assert step == {"name": "step", "status": "ok",
                    "message": 'eager (auto: eager on CPU, measured faster there (docs/speed.md)); fp32 (set in the recipe)'}
    monkeypatch.setattr(compiled, "cannot_compile", lambda device: "no C++ compiler found (install g++ or set CXX)")
    result = runner.invoke(app, ["finetune", str(recipe), "train.compile=on", "--dry-run"])
    assert result.exit_code == 2
    assert "error: train.compile=on, but no C++ compiler found (install g++ or set CXX) (or set train.compile=off)" in result.output
    assert not (tmp_path / "run").exists()


def test_a_cxx_that_is_not_there_is_found_by_the_dry_run(tiny_model_dir, tmp_path, monkeypatch):
    """Inductor builds CPU kernels with $CXX when it is set, even where g++ exists: a CXX that does not
    resolve fails train.compile=on in the dry run (exit 2, one line), as it would fail the run."""
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    assert compiled.cannot_compile(torch.device("cpu")) == (
        f"CXX={tmp_path / 'no-such-compiler'} is not an executable (torch.compile builds CPU kernels with it): fix or unset CXX")
    recipe = write_recipe(tmp_path / "r.yaml", sst2_recipe(tiny_model_dir, tmp_path / "run", train={"compile": "on"}))
    result = runner.invoke(app, ["finetune", str(recipe), "--dry-run"])
    assert result.exit_code == 2 and "is not an executable" in result.output
    assert not (tmp_path / "run").exists()
    monkeypatch.setenv("CXX", sys.executable)  # any executable resolves (whether it compiles is inductor's to say)
    assert compiled.cannot_compile(torch.device("cpu")) is None


@pytest.mark.slow
def test_prepare_weighs_the_run_on_cuda_before_choosing_the_precision(tiny_model_dir, tmp_path, monkeypatch):
    """The set-up's wiring, with CUDA faked up to the decision: a 12-step run stays eager (and so
    fp32), a long one compiles (and so bf16); nothing is written either way."""
    from recall_cli.training import preflight, setup as train_setup
    from recall_cli.distributed import Distributed
    from recall_cli.training.progress import Reporter
    from recall_cli.recipe import recipe_from_dict

    monkeypatch.setattr(train_setup, "resolve_device", lambda name, rank=None: torch.device("cuda"))
    monkeypatch.setattr(compiled, "cannot_compile", lambda device: None)
    monkeypatch.setattr(preflight, "available_cuda", lambda device: 80 * 2**30)
    monkeypatch.setattr(compiled, "COMPILE_SECONDS_PER_LENGTH", 1.0)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)

    def prepared(steps: int):
        raw = tiny_recipe(tiny_model_dir, tmp_path / "run", task={"pad_to_multiple_of": 16},
                          train={"device": "auto", "precision": "auto", "max_steps": steps})
        return train_setup.prepare(recipe_from_dict(raw, "cuda"), Distributed(), train_setup.Start.NEW, Reporter())

    short = prepared(12)  # 12 x 2 layers x 1.8 ms = 0.04 s saved against 1 s for its one length
    assert short.compile_mode is None and "would not pay back" in short.compile_reason
    assert "~1 s to compile 1 length" in short.compile_reason and short.precision == "fp32"
    long = prepared(1000)  # 3.6 s saved: 3.6x the compile
    assert long.compile_mode == "reduce-overhead" and long.precision == "bf16"
    assert long.compile_reason.endswith("(~1 s to compile 1 length, ~4 s saved over 1000 micro-batches)")
    assert not (tmp_path / "run").exists()


def test_where_it_cannot_compile_auto_says_why_and_on_stops_with_exit_2(monkeypatch):
    monkeypatch.setattr(compiled, "cannot_compile", lambda device: "no C++ compiler found (install g++ or set CXX)")
    monkeypatch.setattr(compiled, "MODE_FOR", {"cpu": "default", "cuda": "reduce-overhead"})
    mode, why = compiled.decide("auto", torch.device("cuda"), pad_to_multiple_of=32, world_size=1)
    assert mode is None and why == "auto: eager, no C++ compiler found (install g++ or set CXX)"
    with pytest.raises(CompileError, match="train.compile=on, but no C\\+\\+ compiler found") as caught:
        compiled.decide("on", CPU, pad_to_multiple_of=32, world_size=1)
    assert caught.value.exit_code == 2


def test_no_compiler_on_path_is_named(monkeypatch):
    monkeypatch.setattr(compiled.shutil, "which", lambda name: None)
    monkeypatch.delenv("CXX", raising=False)
    assert "no C++ compiler" in compiled.cannot_compile(CPU)


def test_the_eager_check_passes_a_faithful_forward_and_names_a_wrong_one(still_model):
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(still_model, num_labels=2).train()
    batch = {"input_ids": torch.randint(1000, 2000, (4, 16)), "attention_mask": torch.ones(4, 16, dtype=torch.long),
             "labels": torch.tensor([0, 1, 0, 1])}
    assert compiled.loss_matches_eager(model, model, batch, torch.autocast("cpu", enabled=False), "fp32") is None

    class Wrong(torch.nn.Module):
        def forward(self, **inputs):
            out = model(**inputs)
            out.loss = out.loss + 1.0
            return out

    problem = compiled.loss_matches_eager(model, Wrong(), batch, torch.autocast("cpu", enabled=False), "fp32")
    assert problem is not None and "differs from the eager step's" in problem
    assert model.training  # the check leaves the model as it found it


# ---- runs -----------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_a_compiled_run_trains_as_the_eager_one_and_records_its_compile(still_model, tmp_path):
    """One compiled and one eager run of the same recipe (buckets of 16, a partial last batch, two
    micro-batches per step): the same losses, weights and dev scores within fp32 reordering, and a
    compile record naming the mode, the lengths and the seconds."""
    runs = {}
    for mode in ("on", "off"):
        recipe = write_recipe(tmp_path / f"{mode}.yaml", sst2_recipe(still_model, tmp_path / mode,
                              train={"compile": mode, "grad_accum": 2, "max_steps": 8, "log_every": 1, "eval_every": 4}))
        result = runner.invoke(app, ["finetune", str(recipe), "--plain"])
        assert result.exit_code == 0, result.output
        runs[mode] = tmp_path / mode
    on, off = (json.loads((runs[m] / "summary.json").read_text()) for m in ("on", "off"))
    assert on["compile"]["mode"] == "default" and on["compile"]["fallback"] is None
    assert on["compile"]["reason"] == "on in the recipe" and on["compile"]["seconds"] > 0
    assert off["compile"] == {"mode": None, "seconds": 0.0, "shapes": off["compile"]["shapes"], "fallback": None,
                              "reason": "off in the recipe"}
    # The lengths trained on are buckets, the same in both runs, and more than one.
    assert on["compile"]["shapes"] == off["compile"]["shapes"]
    assert len(on["compile"]["shapes"]) >= 2 and all(n % 16 == 0 and n <= 48 for n in on["compile"]["shapes"])
    a, b = read_metrics(runs["on"]), read_metrics(runs["off"])
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for x, y in zip(a, b):
        for key in ("loss", "distance", "main", "lambda"):
            if key in x:
                assert math.isclose(x[key], y[key], rel_tol=1e-4, abs_tol=1e-6), (x, y)
    wa, wb = (load_file(str(runs[m] / "last" / "model.safetensors")) for m in ("on", "off"))
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-4


@pytest.mark.slow
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_a_compiled_run_stopped_by_sigterm_resumes_to_the_uninterrupted_one(still_model, tmp_path, monkeypatch):
    recipe = lambda name: write_recipe(tmp_path / f"{name}.yaml", sst2_recipe(  # noqa: E731
        still_model, tmp_path / name, train={"compile": "on", "max_steps": 8, "log_every": 2, "save_every": 4}))
    reference, stopped = recipe("reference"), recipe("stopped")
    assert runner.invoke(app, ["finetune", str(reference), "--plain"]).exit_code == 0

    class SigtermAtStep3(train.SigtermFlag):
        asked = 0

        @property
        def requested(self):  # read once per step: true at the third
            SigtermAtStep3.asked += 1
            return SigtermAtStep3.asked >= 3

        @requested.setter
        def requested(self, value):
            pass

    monkeypatch.setattr(train, "SigtermFlag", SigtermAtStep3)
    first = runner.invoke(app, ["finetune", str(stopped), "--plain"])
    assert first.exit_code == 143, first.output
    monkeypatch.undo()
    assert json.loads((tmp_path / "stopped" / "last" / "trainer_state.json").read_text())["step"] == 3
    again = runner.invoke(app, ["finetune", "--resume", str(tmp_path / "stopped"), "--plain"])
    assert again.exit_code == 0, again.output
    wa, wb = (load_file(str(tmp_path / n / "last" / "model.safetensors")) for n in ("stopped", "reference"))
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-5
    a, b = (json.loads((tmp_path / n / "summary.json").read_text())["compile"] for n in ("stopped", "reference"))
    assert a["shapes"] == b["shapes"]  # the lengths of both processes of the resumed run


def failing_compile(model, device, mode=None, *, lengths=8):
    def forward(**inputs):
        raise RuntimeError("BackendCompilerFailed: inductor could not build a kernel\n(pages of trace)")
    return forward


@pytest.mark.slow
def test_auto_falls_back_to_the_eager_step_in_one_line_and_trains_as_eager(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(compiled, "decide", lambda *a, **k: ("default", "auto: chosen for this test"))
    monkeypatch.setattr(compiled, "compile_model", failing_compile)
    recipe = write_recipe(tmp_path / "r.yaml", sst2_recipe(tiny_model_dir, tmp_path / "fell", train={"max_steps": 4}))
    result = runner.invoke(app, ["finetune", str(recipe), "--plain"])
    assert result.exit_code == 0, result.output
    assert "train.compile: running the step eagerly: RuntimeError: BackendCompilerFailed: inductor could not build a kernel" in result.output
    assert "Traceback" not in result.output and "pages of trace" not in result.output
    record = json.loads((tmp_path / "fell" / "summary.json").read_text())["compile"]
    assert record["mode"] is None and record["fallback"].startswith("RuntimeError: BackendCompilerFailed")
    monkeypatch.undo()
    eager = write_recipe(tmp_path / "e.yaml", sst2_recipe(tiny_model_dir, tmp_path / "eager",
                                                          train={"max_steps": 4, "compile": "off"}))
    assert runner.invoke(app, ["finetune", str(eager), "--plain"]).exit_code == 0
    wa, wb = (load_file(str(tmp_path / n / "last" / "model.safetensors")) for n in ("fell", "eager"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.slow
def test_a_resumed_run_keeps_the_step_it_ran_and_never_compiles_again_after_a_fallback(tiny_model_dir, tmp_path,
                                                                                        monkeypatch):
    """A run under `auto` whose compiled step fell back to eager, stopped at step 2 and resumed: the
    resumed process runs eagerly without trying to compile again, and its summary keeps the fallback
    and the first process's reason, as the uninterrupted run's does."""
    monkeypatch.setattr(compiled, "decide", lambda *a, **k: ("default", "auto: chosen for this test"))
    monkeypatch.setattr(compiled, "compile_model", failing_compile)
    recipe = write_recipe(tmp_path / "r.yaml", sst2_recipe(tiny_model_dir, tmp_path / "fell",
                                                           train={"max_steps": 4, "save_every": 2}))

    class StopAtStep2(train.Reporter):
        def step(self, step):
            if step == 2:
                raise KeyboardInterrupt

    from recall_cli.recipe import load_recipe as load

    with pytest.raises(KeyboardInterrupt):
        train.finetune(load(recipe), reporter=StopAtStep2())
    state = json.loads((tmp_path / "fell" / "last" / "trainer_state.json").read_text())
    assert state["step"] == 2 and state["compile_mode"] == "eager" and state["compile_reason"] == "auto: chosen for this test"
    assert state["compile_fallback"].startswith("RuntimeError: BackendCompilerFailed")

    def no_compile(*a, **k):
        raise AssertionError("the resumed run compiled again")

    monkeypatch.setattr(compiled, "compile_model", no_compile)
    result = runner.invoke(app, ["finetune", "--resume", str(tmp_path / "fell"), "--plain"])
    assert result.exit_code == 0, result.output
    assert "running the step eagerly" not in result.output  # said once, by the first process
    record = json.loads((tmp_path / "fell" / "summary.json").read_text())["compile"]
    assert record["mode"] is None and record["reason"] == "auto: chosen for this test"
    assert record["fallback"].startswith("RuntimeError: BackendCompilerFailed")


def test_auto_keeps_a_recorded_step_on_resume_and_decides_anew_otherwise(monkeypatch):
    cuda = torch.device("cuda")
    monkeypatch.setattr(compiled, "cannot_compile", lambda device: None)
    assert compiled.resumed_mode("auto", cuda, ("eager", "why then")) == (None, "why then")
    assert compiled.resumed_mode("auto", cuda, ("reduce-overhead", "why then")) == ("reduce-overhead", "why then")
    assert compiled.resumed_mode("auto", CPU, ("reduce-overhead", "why then")) is None  # moved to a CPU: anew
    assert compiled.resumed_mode("auto", cuda, None) is None  # a checkpoint from before the record
    assert compiled.resumed_mode("auto", cuda, (None, None)) is None
    assert compiled.resumed_mode("on", cuda, ("eager", "why then")) is None  # the recipe's own setting rules


@pytest.mark.slow
def test_on_stops_with_exit_2_and_leaves_no_run_when_the_compile_fails(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(compiled, "compile_model", failing_compile)
    recipe = write_recipe(tmp_path / "r.yaml", sst2_recipe(tiny_model_dir, tmp_path / "on", train={"compile": "on"}))
    result = runner.invoke(app, ["finetune", str(recipe), "--plain"])
    assert result.exit_code == 2, result.output
    assert "train.compile=on, but the compiled step failed: RuntimeError: BackendCompilerFailed" in result.output
    assert "(set train.compile=off)" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "on").exists()  # rolled back: the first step never committed the run


@pytest.mark.slow  # trains two steps
def test_the_start_line_says_how_the_step_runs(tiny_model_dir, tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", sst2_recipe(tiny_model_dir, tmp_path / "run", train={"max_steps": 2}))
    result = runner.invoke(app, ["finetune", str(recipe), "--plain"])
    assert result.exit_code == 0, result.output
    assert "step=eager (auto: eager on CPU, measured faster there (docs/speed.md))" in result.output
    assert load_recipe(recipe).train.compile == "auto"


def test_old_summaries_without_a_compile_record_still_read():
    from recall_cli.rundir import Summary

    assert Summary.from_dict({"task": "rte", "steps": 3}).compile is None
    with pytest.raises(ValueError, match="'compile' is the text 'eager', not an object"):
        Summary.from_dict({"compile": "eager"})


@pytest.mark.slow
def test_compiling_raises_dynamos_graph_limit_to_hold_every_length(monkeypatch):
    """dynamo keeps 8 graphs per function by default and runs a ninth length eagerly without a word:
    compile_model raises the limit to the run's lengths plus the eval check's graph and a margin,
    and never lowers it."""
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    monkeypatch.setattr(config, name, 8)
    compiled.compile_model(torch.nn.Linear(2, 2), CPU, lengths=16)  # lazy: nothing compiles here
    assert getattr(config, name) == 20
    compiled.compile_model(torch.nn.Linear(2, 2), CPU, lengths=2)
    assert getattr(config, name) == 20


def test_under_ddp_a_failed_compile_stops_instead_of_retrying_eagerly(tiny_model_dir, tmp_path):
    """auto's eager retry is for one process: under DDP the reducer may be half way through the failed
    backward, so the step raises CompileError (exit 2) with the reason. The loop's own method, on a
    set-up run whose process group is stood in for."""
    import contextlib
    import types

    from recall_cli import rundir
    from recall_cli.distributed import Distributed
    from recall_cli.training.progress import Reporter
    from recall_cli.recipe import recipe_from_dict
    from recall_cli.training.setup import Start, prepare, set_up

    raw = tiny_recipe(tiny_model_dir, tmp_path / "run", probe={"enabled": False})
    prepared = prepare(recipe_from_dict(raw, "ddp"), Distributed(), Start.NEW, Reporter())
    t = set_up(prepared, Reporter(), rundir.NewRunDir(tmp_path / "run"))
    batches, _ = train.micro_batches(t)
    t.compute.forward = failing_compile(t.model, CPU)
    t.ctx = types.SimpleNamespace(enabled=True, no_sync=lambda model, skip: contextlib.nullcontext())
    loop = object.__new__(train._Loop)
    loop.t, loop.reporter, loop.shapes = t, Reporter(), compiled.ShapeLog(t.compute.compile_record)
    with pytest.raises(CompileError, match="the compiled step failed under DDP, where it cannot be retried eagerly: "
                                           "RuntimeError: BackendCompilerFailed"):
        loop.forward_backward(batches)
    assert t.compute.compile_record.fallback is None  # not recorded as a fallback: the run stops
