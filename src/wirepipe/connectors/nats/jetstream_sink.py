"""The ``jetstream`` sink: at-least-once publish with deterministic ``Nats-Msg-Id``.

Every record carries a deterministic ``Nats-Msg-Id``, so a record published twice
(a retry, a re-run of a crashed job) is stored once within the stream's duplicate window.
The default (``msg_id: auto``) is ``{pipeline}-{source}-{position}-{payload hash}``: the
source's identity (its type and parameters, e.g. the file it reads; ``Source.identity``),
the record's position in it (``seq``; for a core NATS source, the publisher's
``Wirepipe-Publisher.Wirepipe-Seq``, else a per-run counter) and a BLAKE2b hash of the
payload: a re-run of the same input is deduplicated, different content never is. A ``msg_id``
template that gives two records of one batch the same id (``msg_id: constant``, a field most
records share) makes the stream keep one of them: the sink counts those records
(``repeated_msg_ids``, in the run summary beside "already stored") and says so once a run.
Publishes are asynchronous inside a bounded window, written a window's worth at a time as ready-made
protocol frames (``frames.acked_frames``; nats-py's own publish while it reconnects or for a header it
must judge); the sink tracks each ack itself (one
reply subscription, no future per record: nats-py's ``publish_async`` futures can stay
unresolved forever and leak their window slot when a publish raises), gives every ack
its own deadline, and republishes unacknowledged records with the same id, with
backoff, until the server has them. ``flush()`` returns once every record written so
far is stored: that is when the pipeline acknowledges its own source.

A stream that cannot store now says so in the ack: a 503 (Service Unavailable). A stream with
``discard: new`` at one of its limits answers ``err_code`` 10077 (``JSStreamStoreFailedF``) with
``maximum messages exceeded``, ``maximum bytes exceeded`` or ``maximum messages per subject
exceeded`` (nats-server ``ErrMaxMsgs``, ``ErrMaxBytes``, ``ErrMaxMsgsPerSubject``); the same code
is a store that failed, and 10008/10023 a cluster without a leader or resources. That is the
sink's condition, not the records': they are *held* (never dead-lettered), the rest of the batch
waits with them unsent, and the next ``write`` or ``flush`` publishes the first one alone as a
probe and raises ``BackOff`` while the server still refuses it, so the run loop waits (the sink's
``retry`` delays), keeps the records unacknowledged upstream (in-progress acks) and counts a sink
error. Once a probe is stored, the held records go out in order, same ``Nats-Msg-Id``. A record
the server refuses for itself (400: larger than ``max_msg_size``), or one larger than the
stream's ``max_bytes`` (it can never fit), is dead-lettered.

A publish no stream listens to is answered "no responders" (a status 503 without a body). That is
the record's subject when no stream stores it: the sink asks the server which stream stores the
subject (``$JS.API.STREAM.NAMES``, once per distinct subject) and, when none does, dead-letters
the record with that reason (a record-derived subject such as ``orders.{region}`` may name a
subject nobody stores; retrying would never end). When a stream does store it, JetStream cannot
answer now (a leader election): the record is published again, as for a missing ack. Subjects are
checked before publishing, as the core sink does (``nats_sink.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import secrets
import time
from collections import deque
from typing import Any, Literal

from pydantic import Field, field_validator

from ...core.batch import Batch, Rejected, one_per_record
from ...core.errors import BackOff, NotConnected, WirepipeError
from ...core.models import Duration
from ...core.stages import Stage
from ...wire import (
    HDR_STATUS,
    SENT_AT_SIZE,
    Header,
    SubjectTemplate,
    dead_letter_payloads,
    header_lines,
    header_size,
    shown_subject,
)
from ..connector import ConfirmsWrites, Source
from .connection import ReconnectConfig
from .core_sink import (
    NatsSink,
    PublishConfig,
    refuse_bad_subjects,
    refuse_oversized,
    require_bytes,
    wire_headers,
)
from .frames import acked_frames, records_per_chunk
from .reader import can_queue, queue_frames, send_queued
from .streams import StreamConfig, ensure_stream

log = logging.getLogger("wirepipe.jetstream")

# The ack of a publish the server cannot store now (retry later): Service Unavailable (a `discard: new`
# stream at a limit answers so, err_code 10077).
UNAVAILABLE = 503
_OWN = frozenset((Header.MSG_ID, Header.SENT_AT))  # set by the sink on every record


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


class JetStreamSink(NatsSink, ConfirmsWrites):
    """Publishes to JetStream inside a bounded window of unacknowledged records."""

    type = "jetstream"
    stage = Stage.PUBLISH
    config: JetStreamSinkConfig

    def __init__(self, subject: str, **fields: Any) -> None:
        """``fields`` are ``JetStreamSinkConfig``'s (``stream``, ``msg_id``, ``window``..., the connection's
        ``url``, ``auth``, ``reconnect``...), validated as the YAML is: declared once, there."""
        self._init(JetStreamSinkConfig, subject=subject, **fields)

    def _configure(self, config: JetStreamSinkConfig) -> None:  # type: ignore[override]
        super()._configure(config)
        self.conn.role = "jetstream publisher"
        self._msg_id_template: SubjectTemplate | None = None
        self.pipeline_name = "pipeline"
        self.source_identity = ""  # set by the pipeline: part of the default Nats-Msg-Id
        self._id_prefix = ""
        self._unplaced = 0  # records without a position (no seq, no publisher stamp): numbered per run
        self._run = secrets.token_hex(4)
        self._prefix = ""
        self._token = 0
        self._pending: dict[str, _Pending] = {}
        self._retry: deque[_Pending] = deque()
        self._unrouted: deque[_Pending] = deque()  # answered "no responders": does any stream store them?
        self._held: deque[_Pending] = deque()  # refused by a server that cannot store now (a full stream)
        self._refusal: str | None = None  # why, while it refuses
        self._refused_stream: str | None = None
        self._probes_refused = 0  # in a row: the BackOff's wait grows with them
        self._space = asyncio.Event()
        self._space.set()
        self._quiet = asyncio.Event()  # set while no publish waits for its ack
        self._quiet.set()
        self._failed: list[Rejected] = []
        self.acked = 0
        self.duplicates = 0
        self.republished = 0
        self.repeated_msg_ids = 0  # records whose Nats-Msg-Id another record of their batch had (a msg_id template)

    @property
    def params(self) -> dict[str, Any]:
        stream = self.config.stream
        return {**super().params, "stream": stream.name if stream else None, "window": self.config.window}

    @property
    def deduplicated(self) -> int:
        return self.duplicates  # publish acks that said "duplicate": the stream had the Nats-Msg-Id

    def bind(self, pipeline: str, source: Source) -> None:
        """The default ``Nats-Msg-Id`` names the pipeline and its source's identity (see the module doc)."""
        super().bind(pipeline, source)
        self.source_identity = source.identity

    async def open(self) -> None:
        await super().open()
        nc = self.nc
        if self.config.stream is not None:
            template = self.subject_template
            await ensure_stream(nc.jetstream(), self.config.stream,
                                template.template.split("{")[0] + ">" if not template.fixed else template.template)
        if self.config.msg_id == "auto":
            source = hashlib.blake2b(self.source_identity.encode(), digest_size=4).hexdigest()
            self._id_prefix = f"{self.pipeline_name}-{source}-"
        else:
            self._msg_id_template = SubjectTemplate(self.config.msg_id.replace("{pipeline}", self.pipeline_name))
        self._prefix = nc.new_inbox() + "."
        self.check_subjects(reply=len(self._prefix) + 12)  # acks come to the prefix + a counter
        await nc.subscribe(self._prefix + "*", cb=self._on_ack, pending_msgs_limit=4 * self.config.window + 1024)
        await nc.flush(timeout=10)

    # --- acks --------------------------------------------------------------------------------

    async def _on_ack(self, msg: Any) -> None:
        entry = self._pending.pop(msg.subject[len(self._prefix):], None)
        if entry is None:
            return  # an ack for a record already retried or expired
        data = msg.data
        if not data:
            # A status reply: 503 no responders (no stream listens, or JetStream cannot answer now).
            status = msg.headers.get("Status") if msg.headers else None
            (self._unrouted if status == "503" else self._retry).append(entry)
        elif b'"error"' in data:
            self._api_error(entry, data)
        else:
            self.acked += 1
            if b'"duplicate"' in data:
                self.duplicates += 1
        self._wake()

    async def _route(self) -> None:
        """Records answered "no responders": dead-letter those whose subject no stream stores, publish the
        others again (see the module doc). ``BackOff`` while JetStream cannot say."""
        import nats.errors
        import nats.js.errors

        entries = list(self._unrouted)
        self._unrouted.clear()
        stored: dict[str, bool] = {}
        js = self.nc.jetstream()
        for i, entry in enumerate(entries):
            subject = entry.subject
            if subject not in stored:
                try:
                    stored[subject] = bool(await js.find_stream_name_by_subject(subject))
                except nats.js.errors.NotFoundError:
                    stored[subject] = False
                except (nats.errors.Error, asyncio.TimeoutError) as exc:
                    self._retry.extend(entries[i:])
                    raise BackOff(f"JetStream does not answer (publish got 'no responders'; which stream stores "
                                  f"{shown_subject(subject)}? {type(exc).__name__})",
                                  self.config.retry.delay(0)) from None
            if stored[subject]:
                self._retry.append(entry)
            else:
                self._reject(entry, f"no JetStream stream stores subject {shown_subject(subject)} (the publish got "
                                    "'no responders' and the server lists no stream for it): refused; create a "
                                    "stream for it or give the sink a `stream:` to create")

    def _api_error(self, entry: _Pending, data: bytes) -> None:
        try:
            reply = json.loads(data)
            err = reply["error"]
            text = f"{err.get('description', 'error')} (code {err.get('code')}, err_code {err.get('err_code')})"
        except (ValueError, KeyError, TypeError, AttributeError):
            reply, err, text = {}, {}, data[:200].decode(errors="replace")
        if err.get("code") == UNAVAILABLE:
            # Not now (a full `discard: new` stream, a store or cluster that cannot take it): the sink's
            # condition. Held for the next probe; the loop backs off (see the module doc).
            self._held.append(entry)
            self._refusal = text
            self._refused_stream = reply.get("stream") or self._refused_stream
            return
        self._reject(entry, f"JetStream refused: {text}")

    def _reject(self, entry: _Pending, error: str) -> None:
        """The server refused the record for itself (its size): dead-letter it at the next commit."""
        self._failed.append(Rejected(stage=self.stage, operator=self.type, error=error, value=entry.payload,
                                     subject=entry.subject, headers=entry.headers, meta={"msg_id": entry.msg_id}))

    def _wake(self) -> None:
        n = len(self._pending)
        if n < self.config.window:
            self._space.set()
        if n == 0:
            self._quiet.set()

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
        entry.deadline = time.monotonic() + self.config.ack_timeout
        self._pending[token] = entry
        self._quiet.clear()
        await self.nc.publish(entry.subject, entry.payload, reply=self._prefix + token, headers=headers)

    async def _wait_space(self) -> None:
        """Block while the window is full; overdue acks free their slot and are retried."""
        await self._wait_window()
        if self._retry or self._unrouted:
            await self._republish()

    async def _wait_window(self) -> None:
        """Block while the window is full; an overdue ack frees its slot (and queues its record for a retry)."""
        while len(self._pending) >= self.config.window:
            self._space.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._space.wait(), self.config.ack_timeout / 4)
            self._expire()

    async def _wait_connected(self) -> None:
        while not self.nc.is_connected:
            if self.nc.is_closed:
                raise NotConnected(f"NATS connection to {self.conn.public_url} is closed")
            await asyncio.sleep(0.05)

    async def _republish(self) -> None:
        """Publish the records whose ack failed or timed out again, same ``Nats-Msg-Id``, with backoff."""
        if self._unrouted:
            await self._route()
        retry = self._retry
        if not retry:
            return
        attempts = max(e.attempts for e in retry)
        await asyncio.sleep(self.config.retry.delay(attempts - 1))
        await self._wait_connected()
        batch = list(retry)
        retry.clear()
        for entry in batch:
            await self._resend(entry)
        self.republished += len(batch)
        log.warning("republished %d record(s) without an ack (attempt %d; same Nats-Msg-Id, deduplicated)",
                    len(batch), attempts + 1)

    async def _resend(self, entry: _Pending) -> None:
        """Publish a record again with its ``Nats-Msg-Id`` (a new ``Wirepipe-Sent-At``), within the window."""
        entry.attempts += 1
        headers = dict(entry.headers) if entry.headers else {}
        headers[Header.MSG_ID] = entry.msg_id
        if self.config.headers != "none":
            headers[Header.SENT_AT] = str(time.time_ns())
        await self._wait_window()
        await self._send(entry, headers)

    async def _settle(self) -> None:
        """Wait until every publish has its ack (or is overdue and queued for a retry)."""
        while self._pending:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._quiet.wait(), self.config.ack_timeout / 4)
            self._expire()

    async def _probe_held(self) -> None:
        """The server refused records for now: publish the first alone; while it is refused again, raise
        ``BackOff`` (nothing else goes out meanwhile); once it is stored, publish the others, in order."""
        await self._wait_connected()
        await self._settle()  # what is in flight answers first: it may be refused too
        while self._held:
            probe = self._held.popleft()
            self._refusal = None
            await self._resend(probe)
            await self._settle()
            if self._refusal is None:
                break
            if self._held and self._held[-1] is probe:  # refused again: it stays first in line
                self._held.rotate(1)
            if not await self._never_fits(probe):
                self._probes_refused += 1
                raise BackOff(f"JetStream cannot store now: {self._refusal}; holding {len(self._held)} record(s) "
                              "unsent until it can", self.config.retry.delay(self._probes_refused - 1))
        self._probes_refused = 0
        self._refusal = None
        held = deque(self._held)
        self._held.clear()
        while held:
            await self._resend(held.popleft())
            if self._held:  # refused again on the way: the rest waits behind them for the next probe
                self._held.extend(held)
                return

    async def _never_fits(self, probe: _Pending) -> bool:
        """A record larger than the stream's ``max_bytes`` is refused as "maximum bytes exceeded" like any
        record a full stream refuses, but no room will ever come: it is the record's problem (dead-lettered),
        not a wait. Known when its subject, headers and payload alone exceed ``max_bytes`` (the server adds
        a few bytes per message), or when even the empty stream refuses it."""
        import nats.errors

        if self._refusal is None or "maximum bytes" not in self._refusal or not self._refused_stream:
            return False
        try:
            info = await self.nc.jetstream().stream_info(self._refused_stream)
        except (nats.errors.Error, asyncio.TimeoutError):
            return False
        limit = info.config.max_bytes or 0
        size = (len(probe.subject) + len(probe.payload) + header_size({**(probe.headers or {}), Header.MSG_ID: probe.msg_id})
                + (SENT_AT_SIZE if self.config.headers != "none" else 0))  # as _resend sends it
        if info.state.messages and not 0 < limit < size:
            return False
        self._held.remove(probe)
        self._reject(probe, f"JetStream refused: {self._refusal}: the record ({size:,} bytes with subject and "
                            f"headers) can never fit in stream {self._refused_stream} (max_bytes {limit:,})")
        return True

    async def write(self, batch: Batch) -> None:
        if not batch.values:
            return
        require_bytes(batch, self.stage, self.type)
        if self._held:  # BackOff while the server still refuses: nothing of this batch is published
            await self._probe_held()
        headers = wire_headers(batch, self.config.headers)
        ids = self._ids(batch)
        id_size = len(Header.MSG_ID) + 4 + max(map(len, one_per_record(ids, 1)))
        before = len(batch.values)
        refuse_oversized(batch, headers, self.max_payload, self.stage, self.type,
                         id_size + (SENT_AT_SIZE if headers is not None else 0))
        subjects = refuse_bad_subjects(batch, self.subject_template.render(batch), self.subject_check, self.stage,
                                       self.type)
        if len(batch.values) != before:  # refused records left the columns: realign
            ids = self._ids(batch)
            headers = wire_headers(batch, self.config.headers)
        if not batch.values:
            return
        if self._msg_id_template is not None:
            self._count_repeated(ids, len(batch.values))
        await self._wait_connected()
        n = len(batch.values)
        values = batch.values
        subs = one_per_record(subjects, n)
        id_col = one_per_record(ids, n)
        header_col = one_per_record(headers, n)
        step = records_per_chunk(values)
        held = self._held
        i = 0
        while i < n:
            if len(self._pending) >= self.config.window or self._retry or self._unrouted or held:
                if held:  # the server refuses for now: the rest of the batch waits, unsent, behind what it holds
                    held.extend(_Pending(subs[j], values[j], header_col[j], id_col[j], 0.0) for j in range(i, n))
                    break
                await self._wait_space()
                continue
            end = min(n, i + step, i + self.config.window - len(self._pending))
            if not await self._send_frames(i, end, subjects, values, headers, id_col, header_col):
                await self._send_each(i, end, subs, values, headers, id_col, header_col)
            i = end
        self.records += n
        self.bytes += sum(map(len, values))

    async def _send_frames(self, start: int, end: int, subjects: str | list[str], values: list[bytes],
                           headers: dict[str, str] | list[dict[str, str] | None] | None, ids: list[str],
                           header_col: list[Any]) -> bool:
        """Records ``start:end`` as protocol frames written into nats-py's buffer at once (``frames.py``), each
        with its reply token, ``Nats-Msg-Id`` and, with headers, one ``Wirepipe-Sent-At`` for the chunk. False
        when nats-py must publish them itself: not connected (its limits apply), or a header or id it must judge."""
        nc = self.nc
        if not can_queue(nc):
            return False
        whole = start == 0 and end == len(values)
        payload = values if whole else values[start:end]
        id_part = ids if whole else ids[start:end]
        if any(i != i.strip() or not i.isprintable() for i in id_part):
            return False
        sent_at = b"%b: %d\r\n" % (Header.SENT_AT.encode(), time.time_ns()) if headers is not None else b""
        heads: bytes | list[bytes]
        if isinstance(headers, list):
            lines = [header_lines(h, _OWN) if h else b"" for h in headers[start:end]]
            if None in lines:
                return False
            heads = [HDR_STATUS + b + sent_at for b in lines]  # type: ignore[operator]
        else:
            shared = header_lines(headers, _OWN) if headers else b""
            if shared is None:
                return False
            heads = HDR_STATUS + shared + sent_at
        subs = subjects if isinstance(subjects, str) or whole else subjects[start:end]
        try:
            frames = acked_frames(subs, payload, heads, [i.encode() for i in id_part], self._prefix.encode(),
                                  self._token + 1)
        except UnicodeEncodeError:  # a subject or an id that is not UTF-8 text: nats-py says why
            return False
        deadline = time.monotonic() + self.config.ack_timeout
        pending = self._pending
        token = self._token
        for j in range(start, end):
            token += 1
            pending[str(token)] = _Pending(subs if isinstance(subs, str) else subjects[j], values[j], header_col[j],
                                           ids[j], deadline)
        self._token = token
        self._quiet.clear()
        queue_frames(nc, b"".join(frames), end - start, sum(map(len, payload)))
        await send_queued(nc)
        return True

    async def _send_each(self, start: int, end: int, subs: list[str], values: list[bytes],
                         headers: dict[str, str] | list[dict[str, str] | None] | None, ids: list[str],
                         header_col: list[Any]) -> None:
        """Records ``start:end`` one ``nc.publish`` each: nats-py applies its own checks and limits."""
        now = time.time_ns
        msg_id, sent_at = Header.MSG_ID, Header.SENT_AT  # locals: the loop reads them per record
        for j in range(start, end):
            base = header_col[j]
            h = dict(base) if base else {}
            h[msg_id] = ids[j]
            if headers is not None:
                h[sent_at] = str(now())
            await self._send(_Pending(subs[j], values[j], base, ids[j], 0.0), h)

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

    def _count_repeated(self, ids: str | list[str], n: int) -> None:
        """Records of a batch whose id another record of it has: the stream keeps one of each id, so they are
        counted and said once a run (a template's ids; the default's hold the position and the payload)."""
        repeated = n - 1 if isinstance(ids, str) else n - len(set(ids))
        if not repeated:
            return
        if not self.repeated_msg_ids:
            fixed = " (it names no field: every record of the run gets that one id)" if isinstance(ids, str) else ""
            log.warning("msg_id %r gave %d of the %d records of a batch the Nats-Msg-Id of another record of the "
                        "batch%s: the stream keeps one record per id and acknowledges the others as duplicates "
                        "(\"already stored\" in the run summary); name a field that tells records apart, e.g. "
                        "{seq}. Said once a run, counted for the run: repeated_msg_ids", self.config.msg_id, repeated, n,
                        fixed)
        self.repeated_msg_ids += repeated

    def _positions(self, batch: Batch) -> list[str]:
        """Positions of records from a source without ``seq`` (core NATS): the publisher's stamp when the
        message has one (a duplicate delivery gets the same id), else this run's own counter."""
        headers = batch.headers
        n = len(batch.values)
        if isinstance(headers, list):
            out = []
            for h in headers:
                if h and Header.PUBLISHER in h and Header.SEQ in h:
                    out.append(f"{h[Header.PUBLISHER]}.{h[Header.SEQ]}")
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
        while self._pending or self._retry or self._unrouted or self._held:
            if self._retry or self._unrouted:
                await self._republish()
            elif self._pending:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._quiet.wait(), self.config.ack_timeout / 4)
                self._expire()
            else:
                await self._probe_held()  # BackOff while the server still refuses

    @property
    def unconfirmed(self) -> int:
        """Records taken and not yet stored: published without an ack yet, or held while the server refuses."""
        return len(self._pending) + len(self._retry) + len(self._unrouted) + len(self._held)

    def take_rejected(self) -> list[Rejected]:
        failed, self._failed = self._failed, []
        return failed

    async def write_rejected(self, rejected: list[Rejected]) -> None:
        room = self.subject_check.room - len(self.subject_template.template)
        batch = dead_letter_payloads(rejected, self.pipeline_name, room)
        batch.meta["seq"] = [f"dlq-{r.meta.get('stream_seq', r.meta.get('seq'))}-{r.stage}" for r in rejected]
        await self.write(batch)
        self._failed += batch.rejected  # no publish can carry them: the pipeline's default dead-letter file takes them

    async def close(self) -> None:
        try:
            if self.nc is not None and self.nc.is_connected:
                await asyncio.wait_for(self.flush(), self.config.flush_timeout)
        except (asyncio.TimeoutError, WirepipeError) as exc:
            log.error("closing the JetStream sink with %d record(s) unconfirmed: %s",
                      self.unconfirmed, exc or "flush timed out")
        await self.conn.close()


class JetStreamSinkConfig(PublishConfig):
    """``sink: {type: jetstream, subject: points, stream: {name: POINTS}}``"""

    type: Literal["jetstream"]
    stream: StreamConfig | None = Field(default=None, description="create this stream if it does not exist")
    msg_id: str = Field(default="auto", description="Nats-Msg-Id: auto (source identity, position and payload "
                        "hash), or a template such as {pipeline}-{seq}")
    window: int = Field(default=4096, ge=1, description="unacknowledged publishes in flight")
    ack_timeout: Duration = Field(default=5.0, gt=0, description="a publish the stream has not acknowledged in this "
                                  "time is sent again (the same Nats-Msg-Id: stored once)")
    retry: ReconnectConfig = Field(default_factory=lambda: ReconnectConfig(wait=0.2, max_wait=5.0),
                                   description="the waits between publishes sent again")

    _msg_id = field_validator("msg_id")(
        lambda v: v if v == "auto" else (SubjectTemplate(v.replace("{pipeline}", "p")), v)[1])

    def build(self) -> JetStreamSink:
        return JetStreamSink.from_config(self)


SINKS = {"jetstream": JetStreamSinkConfig}
RANK = 5  # where its types come in the "allowed" lists (connectors/__init__.py)
