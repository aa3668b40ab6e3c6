"""JetStream: the ``jetstream`` sink (at-least-once publish) and source (durable pull or ordered consumer).

Sink. Every record carries a deterministic ``Nats-Msg-Id``, so a record published twice
(a retry, a re-run of a crashed job) is stored once within the stream's duplicate window.
The default (``msg_id: auto``) is ``{pipeline}-{source}-{position}-{payload hash}``: the
source's identity (its type and parameters, e.g. the file it reads; ``Source.identity``),
the record's position in it (``seq``; for a core NATS source, the publisher's
``Wirepipe-Publisher.Wirepipe-Seq``, else a per-run counter) and a BLAKE2b hash of the
payload: a re-run of the same input is deduplicated, different content never is.
Publishes are asynchronous inside a bounded window; the sink tracks each ack itself (one
reply subscription, no future per record: nats-py's ``publish_async`` futures can stay
unresolved forever and leak their window slot when a publish raises), gives every ack
its own deadline, and republishes unacknowledged records with the same id, with
backoff, until the server has them. ``flush()`` returns once every record written so
far is stored: that is when the pipeline acknowledges its own source.

Source, durable pull consumer. nats-py's ``fetch`` calls ``next_msg`` once per message
(~15k records/s with an ack each); here pull requests go straight to
``$JS.API.CONSUMER.MSG.NEXT`` with replies on one inbox read as raw protocol tuples
(``inbox.RawInbox``), a new request goes out as soon as the pipeline has taken a batch
(about two batches asked for, and never more bytes than half of ``pending_bytes_limit``:
requests carry ``max_bytes``), and a commit's acks are written as one buffer, or as one
AckAll (``ack: all``, a worker that owns its durable). Measured on 2 shared cores:
~9-10 us of consumer CPU per record against ~66 for a ``fetch`` + ack loop
(benchmarks/jetstream_consume.py). A pull request the server forgot (it restarted) is
detected by the idle heartbeat and on reconnect, and pulled again. Records are
acknowledged only after the sink has made them durable; while the sink is unavailable
they are kept with in-progress acks (``+WPI``), never nak-ed (a sink failure must not
count toward ``max_deliver``); a record a stage rejected goes to the dead-letter
destination and is terminated.

Source, ordered consumer (``ordered: true``): nats-py's ordered push consumer (no acks,
gaps repaired by the client), from a start sequence or time: the replay path.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import json
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ..batch import Batch, Rejected
from ..errors import WirepipeError
from ..pipelines.models import Duration, Size, Strict
from .base import Source
from .gaps import PUBLISHER, SEQ
from .inbox import RawInbox
from .nats import (
    _SENT_AT_SIZE,
    SENT_AT,
    NatsSink,
    Received,
    SubjectTemplate,
    SubscriptionReader,
    publish_many,
    refuse_oversized,
    rejected_payloads,
    require_bytes,
    wire_headers,
)
from .natsconn import ConnectionOptions, NatsConnection, NatsConnectionConfig, ReconnectConfig

log = logging.getLogger("wirepipe.jetstream")

MSG_ID = "Nats-Msg-Id"
_ACK = b"+ACK"
_TERM = b"+TERM"
_WPI = b"+WPI"


# --- stream definition ---------------------------------------------------------------------------


class PlacementConfig(Strict):
    """``placement: {cluster: east, tags: [ssd]}``: which servers hold the stream's replicas (as JetStream's)."""

    cluster: str | None = None
    tags: list[str] = Field(default_factory=list)


class StreamConfig(Strict):
    """``stream: {name: POINTS, subjects: ["points.>"], storage: file, duplicate_window: 2m, replicas: 3}``"""

    name: str
    subjects: list[str] | None = Field(default=None, description="default: the sink's subject")
    storage: Literal["file", "memory"] = "file"
    retention: Literal["limits", "interest", "workqueue"] = "limits"
    duplicate_window: Duration = 120.0
    max_age: Duration | None = None
    max_bytes: Size | None = None
    max_msgs: int | None = None
    max_msg_size: Size | None = None
    replicas: int = Field(default=1, ge=1, le=5, description="R1..R5: copies on distinct servers of a cluster")
    placement: PlacementConfig | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not v or any(ch in v for ch in " .*>\t\r\n/\\"):
            raise ValueError(f"stream name {v!r} may not contain spaces, '.', '*', '>' or slashes")
        return v

    def api_config(self, default_subject: str) -> Any:
        from nats.js import api

        return api.StreamConfig(
            name=self.name,
            subjects=self.subjects or [default_subject],
            storage=api.StorageType(self.storage),
            retention=api.RetentionPolicy(self.retention),
            duplicate_window=self.duplicate_window,
            max_age=self.max_age,
            max_bytes=self.max_bytes,
            max_msgs=self.max_msgs,
            max_msg_size=self.max_msg_size,
            num_replicas=self.replicas,
            placement=(api.Placement(cluster=self.placement.cluster, tags=self.placement.tags or None)
                       if self.placement is not None else None),
        )


async def ensure_stream(js: Any, spec: StreamConfig, default_subject: str) -> None:
    """Create the stream if it does not exist; an existing stream is used as it is."""
    import nats.js.errors

    try:
        await js.stream_info(spec.name)
        return
    except nats.js.errors.NotFoundError:
        pass
    try:
        await js.add_stream(spec.api_config(default_subject))
        log.info("created stream %s for %s", spec.name, ", ".join(spec.subjects or [default_subject]))
    except nats.js.errors.BadRequestError as exc:
        raise WirepipeError(f"cannot create stream {spec.name}: {exc.description}") from None


# --- sink -----------------------------------------------------------------------------------------


class _Pending:
    """One published record waiting for its ack: enough to publish it again with the same id."""

    __slots__ = ("attempts", "deadline", "headers", "msg_id", "payload", "subject")

    def __init__(self, subject: str, payload: bytes, headers: dict[str, str] | None, msg_id: str,
                 deadline: float) -> None:
        self.subject = subject
        self.payload = payload
        self.headers = headers
        self.msg_id = msg_id
        self.deadline = deadline
        self.attempts = 1


class JetStreamSink(NatsSink):
    """Publishes to JetStream inside a bounded window of unacknowledged records."""

    type = "jetstream"
    stage = "publish"

    def __init__(self, subject: str, *, options: ConnectionOptions | None = None, headers: str = "wire",
                 stream: StreamConfig | dict[str, Any] | None = None, msg_id: str = "auto",
                 window: int = 4096, ack_timeout: float = 5.0, retry: ReconnectConfig | None = None,
                 flush_timeout: float = 10.0) -> None:
        super().__init__(subject, options=options, headers=headers, flush_timeout=flush_timeout)
        self.conn.role = "jetstream publisher"
        self.stream = StreamConfig.model_validate(stream) if isinstance(stream, dict) else stream
        self.msg_id = msg_id
        self._msg_id_template: SubjectTemplate | None = None
        self.window = window
        self.ack_timeout = ack_timeout
        self.retry = retry or ReconnectConfig(wait=0.2, max_wait=5.0)
        self.pipeline_name = "pipeline"
        self.source_identity = ""  # set by the pipeline: part of the default Nats-Msg-Id
        self._id_prefix = ""
        self._unplaced = 0  # records without a position (no seq, no publisher stamp): numbered per run
        self._run = secrets.token_hex(4)
        self._prefix = ""
        self._token = 0
        self._pending: dict[str, _Pending] = {}
        self._retry: deque[_Pending] = deque()
        self._space = asyncio.Event()
        self._space.set()
        self._drained = asyncio.Event()
        self._drained.set()
        self._failed: list[Rejected] = []
        self.acked = 0
        self.duplicates = 0
        self.republished = 0
        self._fatal: str | None = None

    @property
    def params(self) -> dict[str, Any]:
        return {**super().params, "stream": self.stream.name if self.stream else None, "window": self.window}

    async def open(self) -> None:
        await super().open()
        nc = self.nc
        if self.stream is not None:
            await ensure_stream(nc.jetstream(), self.stream, self.subject.template.split("{")[0] + ">"
                                if not self.subject.fixed else self.subject.template)
        if self.msg_id == "auto":
            source = hashlib.blake2b(self.source_identity.encode(), digest_size=4).hexdigest()
            self._id_prefix = f"{self.pipeline_name}-{source}-"
        else:
            self._msg_id_template = SubjectTemplate(self.msg_id.replace("{pipeline}", self.pipeline_name))
        self._prefix = nc.new_inbox() + "."
        await nc.subscribe(self._prefix + "*", cb=self._on_ack, pending_msgs_limit=4 * self.window + 1024)
        await nc.flush(timeout=10)

    # --- acks --------------------------------------------------------------------------------

    async def _on_ack(self, msg: Any) -> None:
        entry = self._pending.pop(msg.subject[len(self._prefix):], None)
        if entry is None:
            return  # an ack for a record already retried or expired
        data = msg.data
        if not data:
            # A status reply (503 no responders: JetStream is not ready, or no stream listens).
            status = msg.headers.get("Status") if msg.headers else None
            self._retry.append(entry)
            if status == "503" and self.stream is None and not self._fatal:
                self._no_stream_seen(entry)
        elif b'"error"' in data:
            self._api_error(entry, data)
        else:
            self.acked += 1
            if b'"duplicate"' in data:
                self.duplicates += 1
        self._wake()

    def _no_stream_seen(self, entry: _Pending) -> None:
        if entry.attempts >= 3:
            self._fatal = (f"no JetStream stream stores subject {entry.subject!r} (publish got 'no responders'); "
                           "create one or give the sink a `stream:` to create")

    def _api_error(self, entry: _Pending, data: bytes) -> None:
        try:
            err = json.loads(data)["error"]
            text = f"{err.get('description', 'error')} (code {err.get('code')}, err_code {err.get('err_code')})"
        except (ValueError, KeyError, TypeError):
            text = data[:200].decode(errors="replace")
        # The server refused the record for good (stream limits, message size): dead-letter it.
        self._failed.append(Rejected(stage=self.stage, operator=self.type, error=f"JetStream refused: {text}",
                                     value=entry.payload, subject=entry.subject,
                                     headers=entry.headers, meta={"msg_id": entry.msg_id}))

    def _wake(self) -> None:
        n = len(self._pending)
        if n < self.window:
            self._space.set()
        if n == 0 and not self._retry:
            self._drained.set()

    def _expire(self) -> None:
        """Move records whose ack is overdue to the retry queue (the ack may never come)."""
        now = time.monotonic()
        pending = self._pending
        expired = []
        for token, entry in pending.items():
            if entry.deadline > now:
                break  # insertion order is deadline order
            expired.append(token)
        for token in expired:
            self._retry.append(pending.pop(token))
        if expired:
            self._wake()

    # --- publishing ----------------------------------------------------------------------------

    async def _send(self, entry: _Pending, headers: dict[str, str]) -> None:
        self._token += 1
        token = str(self._token)
        entry.deadline = time.monotonic() + self.ack_timeout
        self._pending[token] = entry
        self._drained.clear()
        await self.nc.publish(entry.subject, entry.payload, reply=self._prefix + token, headers=headers)

    async def _wait_space(self) -> None:
        """Block while the window is full; overdue acks free their slot and are retried."""
        while len(self._pending) >= self.window:
            self._space.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._space.wait(), self.ack_timeout / 4)
            self._expire()
        if self._retry:
            await self._republish()

    async def _wait_connected(self) -> None:
        while not self.nc.is_connected:
            if self.nc.is_closed:
                raise WirepipeError(f"NATS connection to {self.conn.public_url} is closed")
            await asyncio.sleep(0.05)

    async def _republish(self) -> None:
        """Publish the records whose ack failed or timed out again, same ``Nats-Msg-Id``, with backoff."""
        retry = self._retry
        if not retry:
            return
        if self._fatal:
            raise WirepipeError(self._fatal)
        attempts = max(e.attempts for e in retry)
        await asyncio.sleep(self.retry.delay(attempts - 1))
        await self._wait_connected()
        batch = list(retry)
        retry.clear()
        for entry in batch:
            entry.attempts += 1
            headers = dict(entry.headers) if entry.headers else {}
            headers[MSG_ID] = entry.msg_id
            if self.headers_mode != "none":
                headers[SENT_AT] = str(time.time_ns())
            while len(self._pending) >= self.window:
                self._space.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._space.wait(), self.ack_timeout / 4)
                self._expire()
            await self._send(entry, headers)
        self.republished += len(batch)
        log.warning("republished %d record(s) without an ack (attempt %d; same Nats-Msg-Id, deduplicated)",
                    len(batch), attempts + 1)

    async def write(self, batch: Batch) -> None:
        if not batch.values:
            return
        require_bytes(batch, self.stage, self.type)
        if self._fatal:
            raise WirepipeError(self._fatal)
        headers = wire_headers(batch, self.headers_mode)
        ids = self._ids(batch)
        id_size = len(MSG_ID) + 4 + max(map(len, ids)) if isinstance(ids, list) else len(MSG_ID) + 4 + len(ids)
        before = len(batch.values)
        refuse_oversized(batch, headers, self.max_payload, self.stage, self.type,
                         id_size + (_SENT_AT_SIZE if headers is not None else 0))
        if len(batch.values) != before:  # refused records left the columns: realign
            ids = self._ids(batch)
            headers = wire_headers(batch, self.headers_mode)
        if not batch.values:
            return
        subjects = self.subject.render(batch)
        await self._wait_connected()
        n = len(batch.values)
        subs = [subjects] * n if isinstance(subjects, str) else subjects
        id_col = [ids] * n if isinstance(ids, str) else ids
        per_record = headers if isinstance(headers, list) else None
        shared = headers if isinstance(headers, dict) else None
        now = time.time_ns
        window = self.window
        send = self._send
        for i, v in enumerate(batch.values):
            if len(self._pending) >= window or self._retry:
                await self._wait_space()
            base = per_record[i] if per_record is not None else shared
            h = dict(base) if base else {}
            h[MSG_ID] = id_col[i]
            if headers is not None:
                h[SENT_AT] = str(now())
            await send(_Pending(subs[i], v, base, id_col[i], 0.0), h)
        self.records += n
        self.bytes += sum(map(len, batch.values))

    def _ids(self, batch: Batch) -> str | list[str]:
        """The ``Nats-Msg-Id`` column: the template's, or the default (see the module docstring)."""
        if self._msg_id_template is not None:
            return self._msg_id_template.render(batch)
        positions = batch.meta.get("seq")
        if positions is None:
            positions = self._positions(batch)
        prefix = self._id_prefix
        digest = hashlib.blake2b
        return [f"{prefix}{p}-{digest(v, digest_size=8).hexdigest()}"
                for p, v in zip(positions, batch.values, strict=True)]

    def _positions(self, batch: Batch) -> list[str]:
        """Positions of records from a source without ``seq`` (core NATS): the publisher's stamp when the
        message has one (a duplicate delivery gets the same id), else this run's own counter."""
        headers = batch.headers
        n = len(batch.values)
        if isinstance(headers, list):
            out = []
            for h in headers:
                if h and PUBLISHER in h and SEQ in h:
                    out.append(f"{h[PUBLISHER]}.{h[SEQ]}")
                else:
                    self._unplaced += 1
                    out.append(f"{self._run}.{self._unplaced}")
            return out
        first = self._unplaced + 1
        self._unplaced += n
        return [f"{self._run}.{i}" for i in range(first, first + n)]

    async def flush(self) -> None:
        """Return when every record written so far is stored (acked), republishing as needed."""
        if self.nc is None:
            return
        while self._pending or self._retry:
            if self._retry:
                await self._republish()
                continue
            self._drained.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._drained.wait(), self.ack_timeout / 4)
            self._expire()
            if self._fatal:
                raise WirepipeError(self._fatal)

    @property
    def unconfirmed(self) -> int:
        """Records published and not yet stored (no ack from the server)."""
        return len(self._pending) + len(self._retry)

    def take_rejected(self) -> list[Rejected]:
        failed, self._failed = self._failed, []
        return failed

    async def write_rejected(self, rejected: list[Rejected]) -> None:
        batch = rejected_payloads(rejected)
        batch.meta["seq"] = [f"dlq-{r.meta.get('stream_seq', r.meta.get('seq'))}-{r.stage}" for r in rejected]
        await self.write(batch)

    async def close(self) -> None:
        try:
            if self.nc is not None and self.nc.is_connected:
                await asyncio.wait_for(self.flush(), self.flush_timeout)
        except (asyncio.TimeoutError, WirepipeError) as exc:
            log.error("closing the JetStream sink with %d record(s) unconfirmed: %s",
                      len(self._pending) + len(self._retry), exc or "flush timed out")
        await self.conn.close()


