"""zstd dictionaries kept in a NATS Object Store bucket, found by the id every zstd frame carries.

A publisher names a dictionary (``nats://BUCKET/NAME``); its frames carry the dictionary's id,
and a consumer fetches the dictionary by that id. So each dictionary is stored twice in the
bucket: under ``NAME`` (the current one of that name: what ``nats object get BUCKET NAME`` or a
peer in another language reads) and under ``id/<dictionary id>``, which is never replaced. A
dictionary trained again under the same name has another id (zstd derives it from the content),
so messages compressed with the old one stay readable while they exist.

Why an Object Store and not a KV bucket: a KV value is one message, bounded by the server's
``max_payload`` (a server set to 64 KiB refuses a 112 KiB dictionary); an object is cut into
128 KiB chunks, whatever the limit, and carries a SHA-256 digest, so a damaged object is told
from a good one (not a replaced one: whoever rewrites an object rewrites its digest; the bytes are
checked against the digest each publisher stamps where they are used, ``operators/shared_dictionaries.py``,
whatever store they came from). Every read is bounded: an object larger than the caller's cap (the
decompressor's ``max_output_size``) is refused from its size before a chunk is read, and the
chunks stop at the cap whatever the size claims.

``DictionaryBucket`` reads and writes a bucket through a connected client (``wirepipe dict``);
``NatsDictionaries`` is the bucket as a pipeline's dictionary store (``core.stores.DictionaryStore``: a connection
of its own, opened with the pipeline's resources), built from ``NatsDictionariesConfig``.

Errors: ``DictionaryUnusable`` says why a dictionary cannot be used (not in the bucket, no such
bucket, too large, damaged): the records that need it are dead-lettered with that reason.
``NotConnected`` says the server did not answer in time: the caller retries.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator

from ...codecs.zstd import MAX_DICTIONARY_SIZE
from ...core.errors import ConfigError, NotConnected, WirepipeError
from ...core.models import Duration, Strict
from ...core.stores import NATS_SCHEME, DictionaryMissing, DictionaryUnusable
from ..dictionary_stores import RETRY_AFTER, checked, over_cap
from .connection import NatsConnection, NatsConnectionConfig
from .names import bucket_name

ID_PREFIX = "id/"
ID_HEADER = "Wirepipe-Dictionary-Id"  # on each object: the id of the dictionary it holds
_CHUNK = 128 * 1024


@dataclass
class DictionaryEntry:
    """One named dictionary of a bucket, as ``wirepipe dict list`` shows it."""

    name: str
    dict_id: int | None
    size: int
    modified: str
    description: str


class DictionaryBucket:
    """The dictionaries of one Object Store bucket, read and written through a connected nats-py client.

    ``timeout`` bounds every request (a fetch of all the chunks of one dictionary counts as one).
    """

    def __init__(self, nc: Any, bucket: str, *, timeout: float = 5.0) -> None:
        self.nc = nc
        self.bucket = bucket
        self.timeout = timeout
        self._js = nc.jetstream(timeout=timeout)
        self._store: Any = None

    # --- reading ------------------------------------------------------------------------------------

    async def by_id(self, dict_id: int, cap: int) -> bytes:
        """The dictionary whose id is ``dict_id``, checked to be one (its magic and that id)."""
        data = await self.read(f"{ID_PREFIX}{dict_id}", cap)
        self._check(data, dict_id, f"{ID_PREFIX}{dict_id}")
        return data

    async def by_name(self, name: str, cap: int) -> bytes:
        """The current dictionary called ``name``, checked to be a trained zstd dictionary."""
        data = await self.read(name, cap)
        self._check(data, None, name)
        return data

    async def read(self, name: str, cap: int) -> bytes:
        """An object's bytes, at most ``cap`` of them, with its digest checked."""
        from nats.js.errors import ObjectNotFoundError

        store = await self._bucket()
        try:
            info = await self._call(store.get_info(name))
        except ObjectNotFoundError:
            raise DictionaryMissing(f"no dictionary {name!r} in bucket {self.bucket}") from None
        size = info.size or 0
        if size > cap:
            raise over_cap(size, cap, f"dictionary {name!r} in bucket {self.bucket}")
        data = await self._call(self._chunks(info, cap)) if size else b""
        digest = (info.digest or "").partition("=")[2]
        if len(data) != size or (digest and base64.urlsafe_b64decode(digest) != hashlib.sha256(data).digest()):
            raise DictionaryUnusable(f"dictionary {name!r} in bucket {self.bucket} is damaged: its chunks do "
                                     f"not match its size ({size} bytes) and SHA-256 digest")
        return data

    async def _chunks(self, info: Any, cap: int) -> bytes:
        """The object's chunks in order through an ordered consumer, stopping past ``cap`` bytes."""
        sub = await self._js.subscribe(f"$O.{self.bucket}.C.{info.nuid}", ordered_consumer=True)
        data = bytearray()
        try:
            while True:
                msg = await sub.next_msg(timeout=self.timeout)
                data += msg.data
                if len(data) > cap:
                    raise DictionaryUnusable(f"dictionary {info.name!r} in bucket {self.bucket} holds more than "
                                             f"max_output_size ({cap} bytes): refused")
                if msg.metadata.num_pending == 0:
                    return bytes(data)
        finally:
            await sub.unsubscribe()

    def _check(self, data: bytes, dict_id: int | None, name: str) -> None:
        checked(data, dict_id, f"dictionary {name!r} in bucket {self.bucket}")

    async def entries(self) -> list[DictionaryEntry]:
        """The named dictionaries (not their ``id/`` copies), by name."""
        from nats.js.errors import NotFoundError

        store = await self._bucket()
        try:
            infos = await self._call(store.list(ignore_deletes=True))
        except NotFoundError:  # nats-py's word for an empty bucket
            return []
        return sorted((self.entry(i) for i in infos if not i.name.startswith(ID_PREFIX)), key=lambda e: e.name)

    async def ids(self) -> list[int]:
        """The ids of every dictionary the bucket holds (its ``id/<id>`` objects), in order."""
        from nats.js.errors import NotFoundError

        store = await self._bucket()
        try:
            infos = await self._call(store.list(ignore_deletes=True))
        except NotFoundError:
            return []
        names = (i.name[len(ID_PREFIX):] for i in infos if i.name.startswith(ID_PREFIX))
        return sorted(int(n) for n in names if n.isdigit())

    async def info(self, name: str) -> DictionaryEntry:
        from nats.js.errors import ObjectNotFoundError

        store = await self._bucket()
        try:
            return self.entry(await self._call(store.get_info(name)))
        except ObjectNotFoundError:
            raise DictionaryMissing(f"no dictionary {name!r} in bucket {self.bucket}") from None

    @staticmethod
    def entry(info: Any) -> DictionaryEntry:
        raw = (info.headers or {}).get(ID_HEADER)
        value = raw[0] if isinstance(raw, list) else raw
        return DictionaryEntry(info.name, int(value) if value else None, info.size or 0, info.mtime or "",
                               info.description or "")

    # --- writing ------------------------------------------------------------------------------------

    async def publish(self, name: str, data: bytes, description: str = "") -> int:
        """Store a trained dictionary as ``id/<its id>`` and as ``name`` (creating the bucket if needed);
        returns its id. An id the bucket already holds with other bytes is refused: a frame would find the
        wrong dictionary."""
        from ...codecs.zstd import zstd_dictionary_id

        dict_id = zstd_dictionary_id(data)
        if not dict_id:
            raise WirepipeError("not a trained zstd dictionary: it has no id a frame could name")
        store = await self._bucket(create=True)
        key = f"{ID_PREFIX}{dict_id}"
        try:
            existing: bytes | None = await self.by_id(dict_id, max(len(data), MAX_DICTIONARY_SIZE))
        except DictionaryMissing:
            existing = None
        except DictionaryUnusable:  # damaged: these bytes, which have that id, repair it
            existing = b""
        if existing and existing != data:
            raise WirepipeError(f"bucket {self.bucket} already holds another dictionary with id {dict_id}: "
                                "train again (other samples give another id)")
        if existing != data:
            await self._put(store, key, data, dict_id, description)
        await self._put(store, name, data, dict_id, description)
        return dict_id

    async def _put(self, store: Any, name: str, data: bytes, dict_id: int, description: str) -> None:
        from nats.js.api import ObjectMeta, ObjectMetaOptions

        meta = ObjectMeta(name=name, description=description or None, headers={ID_HEADER: str(dict_id)},
                          options=ObjectMetaOptions(max_chunk_size=_CHUNK))
        await self._call(store.put(name, data, meta=meta))

    # --- the bucket and its errors --------------------------------------------------------------------

    async def _bucket(self, create: bool = False) -> Any:
        if self._store is not None:
            return self._store
        from nats.js.errors import BucketNotFoundError

        try:
            self._store = await self._call(self._js.object_store(self.bucket))
        except BucketNotFoundError:
            if not create:
                raise DictionaryMissing(f"no dictionary bucket {self.bucket} on the server (publish one: "
                                         f"wirepipe dict train --to nats://{self.bucket}/NAME)") from None
            from nats.js.api import ObjectStoreConfig

            self._store = await self._call(self._js.create_object_store(
                self.bucket, config=ObjectStoreConfig(description="zstd dictionaries (wirepipe dict)")))
        return self._store

    async def _call(self, request: Any) -> Any:
        """One request, bounded by ``timeout``; a server that does not answer (or a closed connection) is
        ``NotConnected``, an error JetStream answers with is ``DictionaryUnusable``."""
        import nats.errors
        from nats.js.errors import APIError, NotFoundError, ServiceUnavailableError

        try:
            return await asyncio.wait_for(request, self.timeout + 1)
        except (asyncio.TimeoutError, nats.errors.TimeoutError, nats.errors.ConnectionClosedError,
                nats.errors.NoRespondersError, nats.errors.OutboundBufferLimitError, ServiceUnavailableError) as exc:
            raise NotConnected(f"dictionary bucket {self.bucket}: the server did not answer "
                               f"({type(exc).__name__})") from None
        except NotFoundError:
            raise
        except APIError as exc:
            raise DictionaryUnusable(f"dictionary bucket {self.bucket}: {exc.description or exc}") from None


