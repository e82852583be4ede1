"""Preflight: each check on tiny models built from configs, exit codes, no run directory on refusal,
the fresh head for a fine-tuned start, and a run directory restored after a failure before step 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from recall_cli.training import checkpoint, preflight
from recall_cli.cli import app
from recall_cli import model
from recall_cli.methods import active
from recall_cli.model import build_model
from recall_cli.recipe import ModelConfig, recipe_from_dict
from recall_cli.testing import save_with_tokenizer, tiny_bert

from conftest import binary_task, tiny_recipe, write_recipe

runner = CliRunner()


def finetune(*args: str):
    return runner.invoke(app, ["finetune", *args, "--plain"])


def save_tiny(folder: Path, *, classifier_labels: int | None = None, vocab_size: int | None = None,
              positions: int = 128, pad: bool = True) -> Path:
    """A 2-layer, hidden-32 BERT with the MiniLM tokenizer; optionally a classifier with a trained-looking head."""
    model = tiny_bert(head="classifier" if classifier_labels else "encoder", num_labels=classifier_labels or 2,
                      vocab_size=vocab_size, max_positions=positions, seed=5)
    if classifier_labels:
        with torch.no_grad():
            model.classifier.weight.fill_(0.25)  # unlike any fresh initialisation
            model.classifier.bias.fill_(-1.0)
    return save_with_tokenizer(model, folder, pad_token=pad)


def dry_run_json(tmp_path: Path, model_dir: Path, **sections):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(model_dir, tmp_path / "never", **sections))
    result = finetune(str(recipe), "--dry-run", "--json")
    return result, result.stdout


def checks_of(stdout: str) -> dict[str, dict]:
    return {c["name"]: c for c in json.loads(stdout)["checks"]}


@pytest.mark.slow
def test_quick_checks_pass_and_json_has_the_plan(tiny_model_dir, tmp_path):
    result, out = dry_run_json(tmp_path, tiny_model_dir)
    assert result.exit_code == 0, result.output
    report = json.loads(out)
    assert report["ok"] is True and report["plan"]["total_steps"] == 12 and report["plan"]["train_examples"] == 96
    assert report["recipe"]["task"]["max_seq_length"] == 48
    checks = checks_of(out)
    assert {n: c["status"] for n, c in checks.items()} == {
        "step": "ok", "max_seq_length": "ok", "pad token": "ok", "vocabulary": "ok", "head": "ok", "memory": "ok",
        "output_dir": "ok", "probe files": "ok"}
    assert checks["max_seq_length"]["message"] == "48 of the model's 128 positions"
    memory = report["memory"]
    # The parts are exact functions of the model: 4 bytes a parameter for weights, 8 for Adam's moments.
    from transformers import AutoConfig, AutoModelForSequenceClassification
    model = AutoModelForSequenceClassification.from_config(AutoConfig.from_pretrained(tiny_model_dir, num_labels=2))
    n = sum(p.numel() for p in model.parameters())
    head = model.classifier.weight.numel() + model.classifier.bias.numel()
    assert memory["parts"]["weights"] == 4 * n and memory["parts"]["adam_moments"] == 8 * n
    assert memory["parts"]["theta_star"] == 4 * (n - head)
    assert memory["total_bytes"] == sum(memory["parts"].values()) and memory["fits"] is True
    assert not (tmp_path / "never").exists()


@pytest.mark.slow
def test_max_seq_length_beyond_the_positions_is_refused_before_any_run_dir(tmp_path):
    model_dir = save_tiny(tmp_path / "bert64", positions=64)
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(model_dir, tmp_path / "out", task={"max_seq_length": 128}))
    dry = finetune(str(recipe), "--dry-run")
    assert dry.exit_code == 2
    assert "error: preflight: task.max_seq_length=128 is more than the model's 64 positions: " \
           "set task.max_seq_length=64 or less" in dry.output
    assert "fail" in dry.stdout  # the table shows the failing row
    run = finetune(str(recipe))
    assert run.exit_code == 2 and "64 positions" in run.output and "Traceback" not in run.output
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_issue_14_long_custom_row_with_huge_max_seq_length(tiny_model_dir, tmp_path):
    """The reported failure: a 1,200-word row and max_seq_length=100000 used to crash at step 1 (exit 1)."""
    rows = ["text\tlabel"] + [f"short sentence number {i}\t{i % 2}" for i in range(20)]
    rows.append(" ".join(["word"] * 1200) + "\t1")
    train = tmp_path / "train.tsv"
    train.write_text("\n".join(rows) + "\n", encoding="utf-8")
    task = {"name": "custom", "data_dir": None, "train_file": str(train), "dev_file": str(train),
            "text_fields": ["text"], "label_field": "label", "num_labels": 2, "max_seq_length": 100000}
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, tmp_path / "out", task=task))
    for extra in (["--dry-run"], []):
        result = finetune(str(recipe), *extra)
        assert result.exit_code == 2, result.output
        assert "task.max_seq_length=100000 is more than the model's 128 positions" in result.output
        assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_tokenizer_without_pad_token_and_mismatched_vocabulary(tmp_path):
    nopad = save_tiny(tmp_path / "nopad", pad=False)
    result, out = dry_run_json(tmp_path, nopad)
    assert result.exit_code == 2
    check = checks_of(out)["pad token"]
    assert check["status"] == "fail" and "has no padding token" in check["message"]
    assert "tokenizer.pad_token = tokenizer.eos_token" in check["message"]
    assert "memory" not in checks_of(out)  # no estimate for a run that cannot start

    small = save_tiny(tmp_path / "small_vocab", vocab_size=1000)
    result, out = dry_run_json(tmp_path, small)
    assert result.exit_code == 2
    assert checks_of(out)["vocabulary"] == {
        "name": "vocabulary", "status": "fail",
        "message": "the tokenizer has 30522 tokens but the model's embedding has 1000 rows (ids >= 1000 would "
                   "index past it): use the tokenizer saved with this model"}
    assert result.stderr.strip().startswith("error: preflight: the tokenizer has 30522 tokens")
    assert not (tmp_path / "never").exists()


@pytest.mark.slow
def test_head_with_another_label_count_is_replaced(tmp_path):
    three = save_tiny(tmp_path / "three", classifier_labels=3)
    for head in ("auto", "keep"):
        result, out = dry_run_json(tmp_path, three, model={"head": head})
        assert result.exit_code == 0, result.output
        check = checks_of(out)["head"]
        assert check["message"] == ("the checkpoint's head has 3 labels, the task 2: replaced by a new head "
                                    "(not anchored)")
        assert check["status"] == ("warn" if head == "keep" else "ok")
        built = build_model(ModelConfig(str(three), head=head), binary_task(), seed=1)
        assert built.model.classifier.weight.shape == (2, 32) and "classifier.weight" not in built.theta_star


@pytest.mark.slow
def test_fine_tuned_classifier_gets_a_fresh_head_unless_kept(tmp_path):
    """Sequential fine-tuning: task B from task A's checkpoint with the same label count."""
    clf = save_tiny(tmp_path / "clf", classifier_labels=2)
    saved = load_file(str(clf / "model.safetensors"))
    auto = build_model(ModelConfig(str(clf)), binary_task(), seed=3)
    w = auto.model.classifier.weight.detach()
    assert not torch.equal(w, saved["classifier.weight"]) and abs(w.std().item() - 0.02) < 0.01
    assert torch.equal(auto.model.classifier.bias.detach(), torch.zeros(2))
    assert "classifier.weight" not in auto.theta_star and "classifier.bias" not in auto.theta_star
    assert torch.equal(auto.theta_star["bert.pooler.dense.weight"], saved["bert.pooler.dense.weight"])
    again = build_model(ModelConfig(str(clf)), binary_task(), seed=3)
    assert torch.equal(again.model.classifier.weight, auto.model.classifier.weight)  # seeded

    kept = build_model(ModelConfig(str(clf), head="keep"), binary_task(), seed=3)
    assert torch.equal(kept.model.classifier.weight.detach(), saved["classifier.weight"])
    assert torch.equal(kept.theta_star["classifier.weight"], saved["classifier.weight"])

    # A pretrained encoder (no head) with model.head=new is unaffected: its head is new anyway.
    result, out = dry_run_json(tmp_path, clf)
    assert checks_of(out)["head"]["message"] == ("the checkpoint is a fine-tuned classifier: new 2-label head, "
                                                 "not anchored (model.head=keep loads and anchors its head)")
    result, out = dry_run_json(tmp_path, clf, model={"head": "keep"})
    assert checks_of(out)["head"]["message"] == "the checkpoint's 2-label head is kept and anchored (model.head=keep)"


