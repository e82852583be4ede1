"""The method registry: every way to forget less that is not an optimizer, each one class in a room of
its own, registered once and found by every stage that loops over methods (the recipe's sections and
checks, --dry-run, the loss terms, the loop's phase hooks, preflight's memory, summary.json, model cards,
the reports' names and colours).

Standard library only, and it imports nothing of recall but errors.py and the shared loader (plugins/loader.py):
the ground floor (docs/layers.md). The recipe asks it for plugin sections and checks, the report for names and
hues, the training code for the methods a run turns on, all without loading torch or a method's room.

How a method arrives (peft's ``register_peft_method`` and pytest's plugins are the model):

- recall's own methods are modules named in :data:`BUILTIN`, imported by name like any plugin;
- a package installed beside recall names its module in the entry-point group ``recall_cli.methods``
  (``[project.entry-points."recall_cli.methods"] distill = "my_pkg.distill"``);
- library code calls :func:`register_method` with an instance.

A module registers its methods when it is imported (``register_method(MyMethod())`` at its end).
docs/extending.md walks through a method written outside the package.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from ..errors import PluginError
from .loader import Registry, admit_instance, plugin_code

ENTRY_POINT_GROUP = "recall_cli.methods"
# recall's own rooms, in the order tables, labels and summary.json list the methods.
BUILTIN = ("recall_cli.methods.keep", "recall_cli.methods.lpft", "recall_cli.methods.lora", "recall_cli.methods.osf",
           "recall_cli.methods.lmkeep", "recall_cli.methods.ewc", "recall_cli.methods.replay")
# recall's own recipe sections (recipe/schema.py's SECTIONS, output_dir and the plugins' mapping): a plugin's
# section of one of these names would shadow recall's keys in every recipe.
RESERVED_SECTIONS = ("model", "task", "optimizer", "train", "probe", "keep", "output_dir", "plugins")


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
    named_keys: ClassVar[tuple[str, ...]] = ()  # keys besides the switch that named() spells (LoRA's use_dora)
    cell: ClassVar[str] = ""  # a sweep cell's prefix for the switch: keep1.0, lp100, r8
    short: ClassVar[str | None] = None  # the switch's short name in compare --by / --where and labels: lora_r
    family: ClassVar[Family | None] = None
    section: ClassVar[str | None] = None  # a plugin's own top-level recipe section
    config: ClassVar[type | None] = None  # that section's frozen dataclass (defaults = off)
    is_adapter: ClassVar[bool] = False  # an Adapter (plugins/adapter.py): at most one per run

    # ---- the recipe (no torch) ------------------------------------------------------------------

    def strength(self, values: Mapping[str, Any]) -> Any:
        """The switch's value in a run's dotted keys (a recipe's or a record's; absent: off)."""
        return values.get(self.switch) or 0

    def words(self, strength: Any) -> str:
        """A report's name for a run with this method at ``strength``: "embedding anchor 1"."""
        return f"{self.label} {strength:g}" if isinstance(strength, (int, float)) else f"{self.label} {strength}"

    def named(self, values: Mapping[str, Any]) -> str:
        """A report's name for a run with these dotted keys: its words at its strength, by default; a
        method whose other keys make a different method (LoRA's DoRA) names them too."""
        return self.words(self.strength(values))

    def describe(self, recipe: Any) -> str:
        """The start line's, summary.json's and the card's words for it on ``recipe``."""
        return self.words(self.strength(recipe.flat()))

    def settings(self, recipe: Any) -> Any:
        """A plugin's section on ``recipe`` as its :attr:`config` dataclass: the defaults (off) where the recipe
        has none."""
        return recipe.plugins.get(self.section) or self.config()

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


def _validate(method: Method) -> None:
    if not isinstance(method, Method):
        raise TypeError(f"register_method takes a Method instance, got {type(method).__name__}")
    for attr in ("name", "label", "switch"):
        if not isinstance(getattr(method, attr, None), str) or not getattr(method, attr):
            raise ValueError(f"method {type(method).__name__}: set {attr} (a non-empty string)")
    if method.section in RESERVED_SECTIONS:
        raise ValueError(f"method {method.name}: its section {method.section!r} is one of recall's own "
                         f"({', '.join(RESERVED_SECTIONS)}): name a section of its own")
    if method.section is not None and (method.config is None or not method.switch.startswith(method.section + ".")):
        raise ValueError(f"method {method.name}: a section needs its config dataclass, and the switch must be one "
                         f"of its keys ({method.section}.<key>), got {method.switch}")


_METHODS: Registry[Method] = Registry("method", ENTRY_POINT_GROUP, BUILTIN, admit=admit_instance(Method),
                                      validate=_validate, origin=lambda m: type(m).__module__)