def describe_training(report: dict[str, Any]) -> str:
    """The training report kept as an object's description (JSON: one line any client shows)."""
    return json.dumps(report, sort_keys=True)


# --- the bucket as a pipeline's dictionary store -------------------------------------------------------------


class NatsDictionaries:
    """The dictionaries of one bucket, as ``compress`` and ``decompress`` read them (``core.stores.DictionaryStore``),
    through a connection of its own (a dictionary's chunks never queue behind records), made when the pipeline
    opens its resources."""

    def __init__(self, config: NatsDictionariesConfig, connection: NatsConnectionConfig) -> None:
        """``config``: the resource, its bucket named; ``connection``: how it reaches the server (its own ``nats:``
        settings, or the pipeline's)."""
        assert config.bucket is not None, "the resources section names the bucket after the resource"
        self.config = config
        self.connection = connection
        self.where = f"{NATS_SCHEME}{config.bucket}"
        self._conn: NatsConnection | None = None
        self._reader: DictionaryBucket | None = None

    @property
    def bucket(self) -> str:
        return self.config.bucket or ""  # named after the resource when not given

    @property
    def retry_after(self) -> float:
        return self.config.retry_after

    async def open(self) -> None:
        if self._reader is not None:
            return
        conn = NatsConnection(self.connection, role="dictionaries")
        self._conn = conn
        self._reader = DictionaryBucket(await conn.connect(), self.bucket, timeout=self.config.timeout)

    async def close(self) -> None:
        conn, self._conn, self._reader = self._conn, None, None
        if conn is not None:
            await conn.close()

    def _require(self) -> DictionaryBucket:
        if self._reader is None:
            raise WirepipeError(f"{self.where}: the dictionary store is opened first (the pipeline opens its "
                                "resources before its operators)")
        return self._reader

    async def by_id(self, dict_id: int, cap: int) -> bytes:
        return await self._require().by_id(dict_id, cap)

    async def by_name(self, name: str, cap: int) -> bytes:
        return await self._require().by_name(name, cap)

    async def ids(self) -> Sequence[int]:
        return await self._require().ids()


