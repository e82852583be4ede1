"""recall: fine-tune pretrained language models with less forgetting (RecAdam)."""

__version__ = "0.1.0"