class JetStreamSinkConfig(NatsConnectionConfig):
    """``sink: {type: jetstream, subject: points, stream: {name: POINTS}}``"""

    type: Literal["jetstream"]
    subject: str
    headers: Literal["wire", "none"] = "wire"
    stream: StreamConfig | None = Field(default=None, description="create this stream if it does not exist")
    msg_id: str = Field(default="auto", description="Nats-Msg-Id: auto (source identity, position and payload "
                        "hash), or a template such as {pipeline}-{seq}")
    window: int = Field(default=4096, ge=1, description="unacknowledged publishes in flight")
    ack_timeout: Duration = Field(default=5.0, gt=0)
    retry: ReconnectConfig = Field(default_factory=lambda: ReconnectConfig(wait=0.2, max_wait=5.0))
    flush_timeout: Duration = 10.0

    _subject = field_validator("subject")(lambda v: (SubjectTemplate(v), v)[1])
    _msg_id = field_validator("msg_id")(
        lambda v: v if v == "auto" else (SubjectTemplate(v.replace("{pipeline}", "p")), v)[1])

    def build(self) -> JetStreamSink:
        return JetStreamSink(self.subject, options=self.connection_options(), headers=self.headers,
                             stream=self.stream, msg_id=self.msg_id, window=self.window,
                             ack_timeout=self.ack_timeout, retry=self.retry, flush_timeout=self.flush_timeout)


