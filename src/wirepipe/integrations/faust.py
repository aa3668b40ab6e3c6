"""wirepipe's formats and codecs as Faust codecs: one wire format on Kafka (Faust) and NATS (wirepipe).

Each wirepipe step is one Faust codec node, so Faust's own ``|`` chaining builds the
chain: ``value_serializer="msgpack|zstd"`` in a Faust app writes exactly the bytes a
wirepipe pipeline with ``encode: msgpack|zstd`` publishes, and each side decodes the
other's. Decoding keeps wirepipe's rules inside Faust: every decompressor is capped by
``max_output_size`` (a bomb is refused before it is allocated) and ``wp-pickle``
refuses to decode unless it was registered with ``allow_pickle=True``.

Names, registered by the ``faust.codecs`` entry points on Faust's first codec lookup
(``register()`` does the same explicitly):

- each format and codec under its wirepipe name: msgpack, orjson, cbor, arrow, zstd,
  zlib, gzip, deflate, brotli, bz2, xz, lz4, none;
- the steps Faust already has a codec for, under ``wp-``: ``wp-json``, ``wp-pickle``.
  Faust's own ``json``, ``pickle``, ``raw``, ``binary`` and ``yaml`` stay Faust's;
- ``codec:level`` (``zstd:19``, ``gzip:best``) is built on first use, so a wirepipe
  chain string works verbatim: ``value_serializer="msgpack|zstd:19"``;
- ``register_codec(name, spec, ...)`` names anything else: a dictionary, a schema for
  ``msgpack-array``, a size cap, or a whole chain as one codec.

The defaults never replace a codec already registered under their name (one the app
registered itself stays), and an unknown name raises ``UnknownCodecError`` naming it
and the known ones, where Faust alone raises ``TypeError`` for ``get_codec("bogus|json")``.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator, MutableMapping
from pathlib import Path
from typing import Any

from faust.serializers import codecs as faust_codecs
from faust.types.codecs import CodecT

from ..codecs.chain import Chain
from ..codecs.compression import CODECS, DEFAULT_MAX_OUTPUT, get_codec
from ..codecs.formats import FORMATS
from ..core.errors import RefusedError, WirepipeError
from ..operators.codec_options import load_dictionary
from ..operators.schema_options import SchemaSpec, resolve_schema

#: Names Faust registers itself: wirepipe never takes them (its json and pickle are wp-json, wp-pickle).
FAUST_BUILTINS = frozenset({"json", "pickle", "pickle_restricted", "pickle_fickling", "binary", "raw", "yaml"})
PREFIX = "wp-"


def faust_name(step: str) -> str:
    """The Faust codec name of a wirepipe format or codec: its own name, or ``wp-<name>`` where Faust has one."""
    return PREFIX + step if step in FAUST_BUILTINS else step


#: Faust name -> wirepipe step, for every format and codec that needs no schema (the entry points).
STEPS: dict[str, str] = {
    faust_name(name): name for name in [*FORMATS, *CODECS] if not (name in FORMATS and FORMATS[name].needs_schema)
}


def faust_serializer(chain: str) -> str:
    """The Faust serializer string for a wirepipe chain: ``"json|zstd:3"`` -> ``"wp-json|zstd:3"``."""
    return "|".join(faust_name(str(step)) if step.is_format else str(step) for step in Chain.parse(chain).steps)


class UnknownCodecError(WirepipeError, KeyError, TypeError):
    """A Faust codec name nobody registered.

    It is a ``KeyError`` (what Faust raises for one unknown name) and a ``TypeError``
    (what Faust raises for an unknown first name of a chain), so handlers written for
    either still catch it.
    """

    def __init__(self, name: str, known: list[str], hint: str = "") -> None:
        self.name = name
        self.known = known
        message = f"unknown Faust codec {name!r}: known codecs are {', '.join(known)}"
        super().__init__(f"{message} ({hint})" if hint else message)

    def __str__(self) -> str:
        return str(self.args[0])


class _Dictionary(bytes):
    """A zstd dictionary whose repr stays short in Faust's codec reprs."""

    def __repr__(self) -> str:
        return f"<zstd dictionary, {len(self)} bytes>"


