"""The stores a pipeline hands its operators: what an operator may ask of one, and how it names one.

An operator does CPU work over batches and never opens a connection. What it needs from outside (the schema a
record was written with, a zstd dictionary) it asks of a *store*: a pipeline resource, declared once under
``resources:`` in the pipeline file (or implied by a ``nats://BUCKET/...`` reference) and handed to every
operator that names it, as Benthos hands its processors cache resources. The pipeline opens its stores before
its operators and closes them after; the operator only calls the lookups below, on the event loop, from its
``open`` and ``prepare`` hooks. So the same operators run with a NATS store in production, a folder of files in
``wirepipe test`` or a replay, and a store in memory in a unit test.

- ``SchemaStore``: registered schemas by fingerprint (the ``Wirepipe-Schema`` header) and by name and version
  (``connectors/schema_registry.py``: in memory and in a folder; ``connectors/nats/schema_registry.py``: a NATS
  KV bucket).
- ``DictionaryStore``: zstd dictionaries by name (a publisher's) and by the id every frame carries (a consumer's)
  (``connectors/dictionary_stores.py``: in memory and a folder of ``.zdict`` files;
  ``connectors/nats/dictionary_bucket.py``: a NATS Object Store bucket).

A store says "the server did not answer" with ``NotConnected`` (the run loop holds the batch and asks again,
as for a sink that is down) and "no such thing" with a value (``None``), ``NotRegistered`` or
``DictionaryUnusable``.

An operator names its stores with ``StoreUse`` values (``UsesStores.store_uses``) and is handed each one
(``UsesStores.use_store``) when the pipeline is put together (``pipelines/resources.py``). A ``nats://BUCKET/...``
reference names the resource ``BUCKET``: a resource declared under that name stands in for the bucket (a folder in
a test), else it is the bucket, reached as the pipeline's NATS source or sink is.

>>> parse_dictionary_ref("nats://DICTS/points", name=True)
DictionaryRef(bucket='DICTS', name='points')
>>> parse_dictionary_ref("nats://DICTS/points", name=False)
Traceback (most recent call last):
...
ValueError: 'nats://DICTS/points': a bucket alone, nats://BUCKET (the frames name their dictionary by id)
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from .errors import ConfigError, MissingInput, WirepipeError

if TYPE_CHECKING:
    from ..schema import RecordSchema

    Schema = RecordSchema | Sequence[str]  # a typed schema, or field names only

SCHEMAS = "schemas"  # the kind of store under ``resources.schemas``
# A registered name: a KV key's tokens (points, orders.eu); no ``/``, which splits a reference (registry/NAME@3)
SCHEMA_NAME = re.compile(r"^[-_=a-zA-Z0-9]+(\.[-_=a-zA-Z0-9]+)*$")
SCHEMA_NAME_RULE = "letters, digits, - _ =, in tokens joined by single dots (points, orders.eu)"
DICTIONARIES = "dictionaries"  # the kind of store under ``resources.dictionaries``
# A resource's name under ``resources.<kind>``: what a NATS bucket may be called, so nats://BUCKET names one
RESOURCE_NAME = r"^[a-zA-Z0-9_-]+$"
NATS_SCHEME = "nats://"
DICTIONARY_NAME = re.compile(r"^[-_=.a-zA-Z0-9]+$")  # a dictionary's name in its store (tx, orders.v2)
SCHEMA_FILES = (".yaml", ".yml", ".json")  # wirepipe's schema language
DESCRIPTOR_SETS = (".desc", ".pb", ".binpb", ".protoset")  # protobuf FileDescriptorSets
SCHEMA_FILE_SUFFIXES = (*SCHEMA_FILES, ".avsc", ".proto", *DESCRIPTOR_SETS)  # a schema: that names a file


class NotRegistered(MissingInput):
    """A name, a version or a bucket a store does not hold (the message says what it holds): a usage error, as
    a file that is not there."""


@dataclass(frozen=True)
class Registered:
    """One version of a registered name: its number, its schema's fingerprint and the schema."""

    name: str
    version: int
    fingerprint: str
    schema: Schema

    def __str__(self) -> str:  # no NAME@VERSION in a message: redaction takes NAME for a URL's user info
        return f"{self.name} version {self.version}"


class Resource(Protocol):
    """What the pipeline does with every store: open it before the operators open, close it after they close."""

    where: str  # how messages name it: ``nats://WIREPIPE_SCHEMAS``, ``folder schemas/``, ``memory``

    async def open(self) -> None: ...

    async def close(self) -> None: ...


