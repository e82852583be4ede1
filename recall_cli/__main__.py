"""`python -m recall_cli` runs the CLI (as torchrun and subprocess-based tests do)."""

from .cli import app

app(prog_name="recall")
