"""A message decoded from its headers alone: ``decompress: auto`` then ``deserialize: auto``.

What a consumer in any language can do with the wire contract (docs/concepts/wire-contract.md):
``Content-Encoding`` names the codec, ``Content-Type`` the format. The schema'd formats (protobuf, avro, the fixed
layouts, msgpack-array) carry no schema on the wire, so without one given their records are
refused with that reason, and the hint says where the caller takes a schema from. ``wirepipe
tap`` prints what flows with it and ``wirepipe test`` compares payload outputs decoded by it;
both run the operators a pipeline runs, so they decode exactly as a consumer would.

>>> import zlib
>>> from wirepipe.core.batch import Batch
>>> decode = HeaderDecoder()
>>> b = decode(Batch([zlib.compress(b'{"x": 1}')], headers={"Content-Type": "application/json",
...                                                          "Content-Encoding": "zlib"}))
>>> b.values, b.meta[SERIALIZED_SIZE]
([{'x': 1}], [8])
>>> decode(Batch([b"\\x08\\x01"], headers={"Content-Type": "application/x-protobuf"})).rejected[0].error
'application/x-protobuf (protobuf) carries no schema on the wire: set `schema:`'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..codecs.formats import format_for_content_type
from ..core.batch import Batch
from ..core.errors import StageError
from ..core.stores import SCHEMAS, StoreUse
from ..wire import Header
from .decompress import Decompress
from .deserialize import Deserialize
from .operator import failing
from .schema_options import SchemaSpec

SERIALIZED_SIZE = "serialized_size"  # meta column: each record's bytes after decompress, before deserialize


class HeaderDecoder:
    """Decode a batch of payloads by their ``Content-Encoding`` and ``Content-Type`` headers.

    ``schema`` is used for the formats that need one; ``no_schema`` is the hint their refusal
    ends with when none was given. The returned batch has the records, ``meta[SERIALIZED_SIZE]``
    (their size before compression) and, in ``rejected``, each message that did not decode with
    the stage and the reason.
    """

    def __init__(self, schema: SchemaSpec = None, *, allow_pickle: bool = False,
                 no_schema: str = "set `schema:`", dictionaries: str | None = None,
                 dictionary: bytes | None = None) -> None:
        """``dictionaries`` (``nats://BUCKET``): the store the zstd dictionaries that frames name by id are
        fetched from (handed by whoever runs the decoder: ``store_uses``; then ``prepare`` before each call), as
        ``decompress`` fetches them; ``dictionary``: a dictionary's bytes, for frames that do not name theirs."""
        self.has_schema = schema is not None  # a registered schema too: each record is read by its header
        self.no_schema = no_schema
        self.decompress = Decompress("auto", dictionaries=dictionaries, dictionary=dictionary)
        self.deserialize = Deserialize("auto", schema=schema, allow_pickle=allow_pickle)
        self.decompress.precedes([self.deserialize.stage])  # its bytes are decoded next: their headers stay as read
        self._schema_needed: dict[str | None, str | None] = {}

    def _refusal(self, content_type: str | None) -> str | None:
        """Why a record of this ``Content-Type`` cannot be decoded here (a format that needs a schema), or None."""
        if content_type not in self._schema_needed:
            why = None
            try:
                fmt = format_for_content_type(content_type)
            except KeyError:
                fmt = None  # deserialize says why
            if fmt is not None and fmt.needs_schema and not self.has_schema:
                why = f"{content_type} ({fmt.name}) carries no schema on the wire: {self.no_schema}"
            self._schema_needed[content_type] = why
        return self._schema_needed[content_type]

    def _check(self, content_type: str | None) -> Callable[[Any], Any]:
        """What a record of this ``Content-Type`` goes through before it is decoded: refused when its format
        needs a schema none was given, else kept as it is."""
        why = self._refusal(content_type)
        return _kept if why is None else failing(StageError("deserialize", "auto", why))

    def store_uses(self) -> Sequence[StoreUse]:
        """The dictionary store ``dictionaries`` names and the schema store ``schema`` names (a registered
        schema: ``registry``, ``nats://SCHEMAS/points``), those it names (``core.stores.UsesStores``)."""
        return (*self.decompress.store_uses(), *self.deserialize.store_uses())

    def use_store(self, use: StoreUse, store: Any) -> None:
        (self.deserialize if use.kind == SCHEMAS else self.decompress).use_store(use, store)

    async def open(self, parts: Sequence[Any]) -> None:
        """The registered schema records are read as, once the schema store is open."""
        await self.deserialize.open(parts)

    async def close(self) -> None:
        await self.deserialize.close()
        await self.decompress.close()

    async def prepare(self, batch: Batch) -> None:
        """Fetch the dictionaries ``batch``'s frames name and the registered schemas its ``Wirepipe-Schema``
        headers name that are not held yet."""
        await self.decompress.prepare(batch)
        await self.deserialize.prepare(batch)

    def __call__(self, batch: Batch) -> Batch:
        batch.map_by_header(Header.CONTENT_TYPE, self._check, "deserialize", "auto")
        batch = self.decompress(batch)
        batch.meta[SERIALIZED_SIZE] = [len(v) for v in batch.values]
        return self.deserialize(batch)


def _kept(value: Any) -> Any:
    return value
