"""The schema registry in a NATS KV bucket (``WIREPIPE_SCHEMAS`` unless told otherwise).

Two kinds of key, readable by any NATS client (``nats kv get WIREPIPE_SCHEMAS names.points``):

- ``fingerprints.<fingerprint>``: a schema, under the 16 hex digits the ``Wirepipe-Schema`` header carries. JSON:
  ``{"fingerprint", "canonical", "schema"}`` (the canonical form the fingerprint is the SHA-256 of, and the
  schema's document in wirepipe's schema language, or its field names). Created once, never replaced: a consumer
  that meets a fingerprint reads this one key.
- ``names.<name>``: a name's entry. JSON: ``{"name", "compatibility", "versions": [{"version", "fingerprint",
  "registered"}, ...]}``, oldest first. A push rewrites it with the KV's revision check (``update(last=...)``,
  ``create`` for a new name), so of two pushers only one writes a given revision; the other reads the entry again
  and takes the next number (``connectors/schema_registry.py``).

Compared with Confluent's REST registry: a subject is a name here, its versions are the entry's list, and the
global schema id is the fingerprint, which any publisher computes without asking.

A request the server does not answer in ``timeout`` is ``NotConnected`` (the run loop holds the batch and asks
again); a missing bucket, for a reader, is ``NotRegistered`` naming the fix.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any, Literal, TypeVar

from pydantic import Field

from ...core.errors import ConfigError, NotConnected, WirepipeError
from ...core.models import Duration, Strict
from ...core.stores import RESOURCE_NAME, NotRegistered
from ..schema_registry import NameEntry, SchemaRegistry
from .connection import NatsConnection, NatsConnectionConfig

DEFAULT_BUCKET = "WIREPIPE_SCHEMAS"
SCHEME = "nats://"
FINGERPRINTS, NAMES = "fingerprints.", "names."

T = TypeVar("T")


class KvBackend:
    """A registry's entries and schemas in one KV bucket, through a connection of its own (a schema read never
    queues behind records)."""

    def __init__(self, connection: NatsConnectionConfig, bucket: str = DEFAULT_BUCKET, *, timeout: float = 5.0) -> None:
        self.connection = connection
        self.bucket = bucket
        self.timeout = timeout
        self.where = f"{SCHEME}{bucket}"
        self._conn: NatsConnection | None = None
        self._kv: Any = None

    async def open(self, create: bool = False) -> None:
        """Connect, and find the bucket (``create``: make it when it is missing, as a push does)."""
        from nats.js.errors import BucketNotFoundError

        if self._kv is not None:
            return
        conn = NatsConnection(self.connection, role="schemas")
        self._conn = conn
        js = (await conn.connect()).jetstream(timeout=self.timeout)
        try:
            self._kv = await self._call(js.key_value(self.bucket))
        except BucketNotFoundError:
            if not create:
                raise NotRegistered(f"no schema registry bucket {self.bucket} on the server at {conn.public_url} "
                                    f"(push a schema to create it: wirepipe schema push FILE --name NAME "
                                    f"--registry {self.where})") from None
            from nats.js.api import KeyValueConfig

            self._kv = await self._call(js.create_key_value(KeyValueConfig(
                bucket=self.bucket, description="schemas by fingerprint and by name (wirepipe schema push)")))

    async def close(self) -> None:
        conn, self._conn, self._kv = self._conn, None, None
        if conn is not None:
            await conn.close()

    async def read_entry(self, name: str) -> tuple[NameEntry | None, Any]:
        data, revision = await self._get(NAMES + name)
        return (NameEntry.from_json(data) if data is not None else None), revision

    async def write_entry(self, entry: NameEntry, token: Any) -> bool:
        from nats.js.errors import KeyWrongLastSequenceError

        kv = self._require()
        key, value = NAMES + entry.name, entry.to_json()
        try:
            await self._call(kv.create(key, value) if not token else kv.update(key, value, last=token))
        except KeyWrongLastSequenceError:
            return False  # another push wrote it since it was read
        return True

    async def read_schema(self, fingerprint: str) -> bytes | None:
        return (await self._get(FINGERPRINTS + fingerprint))[0]

    async def write_schema(self, fingerprint: str, stored: bytes) -> None:
        from nats.js.errors import KeyWrongLastSequenceError

        with contextlib.suppress(KeyWrongLastSequenceError):  # kept already: a fingerprint names one schema
            await self._call(self._require().create(FINGERPRINTS + fingerprint, stored))

    async def names(self) -> list[str]:
        from nats.js.errors import NoKeysError

        try:
            keys = await self._call(self._require().keys())
        except NoKeysError:
            return []
        return sorted(k[len(NAMES):] for k in keys if k.startswith(NAMES))

    async def _get(self, key: str) -> tuple[bytes | None, int]:
        from nats.js.errors import KeyNotFoundError

        try:
            entry = await self._call(self._require().get(key))
        except KeyNotFoundError:  # KeyDeletedError too
            return None, 0
        return entry.value, entry.revision

    def _require(self) -> Any:
        if self._kv is None:
            raise WirepipeError(f"{self.where}: the registry is opened first (the pipeline opens its resources "
                                "before its operators)")
        return self._kv

    async def _call(self, request: Awaitable[T]) -> T:
        """One request, bounded by ``timeout``: no answer (or a closed connection) is ``NotConnected``."""
        import nats.errors
        from nats.js.errors import APIError, KeyValueError, NotFoundError, ServiceUnavailableError

        try:
            return await asyncio.wait_for(request, self.timeout + 1)
        except (asyncio.TimeoutError, nats.errors.TimeoutError, nats.errors.ConnectionClosedError,
                nats.errors.NoRespondersError, nats.errors.OutboundBufferLimitError, ServiceUnavailableError) as exc:
            raise NotConnected(f"schema registry {self.where}: the server did not answer ({type(exc).__name__})"
                               ) from None
        except (NotFoundError, KeyValueError):  # the bucket's answers: the caller's to read
            raise
        except APIError as exc:
            raise WirepipeError(f"schema registry {self.where}: {exc.description or exc}") from None


def nats_registry(server: str | NatsConnectionConfig | None, bucket: str = DEFAULT_BUCKET, *,
                  timeout: float = 5.0) -> SchemaRegistry:
    """The registry in ``bucket`` on ``server`` (a url, the embedded server when None, or a whole connection with
    its credentials): ``wirepipe schema``'s."""
    config = server if isinstance(server, NatsConnectionConfig) else NatsConnectionConfig(url=server)
    return SchemaRegistry(KvBackend(config, bucket, timeout=timeout))


