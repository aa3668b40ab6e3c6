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
- ``DictionaryStore``: the shape zstd dictionaries take when they follow (today ``operators/shared_dictionaries.py``
  opens its own connection to ``connectors/dictionary_bucket.DictionaryBucket``, whose two reads are these).

A store says "the server did not answer" with ``NotConnected`` (the run loop holds the batch and asks again,
as for a sink that is down) and "no such thing" with a value (``None``) or ``NotRegistered``.

An operator names its stores with ``StoreUse`` values (``UsesStores.store_uses``) and is handed each one
(``UsesStores.use_store``) when the pipeline is put together (``pipelines/resources.py``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .errors import MissingInput

if TYPE_CHECKING:
    from ..schema import RecordSchema

    Schema = RecordSchema | Sequence[str]  # a typed schema, or field names only

SCHEMAS = "schemas"  # the kind of store under ``resources.schemas``
# A registered name: a KV key's tokens (points, orders.eu); no ``/``, which splits a reference (registry/NAME@3)
SCHEMA_NAME = re.compile(r"^[-_=a-zA-Z0-9]+(\.[-_=a-zA-Z0-9]+)*$")
SCHEMA_NAME_RULE = "letters, digits, - _ =, in tokens joined by single dots (points, orders.eu)"
DICTIONARIES = "dictionaries"  # the kind zstd dictionaries will take


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


class DictionaryStore(Resource, Protocol):
    """zstd dictionaries, as ``compress`` (by name) and ``decompress`` (by the id every frame carries) read them;
    every read bounded by ``cap`` bytes (the decompressor's ``max_output_size``). Not used yet: the dictionaries
    still reach NATS from ``operators/shared_dictionaries.py``; this is the shape they move to."""

    async def by_id(self, dict_id: int, cap: int) -> bytes: ...

    async def by_name(self, name: str, cap: int) -> bytes: ...


@dataclass(frozen=True)
class StoreUse:
    """A store an operator names: its kind (``schemas``), the resource's name under ``resources.<kind>``, the
    bucket a ``nats://BUCKET`` reference implies when no resource of that name is declared (None: it must be
    declared), and the operator's field that names it (where a configuration error points)."""

    kind: str
    resource: str
    bucket: str | None = None
    field: str = "schema"


@runtime_checkable
class UsesStores(Protocol):
    """An operator that reads from stores: it says which, and the pipeline hands it each one before it opens."""

    def store_uses(self) -> Sequence[StoreUse]: ...

    def use_store(self, use: StoreUse, store: Any) -> None: ...
