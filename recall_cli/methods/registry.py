"""The method registry: every way to forget less that is not an optimizer, each one class in a room of
its own, registered once and found by every stage that loops over methods (the recipe's sections and
checks, --dry-run, the loss terms, the loop's phase hooks, preflight's memory, summary.json, model cards,
the reports' names and colours).

Standard library only, and it imports nothing of recall but errors.py: the recipe (below the training code)
asks it for plugin sections and checks, the report for names and hues, without loading torch.

How a method arrives (peft's ``register_peft_method`` and pytest's plugins are the model):

- recall's own methods are modules named in :data:`BUILTIN`, imported by name like any plugin;
- a package installed beside recall names its module in the entry-point group ``recall_cli.methods``
  (``[project.entry-points."recall_cli.methods"] distill = "my_pkg.distill"``);
- library code calls :func:`register_method` with an instance.

A module registers its methods when it is imported (``register_method(MyMethod())`` at its end).
docs/extending.md walks through a method written outside the package.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Mapping

from ..errors import PluginError

ENTRY_POINT_GROUP = "recall_cli.methods"
# recall's own rooms, in the order tables, labels and summary.json list the methods.
BUILTIN = ("recall_cli.methods.keep", "recall_cli.methods.lpft", "recall_cli.methods.lora", "recall_cli.methods.osf",
           "recall_cli.methods.lmkeep")


@dataclass(frozen=True)
class Family:
    """How reports draw a method's runs: its hue (Okabe-Ito, one per family in every figure) and, for
    a method whose strength is worth a line from weak to strong, that line's title and style."""

    hue_id: str  # report/families.py's colour key: "keep", "lpft", "lora"
    hue: str  # "#E69F00"
    hue_rank: int = 50  # a run with several methods on takes the hue of the lowest rank
    line_title: str | None = None  # "embedding anchor": a family line over the switch's values
    line_style: str = "--"
    wise_hue: str | None = None  # WiSE-FT merges of its runs drawn apart from WiSE-FT after vanilla (LP-FT's)


class Method:
    """One way to forget less. Subclasses set the class attributes and override what they need; every
    hook has a default that does nothing, so a method states only what it changes.

    A method reads its settings from the recipe by dotted key (``recipe.get("keep.pooling")``): recall's
    own keep theirs where recipes have always had them (``keep.*``, ``train.linear_probe_*``,
    ``model.lora.*``); a plugin declares a section of its own (:attr:`section`, :attr:`config`), which
    recipes write as a top-level mapping and config.yaml records as written."""

    name: ClassVar[str]  # registry key; summary.json's method.names
    label: ClassVar[str]  # how tables and cards name it: "embedding anchor", "LoRA"
    paper: ClassVar[str] = ""  # "Kumar et al. 2022, arXiv 2202.10054"
    switch: ClassVar[str]  # the dotted key whose value turns it on (0 / null / false = off) and is its strength
    keys: ClassVar[tuple[str, ...]] = ()  # every dotted key it reads (docs, sweeps)
    reads: ClassVar[tuple[str, ...]] = ()  # keys it also reads that another method owns (and documents)
    cell: ClassVar[str] = ""  # a sweep cell's prefix for the switch: keep1.0, lp100, r8
    short: ClassVar[str | None] = None  # the switch's short name in compare --by / --where and labels: lora_r
    family: ClassVar[Family | None] = None
    section: ClassVar[str | None] = None  # a plugin's own top-level recipe section
    config: ClassVar[type | None] = None  # that section's frozen dataclass (defaults = off)
    is_adapter: ClassVar[bool] = False  # an Adapter (methods/adapter.py): at most one per run

    # ---- the recipe (no torch) ------------------------------------------------------------------

    def strength(self, values: Mapping[str, Any]) -> Any:
        """The switch's value in a run's dotted keys (a recipe's or a record's; absent: off)."""
        return values.get(self.switch) or 0

    def words(self, strength: Any) -> str:
        """A report's name for a run with this method at ``strength``: "embedding anchor 1"."""
        return f"{self.label} {strength:g}" if isinstance(strength, (int, float)) else f"{self.label} {strength}"

    def describe(self, recipe: Any) -> str:
        """The start line's, summary.json's and the card's words for it on ``recipe``."""
        return self.words(self.strength(recipe.flat()))

    def summary(self, recipe: Any) -> dict[str, Any]:
        """What summary.json's "method" block records of its settings (merged into the block)."""
        if self.section is None:
            return {}
        return {self.section: dict(recipe.flat_section(self.section))}

    def card_rows(self, recipe: Any) -> list[tuple[str, str]]:
        """Rows of the model card's Recipe table."""
        return [("method", self.describe(recipe))]

    def check(self, recipe: Any) -> list[str]:
        """Problems with its keys on a built recipe, each one line starting with the key."""
        return []

    def check_steps(self, recipe: Any, total_steps: int) -> list[str]:
        """Problems only the run's length shows (under train.epochs the recipe alone cannot know it)."""
        return []

    def check_inputs(self, recipe: Any, config: Any) -> list[str]:
        """Problems only the run's own inputs show, before anything is written: the model's config
        (``config``: its layer count) and the files the method reads (the anchor's texts, which must not
        overlap the probes'). Each one line starting with the key: the run refuses the first (exit 2),
        --dry-run lists each as a failed check. Unlike :meth:`check`, never asked of a config.yaml read back."""
        return []

    def reads_recall_schedule(self, recipe: Any) -> bool:
        """Whether it reads RecAdam's anneal_* keys itself (the anchor's keep.schedule=recall): then an
        optimizer without recall terms does not leave those keys unread."""
        return False

    def recall_offset(self, recipe: Any) -> int:
        """Steps of the run before RecAdam's clock starts for the encoder (LP-FT: its head phase)."""
        return 0

    def checkpoint_folders(self, recipe: Any) -> tuple[str, ...]:
        """Folders the run saves for it besides best/ and last/ (LP-FT: lp/)."""
        return ()

    def extra_bytes(self, run: Any) -> int:
        """What it adds to one process's peak memory, listed under its name in preflight's estimate: a
        cache of theta*'s outputs, a frozen teacher (methods/teacher.copy_bytes). ``run`` is preflight's
        view (training/preflight.py's MemoryView: recipe, the model's config and parameter count, the
        training rows, the run's steps and processes)."""
        return 0

    # ---- the run (its room imports torch lazily) ------------------------------------------------

    def start(self, run: Any) -> MethodRun | None:
        """What it adds to one run: a :class:`MethodRun` (loss terms, the start line's words, phase
        hooks), built before the run directory is written. ``run`` is the set-up's view of the run
        (training/methods.py's RunView: recipe, model, theta*, training rows, steps, device, ...)."""
        return None

    def dry_run_lines(self, prepared: Any) -> dict[str, str]:
        """--dry-run's lines about it, from the run's own set-up (the model is loaded)."""
        return {}


