"""recall as a library: the README's two examples run as written (plain loop, HF Trainer) on a tiny BERT
offline; θ* read from the checkpoint by name; probe() equals `recall probe`; `import recall_cli` stays light."""

from __future__ import annotations

import ast
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback
from typer.testing import CliRunner

import recall_cli
from recall_cli.api import unwrap
from recall_cli.cli import app
from recall_cli.testing import save_with_tokenizer, tiny_bert, tiny_bert_dir

REPO = Path(__file__).resolve().parents[1]
PUBLIC = {"RecAdam", "RecAdamCallback", "__version__", "anchor_distance", "probe", "recadam_for", "embedding_anchor",
          "freeze_encoder", "unfreeze_encoder", "loss_step", "add_loss_terms", "LinearProbeCallback", "continual"}


def readme_examples() -> list[str]:
    """The python blocks of the README's "RecAdam in your own training loop" section, in order."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## RecAdam in your own training loop\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


def on_tiny_model(code: str, pretrained: Path, settings: dict[str, str]) -> str:
    """The README's code with its settings lines (pretrained, steps, ...) pointed at the tiny model; every
    other line runs as written. A settings line the README no longer has fails the test."""
    lines = {r"pretrained = .*": f"pretrained = {str(pretrained)!r}", **settings}
    for pattern, replacement in lines.items():
        code, n = re.subn(rf"^{pattern}$", replacement, code, flags=re.MULTILINE)
        assert n == 1, f"the README example has no line matching {pattern!r}"
    return code


def sigmoid_lambda(step: int, k: float = 0.1, t0: float = 250) -> float:
    return 1 / (1 + math.exp(-k * (step - t0)))


@pytest.fixture(scope="module")
def mlm_dir(tmp_path_factory) -> Path:
    """θ*: a tiny BERT saved with its masked-LM head (so the mlm probe runs too) and its tokenizer."""
    return tiny_bert_dir(tmp_path_factory.mktemp("tiny_mlm"), head="mlm", seed=11)


# ---- the public surface --------------------------------------------------------------------------


@pytest.mark.slow
def test_public_names_are_all_and_load_lazily():
    assert set(recall_cli.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(recall_cli, name) is not None
    assert recall_cli.RecAdam is __import__("recall_cli.optim", fromlist=["RecAdam"]).RecAdam
    with pytest.raises(AttributeError, match="no attribute 'build_model'"):
        recall_cli.build_model  # noqa: B018 - private: not re-exported
    # Neither `import recall_cli` nor the CLI module (what `recall --help` imports) pulls in torch.
    code = ("import sys, recall_cli, recall_cli.cli; "
            "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]; print(heavy); sys.exit(bool(heavy))")
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr


# ---- recadam_for: θ* from the checkpoint, by name --------------------------------------------------


def theta_star_by_name(model: torch.nn.Module, optimizer) -> dict[str, torch.Tensor]:
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: a for p, a in unwrap(optimizer).anchored()}


@pytest.mark.slow
def test_recadam_for_reads_theta_star_from_disk_by_name(mlm_dir):
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(mlm_dir, num_labels=3)
    with torch.no_grad():  # the model has moved away from θ*: the anchors must still be θ*, read from disk
        for p in model.parameters():
            p.add_(0.5)
    optimizer = recall_cli.recadam_for(model, mlm_dir, lr=1e-3, pretrain_cof=100.0, weight_decay=0.01)
    theta_star = theta_star_by_name(model, optimizer)
    disk = load_file(str(mlm_dir / "model.safetensors"))
    params = dict(model.named_parameters())
    # Every parameter the checkpoint holds is anchored to the checkpoint's tensor of the same name.
    expected = {n for n in params if n in disk}
    assert set(theta_star) == expected and len(expected) > 30
    for name in expected:
        assert torch.equal(theta_star[name], disk[name]), name
    # The new head (and BERT's pooler, which a masked-LM checkpoint lacks) get plain Adam.
    assert sorted(set(params) - set(theta_star)) == ["bert.pooler.dense.bias", "bert.pooler.dense.weight",
                                                  "classifier.bias", "classifier.weight"]
    assert recall_cli.anchor_distance(optimizer) == pytest.approx(
        math.sqrt(sum(((params[n].detach() - disk[n]) ** 2).sum().item() for n in expected)), rel=1e-6)
    # Four groups as recall finetune builds them: no weight decay on biases and LayerNorms.
    decays = {n: g["weight_decay"] for g in optimizer.param_groups for n in g["names"]}
    assert decays["bert.encoder.layer.0.attention.self.query.weight"] == 0.01
    assert decays["bert.encoder.layer.0.attention.self.query.bias"] == 0.0
    assert decays["bert.embeddings.LayerNorm.weight"] == 0.0 and decays["classifier.weight"] == 0.01


def test_recadam_for_matches_recall_finetunes_anchors(tiny_model_dir):
    """The CLI's build_model and the library take θ* through the same matching (model.py)."""
    from transformers import AutoModelForSequenceClassification

    from recall_cli.model import build_model
    from recall_cli.recipe import ModelConfig

    from conftest import binary_task

    built = build_model(ModelConfig(name_or_path=str(tiny_model_dir)), binary_task(), seed=3)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=2)
    theta_star = theta_star_by_name(model, recall_cli.recadam_for(model, tiny_model_dir))
    assert set(theta_star) == set(built.theta_star)
    for name, tensor in built.theta_star.items():
        assert torch.equal(theta_star[name], tensor), name