@runtime_checkable
class SchemaStore(Resource, Protocol):
    """Registered schemas, as ``serialize`` and ``deserialize`` read them (``schema: registry/NAME@VERSION``)."""

    async def by_fingerprint(self, fingerprint: str) -> Schema | None:
        """The schema whose fingerprint this is, if any name registered it; None otherwise."""
        ...

    async def version(self, name: str, version: int | None = None) -> Registered:
        """Version ``version`` of ``name`` (None: its latest); ``NotRegistered`` saying what there is."""
        ...


class DictionaryUnusable(WirepipeError):
    """A dictionary that cannot be used: not in the store, no store, larger than the cap, or damaged (the records
    that need it are dead-lettered with this reason)."""


class DictionaryMissing(DictionaryUnusable):
    """No such dictionary (or no such bucket, or folder)."""


@runtime_checkable
class DictionaryStore(Resource, Protocol):
    """zstd dictionaries, as ``compress`` (by name) and ``decompress`` (by the id every frame carries) read them;
    every read bounded by ``cap`` bytes (the decompressor's ``max_output_size``) and checked to be a trained
    dictionary (of that id). Which bytes a record was compressed with is checked where they are used
    (``operators/shared_dictionaries.py``), whatever store they came from. ``retry_after``: how long a
    dictionary it could not give is taken as missing before it is asked for again."""

    @property
    def retry_after(self) -> float: ...

    async def by_id(self, dict_id: int, cap: int) -> bytes: ...

    async def by_name(self, name: str, cap: int) -> bytes: ...

    async def ids(self) -> Sequence[int]:
        """Every dictionary id it holds (what a Beam job carries to its workers)."""
        ...


class DictionaryRef(NamedTuple):
    """``nats://BUCKET/NAME`` (a publisher's dictionary) or ``nats://BUCKET`` (where a consumer looks); the
    bucket names the resource (``resources.dictionaries.BUCKET``, when declared, stands in for it)."""

    bucket: str
    name: str | None = None

    def __str__(self) -> str:
        return f"{NATS_SCHEME}{self.bucket}" + (f"/{self.name}" if self.name else "")


def is_nats_ref(value: object) -> bool:
    """True for a ``nats://`` reference (a dictionary in a store), False for a file path or bytes."""
    return isinstance(value, str) and value.startswith(NATS_SCHEME)


def parse_dictionary_ref(text: str, *, name: bool) -> DictionaryRef:
    """``nats://BUCKET/NAME`` (``name=True``) or ``nats://BUCKET``; ``ValueError`` saying what is allowed."""
    shape = "nats://BUCKET/NAME" if name else "nats://BUCKET"
    if not text.startswith(NATS_SCHEME):
        raise ValueError(f"{text!r}: a dictionary in a NATS Object Store bucket is {shape}")
    bucket, _, rest = text[len(NATS_SCHEME):].partition("/")
    if not re.match(RESOURCE_NAME, bucket):
        raise ValueError(f"{text!r}: the bucket name is letters, digits, - and _ ({shape})")
    if not name:
        if rest:
            raise ValueError(f"{text!r}: a bucket alone, nats://BUCKET (the frames name their dictionary by id)")
        return DictionaryRef(bucket)
    if not DICTIONARY_NAME.match(rest):
        raise ValueError(f"{text!r}: give the dictionary's name, {shape} (letters, digits, - _ = .)")
    return DictionaryRef(bucket, rest)


@dataclass(frozen=True)
class StoreUse:
    """A store an operator names: its kind (``schemas``), the resource's name under ``resources.<kind>``, the
    bucket a ``nats://BUCKET`` reference implies when no resource of that name is declared (None: it must be
    declared), the operator's field that names it (where a configuration error points), and how the implied
    store reaches its server (an operator's own ``nats:`` settings; None: as the pipeline's NATS source or sink
    does)."""

    kind: str
    resource: str
    bucket: str | None = None
    field: str = "schema"
    connection: Mapping[str, Any] | None = dataclasses.field(default=None, compare=False)


@runtime_checkable
class UsesStores(Protocol):
    """An operator that reads from stores: it says which, and the pipeline hands it each one before it opens."""

    def store_uses(self) -> Sequence[StoreUse]: ...

    def use_store(self, use: StoreUse, store: Any) -> None: ...


@runtime_checkable
class FetchesFromStores(UsesStores, Protocol):
    """A source or sink that fetches what it names from its stores once they are open (a ``csv`` source's
    registered schema): before any output is opened, so a name a store does not hold leaves nothing written."""

    async def fetch_from_stores(self) -> None: ...


