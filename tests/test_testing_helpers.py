"""recall_cli.testing, the tiny-BERT builder the tests and benchmarks share: its heads, config, seeds,
saved tokenizer, and that no module of recall_cli itself depends on it; and conftest's guard that keeps
the set-up of a test not marked slow from training."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from recall_cli.testing import tiny_bert, tiny_bert_dir

from conftest import starts_recall, training_refused

PACKAGE = Path(__file__).resolve().parents[1] / "recall_cli"


@pytest.mark.parametrize("head, cls", [("encoder", "BertModel"), ("classifier", "BertForSequenceClassification"),
                                       ("mlm", "BertForMaskedLM")])
@pytest.mark.slow
def test_heads_config_and_seed(head, cls):
    model = tiny_bert(head=head, num_labels=3, seed=7)
    assert type(model).__name__ == cls
    c = model.config
    assert (c.vocab_size, c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.intermediate_size,
            c.max_position_embeddings) == (30522, 32, 2, 2, 37, 128)
    if head == "classifier":
        assert c.num_labels == 3 and model.classifier.out_features == 3
    same = tiny_bert(head=head, num_labels=3, seed=7).state_dict()
    weights = model.state_dict()
    assert all(torch.equal(weights[k], same[k]) for k in weights)  # the seed fixes every weight
    other = tiny_bert(head=head, num_labels=3, seed=8)
    assert not torch.equal(model.get_input_embeddings().weight, other.get_input_embeddings().weight)
    with pytest.raises(ValueError, match="head must be one of"):
        tiny_bert(head="pooler")


@pytest.mark.slow
def test_saved_with_its_tokenizer(tmp_path):
    from transformers import AutoModel, AutoTokenizer

    folder = tiny_bert_dir(tmp_path / "tiny", seed=1, hidden_size=16, num_heads=1, hidden_dropout_prob=0.0)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.vocab_size == 30522 and tokenizer.pad_token == "[PAD]"
    assert tokenizer("a b")["input_ids"][0] == tokenizer.cls_token_id
    loaded = AutoModel.from_pretrained(folder)
    assert loaded.config.hidden_size == 16 and loaded.config.hidden_dropout_prob == 0.0
    built = tiny_bert(seed=1, hidden_size=16, num_heads=1, hidden_dropout_prob=0.0).state_dict()
    assert all(torch.equal(v, built[k]) for k, v in loaded.state_dict().items())
    nopad = tiny_bert_dir(tmp_path / "nopad", pad_token=False, vocab_size=1000, seed=None)
    assert AutoTokenizer.from_pretrained(nopad).pad_token is None


def imported_modules(path: Path) -> set[str]:
    """Absolute names of what a module of recall_cli imports (relative imports resolved)."""
    package = ["recall_cli", *path.relative_to(PACKAGE).parent.parts]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module
            found |= {base} | {f"{base}.{a.name}" for a in node.names}
    return found


@pytest.mark.slow
def test_no_module_of_recall_cli_imports_it():
    assert "recall_cli.errors" in imported_modules(PACKAGE / "recipe" / "build.py")  # `from ..errors import ...` resolves
    importers = [str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py") if path != PACKAGE / "testing.py"
                 and any(m == "recall_cli.testing" or m.startswith("recall_cli.testing.") for m in imported_modules(path))]
    assert importers == []


# ---- conftest's guard: a test not marked slow trains nothing in its set-up ----------------------------


@pytest.mark.parametrize("args, starts", [
    (["recall", "finetune", "r.yaml"], True),
    ([Path("/venv/bin/recall"), "sweep", "s.yaml"], True),
    ("torchrun --nproc_per_node 2 -m recall_cli finetune r.yaml", True),
    ([sys.executable, "-m", "recall_cli", "finetune", "r.yaml", "--plain"], True),  # a sweep's cell
    ([sys.executable, "-u", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "x.py"], True),
    ([sys.executable, "-c", "import recall_cli"], False),
    (["mount", "-t", "tmpfs", "-o", "size=26M", "tmpfs", "/tmp/recall"], False),
    (["git", "log", "--grep", "recall"], False),  # a word in the arguments is not the program
])
def test_which_command_lines_run_recall(args, starts):
    assert starts_recall(args) is starts


def test_set_up_that_trains_or_starts_recall_is_refused():
    from recall_cli.training import loop

    real_run, real_start = loop.run, subprocess.Popen._execute_child
    with training_refused("tests/test_x.py::test_y") as refused:
        with pytest.raises(pytest.fail.Exception, match=r"^tests/test_x.py::test_y: its set-up trains a model"):
            loop.run(None, None, None)
        with pytest.raises(pytest.fail.Exception, match=r"its set-up starts \S+ -m recall_cli finetune r.yaml, but"):
            subprocess.run([sys.executable, "-m", "recall_cli", "finetune", "r.yaml"], capture_output=True)
        other = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True, check=True)
        assert other.stdout == "42\n"
    assert len(refused) == 2
    assert loop.run is real_run and subprocess.Popen._execute_child is real_start  # put back on the way out