@pytest.mark.slow
def test_recadam_for_a_fine_tuned_classifier_leaves_its_head_unanchored(tmp_path):
    folder = save_with_tokenizer(tiny_bert(head="classifier", num_labels=2, seed=4), tmp_path / "clf")
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(folder)
    auto = theta_star_by_name(model, recall_cli.recadam_for(model, folder))
    keep = theta_star_by_name(model, recall_cli.recadam_for(model, folder, head="keep"))
    assert not any(n.startswith("classifier.") for n in auto)
    assert {"classifier.weight", "classifier.bias"} <= set(keep)
    with pytest.raises(TypeError, match="PreTrainedModel"):
        recall_cli.recadam_for(torch.nn.Linear(2, 2), folder)


# ---- the README's plain loop ---------------------------------------------------------------------


@pytest.mark.slow
def test_readme_plain_loop_runs_and_probe_equals_recall_probe(mlm_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plain = readme_examples()[0]
    code = on_tiny_model(plain, mlm_dir, {r"steps, log_every = .*": "steps, log_every = 6, 2"})
    namespace: dict = {}
    torch.manual_seed(0)
    exec(compile(code, "README.md (plain loop)", "exec"), namespace)  # noqa: S102 - the README's own code
    captured = capsys.readouterr()
    printed = [ast.literal_eval(line) for line in captured.out.splitlines() if line.startswith("{")]
    logs, measured = printed[:-1], printed[-1]

    # λ(t) at the logged steps is the sigmoid the example asks for; the distance grows from 0.
    assert [r["step"] for r in logs] == [2, 4, 6]
    for r in logs:
        assert r["lambda"] == pytest.approx(sigmoid_lambda(r["step"]), rel=1e-12)
        assert math.isfinite(r["loss"])
    distances = [r["distance"] for r in logs]
    assert 0 < distances[0] < distances[-1] < 1.0
    optimizer = namespace["optimizer"]
    assert optimizer.current_penalty_weight == pytest.approx(1 - sigmoid_lambda(6))

    # probe() on the model in memory == `recall probe` on the same weights saved, field by field.
    saved = tmp_path / "trained"
    namespace["model"].save_pretrained(saved)
    namespace["tokenizer"].save_pretrained(saved)
    # probe()'s defaults are a run's probe section's (128 sentences, every pair, 64 tokens), and the CLI's too
    # (issue 53): no flag, the same numbers.
    result = CliRunner().invoke(app, ["probe", str(saved), "--against", str(mlm_dir), "--json", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    cli = json.loads(result.output)[0]
    assert set(measured) == set(cli)
    assert {"sts_retained", "cka", "cka_layers", "drift", "mlm_ratio"} <= set(measured)
    assert measured["texts"] == cli["texts"] == 128 and measured["pairs"] == cli["pairs"] == 1500
    said = captured.err.splitlines()
    assert f"probe: model against {mlm_dir}: 128 sentences, 1500 STS pairs, 64 tokens (cka, drift, sts, mlm)" in said
    assert any(line.startswith("probe: done in ") for line in said)
    assert measured["reference"] == cli["reference"] == str(mlm_dir) and measured["theta"] is None
    for key, value in cli.items():
        if key in ("target", "theta", "probe_seconds", "notes", "reference"):
            continue
        mine = measured[key]
        if isinstance(value, list):
            assert mine == pytest.approx(value, abs=1e-6), key
        else:
            assert mine == pytest.approx(value, abs=1e-6), key
    assert measured["sts_retained"] == pytest.approx(measured["sts"] / measured["sts_ref"])


# ---- the README's HF Trainer example -------------------------------------------------------------


class Recorder(TrainerCallback):
    """Stands where report_to puts its integrations (TensorBoard, W&B, ...): before any user callback."""

    seen: ClassVar[list[dict]] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        Recorder.seen.append({**logs, "global_step": state.global_step})


@pytest.mark.slow
def test_readme_hf_trainer_example_logs_lambda_and_distance_to_report_to(mlm_dir, tmp_path, monkeypatch):
    pytest.importorskip("accelerate", reason="the Trainer needs accelerate (the dev extra installs it)")
    import transformers.trainer

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(transformers.trainer, "get_reporting_integration_callbacks", lambda report_to: [Recorder()])
    Recorder.seen = []
    trainer_example = readme_examples()[1]
    code = on_tiny_model(trainer_example, mlm_dir,
                         {r"steps, log_every, report_to = .*": 'steps, log_every, report_to = 6, 2, "none"'})
    namespace: dict = {}
    exec(compile(code, "README.md (HF Trainer)", "exec"), namespace)  # noqa: S102 - the README's own code
    trainer = namespace["trainer"]

    ours = [log for log in trainer.state.log_history if "lambda" in log]
    losses = [log for log in trainer.state.log_history if "loss" in log]
    assert [log["step"] for log in ours] == [log["step"] for log in losses] == [2, 4, 6]
    for log in ours:
        assert log["lambda"] == pytest.approx(sigmoid_lambda(log["step"]), rel=1e-12)
        assert log["penalty_weight"] == pytest.approx(1 - log["lambda"])
    distances = [log["distance"] for log in ours]
    assert 0 < distances[0] < distances[-1] < 1.0
    assert distances[-1] == pytest.approx(recall_cli.anchor_distance(trainer.optimizer))
    # What report_to's integrations received: the same values, at the same global steps as the loss.
    reported = [r for r in Recorder.seen if "lambda" in r]
    assert [(r["global_step"], r["lambda"], r["distance"]) for r in reported] == \
        [(log["step"], log["lambda"], log["distance"]) for log in ours]
    # The Trainer trained with RecAdam (accelerate wraps it) and the given schedule.
    assert isinstance(unwrap(trainer.optimizer), recall_cli.RecAdam)
    assert trainer.lr_scheduler is namespace["scheduler"]


# ---- the README's methods in your own loop --------------------------------------------------------


def methods_examples() -> list[str]:
    """The python blocks of the README's "Methods in your own training loop" section, in order."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Methods in your own training loop\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


def encoder_equal(model, pretrained: Path) -> bool:
    """Whether every encoder weight the checkpoint holds is still θ*'s, bit for bit."""
    from safetensors.torch import load_file

    theta = load_file(str(pretrained / "model.safetensors"))
    mine = dict(model.named_parameters())
    shared = [name for name in theta if name in mine]
    assert len(shared) > 10
    return all(torch.equal(mine[name].detach(), theta[name]) for name in shared)


@pytest.mark.slow
@pytest.mark.parametrize("steps, probe_steps, moved", [(2, 2, False), (6, 2, True)])
@pytest.mark.long  # left to make test's second step (-m long): the default run stays under 10 minutes (issue 53)
def test_readme_methods_plain_loop_anchors_and_probes_first(mlm_dir, tmp_path, monkeypatch, capsys, steps, probe_steps,
                                                            moved):
    monkeypatch.chdir(tmp_path)
    code = on_tiny_model(methods_examples()[0], mlm_dir,
                         {r"steps, probe_steps = .*": f"steps, probe_steps = {steps}, {probe_steps}"})
    namespace: dict = {}
    exec(compile(code, "README.md (methods, plain loop)", "exec"), namespace)  # noqa: S102 - the README's own code
    model, parts = namespace["model"], namespace["parts"]
    # LP-FT: through the head phase the encoder is θ* bit for bit; after it, it trains.
    assert encoder_equal(model, mlm_dir) is not moved
    # Dropout is on in the student and off in θ*: the anchor is above 0 from the first step.
    assert set(parts) == {"loss_task", "loss_keep"} and float(parts["loss_keep"]) > 0
    assert "loss_task" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("probe_steps, moved", [(6, False), (2, True)])
def test_readme_methods_trainer_logs_the_parts_and_runs_lp_ft(mlm_dir, tmp_path, monkeypatch, probe_steps, moved):
    pytest.importorskip("accelerate", reason="the Trainer needs accelerate (the dev extra installs it)")
    monkeypatch.chdir(tmp_path)
    code = on_tiny_model(methods_examples()[1], mlm_dir,
                         {r"steps, log_every, probe_steps = .*": f"steps, log_every, probe_steps = 6, 2, {probe_steps}"})
    namespace: dict = {}
    exec(compile(code, "README.md (methods, Trainer)", "exec"), namespace)  # noqa: S102 - the README's own code
    trainer = namespace["trainer"]
    logs = [log for log in trainer.state.log_history if "loss_keep" in log]
    losses = [log for log in trainer.state.log_history if "loss" in log]
    assert [log["step"] for log in logs] == [log["step"] for log in losses] == [2, 4, 6]
    for log in logs:
        assert log["keep_weight"] == 1.0 and log["loss_task"] > 0 and log["loss_keep"] >= 0
    assert encoder_equal(trainer.model, mlm_dir) is not moved


def test_probe_defaults_are_a_runs_probe_section():
    """The library's probe() measures as a run's in-run probe does, so its numbers sit beside a run's."""
    import inspect

    from recall_cli.api import probe
    from recall_cli.recipe.schema import ProbeConfig

    defaults = {k: v.default for k, v in inspect.signature(probe).parameters.items()}
    section = ProbeConfig()
    for key in ("num_texts", "num_pairs", "max_length", "batch_size"):
        assert defaults[key] == getattr(section, key), key
    assert list(defaults["probes"]) == section.probes and defaults["progress"] is True