def register_method(method: Method, *, replace: bool = False) -> Method:
    """Add ``method`` (an instance) to the registry; returns it. A second method of the same name, or a
    second owner of a switch or section, is a mistake in the plugin: ValueError, unless ``replace`` (which
    is announced when it replaces one of recall's own; a key only the replaced method read is then refused
    by :func:`check` unless it is at its default)."""
    _validate(method)
    if not is_builtin(method):
        _METHODS.load()  # recall's own first: a plugin cannot take the name or switch of one not yet imported
    if not replace:
        for other in _METHODS.entries.values():
            clash = ("name" if other.name == method.name else "switch" if other.switch == method.switch
                     else "section" if method.section and other.section == method.section else None)
            if clash:
                raise ValueError(f"method {method.name}: its {clash} is taken by {other.name} "
                                 f"({type(other).__module__}); pick another, or register_method(..., replace=True)")
    return _METHODS.register(method, replace=replace)


_METHODS.add = register_method


def unregister_method(name: str) -> None:
    """Remove a method (tests, and a library user replacing one of recall's)."""
    _METHODS.unregister(name)


def methods() -> list[Method]:
    """Every registered method: recall's in BUILTIN's order (whatever order their modules were imported
    in), then plugins in the order they came."""
    return _METHODS.values()


def is_builtin(method: Method) -> bool:
    return _METHODS.is_builtin(method)


def get(name: str) -> Method:
    return _METHODS.get(name)


def active(values: Mapping[str, Any] | Any) -> list[Method]:
    """The methods a recipe (or a run's dotted keys) turns on, in registry order."""
    flat = values.flat() if hasattr(values, "flat") else values
    return [m for m in methods() if m.strength(flat)]


def active_adapter(recipe: Any) -> Any:
    """The adapter a recipe turns on (plugins/adapter.py), or None."""
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
    problems = [p for m in methods() for p in asked(m, "check", recipe)]
    adapters = [m.name for m in active(recipe) if m.is_adapter]
    if len(adapters) > 1:
        problems.append(f"{', '.join(adapters)}: one adapter per run (turn all but one off)")
    return problems + orphaned(recipe)


def asked(method: Method, hook: str, *args: Any) -> list[str]:
    """A method's problems from one of its check hooks (check, check_steps, check_inputs), as a list of
    lines whatever the hook returned: one string is one problem, None none. A hook that raises, or returns
    something else, is the plugin's fault: PluginError naming the method and the hook."""
    with plugin_code(f"{_who(method)}: {hook}()", ours=is_builtin(method)):
        found = getattr(method, hook)(*args)
    if found is None:
        return []
    if isinstance(found, str):
        return [found]
    if isinstance(found, (list, tuple)) and all(isinstance(p, str) for p in found):
        return list(found)
    raise PluginError(f"{_who(method)}: {hook}() returned {type(found).__name__}, not a list of problems "
                      "(one line each; [] when there are none)")


def extra_bytes(method: Method, view: Any) -> int:
    """``method.extra_bytes(view)`` as a whole number of bytes: a hook that raises, or returns something else
    (a float, a negative count, None), is the plugin's fault: PluginError naming the method."""
    with plugin_code(f"{_who(method)}: extra_bytes()", ours=is_builtin(method)):
        found = method.extra_bytes(view)
    if isinstance(found, bool) or not isinstance(found, int) or found < 0:
        raise PluginError(f"{_who(method)}: extra_bytes() returned {found!r}, not a number of bytes (an int >= 0; 0 for none)")
    return found


def _who(method: Method) -> str:
    """How a line names a method: recall's by name, a plugin's with its module."""
    return (f"method {method.name}" if is_builtin(method)
            else f"the method plugin {method.name} ({type(method).__module__})")


def orphaned(recipe: Any) -> list[str]:
    """Keys that only a replaced method of recall's read, set away from their default: no method reads
    them any more, so the run would not do what config.yaml says (keep.embeddings=1.0 under a plugin
    that replaced the embedding anchor and reads other keys)."""
    read = {key for m in methods() for key in (m.switch, *m.keys, *m.reads)}
    problems = []
    for name, (own, plugin) in _METHODS.replaced.items():
        if _METHODS.entries.get(name) is not plugin:
            continue
        for key in dict.fromkeys((own.switch, *own.keys)):
            if key in read:
                continue
            value, default = recipe.get(key), _default(recipe, key)
            if default is not _UNKNOWN and value != default:
                problems.append(f"{key}: no method reads it any more ({type(plugin).__module__} replaced recall's "
                                f"{name}): remove it from the recipe (set it back to {default!r})")
    return problems