class MethodRun:
    """One method's part in one run; the loop calls every hook of every method on, in registry order.
    Loss terms (training/loss.py's Term) are added to the task loss; ``info`` goes to the start line and
    summary.json's method block."""

    def __init__(self, terms: list[Any] | None = None, info: dict[str, str] | None = None):
        self.terms = list(terms or [])
        self.info = dict(info or {})

    def before_wrap(self, model: Any, step: int) -> None:
        """The model before DDP and torch.compile see it, at the step the run starts from (LP-FT freezes)."""

    def peak_lr(self, lr: float) -> float:
        """The schedule's peak learning rate for the next step (LP-FT's head phase has its own)."""
        return lr

    def before_micro_batch(self, position: int) -> None:
        """Before each micro-batch's forward; ``position`` is its place in the run's order of micro-batches
        (step s starts at (s - 1) x grad_accum). A term that draws inputs of its own (the anchor's general
        texts) draws them by it, so that --resume continues the draw with nothing saved."""

    def after_step(self, loop: Any, step: int) -> None:
        """After a step's evaluation, probe and best/ (LP-FT ends its phase). ``loop`` offers
        save(folder, step), rewrap(), note(text) and ``t`` (the Training)."""


_REGISTRY: dict[str, Method] = {}
_LOADED = False


def register_method(method: Method, *, replace: bool = False) -> Method:
    """Add ``method`` (an instance) to the registry; returns it. A second method of the same name, or a
    second owner of a switch or section, is a mistake in the plugin: ValueError, unless ``replace``."""
    _load()  # recall's own first: a plugin cannot take the name or switch of one not yet imported
    if not isinstance(method, Method):
        raise TypeError(f"register_method takes a Method instance, got {type(method).__name__}")
    for attr in ("name", "label", "switch"):
        if not isinstance(getattr(method, attr, None), str) or not getattr(method, attr):
            raise ValueError(f"method {type(method).__name__}: set {attr} (a non-empty string)")
    if method.section is not None and (method.config is None or not method.switch.startswith(method.section + ".")):
        raise ValueError(f"method {method.name}: a section needs its config dataclass, and the switch must be one "
                         f"of its keys ({method.section}.<key>), got {method.switch}")
    if not replace:
        for other in _REGISTRY.values():
            clash = ("name" if other.name == method.name else "switch" if other.switch == method.switch
                     else "section" if method.section and other.section == method.section else None)
            if clash:
                raise ValueError(f"method {method.name}: its {clash} is taken by {other.name} "
                                 f"({type(other).__module__}); pick another, or register_method(..., replace=True)")
    _REGISTRY[method.name] = method
    return method


