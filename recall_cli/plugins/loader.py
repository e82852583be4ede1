"""The one loader every extension point shares: recall's own entries and installed plugins, found the same way.

A :class:`Registry` holds one kind of entry (methods, probes, task types, merge methods, trackers), each
keyed by its ``name``. It fills itself once per process, on first use: first recall's own modules (``builtin``,
imported by name, as a plugin is), then every entry point of its group. An entry point names a module (which
registers its entries when imported) or the entry itself (a class or an instance; :meth:`Registry.admit`
turns it into an entry).

One group per kind, each named after the package that holds recall's own entries of that kind
(``recall_cli.methods``, ``recall_cli.probes``, ``recall_cli.tasks``, ``recall_cli.merge``, ``recall_cli.trackers``),
rather than one group with kinds: a package's pyproject says what it adds in the group's name,
``importlib.metadata`` lists a kind without loading the others (`recall merge` never imports a probe
plugin), and a broken plugin fails only the commands that use its kind.

What a plugin cannot do here, whatever it does at import or in a hook (:func:`plugin_code`): end the process
(``sys.exit``, ``GeneratorExit`` are caught like an exception and named; a KeyboardInterrupt stays the stop it is,
and the stop's line names the plugin), take a name that is already taken without saying so (refused in one line naming the
plugin, or, with ``replace=True``, announced on stderr), or fail with a traceback that names neither the
plugin nor its package. Standard library only, and nothing of recall but errors.py: the ground floor
(docs/layers.md).
"""

from __future__ import annotations

import importlib
from contextlib import contextmanager
import sys
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

from ..errors import PluginError

T = TypeVar("T")


def failure(exc: BaseException) -> str:
    """An exception a plugin raised (or a sys.exit it called), in words for the one line that names it."""
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def raised(exc: BaseException) -> str:
    """What a plugin's hook did, after its name: "raised KeyError: 'x'", "called sys.exit(0)"."""
    return f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else f"raised {failure(exc)}"


@contextmanager
def plugin_code(said: str, fix: str = "fix the plugin, or uninstall it", *, ours: bool = False,
                how: Callable[[BaseException], str] = raised, importing: str | None = None) -> Iterator[None]:
    """Runs a plugin's code: whatever it raises but a stop is its fault, one PluginError line "{said} {how(it)}
    ({fix})". Not only exceptions: a sys.exit would end every command with its code having done nothing (exit 0
    looks like success), a GeneratorExit with a traceback. A KeyboardInterrupt (Ctrl-C, SIGTERM's Terminated)
    stays a stop, exit 130/143, whoever raised it: Ctrl-C and a plugin's own raise look alike. ``importing`` (the
    plugin being imported) goes with it, so that the stop's line says where it came: an import that raises it
    stops every command of its kind, and the line is all that names the plugin. A stop inside a hook that runs
    each step is a stop like any other. ``ours``: recall's own entry, whose failure is recall's, left as it is."""
    if ours:
        yield
        return
    try:
        yield
    except PluginError:
        raise
    except KeyboardInterrupt as stop:
        if importing:
            stop.recall_where = importing
        raise
    except BaseException as exc:  # noqa: BLE001 - a plugin's fault, named instead of a traceback or an exit
        raise PluginError(f"{said} {how(exc)} ({fix})") from None