_UNKNOWN = object()


def _default(recipe: Any, key: str) -> Any:
    """A dotted key's default, from the dataclass that holds it (or _UNKNOWN)."""
    *path, leaf = key.split(".")
    holder = recipe
    try:
        for part in path:
            holder = getattr(holder, part)
        field = next(f for f in dataclasses.fields(holder) if f.name == leaf)
    except (AttributeError, TypeError, StopIteration):
        return _UNKNOWN
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else _UNKNOWN


def start(method: Method, run: Any) -> MethodRun | None:
    """``method.start(run)``: recall's own as they are; a plugin's terms each checked as they run
    (:class:`CheckedTerm`), and a start that raises named."""
    if is_builtin(method):
        return method.start(run)
    with plugin_code(f"{_who(method)}: start()"):
        started = method.start(run)
    if started is not None:
        started.terms = [CheckedTerm(term, _who(method), getattr(run, "model", None)) for term in started.terms]
    return started


class CheckedTerm:
    """A plugin's loss term, held to the contract (training/loss.py's Term) at each call: a real scalar tensor
    that the model's weights reach. A term that raises, returns a float, None, a vector or a complex number, or a
    tensor no gradient flows back from to the model (made outside autograd, or from a tensor of its own: it would
    train as a constant) ends the run in one line naming the plugin and the term."""

    def __init__(self, term: Any, who: str, model: Any = None):
        self.term, self.who, self.model = term, who, model
        self.name = getattr(term, "name", type(term).__name__)
        self.needs_hidden_states = bool(getattr(term, "needs_hidden_states", False))
        self.reaches_checked = False  # whether the model reaches it: asked once, on the first call with a gradient

    def weight(self, step: int) -> float:
        with plugin_code(f"{self.who}: its loss term {self.name!r}'s weight()"):
            return self.term.weight(step)

    def __call__(self, outputs: Any, batch: Any, indices: Any = None) -> Any:
        import torch

        where = f"{self.who}: its loss term {self.name!r}"
        with plugin_code(where):
            value = self.term(outputs, batch, indices)
        if not isinstance(value, torch.Tensor):
            raise PluginError(f"{where} returned {type(value).__name__}, not a tensor: return a scalar tensor "
                              "computed from the model's outputs")
        if value.dim() != 0:
            raise PluginError(f"{where} returned a tensor of shape {tuple(value.shape)}, not a scalar: reduce it "
                              "(.mean() or .sum())")
        if not value.is_floating_point():
            raise PluginError(f"{where} returned a {value.dtype} tensor, not a real floating-point number: a loss "
                              "is real (take .abs() or .real of a complex one)")
        if torch.is_grad_enabled() and not value.requires_grad:
            raise PluginError(f"{where} returned a tensor without a gradient (made outside autograd: .item(), "
                              "torch.tensor(...), torch.no_grad()): it would train as a constant; compute it from "
                              "the model's outputs")
        if torch.is_grad_enabled() and not self.reaches_checked:
            self.reaches_checked = True
            if not _reaches_model(value, outputs, self.model):
                raise PluginError(f"{where} returned a tensor that no weight of the model reaches (computed from a "
                                  "tensor of its own, not from the model's outputs or parameters): it would train "
                                  "as a constant; compute it from the model's outputs")
        return value


def _reaches_model(value: Any, outputs: Any, model: Any) -> bool:
    """Whether ``value``'s autograd graph leads back to the model: to one of its outputs' tensors, or to one of
    its trainable parameters (a term may read the weights directly, as EWC's does). Walked once per term."""
    import torch

    ends: set = set()  # the outputs' autograd nodes
    weights = {id(p) for p in model.parameters() if p.requires_grad} if model is not None else set()
    found = [outputs]
    while found:  # the outputs' tensors, through the mappings, tuples and lists that hold them
        item = found.pop()
        if isinstance(item, torch.Tensor):
            if item.grad_fn is not None:
                ends.add(item.grad_fn)
            elif item.requires_grad:
                weights.add(id(item))
        elif isinstance(item, Mapping):
            found.extend(item.values())
        elif isinstance(item, (tuple, list)):
            found.extend(item)
        elif item is outputs and hasattr(item, "__dict__"):  # an outputs object of the model's own
            found.extend(vars(item).values())
    seen: set = set()
    nodes = [value.grad_fn]
    while nodes:
        node = nodes.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if node in ends or id(getattr(node, "variable", None)) in weights:
            return True
        nodes.extend(after for after, _ in node.next_functions)
    return not ends and not weights  # nothing to hold it against: not refused


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