def unregister_method(name: str) -> None:
    """Remove a method (tests, and a library user replacing one of recall's)."""
    _REGISTRY.pop(name, None)


def _load() -> None:
    """recall's own rooms, then every installed plugin, once per process."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for module in BUILTIN:
        importlib.import_module(module)
    for entry in _entry_points():
        try:
            loaded = entry.load()
        except Exception as exc:  # a broken plugin names itself instead of failing every command with a traceback
            raise PluginError(f"the method plugin {entry.name} ({entry.value}) failed to load: "
                              f"{type(exc).__name__}: {exc} (fix or uninstall the package that provides it)") from exc
        try:
            if isinstance(loaded, type) and issubclass(loaded, Method) and loaded.name not in _REGISTRY:
                register_method(loaded())  # an entry point may name the class itself
            elif isinstance(loaded, Method) and loaded.name not in _REGISTRY:
                register_method(loaded)
        except (TypeError, ValueError) as exc:
            raise PluginError(f"the method plugin {entry.name} ({entry.value}) cannot be registered: {exc}") from exc


def _entry_points() -> Iterable[Any]:
    from importlib.metadata import entry_points

    return entry_points(group=ENTRY_POINT_GROUP)


def methods() -> list[Method]:
    """Every registered method: recall's in BUILTIN's order (whatever order their modules were imported
    in), then plugins in the order they came."""
    _load()
    arrival = {name: i for i, name in enumerate(_REGISTRY)}
    return sorted(_REGISTRY.values(), key=lambda m: (_builtin_rank(m), arrival[m.name]))


def _builtin_rank(method: Method) -> int:
    module = type(method).__module__
    return BUILTIN.index(module) if module in BUILTIN else len(BUILTIN)


def get(name: str) -> Method:
    _load()
    return _REGISTRY[name]


def active(values: Mapping[str, Any] | Any) -> list[Method]:
    """The methods a recipe (or a run's dotted keys) turns on, in registry order."""
    flat = values.flat() if hasattr(values, "flat") else values
    return [m for m in methods() if m.strength(flat)]


def active_adapter(recipe: Any) -> Any:
    """The adapter a recipe turns on (methods/adapter.py), or None."""
    return next((m for m in active(recipe) if m.is_adapter), None)


def inert_keys(values: Mapping[str, Any]) -> set[str]:
    """The keys that only methods a run leaves off read (a vanilla run's keep.texts, a full fine-tune's
    model.lora.alpha): not a setting of that run, so a report does not split or name runs by them."""
    on = [m for m in methods() if m.strength(values)]
    read = {key for m in on for key in (*m.keys, *m.reads)}
    return {key for m in methods() if m not in on for key in (*m.keys, *m.reads) if key != m.switch and key not in read}


def sections() -> dict[str, type]:
    """The plugins' recipe sections: name -> config dataclass."""
    return {m.section: m.config for m in methods() if m.section is not None}


def check(recipe: Any) -> list[str]:
    """Every method's problems with a built recipe (each method checks its keys whether it is on or
    off: a negative weight is wrong either way), and more than one adapter."""
    problems = [p for m in methods() for p in m.check(recipe)]
    adapters = [m.name for m in active(recipe) if m.is_adapter]
    if len(adapters) > 1:
        problems.append(f"{', '.join(adapters)}: one adapter per run (turn all but one off)")
    return problems


def labels(recipe: Any, on: list[Method] | None = None) -> list[str]:
    """How the start line, summary.json and model cards name each method on (``on``: a run's plan has them)."""
    return [m.describe(recipe) for m in (active(recipe) if on is None else on)]


def summary_block(recipe: Any, on: list[Method] | None = None, **facts: Any) -> dict[str, Any] | None:
    """summary.json's "method": what was on and with which settings (None: plain fine-tuning)."""
    on = active(recipe) if on is None else on
    if not on:
        return None
    block: dict[str, Any] = {"names": [m.name for m in on], "labels": [m.describe(recipe) for m in on]}
    for m in on:
        block.update(m.summary(recipe))
    block.update({k: v for k, v in facts.items() if v is not None})
    return block


def key_aliases() -> tuple[dict[str, str], dict[str, str]]:
    """(short name -> key, key -> sweep cell prefix) of every method's switch: names.SHORT_KEYS and
    names.CELL_PREFIXES for the keys that are not a method's."""
    return ({m.short: m.switch for m in methods() if m.short},
            {m.switch: m.cell for m in methods() if m.cell})