class Registry(Generic[T]):
    """Entries of one kind by name: recall's own (``builtin`` modules, in that order) first, then plugins in
    the order they came. ``admit`` turns what an entry point names into an entry, or None when it is a
    module that registered its entries itself; ``validate`` raises ValueError for an entry the kind cannot
    take (checked before its name is); ``add`` is the kind's own register function, when it checks more
than the name (a method's switch and section)."""

    def __init__(self, kind: str, group: str, builtin: tuple[str, ...], *,
                 admit: Callable[[Any], T | None], validate: Callable[[T], None] = lambda entry: None,
                 origin: Callable[[T], str] | None = None, add: Callable[[T], Any] | None = None):
        self.kind = kind
        self.group = group
        self.builtin = builtin
        self.admit = admit
        self.validate = validate
        self.origin = origin or (lambda entry: getattr(entry, "__module__", type(entry).__module__))
        self.entries: dict[str, T] = {}
        self.replaced: dict[str, tuple[T, T]] = {}  # name -> (recall's own entry, the plugin's that replaced it)
        self.loaded = False
        self.failure: PluginError | None = None  # a plugin that failed: every later use of the kind fails alike
        self.add = add or self.register  # how an entry point's entry is registered (a kind's own register_*)

    # ---- filling -----------------------------------------------------------------------------------

    def register(self, entry: T, *, replace: bool = False) -> T:
        """Add ``entry``; a second entry of the same name is a mistake (ValueError) unless ``replace``,
        which is announced when it replaces one of recall's own."""
        if not self.is_builtin(entry):
            self.load()  # recall's own first: a plugin cannot take a name not yet registered
        self.validate(entry)
        name = getattr(entry, "name", None)
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} {_shown(entry)}: set name (a non-empty string)")
        other = self.entries.get(name)
        if other is not None and other is not entry:
            if not replace:
                raise ValueError(f"{self.kind} {name}: the name is taken by {self.origin(other)}; pick another, "
                                 f"or register it with replace=True")
            if self.is_builtin(other):
                self.replaced[name] = (other, entry)
                print(f"note: the {self.kind} {name!r} of {self.origin(other)} is replaced by {self.origin(entry)} "
                      "(registered with replace=True)", file=sys.stderr, flush=True)
        self.entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        self.entries.pop(name, None)

    def load(self) -> None:
        """recall's own modules, then every installed plugin of the group, once per process."""
        if self.loaded:
            if self.failure is not None:
                raise self.failure
            return
        self.loaded = True
        for module in self.builtin:
            importlib.import_module(module)
        for entry_point in _entry_points(self.group):
            self._load_plugin(entry_point)

    def _load_plugin(self, entry_point: Any) -> None:
        try:
            self._admit_plugin(entry_point)
        except PluginError as exc:
            self.failure = exc
            raise

    def _admit_plugin(self, entry_point: Any) -> None:
        where = f"the {self.kind} plugin {entry_point.name} ({entry_point.value})"
        with plugin_code(f"{where} failed to load:", "fix or uninstall the package that provides it", how=failure,
                         importing=f"while importing {where}"):
            loaded = entry_point.load()  # a broken plugin names itself instead of failing every command
        try:
            entry = self.admit(loaded)
        except (TypeError, ValueError) as exc:
            raise PluginError(f"{where} cannot be registered: {exc}") from None
        if entry is None:
            return  # a module: it registered its entries as it was imported
        name = getattr(entry, "name", None)
        held = self.entries.get(name) if isinstance(name, str) else None
        if held is entry or held is not None and not isinstance(entry, type) and type(held) is type(entry):
            return  # its module registered it (an instance of it) already while being imported
        try:
            self.add(entry)
        except (TypeError, ValueError) as exc:
            raise PluginError(f"{where} cannot be registered: {exc}") from None

    # ---- reading -----------------------------------------------------------------------------------

    def is_builtin(self, entry: T) -> bool:
        return self.origin(entry) in self.builtin

    def _rank(self, entry: T) -> int:
        origin = self.origin(entry)
        return self.builtin.index(origin) if origin in self.builtin else len(self.builtin)

    def values(self, strict: bool = True) -> list[T]:
        """Every entry: recall's in ``builtin``'s order (whatever order their modules were imported in),
        then plugins in the order they came. ``strict=False``: what loaded, even where a plugin failed (the
        command line's --help text, built at import, before the command that names the failure runs)."""
        try:
            self.load()
        except PluginError:
            if strict:
                raise
        arrival = {name: i for i, name in enumerate(self.entries)}
        return sorted(self.entries.values(), key=lambda e: (self._rank(e), arrival[e.name]))

    def names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.values())

    def get(self, name: str) -> T:
        self.load()
        return self.entries[name]

    def __contains__(self, name: object) -> bool:
        self.load()
        return name in self.entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


def _shown(entry: Any) -> str:
    return entry.__name__ if isinstance(entry, type) else type(entry).__name__


def _entry_points(group: str) -> Iterable[Any]:
    from importlib.metadata import entry_points

    return entry_points(group=group)


def admit_instance(base: type) -> Callable[[Any], Any]:
    """An ``admit`` for kinds whose entries are instances of ``base``: a subclass is instantiated, an
    instance taken as it is, a module left to have registered itself; anything else is refused."""
    def admit(loaded: Any) -> Any:
        if isinstance(loaded, type) and issubclass(loaded, base):
            return loaded()
        if isinstance(loaded, base):
            return loaded
        if type(loaded).__name__ == "module":
            return None
        raise TypeError(f"it names {_shown(loaded)}, which is not a {base.__name__} (name a module, a "
                        f"{base.__name__} subclass or an instance)")
    return admit


def admit_class(required: tuple[str, ...], what: str) -> Callable[[Any], Any]:
    """An ``admit`` for kinds whose entries are classes (task types, merge methods): a class with the
    ``required`` attributes is the entry, a module registered itself, anything else is refused."""
    def admit(loaded: Any) -> Any:
        if type(loaded).__name__ == "module":
            return None
        if isinstance(loaded, type):
            missing = [a for a in required if not hasattr(loaded, a)]
            if not missing:
                return loaded
            raise TypeError(f"{loaded.__name__} is not a {what}: it has no {', '.join(missing)}")
        raise TypeError(f"it names {_shown(loaded)}, which is not a {what} class (name a module or the class)")
    return admit