# --- source ---------------------------------------------------------------------------------------


def parse_ack_reply(reply: str) -> tuple[int, int, int]:
    """(stream sequence, delivery count, pending) from a ``$JS.ACK...`` reply subject (v1 and v2 forms)."""
    t = reply.split(".")
    off = 0 if len(t) == 9 else 2
    return int(t[5 + off]), int(t[4 + off]), int(t[8 + off])


class JetStreamSource(Source):
    """A durable pull consumer (default) or an ordered consumer (``ordered=True``) as batches."""

    type = "jetstream"
    stage = "consume"
    redelivers = True

    def __init__(self, subject: str | None = None, *, stream: str | None = None, durable: str | None = None,
                 options: ConnectionOptions | None = None, ordered: bool = False, deliver: str = "all",
                 start_seq: int | None = None, start_time: dt.datetime | None = None, batch_size: int = 1000,
                 batch_timeout: float = 0.005, max_ack_pending: int = 20000, ack_wait: float = 30.0,
                 max_deliver: int = 5, nak_delay: float = 1.0, expires: float = 30.0, heartbeat: float = 5.0,
                 stop_at_end: bool = False, count: int | None = None, duration: float | None = None,
                 ack: str = "explicit", pending_bytes_limit: int = 64 * 1024 * 1024) -> None:
        super().__init__(count=count, duration=duration)
        self.subject = subject
        self.stream = stream
        self.durable = durable
        self.options = options or ConnectionOptions()
        self.ordered = ordered
        # An ordered consumer has no acks: a record the sink failed never comes back, so the
        # pipeline must stop on a sink error rather than nak (and lose) it.
        self.redelivers = not ordered
        self.deliver = deliver
        self.start_seq = start_seq
        self.start_time = start_time
        self.batch_size = batch_size
        self.max_ack_pending = max_ack_pending
        self.ack_wait = ack_wait
        self.max_deliver = max_deliver
        self.nak_delay = nak_delay
        self.expires = expires
        self.heartbeat = heartbeat
        self.stop_at_end = stop_at_end
        self.ack_mode = ack
        self.pending_bytes_limit = pending_bytes_limit
        self.conn = NatsConnection(self.options, role="jetstream consumer")
        # Never hold more than the server lets us keep unacknowledged.
        self.buffer: SubscriptionReader | RawInbox = SubscriptionReader(batch_size, batch_timeout,
                                         max_buffered=max(batch_size, min(2 * batch_size, max_ack_pending)),
                                         status=self._on_status)
        self.nc: Any = None
        self.sub: Any = None
        self.consumer = ""
        self._next_subject = ""
        self._inbox = ""
        self._requested = 0  # messages asked for and not yet taken by the pipeline (nor given up by the server)
        self._pull_wake = asyncio.Event()
        self._last_activity = time.monotonic()
        self._puller: asyncio.Task[None] | None = None
        self._seen = 0
        self._lag: int | None = None
        self._at_end = asyncio.Event()
        self.acked = 0
        self.nacked = 0
        self.terminated = 0
        self.in_progress_sent = 0
        self.repulls = 0
        self._settled = 0  # acked or terminated: with `count`, the source ends when all it read is settled
        self._settle_event = asyncio.Event()
        self._avg_size = 0.0  # payload bytes per message seen so far: sizes the pull requests
        self._max_payload = 1024 * 1024

    @property
    def params(self) -> dict[str, Any]:
        return {"stream": self.stream, "subject": self.subject, "durable": self.durable, "ordered": self.ordered,
                "batch_size": self.batch_size, **self.options.public_params()}

    def lag(self) -> int | None:
        """Messages in the stream not yet delivered to this consumer (from the last message's metadata)."""
        return self._lag

    def wants_commit(self) -> bool:
        return self.count is not None and self._seen >= self.count

    @property
    def ack_pressure(self) -> int:
        """Unacknowledged records after which the pipeline should commit (half of ``max_ack_pending``)."""
        return max(1, self.max_ack_pending // 2)

    # --- setup ---------------------------------------------------------------------------------

    async def open(self) -> None:
        import nats.js.errors

        self.nc = nc = await self.conn.connect()
        js = nc.jetstream()
        if self.stream is None:
            if not self.subject:
                raise WirepipeError("the jetstream source needs a stream or a subject")
            try:
                self.stream = await js.find_stream_name_by_subject(self.subject)
            except nats.js.errors.NotFoundError:
                raise WirepipeError(f"no JetStream stream stores subject {self.subject!r}") from None
        if self.ordered:
            await self._open_ordered(js)
        else:
            await self._open_pull(js)

    def _deliver_config(self, cfg: Any) -> None:
        from nats.js import api

        cfg.deliver_policy = api.DeliverPolicy(self.deliver)
        if self.deliver == "by_start_sequence":
            cfg.opt_start_seq = self.start_seq
        elif self.deliver == "by_start_time":
            cfg.opt_start_time = self.start_time

    async def _open_ordered(self, js: Any) -> None:
        from nats.js import api

        cfg = api.ConsumerConfig()
        self._deliver_config(cfg)
        self.sub = await js.subscribe(self.subject or ">", stream=self.stream, ordered_consumer=True,
                                      config=cfg, pending_msgs_limit=4 * self.batch_size + 65536)
        reader = self.buffer
        assert isinstance(reader, SubscriptionReader)  # the pull inbox replaces it in _open_pull only
        reader.status = None  # nats-py's ordered consumer handles its own control messages
        reader.attach(self.sub._sub)  # the subscription nats-py feeds (the wrapper holds copies)
        await self._check_empty(js)

    def _pull_config(self, name: str | None) -> Any:
        from nats.js import api

        cfg = api.ConsumerConfig(
            durable_name=self.durable, name=name, ack_wait=self.ack_wait,
            ack_policy=api.AckPolicy.ALL if self.ack_mode == "all" else api.AckPolicy.EXPLICIT,
            max_deliver=self.max_deliver if self.max_deliver > 0 else -1, max_ack_pending=self.max_ack_pending,
            filter_subject=self.subject, max_waiting=512,
            inactive_threshold=None if self.durable else 300.0,
        )
        self._deliver_config(cfg)
        return cfg

    async def _open_pull(self, js: Any) -> None:
        import nats.js.errors
        from nats.js import api

        self._max_payload = int(self.nc.max_payload)
        name = self.durable
        cfg = self._pull_config(name)
        existing = None
        if name:
            with contextlib.suppress(nats.js.errors.NotFoundError):
                existing = await js.consumer_info(self.stream, name)
        try:
            if existing is None:
                info = await js.add_consumer(self.stream, cfg)
            else:
                # Deliver policy and start position cannot change on an existing durable: keep them.
                old = existing.config
                for keep in ("deliver_policy", "opt_start_seq", "opt_start_time", "filter_subject"):
                    setattr(cfg, keep, getattr(old, keep))
                if old.ack_policy != cfg.ack_policy:  # the server cannot change it: use the durable's
                    log.warning("durable %s acknowledges with ack policy %s, not %s: using it as it is", name,
                                old.ack_policy.value, cfg.ack_policy.value)
                    cfg.ack_policy = old.ack_policy
                    self.ack_mode = "all" if old.ack_policy == api.AckPolicy.ALL else "explicit"
                if old.filter_subject != self.subject and self.subject:
                    log.warning("durable %s filters %r, not %r: using it as it is", name, old.filter_subject,
                                self.subject)
                info = await js.add_consumer(self.stream, cfg)
        except nats.js.errors.APIError as exc:
            raise WirepipeError(f"cannot create consumer {name or '(ephemeral)'} on stream {self.stream}: "
                                f"{exc.description}") from None
        self.consumer = info.name
        self._next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{self.consumer}"
        self._inbox = self.nc.new_inbox()
        self.sub = await self.nc.subscribe(self._inbox, pending_msgs_limit=self.buffer.max_buffered + 1024,
                                           pending_bytes_limit=0)
        inbox = RawInbox(self.batch_size, self.buffer.batch_timeout, self.buffer.max_buffered, status=self._on_status)
        inbox.attach(self.nc, self.sub)
        self.buffer = inbox
        self.conn.on_reconnect(self._repull)
        await self._check_empty(js)
        self._puller = asyncio.ensure_future(self._pull_loop())

    async def _check_empty(self, js: Any) -> None:
        if not self.stop_at_end:
            return
        info = await self.sub.consumer_info() if self.ordered else await js.consumer_info(self.stream, self.consumer)
        if not info.num_pending and not info.num_ack_pending:
            self._at_end.set()

    # --- receiving -----------------------------------------------------------------------------

    def _on_status(self, h: dict[str, str]) -> None:
        status = h.get("Status")
        if status == "100":
            return  # idle heartbeat: the pull request is alive
        left = h.get("Nats-Pending-Messages")
        if left is not None:
            with contextlib.suppress(ValueError):
                self._requested = max(0, self._requested - int(left))
        elif status in ("404", "408", "409"):
            self._requested = 0
        if status == "409":
            desc = h.get("Description", "")
            if "Deleted" in desc or "Leadership" in desc:
                log.warning("pull consumer %s: %s", self.consumer, desc)
        self._pull_wake.set()

    async def _repull(self) -> None:
        """After a reconnect the server may have forgotten our pull requests: ask again."""
        self._requested = len(self.buffer)  # what arrived is still to be taken; the rest is forgotten
        self.repulls += 1
        self._pull_wake.set()

    async def _pull_loop(self) -> None:
        """Keep about two batches requested; refill when half has arrived; stop with ``stopping``."""
        target = self.buffer.max_buffered
        received = -1
        expires_ns = int(self.expires * 1e9)
        hb = self.heartbeat
        body_extra = {"expires": expires_ns, "idle_heartbeat": int(hb * 1e9)} if hb > 0 else {"expires": expires_ns}
        while not self.stopping.is_set():
            try:
                want = target - self._requested
                if self.count is not None:
                    want = min(want, self.count - self._seen - self._requested)
                want, max_bytes = self._byte_bound(want)
                worth = want >= min(self.batch_size, target // 2) or (want > 0 and self._requested == 0)
                if worth and self.nc.is_connected:
                    body = json.dumps({"batch": want, "max_bytes": max_bytes, **body_extra}).encode()
                    await self.nc.publish(self._next_subject, body, reply=self._inbox)
                    self._requested += want
                    self._last_activity = time.monotonic()
                self._pull_wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._pull_wake.wait(), max(0.05, hb or 1.0))
                if self._received() != received:  # any message, heartbeat or status: the request is alive
                    received = self._received()
                    self._last_activity = time.monotonic()
                if self._requested and hb > 0 and time.monotonic() - self._last_activity > 2 * hb + 1:
                    # No message, heartbeat or status for two heartbeats: the request is lost.
                    log.warning("pull consumer %s: no heartbeat for %.0fs, pulling again", self.consumer,
                                time.monotonic() - self._last_activity)
                    await self._repull()
                    await self._ensure_consumer()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("pull request failed (%s); retrying", type(exc).__name__)
                await asyncio.sleep(0.2)

    def _received(self) -> int:
        """Messages of any kind (records, statuses, heartbeats) the pull inbox has seen."""
        buf = self.buffer
        return buf.received if isinstance(buf, RawInbox) else (self.sub._received if self.sub is not None else 0)

    def _byte_bound(self, want: int) -> tuple[int, int]:
        """Messages and bytes to ask for, so what is in flight plus what is buffered stays within half of
        ``pending_bytes_limit`` (the server's own per-client limit is 64 MiB by default; a pull for 2,000
        messages of 512 KiB would ask for 1 GB and get the client disconnected). A request may always
        take one message of the server's ``max_payload``, or it could never deliver a large one."""
        budget = self.pending_bytes_limit // 2
        floor = self._max_payload + 4096
        if budget <= 0:
            return want, 0
        avg = self._avg_size
        if not avg:  # nothing seen yet: two requests of a quarter each
            return want, max(floor, budget // 4)
        buffered = self.buffer.pending_bytes if isinstance(self.buffer, RawInbox) else 0
        in_flight = max(0, self._requested - len(self.buffer))
        room = int((budget - buffered) / avg) - in_flight
        want = min(want, max(room, 0 if in_flight or len(self.buffer) else 1))
        return want, max(floor, min(budget, int(want * avg * 1.5)))

    async def _ensure_consumer(self) -> None:
        """Re-create a consumer the server lost (memory storage, a reset): same name and settings."""
        import nats.js.errors

        js = self.nc.jetstream()
        try:
            await js.consumer_info(self.stream, self.consumer)
        except nats.js.errors.NotFoundError:
            log.warning("consumer %s is gone from stream %s: re-creating it", self.consumer, self.stream)
            await js.add_consumer(self.stream, self._pull_config(self.consumer))
        except Exception as exc:  # the server is still recovering: the next heartbeat check tries again
            log.debug("consumer check failed: %s", type(exc).__name__)

    async def batches(self) -> AsyncIterator[Batch]:
        while True:
            # An ordered consumer has nothing to settle (no acks): its count is reached when it is read.
            if (self.count is not None and self._seen >= self.count
                    and (self.ordered or not await self._count_settled())):
                return
            if self._at_end.is_set() and not len(self.buffer):
                return
            left = self.batch_size if self.count is None else self.count - self._seen
            got = await self._take(left)
            if got is None:
                return
            self._seen += len(got)
            size = sum(map(len, got.data)) / len(got)
            self._avg_size = size if size > self._avg_size else 0.9 * self._avg_size + 0.1 * size
            if not self.ordered:
                self._requested = max(0, self._requested - len(got))
                self._pull_wake.set()
            yield self._batch(got)

    async def _count_settled(self) -> bool:
        """``count`` records were read: wait until they are settled; False when done, True if some came back."""
        while self._settled < self._seen and not self.stopping.is_set():
            self._settle_event.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._settle_event.wait(), 0.5)
        return self._seen < self.count if self.count is not None and not self.stopping.is_set() else False

    async def _take(self, left: int) -> Received | None:
        if not self.stop_at_end:
            return await self.buffer.take(left, self.stopping)
        # Stop at the end of the stream: also wake up when the last message was seen.
        stop = asyncio.Event()

        async def watch() -> None:
            waits = [asyncio.ensure_future(e.wait()) for e in (self.stopping, self._at_end)]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
            if not len(self.buffer):
                stop.set()

        watcher = asyncio.ensure_future(watch())
        try:
            return await self.buffer.take(left, stop)
        finally:
            watcher.cancel()

    def _batch(self, got: Received) -> Batch:
        batch = got.batch()
        replies = got.replies
        try:
            parsed = [parse_ack_reply(r) for r in replies]
        except (IndexError, ValueError):
            parsed = [(0, 1, 0)] * len(replies)
        seqs = [p[0] for p in parsed]
        batch.meta["seq"] = seqs
        batch.meta["stream_seq"] = seqs
        batch.meta["delivered"] = [p[1] for p in parsed]
        self._lag = parsed[-1][2] if parsed else self._lag
        if not self.ordered:
            batch.meta["ack"] = replies
        if self.stop_at_end and self._lag == 0:
            self._at_end.set()
        return batch

    # --- settling ------------------------------------------------------------------------------

    async def _send_all(self, replies: Sequence[str | None], body: bytes) -> None:
        await publish_many(self.nc, replies, body)

    async def ack(self, batch: Batch) -> None:
        """Acknowledge a batch the sink made durable: every message (``ack: explicit``, one write of
        protocol lines), or only the one with the highest stream sequence (``ack: all``: the server
        acks every pending message up to that sequence). That is safe for a worker that owns its
        durable because first deliveries come in stream order, batches are acked in that order, and
        a batch the sink failed is retried in place (kept with ``+WPI``), never given back, so no
        later batch is acked before it is written."""
        replies = batch.meta.get("ack")
        if not replies:
            return
        n = sum(1 for r in replies if r)  # unpacked records share their message's handle (None after the first)
        if self.ack_mode == "all":
            seqs = batch.meta.get("stream_seq") or ()
            if seqs:
                # AckAll acks up to a *stream* sequence: send the highest written (a message the server
                # redelivered after ack_wait can sit in a later batch with a lower one).
                i = max(range(len(seqs)), key=seqs.__getitem__)
                while i > 0 and not replies[i]:
                    i -= 1  # records unpacked from one message: its handle is on the first
                await self._send_all([replies[i]], _ACK)
        else:
            await self._send_all(replies, _ACK)
        self.acked += n
        self._settled_more(n)

    async def settle_rejected(self, rejected: list[Rejected]) -> None:
        """Dead-lettered records: terminate them (the dead letter holds them; no redelivery).

        With ``ack: all`` a term also acks every message up to its stream sequence: the pipeline settles
        dead letters at a commit, after the batches they came from were written and acked."""
        replies = [r.meta.get("ack") for r in rejected]
        if any(replies):
            await self._send_all(replies, _TERM)
            n = sum(1 for r in replies if r)
            self.terminated += n
            self._settled_more(n)

    def _settled_more(self, n: int) -> None:
        self._settled += n
        self._settle_event.set()

    async def in_progress(self, batches: list[Batch]) -> None:
        """The sink is unavailable: ``+WPI`` every record held (in these batches and in our buffer) so the
        server extends their ack deadline instead of redelivering them (no delivery is counted)."""
        replies = [r for b in batches for r in (b.meta.get("ack") or ()) if r]
        replies += self.buffer.waiting_replies()  # received, not yet taken by the pipeline
        if replies and self.nc is not None and self.nc.is_connected:
            await self._send_all(replies, _WPI)
            self.in_progress_sent += len(replies)

    async def close(self) -> None:
        if self._puller is not None:
            self._puller.cancel()
            with contextlib.suppress(BaseException):
                await self._puller
        if self.nc is not None and not self.ordered and self.nc.is_connected and self.sub is not None:
            # Messages received but never handed to the pipeline: give them back now, not after ack_wait.
            # Let what the server is still sending for our pull requests arrive first (until the queue
            # stops growing, at most a second), then unsubscribe and nak everything queued.
            with contextlib.suppress(Exception):
                deadline = time.monotonic() + 1.0
                seen = -1
                while time.monotonic() < deadline and self._received() != seen:
                    seen = self._received()
                    await asyncio.sleep(0.05)
                await self.nc.flush(timeout=2)
                await self.sub.unsubscribe()
            self.sub = None
            left = self.buffer.drop_replies()
            with contextlib.suppress(Exception):
                await self._send_all(left, b"-NAK")
                await self.nc.flush(timeout=5)
        if self.sub is not None:
            with contextlib.suppress(Exception):
                await self.sub.unsubscribe()
            self.sub = None
        if isinstance(self.buffer, RawInbox):
            self.buffer.detach()
        await self.conn.close()


class JetStreamSourceConfig(NatsConnectionConfig):
    """``source: {type: jetstream, stream: POINTS, durable: points-worker}``"""

    type: Literal["jetstream"]
    stream: str | None = Field(default=None, description="default: the stream that stores `subject`")
    subject: str | None = Field(default=None, description="filter subject")
    durable: str | None = Field(default=None, description="durable consumer name; unset: an ephemeral consumer")
    ordered: bool = Field(default=False, description="ordered consumer (replay): no acks, no durable")
    deliver: Literal["all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"] = "all"
    start_seq: int | None = Field(default=None, ge=1)
    start_time: dt.datetime | None = None
    batch_size: int = Field(default=1000, ge=1, description="messages per pull request / batch")
    batch_timeout: Duration = 0.005
    max_ack_pending: int = Field(default=20000, ge=1)
    ack_wait: Duration = Field(default=30.0, gt=0)
    max_deliver: int = Field(default=5, ge=-1)
    nak_delay: Duration = Field(default=1.0, description="unused: a sink failure is no longer nak-ed (kept so configs validate)")
    expires: Duration = Field(default=30.0, gt=0, description="lifetime of one pull request")
    heartbeat: Duration = Field(default=5.0, ge=0, description="idle heartbeat of pull requests; 0 disables")
    stop_at_end: bool = Field(default=False, description="stop when every message in the stream was delivered")
    count: int | None = Field(default=None, ge=0)
    duration: Duration | None = None
    ack: Literal["explicit", "all"] = Field(
        default="explicit", description="explicit: every message acked (safe when workers share the durable); "
        "all: one AckAll per commit, only when this worker is the durable's sole consumer")
    pending_bytes_limit: Size = Field(default=64 * 1024 * 1024, description="bytes buffered plus asked for "
                                      "stay within half of this (pull requests carry max_bytes)")

    @model_validator(mode="after")
    def _start(self) -> JetStreamSourceConfig:
        if self.deliver == "by_start_sequence" and self.start_seq is None:
            raise ValueError("deliver: by_start_sequence needs start_seq")
        if self.deliver == "by_start_time" and self.start_time is None:
            raise ValueError("deliver: by_start_time needs start_time (ISO 8601)")
        if self.ordered and self.durable:
            raise ValueError("an ordered consumer is never durable: drop `durable` or `ordered`")
        if self.stream is None and self.subject is None:
            raise ValueError("give `stream` or `subject`")
        if self.heartbeat and self.heartbeat * 2 >= self.expires:
            raise ValueError("heartbeat must be less than half of expires")
        if self.ack == "all" and self.ordered:
            raise ValueError("an ordered consumer has no acks: drop `ack: all`")
        return self

    def build(self) -> JetStreamSource:
        return JetStreamSource(
            self.subject, stream=self.stream, durable=self.durable, options=self.connection_options(),
            ordered=self.ordered, deliver=self.deliver, start_seq=self.start_seq, start_time=self.start_time,
            batch_size=self.batch_size, batch_timeout=self.batch_timeout, max_ack_pending=self.max_ack_pending,
            ack_wait=self.ack_wait, max_deliver=self.max_deliver, nak_delay=self.nak_delay, expires=self.expires,
            heartbeat=self.heartbeat, stop_at_end=self.stop_at_end, count=self.count, duration=self.duration,
            ack=self.ack, pending_bytes_limit=self.pending_bytes_limit)