@pytest.mark.slow
def test_memory_warning_names_settings_that_fit(tiny_model_dir, tmp_path, monkeypatch):
    recipe = recipe_from_dict(tiny_recipe(tiny_model_dir, tmp_path / "never"), "r.yaml")
    from recall_cli.model import load_tokenizer

    tokenizer = load_tokenizer(str(tiny_model_dir))
    lengths = [48] * 96
    device = torch.device("cpu")
    full = preflight.estimate_memory(recipe, model.load_config(str(tiny_model_dir)), binary_task(), device, "fp32", 1, lengths, [])
    # Just below the estimate: halving the batch (with grad_accum doubled) or the length fits.
    monkeypatch.setattr(preflight, "available_ram", lambda: full.total_bytes - 1)
    config = model.load_config(str(tiny_model_dir))
    report = preflight.run_checks(recipe, tokenizer, config, preflight.Preflight(), task=binary_task(), device=device,
                                  precision="fp32", lengths=lengths, on=[])
    check = next(c for c in report.checks if c.name == "memory")
    assert check.status == "warn" and report.memory.fits is False
    assert "would fit: train.batch_size=4 train.grad_accum=2 | model.anchor_dtype=bfloat16 | task.max_seq_length=24" \
        in check.message
    # Two CPU processes share the machine's RAM: the estimate counts twice.
    monkeypatch.setattr(preflight, "available_ram", lambda: int(full.total_bytes * 1.5))
    report = preflight.run_checks(recipe, tokenizer, config, preflight.Preflight(), task=binary_task(), device=device,
                                  precision="fp32", lengths=lengths, world_size=2, on=[])
    assert report.memory.needed_bytes == 2 * full.total_bytes and report.memory.fits is False
    processes = next(c for c in report.checks if c.name == "processes")
    assert processes.message == ("2 processes (share this machine's RAM): batch 8 per process x 2 x grad_accum 1 "
                                 "= global batch 16")


