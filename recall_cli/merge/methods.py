"""The merge methods' registry: ``METHODS``, name -> spec (base.MethodSpec). Its own module, so that
what reads a method's names, options or title (the command line, the reports) needs nothing else of
recall_cli.merge. Adding a method is its file and one entry here."""

from __future__ import annotations

from .base import MethodSpec
from .intruders import IntruderReduction
from .linear import Linear
from .recall import Recall
from .task_arithmetic import TaskArithmetic
from .ties import Ties

METHODS: dict[str, type[MethodSpec]] = {spec.name: spec for spec in (Recall, Linear, TaskArithmetic, Ties, IntruderReduction)}
