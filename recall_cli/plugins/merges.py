"""The merge methods' registry: `recall merge --method NAME`, each method a class in a room of its own
(recall_cli/merge/base.py's MethodSpec: name, label, title, options, build) that registers itself once.

recall's own are the modules in :data:`BUILTIN`; a package adds one through the entry-point group
``recall_cli.merge`` (a module that calls :func:`register_merge`, or the class itself). `recall merge` shows
every option every registered method declares, and reports name a merge's outputs by its ``title``.
Standard library only: the ground floor (docs/layers.md); the command line reads it at start-up.
"""

from __future__ import annotations

from typing import Any

from .loader import Registry, admit_class

GROUP = "recall_cli.merge"
# recall's own, in the order --help and the registry list them.
BUILTIN = ("recall_cli.merge.recall", "recall_cli.merge.linear", "recall_cli.merge.task_arithmetic",
           "recall_cli.merge.ties", "recall_cli.merge.intruders")
REQUIRED = ("name", "label", "title", "options", "build")


def _validate(spec: Any) -> None:
    if not isinstance(spec, type):
        raise TypeError(f"register_merge takes a class (base.MethodSpec), got {type(spec).__name__}")
    missing = [attr for attr in REQUIRED if not hasattr(spec, attr)]
    if missing:
        raise ValueError(f"merge method {spec.__name__}: set {', '.join(missing)} (merge/base.py's MethodSpec)")


_MERGES: Registry[Any] = Registry("merge method", GROUP, BUILTIN, admit=admit_class(REQUIRED, "merge method"),
                                  validate=_validate, origin=lambda spec: spec.__module__)


def register_merge(spec: type, *, replace: bool = False) -> type:
    """Add a merge method (its class); returns it, so that it may decorate the class."""
    return _MERGES.register(spec, replace=replace)


def merges(strict: bool = True) -> dict[str, Any]:
    """Every merge method by name: recall's in BUILTIN's order, then plugins' (``strict=False``: those that
    loaded, where a plugin failed)."""
    return {spec.name: spec for spec in _MERGES.values(strict)}