def _old_run(run_dir: Path) -> dict[str, bytes]:
    run_dir.mkdir(parents=True)
    files = {"config.yaml": b"old: run\n", "metrics.jsonl": b'{"step": 1}\n', "theta_star.safetensors": b"\x00" * 64}
    for name, content in files.items():
        (run_dir / name).write_bytes(content)
    return files


@pytest.mark.slow
def test_failure_before_the_first_step_restores_the_run_directory(tiny_model_dir, tmp_path, monkeypatch):
    def broken(*_args, **_kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(checkpoint, "save_theta_star", broken)  # fails after config.yaml is written
    new = write_recipe(tmp_path / "new.yaml", tiny_recipe(tiny_model_dir, tmp_path / "new"))
    result = finetune(str(new))
    assert result.exit_code == 1 and "disk full" in result.output
    assert not (tmp_path / "new").exists()

    old = tmp_path / "old"
    files = _old_run(old)
    again = write_recipe(tmp_path / "old.yaml", tiny_recipe(tiny_model_dir, old))
    result = finetune(str(again), "--overwrite")
    assert result.exit_code == 1
    assert {p.name: p.read_bytes() for p in old.iterdir()} == files
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".old")] == []


@pytest.mark.slow
def test_overwrite_replaces_the_old_run_once_training_starts(tiny_model_dir, tmp_path):
    old = tmp_path / "old"
    _old_run(old)
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_dir, old, train={"max_steps": 2, "eval_every": 0}))
    result = finetune(str(recipe), "--overwrite")
    assert result.exit_code == 0, result.output
    assert (old / "config.yaml").read_text() != "old: run\n" and (old / "last").is_dir()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".old")] == []


@pytest.mark.parametrize("model_type,positions,pad,limit", [("bert", 512, 0, 512), ("roberta", 514, 1, 512)])
def test_position_limit_minds_the_roberta_offset(model_type, positions, pad, limit):
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type, max_position_embeddings=positions, pad_token_id=pad)
    assert model.position_limit(config) == limit


@pytest.mark.parametrize("targets", [None, ["query", "value"]])
def test_lora_memory_estimate_counts_what_peft_trains(tiny_model_dir, tmp_path, targets):
    """Under LoRA only the adapters and the head have gradients and Adam's moments: the estimate (made
    before any model is built) counts exactly the parameters peft trains, not the whole model's."""
    from transformers import AutoModelForSequenceClassification

    from recall_cli.methods.lora import peft_lora as lora

    lengths, cpu = [16] * 8, torch.device("cpu")
    config = model.load_config(str(tiny_model_dir))
    plain = recipe_from_dict(tiny_recipe(tiny_model_dir, tmp_path / "never", optimizer={"name": "adamw"}), "r.yaml")
    with_lora = recipe_from_dict(tiny_recipe(tiny_model_dir, tmp_path / "never", optimizer={"name": "adamw"},
                                             model={"lora": {"r": 8, "alpha": 16, "target_modules": targets}}), "r.yaml")
    full = preflight.estimate_memory(plain, config, binary_task(), cpu, "fp32", 1, lengths, active(plain))
    est = preflight.estimate_memory(with_lora, config, binary_task(), cpu, "fp32", 1, lengths, active(with_lora))
    wrapped = lora.wrap(AutoModelForSequenceClassification.from_pretrained(str(tiny_model_dir), num_labels=2), 8, 16, 0.0,
                        targets, task_type="SEQ_CLS")
    trainable, total = wrapped.get_nb_trainable_parameters()
    plain_model = AutoModelForSequenceClassification.from_pretrained(str(tiny_model_dir), num_labels=2)
    base = sum(p.numel() for p in plain_model.parameters())
    head = sum(p.numel() for n, p in plain_model.named_parameters() if n in model.head_parameter_names(plain_model))
    assert est.parts["gradients"] == 4 * trainable and est.parts["adam_moments"] == 8 * trainable
    assert est.parts["weights"] == 4 * total  # the frozen base, the adapters and peft's copy of the head
    assert est.parts["theta_star"] == 4 * (base - head)  # the probes' fp32 copy in host memory, bf16 anchors or not
    gpu = preflight.estimate_memory(with_lora, config, binary_task(), torch.device("cuda"), "bf16", 1, lengths,
                                    active(with_lora))
    assert gpu.parts["theta_star"] == 0 and gpu.parts["autocast_copies"] == 2 * trainable  # nothing of theta* on the device
    assert full.parts["gradients"] == 4 * base and full.parts["weights"] == 4 * base
    assert 0 < trainable < base / 10 and est.total_bytes < full.total_bytes
