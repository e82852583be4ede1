"""A tiny random Llama and a word-level tokenizer built offline, for the causal-LM tests (tests/test_lm_*.py):
hidden 32, 2 layers, a vocabulary of the words of the first SST-2 rows and the prompt's, saved like a
pretrained checkpoint (config.json, safetensors, tokenizer.json)."""

from __future__ import annotations

import csv
from pathlib import Path

from conftest import GLUE, with_sections

SPECIALS = ["<pad>", "<unk>", "<s>", "</s>"]


def sst2_words(rows: int = 400) -> list[str]:
    with open(GLUE / "SST-2" / "train.tsv", encoding="utf-8") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(reader)
        words = {w for _, (sentence, _label) in zip(range(rows), reader) for w in sentence.split()}
    return sorted(words | {"Review:", "Sentiment:", "positive", "negative", "The", "cat", "sat"})


def word_tokenizer(words: list[str]):
    """A PreTrainedTokenizerFast over ``words`` (whitespace and punctuation split), <s> before each text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate([*SPECIALS, *words])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##")  # joins tokens with spaces
    core.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", vocab["<s>"])])
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>")


def tiny_llama(vocab_size: int, seed: int = 0, **config):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0,
                      bos_token_id=2, eos_token_id=3, tie_word_embeddings=False, **config)
    return LlamaForCausalLM(cfg)


def tiny_llama_dir(folder: Path, seed: int = 0, **config) -> Path:
    tokenizer = word_tokenizer(sst2_words())
    model = tiny_llama(len(tokenizer), seed, **config)
    model.generation_config.pad_token_id = 0
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def lm_recipe(model_dir: Path, output_dir: Path, **sections) -> dict:
    """sst2_lm on the first SST-2 rows, a few steps of vanilla fine-tuning at a high rate, probes off."""
    recipe = {
        "model": {"name_or_path": str(model_dir)},
        "task": {"name": "sst2_lm", "data_dir": str(GLUE / "SST-2"), "max_seq_length": 64,
                 "max_train_examples": 64, "max_eval_examples": 16},
        "optimizer": {"name": "adamw", "lr": 3e-3},
        "train": {"batch_size": 8, "max_steps": 12, "log_every": 4, "eval_every": 6, "seed": 3, "device": "cpu",
                  "precision": "fp32", "save": "all"},
        "probe": {"enabled": False},
        "output_dir": str(output_dir),
    }
    return with_sections(recipe, sections)