class _Functions:
    """The encoder and decoder of one chain and option set, built on first use, shared by every clone."""

    def __init__(self, spec: str, schema: tuple[str, ...] | None, dictionary: bytes | None,
                 max_output_size: int, allow_pickle: bool) -> None:
        self.chain = Chain.parse(spec)  # ValueError naming a bad step or level
        fmt = FORMATS.get(self.chain.format or "")
        if fmt is not None and fmt.needs_schema and not schema:
            raise ValueError(f"{fmt.name} is positional and needs its field order: "
                             f"register_codec('points-array', '{fmt.name}', schema=MyRecord)")
        self.schema = schema
        self.dictionary = dictionary
        self.max_output_size = max_output_size
        self.allow_pickle = allow_pickle
        self._encode: Callable[[Any], bytes] | None = None
        self._decode: Callable[[bytes], Any] | None = None

    def encode(self, value: Any) -> bytes:
        fn = self._encode
        if fn is None:
            fn = self._encode = self.chain.encoder(self.schema, self.dictionary)
        return fn(value)

    def decode(self, data: bytes) -> Any:
        fn = self._decode
        if fn is None:
            try:
                fn = self._decode = self.chain.decoder(self.schema, max_output_size=self.max_output_size,
                                                       allow_pickle=self.allow_pickle, dictionary=self.dictionary)
            except RefusedError as exc:  # pickle: refused on every decode, never cached
                raise RefusedError(exc.stage, exc.operator, _PICKLE_REFUSED) from None
        return fn(data)


_PICKLE_REFUSED = (
    "pickle runs code from the payload when it is loaded, so wirepipe's Faust codec does not decode it; "
    "if every producer of the topic is trusted, register a codec that may: "
    "register_codec('trusted-pickle', 'pickle', allow_pickle=True)"
)


_functions = functools.lru_cache(maxsize=256)(_Functions)


_DEFAULTS = {"schema": None, "dictionary": None, "max_output_size": DEFAULT_MAX_OUTPUT, "allow_pickle": False}


class WirepipeCodec(faust_codecs.Codec):
    """A wirepipe chain (one step for the registered names) as one Faust codec node.

    Faust looks a serializer up again for every message and clones the first node of a
    chain each time: ``clone`` copies the node (its functions are shared, built once per
    option set), and ``kwargs`` holds the options already resolved, as Faust's own
    ``clone`` and ``repr`` expect.
    """

    def __init__(self, children: tuple[CodecT, ...] | None = None, *, spec: str, schema: SchemaSpec = None,
                 dictionary: bytes | str | Path | None = None, max_output_size: int = DEFAULT_MAX_OUTPUT,
                 allow_pickle: bool = False) -> None:
        fields = resolve_schema(schema)
        data = load_dictionary(dictionary)
        data = _Dictionary(data) if data and not isinstance(data, _Dictionary) else data
        self._fns = _functions(spec, fields, data, max_output_size, allow_pickle)
        options = {"schema": fields, "dictionary": data, "max_output_size": max_output_size,
                   "allow_pickle": allow_pickle}
        super().__init__(children, spec=spec, **{k: v for k, v in options.items() if v != _DEFAULTS[k]})

    def clone(self, *children: CodecT) -> CodecT:
        """A copy with ``children`` appended (what Faust's ``|`` does), without building anything again."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.children = self.children + children
        new.nodes = (new, *new.children)
        return new

    def _dumps(self, obj: Any) -> bytes:
        return self._fns.encode(obj)

    def _loads(self, s: bytes) -> Any:
        return self._fns.decode(s)


class GuardedRegistry(MutableMapping[str, CodecT]):
    """Faust's codec registry, same storage, whose misses say what is wrong.

    Faust's ``get_codec`` reads the registry with ``codecs[name]`` and, for the first
    name of a chain, ``codecs.get(name, name)``: that fallback to the name itself is what
    turns ``bogus|json`` into a ``TypeError``. Here a miss builds a wirepipe
    ``codec:level`` step, or raises ``UnknownCodecError``; hits are plain dict lookups.
    """

    def __init__(self, data: MutableMapping[str, CodecT]) -> None:
        self.data = data

    def __getitem__(self, name: str) -> CodecT:
        codec = self.data.get(name)
        return codec if codec is not None else self._missing(name)

    def get(self, name: str, default: Any = None) -> Any:
        codec = self.data.get(name)
        if codec is not None:
            return codec
        if name and name == default:  # get_codec's fallback for the first name of a chain
            return self._missing(name)
        try:
            codec = self._with_level(name) if isinstance(name, str) else None
        except ValueError:
            codec = None
        return codec if codec is not None else default

    def __contains__(self, name: object) -> bool:
        return name in self.data

    def __setitem__(self, name: str, codec: CodecT) -> None:
        self.data[name] = codec

    def __delitem__(self, name: str) -> None:
        del self.data[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        return f"GuardedRegistry({self.data!r})"

    def _with_level(self, name: str) -> CodecT | None:
        """The wirepipe step ``codec:level``, registered on first use; None when ``name`` is not one."""
        base, sep, _ = name.partition(":")
        if not sep or base not in CODECS:
            return None
        codec = self.data[name] = WirepipeCodec(spec=name)  # ValueError naming the codec's levels
        return codec

    def _missing(self, name: str) -> CodecT:
        try:
            codec = self._with_level(name) if isinstance(name, str) else None
        except ValueError as exc:
            raise UnknownCodecError(name, sorted(self.data), str(exc)) from None
        if codec is None:
            raise UnknownCodecError(name, sorted(self.data), _hint(name, self.data))
        return codec


def _hint(name: str, registry: MutableMapping[str, CodecT]) -> str:
    fmt = FORMATS.get(name)
    if fmt is not None and fmt.needs_schema:
        return (f"{name} is positional: register it with its field order, e.g. "
                f"wirepipe.integrations.faust.register_codec('points-array', '{name}', schema=MyRecord)")
    step = name if fmt is not None else None
    if step is None:
        try:
            step = get_codec(name).name
        except KeyError:
            return ""
    if faust_name(step) in registry:
        return f"wirepipe's {step} is registered as {faust_name(step)!r}"
    return "wirepipe's codecs are not registered: call wirepipe.integrations.faust.register()"


def install_guard() -> GuardedRegistry:
    """Put ``GuardedRegistry`` in front of Faust's codec registry (once); returns it."""
    registry = faust_codecs.codecs
    if not isinstance(registry, GuardedRegistry):
        registry = faust_codecs.codecs = GuardedRegistry(registry)
    return registry


