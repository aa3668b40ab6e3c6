"""The ``nats`` sink (core NATS publish) and the publishing rules the JetStream sink shares.

Subjects are templates: ``points`` (one subject), ``blocks.{seq}`` (any per-record meta
column), ``out.{subject}`` (the subject the record came in on, for relays; a ``subject``
operator sets it from record fields, e.g. ``orders.{region}``).

Oversized records: nats-py sends a payload whose size plus headers exceeds the
server's ``max_payload`` and the server then closes the connection. The sink checks
payload + headers itself and refuses such a record (it goes to the dead-letter
destination with a clear error); the connection stays up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, field_validator

from ...core.batch import Batch, Rejected
from ...core.errors import ConfigError, NotConnected, WirepipeError
from ...core.models import Duration
from ...wire import (
    HDR_LINE,
    SENT_AT_SIZE,
    STAMP_SIZE,
    Header,
    dead_letter_payloads,
    header_size,
    template_fields,
)
from ..base import Configured, Refusal, Sink
from .connection import NatsConnection, NatsConnectionConfig, embedded_refusal
from .gaps import PUBLISHER, SEQ, PublisherStamp

log = logging.getLogger("wirepipe.nats")

SENT_AT = Header.SENT_AT.value
STAGE_HEADER = Header.STAGE.value
ERROR_HEADER = Header.ERROR.value
# Per-record header blocks are measured exactly only for payloads this close to the limit.
_HEADER_SLACK = 65536


class SubjectTemplate:
    """``points``, ``blocks.{seq}``, ``out.{subject}``: one subject per record from meta columns."""

    def __init__(self, template: str) -> None:
        self.template = template
        self.fields = template_fields(template)

    @property
    def fixed(self) -> bool:
        return not self.fields

    def render(self, batch: Batch) -> str | list[str]:
        if not self.fields:
            return self.template
        n = len(batch.values)
        columns: dict[str, Sequence[Any]] = {}
        for f in self.fields:
            if f == "subject":
                s = batch.subjects
                if s is None:
                    raise WirepipeError(f"subject template {self.template!r}: the records have no subject")
                columns[f] = [s] * n if isinstance(s, str) else s
            elif f in batch.meta:
                columns[f] = batch.meta[f]
            else:
                raise WirepipeError(
                    f"subject template {self.template!r}: no column {f!r} (available: subject, "
                    f"{', '.join(batch.meta) or 'none'}; set per-record subjects with a `subject` operator)")
        if self.template == "{subject}":
            return list(columns["subject"])
        fmt = self.template.format
        names = list(columns)
        cols = [columns[k] for k in names]
        return [fmt(**dict(zip(names, row, strict=True))) for row in zip(*cols, strict=True)]


def refuse_oversized(batch: Batch, headers: dict[str, str] | list[dict[str, str] | None] | None,
                     max_payload: int, stage: str, operator: str, extra: int = 0) -> None:
    """Move records whose payload + headers exceed ``max_payload`` to ``batch.rejected``.

    ``extra`` is header bytes the sink adds to every record (``Wirepipe-Sent-At``,
    ``Nats-Msg-Id``). The common case costs one ``max(map(len, values))``.
    """
    values = batch.values
    if not values:
        return
    longest = max(map(len, values))
    if isinstance(headers, list):
        if longest + extra + HDR_LINE <= max_payload - _HEADER_SLACK:
            return
        sizes = [header_size(h) + extra if h else (extra + HDR_LINE if extra else 0) for h in headers]
        bad = [i for i, v in enumerate(values) if len(v) + sizes[i] > max_payload]
    else:
        hsize = header_size(headers) + extra + (HDR_LINE if extra and not headers else 0)
        if longest + hsize <= max_payload:
            return
        sizes = None
        bad = [i for i, v in enumerate(values) if len(v) + hsize > max_payload]
    if not bad:
        return
    for i in bad:
        h = sizes[i] if sizes is not None else hsize
        batch.rejected.append(batch.reject(
            i, stage, operator,
            f"payload {len(values[i])} B + headers {h} B exceeds the server's max_payload {max_payload} B: "
            "refused (the connection stays up); compress harder, split the record or raise max_payload"))
    drop = set(bad)
    batch.keep([i for i in range(len(values)) if i not in drop])


def wire_headers(batch: Batch, mode: str) -> dict[str, str] | list[dict[str, str] | None] | None:
    """The headers to publish: the batch's (shared dict or per record), or none with ``headers: none``."""
    if mode == "none":
        return None
    h = batch.headers
    if isinstance(h, list):
        return h
    return dict(h) if h else {}


