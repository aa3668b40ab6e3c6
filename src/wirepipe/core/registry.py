"""Lazy, open registries: the formats, codecs, operators and connectors a config can name.

A registry maps a name to an entry: first wirepipe's own (given as objects, ``module:attr``
strings, or a function that lists them), then those installed packages declare under an
entry-point group, so a third-party package adds a format, codec, operator or connector by
declaring one in its ``pyproject.toml``::

    [project.entry-points."wirepipe.formats"]
    yaml = "wirepipe_yaml:YAML_FORMAT"          # a codecs.formats.Format

    [project.entry-points."wirepipe.codecs"]     # a codecs.compression.Codec
    [project.entry-points."wirepipe.operators"]  # a params model with build(ctx) -> [operators]
    [project.entry-points."wirepipe.connectors"]
    "source.kafka" = "wirepipe_kafka:KafkaSourceConfig"   # source.<type> or sink.<type>

Nothing is imported and no package metadata is read until the first lookup, so
``import wirepipe`` stays fast; a lookup of a built-in name imports the module named after it when that
module declares it (``Declared``), a listing imports them all. A built-in name wins over a plugin that
reuses it.

>>> reg = Registry("wirepipe.examples", {"one": 1, "path": "os.path:sep"})
>>> list(reg), reg["path"] in ("/", "\\\\")
(['one', 'path'], True)
>>> reg.register("two", 2)
>>> reg["two"], len(reg)
(2, 3)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from importlib.util import find_spec
from typing import Any, Generic, TypeVar

from .errors import WirepipeError

T = TypeVar("T")

Builtins = Mapping[str, Any] | Callable[[], Mapping[str, Any]]


def load_ref(ref: str) -> Any:
    """The object a ``module:attr`` string names (``attr`` may be dotted; without it, the module): the one
    loader of import paths, for registries and for what a config names (``map: {function: mod:fn}``, a
    ``module:Class`` schema). ``ValueError`` saying why not, so a config error can show it.

    >>> load_ref("os.path:join").__name__
    'join'
    >>> load_ref("os.path:nope")
    Traceback (most recent call last):
    ...
    ValueError: cannot import 'os.path:nope': module 'posixpath' has no attribute 'nope'
    """
    module, _, attr = ref.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split(".") if attr else ():
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot import {ref!r}: {exc}") from None
    return obj


class Registry(Mapping[str, T], Generic[T]):
    """Built-in entries, then the entry points of ``group`` (those named ``prefix``<name>), loaded lazily."""

    def __init__(self, group: str, builtins: Builtins, *, prefix: str = "") -> None:
        self.group = group
        self.prefix = prefix
        self._builtins = builtins
        self._pending: dict[str, Callable[[], Any]] | None = None  # name -> loader, before first lookup
        self._loaded: dict[str, T] = {}
        self._generation = 0

    def _table(self) -> dict[str, Callable[[], Any]]:
        if self._pending is None:
            builtins = self._builtins() if callable(self._builtins) else self._builtins
            table: dict[str, Callable[[], Any]] = {name: _loader(entry) for name, entry in builtins.items()}
            for ep in _entry_points(self.group):
                if ep.name.startswith(self.prefix):
                    table.setdefault(ep.name[len(self.prefix):], _plugin_loader(self.group, ep))
            self._pending = table
            self._generation += 1
        return self._pending

    def __getitem__(self, name: str) -> T:
        if name in self._loaded:
            return self._loaded[name]
        if self._pending is None and isinstance(self._builtins, Declared):
            found = self._builtins.named(name)
            if found is not None:
                self._loaded[name] = found
                return found
        loader = self._table()[name]  # KeyError for an unknown name, as a dict
        entry = self._loaded[name] = loader()
        return entry

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())

    def __contains__(self, name: object) -> bool:
        return name in self._table()

    def register(self, name: str, entry: T) -> None:
        """Add (or replace) one entry at run time: a notebook or a test, without packaging."""
        self._table()[name] = lambda: entry
        self._loaded[name] = entry
        self._generation += 1

    @property
    def generation(self) -> int:
        """Changes whenever the set of entries does: caches derived from a registry key on it."""
        self._table()
        return self._generation

    def __repr__(self) -> str:
        return f"Registry({self.group!r}, {list(self)!r})"


def declared_in(package: str, attribute: str) -> dict[str, Any]:
    """name -> entry of every module of ``package`` (and of its subpackages) that declares ``attribute`` (a dict),
    in ``RANK`` order.

    How a package's own entries register: each module says what it provides, e.g.
    ``OPERATORS = {"name": Params}`` or ``SINKS = {"type": Config}``, with a ``RANK`` (where its
    names come in "allowed" lists; the module name breaks ties); nothing else lists them. Every
    module of the package is imported, so they keep heavy imports inside functions. A name two
    modules declare is an error naming both (one would hide the other).
    """
    import pkgutil

    modules = [importlib.import_module(m.name) for m in
               pkgutil.walk_packages(importlib.import_module(package).__path__, prefix=f"{package}.")]
    declaring = sorted((m for m in modules if hasattr(m, attribute)), key=lambda m: (m.RANK, m.__name__))
    found: dict[str, Any] = {}
    where: dict[str, str] = {}
    for module in declaring:
        for name, entry in getattr(module, attribute).items():
            if name in where:
                raise WirepipeError(f"{attribute} {name!r} is declared twice: in {where[name]} and {module.__name__}")
            found[name] = entry
            where[name] = module.__name__
    return found


class Declared:
    """A registry's built-ins: what the modules of ``package`` declare under ``attribute`` (``declared_in``).

    Calling it scans the package (every module imported: a listing, a name no module is named after);
    ``named`` looks in the one module named after the entry first (``operators/serialize.py`` declares
    ``serialize``, ``connectors/null.py`` the ``null`` sink), so ``wirepipe.serialize(...)`` in a fresh
    process imports that module and not the thirty others (~90 ms of a first build of a pipeline).
    """

    def __init__(self, package: str, attribute: str) -> None:
        self.package = package
        self.attribute = attribute

    def __call__(self) -> dict[str, Any]:
        return declared_in(self.package, self.attribute)

    def named(self, name: object) -> Any:
        """The entry ``name`` as the module of that name declares it, or None (no such module, or it does not
        declare ``name``: the scan finds it, or says it is unknown)."""
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
            return None
        module = f"{self.package}.{name}"
        if find_spec(module) is None:
            return None
        declared = getattr(importlib.import_module(module), self.attribute, None)
        return declared.get(name) if isinstance(declared, dict) else None


def _loader(entry: Any) -> Callable[[], Any]:
    if isinstance(entry, str):
        return lambda: load_ref(entry)
    return lambda: entry


def _plugin_loader(group: str, ep: Any) -> Callable[[], Any]:
    def load() -> Any:
        try:
            return ep.load()
        except Exception as exc:  # a broken plugin names itself instead of a bare ImportError
            raise WirepipeError(f"entry point {ep.name!r} = {ep.value!r} in group {group!r} cannot be loaded: "
                                f"{type(exc).__name__}: {exc}") from exc

    return load


def _entry_points(group: str) -> list[Any]:
    from importlib.metadata import entry_points

    return list(entry_points(group=group))


def library_installed(library: str) -> bool:
    """Whether the module ``library`` can be imported ("" is the standard library: always)."""
    if library == "":
        return True
    try:
        return find_spec(library) is not None
    except (ModuleNotFoundError, ValueError):  # a dotted name whose parent is missing; a module set to None
        return False


def install_hint(extra: str) -> str:
    """What to run to install an extra: from wirepipe's clone, as the docs install it (wirepipe is not on PyPI).

    >>> install_hint("lz4")
    "pip install '.[lz4]' in wirepipe's clone"
    """
    return f"pip install '.[{extra}]' in wirepipe's clone" if extra else "reinstall wirepipe"