def register() -> dict[str, CodecT]:
    """Register every wirepipe step under its Faust name (what the entry points do), keeping existing ones.

    Returns name -> the codec now registered under it.
    """
    registry = install_guard()
    for name, step in STEPS.items():
        _keep_or_add(registry, name, step)
    return {name: registry.data[name] for name in STEPS}


def register_codec(name: str, spec: str, *, schema: SchemaSpec = None, dictionary: bytes | str | Path | None = None,
                   max_output_size: int = DEFAULT_MAX_OUTPUT, allow_pickle: bool = False,
                   replace: bool = False) -> WirepipeCodec:
    """Register a wirepipe step, or a whole chain as one codec, under its own Faust name.

        register_codec("zstd19", "zstd:19")
        register_codec("zstd-dict", "zstd", dictionary="points.zdict")   # bytes or a file path
        register_codec("point-array", "msgpack-array", schema=Point)      # field order of a faust.Record
        register_codec("zstd-1g", "zstd", max_output_size=1 << 30)         # a larger decompression cap

    A name that holds a codec which is not wirepipe's (a Faust built-in such as ``json``,
    or the app's own) is refused unless ``replace=True``: that would change what every
    topic using the name decodes.
    """
    if not name or "|" in name:
        raise ValueError(f"{name!r} cannot be a Faust codec name: it must be non-empty, without '|' "
                         "(Faust splits chains on it)")
    registry = install_guard()
    current = registry.data.get(name)
    if current is not None and not isinstance(current, WirepipeCodec) and not replace:
        what = "a Faust built-in codec" if name in FAUST_BUILTINS else f"{current!r}"
        raise ValueError(f"Faust codec name {name!r} is already taken by {what}: pick another name, "
                         "or pass replace=True to change it for the whole app")
    codec = WirepipeCodec(spec=spec, schema=schema, dictionary=dictionary, max_output_size=max_output_size,
                          allow_pickle=allow_pickle)
    registry[name] = codec
    return codec


def _keep_or_add(registry: GuardedRegistry, name: str, step: str) -> CodecT:
    current = registry.data.get(name)
    if current is None:
        current = registry.data[name] = WirepipeCodec(spec=step)
    elif not isinstance(current, WirepipeCodec):
        warnings.warn(f"Faust codec {name!r} is already registered ({current!r}) and was kept; wirepipe's {step} "
                      f"is reachable with register_codec('{PREFIX}{step}', '{step}')", stacklevel=3)
    return current


def _entry_point(name: str) -> Callable[[], CodecT]:
    """What the ``faust.codecs`` entry point ``name`` loads; Faust calls it on its first codec lookup."""

    def load() -> CodecT:
        # Faust writes the result under ``name``: return what is there, so nothing is replaced.
        return _keep_or_add(install_guard(), name, STEPS[name])

    load.__name__ = load.__qualname__ = name.replace("-", "_")
    return load


# The faust.codecs entry points (pyproject.toml lists the same names; a test checks they agree).
msgpack = _entry_point("msgpack")
orjson = _entry_point("orjson")
cbor = _entry_point("cbor")
arrow = _entry_point("arrow")
wp_json = _entry_point("wp-json")
wp_pickle = _entry_point("wp-pickle")
zstd = _entry_point("zstd")
zlib = _entry_point("zlib")
gzip = _entry_point("gzip")
deflate = _entry_point("deflate")
brotli = _entry_point("brotli")
bz2 = _entry_point("bz2")
xz = _entry_point("xz")
lz4 = _entry_point("lz4")
snappy = _entry_point("snappy")
none = _entry_point("none")
bson = _entry_point("bson")
flexbuffers = _entry_point("flexbuffers")
toml = _entry_point("toml")

__all__ = [
    "FAUST_BUILTINS",
    "STEPS",
    "GuardedRegistry",
    "UnknownCodecError",
    "WirepipeCodec",
    "faust_name",
    "faust_serializer",
    "install_guard",
    "register",
    "register_codec",
]
