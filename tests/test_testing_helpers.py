"""recall_cli.testing, the tiny-BERT builder the tests and benchmarks share: its heads, config, seeds,
saved tokenizer, and that no module of recall_cli itself depends on it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from recall_cli.testing import tiny_bert, tiny_bert_dir

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


def test_no_module_of_recall_cli_imports_it():
    assert "recall_cli.errors" in imported_modules(PACKAGE / "recipe" / "build.py")  # `from ..errors import ...` resolves
    importers = [str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py") if path != PACKAGE / "testing.py"
                 and any(m == "recall_cli.testing" or m.startswith("recall_cli.testing.") for m in imported_modules(path))]
    assert importers == []
