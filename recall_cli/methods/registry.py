"""Moved to recall_cli/plugins/methods.py (the ground floor, docs/layers.md): this name stays importable for
plugins and code written against it, as the very same module (so that what one changes, the other sees)."""

import sys

from ..plugins import methods as _methods

sys.modules[__name__] = _methods
