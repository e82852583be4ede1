"""The probes' registry: what a fine-tuned model still knows, each probe a class in a room of its own that
registers itself once (recall's: probes/encoder.py's cka, drift, sts and mlm; probes/causal.py's lm, kl and
choice). The runner (probes/runner.py's Prober), the recipe's check, `recall probe`, the reports' --metric
(scale, direction) and the probe figure's skill panel read the entries; none of them names a probe.

recall's own are the modules in :data:`BUILTIN`; a package adds one through the entry-point group
``recall_cli.probes`` (a module that calls :func:`register_probe`, or the class itself). Standard library only,
and so must a probe's room be at import (`recall --help` lists the probes): it imports torch in its hooks.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .loader import Registry, admit_instance

GROUP = "recall_cli.probes"
BUILTIN = ("recall_cli.probes.encoder", "recall_cli.probes.causal")
# What a probe reads, loaded once per runner whoever reads it (probes/runner.py's load_inputs): the probe
# sentences, the STS sentence pairs, general prose (a causal LM's) or multiple-choice items (a causal LM's).
INPUTS = ("texts", "pairs", "lm_texts", "choices")


class Probe:
    """One probe: a name in probe.probes and `recall probe --probes`, the input it reads, the fields it writes
    to a probe record, and three hooks the runner calls. Subclasses set the class attributes and the hooks."""

    name: ClassVar[str]
    reads: ClassVar[str]  # one of INPUTS
    measures: ClassVar[tuple[str, ...]]  # the scalar fields it writes to a probe record: usable as --metric
    skill: ClassVar[str | None] = None  # its retained-skill ratio, the probe figure's panel (b) when the runs have it
    skill_title: ClassVar[str | None] = None
    lower_is_better: ClassVar[tuple[str, ...]] = ()  # of its measures: "best" in a compare column is the smallest
    raw: ClassVar[tuple[str, ...]] = ()  # of its measures: shown as they are, not x100 like scores and ratios
    causal: ClassVar[bool] = False  # reads a causal LM's next-token logits: skipped (with a note) on any other model
    # θ*'s side may be kept between runs (probes/cache.py): it is a function of the model's weights and config and
    # the runner's batched inputs alone, and holds tensors, numbers and lists or dicts of them. Off unless said:
    # a plugin's side may read what the cache's key does not know.
    cacheable: ClassVar[bool] = False

    def prepare(self, prober: Any) -> str | None:
        """Set up on the runner, once, before θ*'s side: what it needs beyond the batched inputs (the
        runner's ``texts``, ``sentences``, ``lm_texts``, ``choices``). A line returned is a note that the
        probe is skipped on this model ("mlm: skipped, ... has no masked-LM head")."""
        return None

    def side(self, prober: Any, model: Any) -> Any:
        """What it measures of one model (θ* once, then each θ); ``prober.shared(key, compute)`` computes
        what several probes read (the pooled layers) once per model."""
        raise NotImplementedError

    def record(self, prober: Any, mine: Any, ref: Any) -> dict[str, Any]:
        """Its fields of a probe record: θ's side ``mine`` against θ*'s ``ref``."""
        raise NotImplementedError


def _validate(probe: Any) -> None:
    if not isinstance(probe, Probe):
        raise TypeError(f"register_probe takes a Probe instance, got {type(probe).__name__}")
    if getattr(probe, "reads", None) not in INPUTS:
        raise ValueError(f"probe {getattr(probe, 'name', type(probe).__name__)}: reads must be one of "
                         f"{', '.join(INPUTS)}, got {getattr(probe, 'reads', None)!r}")
    measures = getattr(probe, "measures", None)
    if not isinstance(measures, tuple) or not measures or not all(isinstance(m, str) for m in measures):
        raise ValueError(f"probe {getattr(probe, 'name', type(probe).__name__)}: measures must be a tuple of field names")


_PROBES: Registry[Probe] = Registry("probe", GROUP, BUILTIN, admit=admit_instance(Probe), validate=_validate,
                                    origin=lambda p: type(p).__module__)


def register_probe(probe: Probe, *, replace: bool = False) -> Probe:
    """Add ``probe`` (an instance); a field another probe writes is refused, unless ``replace``."""
    if not replace:
        taken = {m: p.name for p in (_PROBES.values() if not _PROBES.is_builtin(probe) else _PROBES.entries.values())
                 for m in p.measures if p.name != probe.name}
        clash = next((m for m in getattr(probe, "measures", ()) if m in taken), None)
        if clash:
            raise ValueError(f"probe {probe.name}: its field {clash!r} is written by the probe {taken[clash]}")
    return _PROBES.register(probe, replace=replace)


def unregister_probe(name: str) -> None:
    _PROBES.unregister(name)


def probes() -> dict[str, Probe]:
    """Every probe by name: recall's in BUILTIN's order, then plugins'."""
    return {p.name: p for p in _PROBES.values()}


def probe_names(strict: bool = True) -> tuple[str, ...]:
    """The probes' names (``strict=False``: recall's and those that loaded, where a plugin failed)."""
    return tuple(p.name for p in _PROBES.values(strict))


def causal_probes() -> tuple[str, ...]:
    """The probes that read a causal LM's next-token logits (the whole *ForCausalLM, not its encoder)."""
    return tuple(p.name for p in probes().values() if p.causal)


def probe_measures() -> tuple[str, ...]:
    """Every field a probe record may hold that is a measure (compare's --metric)."""
    return tuple(m for p in probes().values() for m in p.measures)