class NatsDictionariesConfig(Strict):
    """The zstd dictionaries of a NATS Object Store bucket (``wirepipe dict train`` publishes them), reached through
    the resource's own `nats:` settings or, without them, those of the pipeline's NATS source or sink (its URL, auth
    and TLS; a connection of its own)."""

    type: Literal["nats"]
    bucket: str | None = Field(default=None, description="the Object Store bucket; default: "
                               "the resource's name")
    nats: NatsConnectionConfig | None = Field(default=None, description="how to reach the server; default: as the "
                                              "pipeline's NATS source or sink does")
    timeout: Duration = Field(default=5.0, gt=0, description="one request to the bucket; past it the batch is held "
                              "and the request made again")
    retry_after: Duration = Field(default=RETRY_AFTER, gt=0, description="a dictionary the bucket does not hold (or "
                                  "holds damaged) is asked for again after this long (its records are dead-lettered "
                                  "meanwhile)")

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, v: str | None) -> str | None:
        return bucket_name(v) if v is not None else v

    def build(self, connection: NatsConnectionConfig | None = None) -> NatsDictionaries:
        """The store; ``connection``: the pipeline's NATS settings, used when the resource gives none."""
        reach = self.nats or connection
        if reach is None:
            raise ConfigError(f"the pipeline has no NATS source or sink to reach the dictionaries {NATS_SCHEME}"
                              f"{self.bucket} through: declare resources.dictionaries.{self.bucket} as "
                              "{type: nats, nats: {url: ...}}, or as {type: folder, path: ...} (a folder of .zdict "
                              "files)")
        return NatsDictionaries(self, reach)