def require_bytes(batch: Batch, stage: str, operator: str) -> None:
    values = batch.values
    if values and not isinstance(values[0], (bytes, bytearray, memoryview)):
        raise ConfigError(
            f"{stage} ({operator}) needs bytes but got {type(values[0]).__name__}: add a `serialize` operator "
            "(and `compress`) before the NATS sink")


class NatsSink(Configured, Sink):
    """Publishes every record of a batch to core NATS with the wire-contract headers."""

    type = "nats"
    stage = "publish"

    def __init__(self, subject: str, **fields: Any) -> None:
        """``fields`` are ``NatsSinkConfig``'s (``headers``, ``flush_timeout``, the connection's ``url``,
        ``auth``, ``reconnect``...), validated as the YAML is: declared once, there."""
        self._init(NatsSinkConfig, subject=subject, **fields)

    def _configure(self, config: PublishConfig) -> None:
        self.config = config
        self.subject = SubjectTemplate(config.subject)
        self.headers_mode = config.headers
        self.flush_timeout = config.flush_timeout
        self.conn = NatsConnection(config, role="publisher")
        self.nc: Any = None
        self.max_payload = 0
        self.records = 0
        self.bytes = 0
        self.stamp = PublisherStamp()  # Wirepipe-Publisher / Wirepipe-Seq: consumers count gaps

    @property
    def params(self) -> dict[str, Any]:
        return {"subject": self.subject.template, "headers": self.headers_mode, **self.config.public_params()}

    def refuse_workers(self, workers: int) -> Refusal | None:
        return embedded_refusal(self.config, workers)

    async def open(self) -> None:
        self.nc = await self.conn.connect()
        self.max_payload = int(self.nc.max_payload)

    async def write(self, batch: Batch) -> None:
        if not batch.values:
            return
        require_bytes(batch, self.stage, self.type)
        headers = wire_headers(batch, self.headers_mode)
        extra = SENT_AT_SIZE + STAMP_SIZE if headers is not None else 0
        refuse_oversized(batch, headers, self.max_payload, self.stage, self.type, extra)
        if isinstance(headers, list) and len(headers) != len(batch.values):
            headers = batch.headers  # refuse_oversized dropped records: the batch's column is aligned
        if not batch.values:
            return
        first = self.stamp.take(len(batch.values)) if headers is not None else 0
        await self.publish(self.subject.render(batch), batch.values, headers, first)

    async def publish(self, subjects: str | list[str], values: list[bytes],
                      headers: dict[str, str] | list[dict[str, str] | None] | None, first: int = 0) -> None:
        """The hot loop: one ``nc.publish`` per record, stamped just before it with ``Wirepipe-Sent-At``
        and, from ``first`` on, ``Wirepipe-Seq`` (with headers; ``first`` is 0 only without them)."""
        pub = self.nc.publish
        now = time.time_ns
        pid = self.stamp.id
        seq = first
        try:
            if headers is None:
                if isinstance(subjects, str):
                    for v in values:
                        await pub(subjects, v)
                else:
                    for s, v in zip(subjects, values, strict=True):
                        await pub(s, v)
            elif isinstance(headers, dict):
                # nats-py encodes the headers before its first await, so one dict is reused.
                h = headers
                h[PUBLISHER] = pid
                if isinstance(subjects, str):
                    for v in values:
                        h[SENT_AT] = str(now())
                        h[SEQ] = str(seq)
                        seq += 1
                        await pub(subjects, v, headers=h)
                else:
                    for s, v in zip(subjects, values, strict=True):
                        h[SENT_AT] = str(now())
                        h[SEQ] = str(seq)
                        seq += 1
                        await pub(s, v, headers=h)
            else:
                subs = [subjects] * len(values) if isinstance(subjects, str) else subjects
                for s, v, hd in zip(subs, values, headers, strict=True):
                    await pub(s, v, headers={**(hd or {}), SENT_AT: str(now()), PUBLISHER: pid, SEQ: str(seq)})
                    seq += 1
        except Exception as exc:
            await self._publish_failed(exc, subjects, values, headers, first)
        self.records += len(values)
        self.bytes += sum(map(len, values))

    async def _publish_failed(self, exc: Exception, subjects: Any, values: list[bytes], headers: Any,
                              first: int) -> None:
        """A full outbound buffer while disconnected: wait for the reconnect, then publish again (at-most-once)."""
        import nats.errors

        if not isinstance(exc, nats.errors.OutboundBufferLimitError):
            if isinstance(exc, nats.errors.ConnectionClosedError):
                raise NotConnected(f"NATS connection to {self.conn.public_url} is closed") from None
            raise WirepipeError(f"publish to {self.conn.public_url} failed: {exc}") from None
        # Records before the failure are in the outbound buffer; republishing all of the batch may
        # duplicate some, which core NATS (at-most-once, no dedup) accepts as a trade for not losing them.
        # They keep their Wirepipe-Seq, so consumers count them as duplicates, not as new records.
        while not self.nc.is_connected:
            if self.nc.is_closed:
                raise NotConnected(f"NATS connection to {self.conn.public_url} is closed") from None
            await asyncio.sleep(0.05)
        await self.publish(subjects, values, headers, first)

    async def write_rejected(self, rejected: list[Rejected]) -> None:
        """As a dead-letter destination: publish the original payloads with stage and error headers."""
        batch = dead_letter_payloads(rejected)
        refuse_oversized(batch, batch.headers, self.max_payload, self.stage, self.type, SENT_AT_SIZE + STAMP_SIZE)
        if batch.rejected:
            log.error("%d dead letter(s) too large to publish to %s: dropped", len(batch.rejected),
                      self.subject.template)
        if batch.values:
            await self.publish(self.subject.render(batch), batch.values, batch.headers,
                               self.stamp.take(len(batch.values)))

    async def flush(self) -> None:
        if self.nc is not None and self.nc.is_connected:
            try:
                await self.nc.flush(timeout=self.flush_timeout)
            except Exception as exc:
                raise WirepipeError(f"flush to {self.conn.public_url} failed: {type(exc).__name__}") from None

    async def close(self) -> None:
        with contextlib.suppress(WirepipeError):
            await self.flush()
        await self.conn.close()


class PublishConfig(NatsConnectionConfig):
    """The fields both NATS sinks have (``nats``, ``jetstream``): the connection, where and how they publish."""

    subject: str = Field(description="subject or template: points, blocks.{seq}, out.{subject}")
    headers: Literal["wire", "none"] = "wire"
    flush_timeout: Duration = 10.0

    @field_validator("subject")
    @classmethod
    def _template(cls, v: str) -> str:
        SubjectTemplate(v)
        return v


class NatsSinkConfig(PublishConfig):
    """``sink: {type: nats, url: "${NATS_URL:-embedded}", subject: points}``"""

    type: Literal["nats"]

    def build(self) -> NatsSink:
        return NatsSink.from_config(self)


SINKS = {"nats": NatsSinkConfig}
RANK = 2  # where its types come in the "allowed" lists (connectors/__init__.py)