class NatsRegistryConfig(Strict):
    """The schema registry in a NATS KV bucket, reached through the resource's own `nats:` settings or, without
    them, those of the pipeline's NATS source or sink (its URL, auth and TLS; a connection of its own)."""

    type: Literal["nats"]
    bucket: str = Field(default=DEFAULT_BUCKET, pattern=RESOURCE_NAME, description="the KV bucket")
    nats: NatsConnectionConfig | None = Field(default=None, description="how to reach the server; default: as the "
                                              "pipeline's NATS source or sink does")
    timeout: Duration = Field(default=5.0, gt=0, description="one request to the bucket; past it the batch is held "
                              "and the request made again")
    retry_after: Duration = Field(default=30.0, gt=0, description="a fingerprint the registry does not hold is asked "
                                  "for again after this long (its records are dead-lettered meanwhile)")

    def build(self, connection: NatsConnectionConfig | None = None) -> SchemaRegistry:
        """The registry; ``connection``: the pipeline's NATS settings, used when the resource gives none."""
        connection = self.nats or connection
        if connection is None:
            raise ConfigError(f"the pipeline has no NATS source or sink to reach the schema registry {SCHEME}"
                              f"{self.bucket} through: give the resource `nats: {{url: ...}}`")
        return SchemaRegistry(KvBackend(connection, self.bucket, timeout=self.timeout), retry_after=self.retry_after)
