"""Moved to recall_cli/plugins/adapter.py (the ground floor, docs/layers.md): this name stays importable for
plugins and code written against it, as the very same module."""

import sys

from ..plugins import adapter as _adapter

sys.modules[__name__] = _adapter