# --- a schema in a store: registry/NAME@VERSION, nats://BUCKET/NAME@VERSION -------------------------------------

REGISTRY = "registry"  # the store ``schema: registry/...`` names when ``resources.schemas`` declares no other
_NATS = "nats://"
_STORE = r"[A-Za-z0-9_-]+"
_REF = re.compile(rf"^(?P<store>{_STORE})(?:/(?P<name>[-_=.a-zA-Z0-9]+?)(?:@(?P<version>[^@/]*))?)?$")
# (no NAME@VERSION in a message: redaction would take NAME for a URL's user info; " @VERSION" stays as it is)
_REF_SHAPE = "registry/NAME, registry/NAME @VERSION (1, 2 ... or latest), or nats://BUCKET in place of registry"


@dataclass(frozen=True)
class RegistryRef:
    """A schema in a schema store: the store (``use``), a name (None: each record's own writer schema) and a
    version (None: the latest when the pipeline starts)."""

    use: StoreUse
    name: str | None = None
    version: int | None = None
    spelled: str = ""

    def __str__(self) -> str:
        """The reference in a message (``registry/points version 3``: see ``_REF_SHAPE``)."""
        head = self.spelled.partition("@")[0]
        if self.name is None:
            return head
        return f"{head} version {self.version}" if self.version is not None else f"{head} (its latest version)"


def registry_ref(spec: Any) -> RegistryRef | None:
    """The registered schema ``spec`` names, or None when it names a schema some other way (a file, a dataset,
    module:Class, a mapping); ``ValueError`` for a reference that is not well formed.

    >>> str(registry_ref("registry/points@3")), registry_ref("nats://SCHEMAS/points").use.bucket
    ('registry/points version 3', 'SCHEMAS')
    """
    if not isinstance(spec, str):
        return None
    text, bucket = spec, None
    if spec.startswith(_NATS):
        text = spec[len(_NATS):]
        bucket = text.partition("/")[0]
    elif "/" not in spec and spec != REGISTRY:
        return None
    elif ":" in spec or "#" in spec or Path(spec).suffix.lower() in SCHEMA_FILE_SUFFIXES:
        return None  # module:Class, FILE#Message, a schema file in a folder
    m = _REF.match(text)
    if m is None:
        raise ValueError(f"a registered schema is {_REF_SHAPE} (the store letters, digits, - and _, the name letters, "
                         f"digits, - _ = and single dots), got {spec.partition('@')[0]!r}")
    version, name = m.group("version"), m.group("name")
    if name is not None and not SCHEMA_NAME.match(name):
        raise ValueError(f"{name!r} is not a schema name: {SCHEMA_NAME_RULE}")
    if version is not None and not (version == "latest" or (version.isdigit() and int(version) > 0)):
        raise ValueError(f"{spec.partition('@')[0]!r}: the version is 1, 2, 3 ... or latest, got {version!r}")
    return RegistryRef(StoreUse(SCHEMAS, m.group("store"), bucket), name,
                       int(version) if version and version != "latest" else None, spec)


class SchemaFromStore:
    """What ``serialize``, ``deserialize`` and the ``csv`` source share when ``schema:`` names a registered schema:
    the reference and the store the pipeline hands them (``UsesStores``)."""

    _ref: RegistryRef | None = None
    _store: SchemaStore | None = None

    @property
    def schema_ref(self) -> RegistryRef | None:
        """The registered schema ``schema:`` names (None: a schema given another way)."""
        return self._ref

    def store_uses(self) -> Sequence[StoreUse]:
        """The schema store ``schema:`` names, if it names one."""
        return (self._ref.use,) if self._ref is not None else ()

    def use_store(self, use: StoreUse, store: Any) -> None:
        self._store = store

    def _handed(self, entry: str) -> SchemaStore:
        """The store the pipeline handed the operator (``entry``: its name in messages)."""
        if self._store is None:
            raise WirepipeError(f"{entry}: schema {self._ref} comes from a schema store the pipeline hands it: run "
                                "it in a Pipeline (its resources give it the store)")
        return self._store


async def registered_schema(store: SchemaStore, ref: RegistryRef, entry: str) -> Registered:
    """The version of a registered schema ``ref`` names, from the store the pipeline handed ``entry``'s part;
    a ``ConfigError`` at ``entry.schema`` saying what the store holds when it does not hold that one."""
    assert ref.name is not None
    try:
        return await store.version(ref.name, ref.version)
    except NotRegistered as exc:
        raise ConfigError(f"{ref}: {exc}", path=f"{entry}.schema") from None
