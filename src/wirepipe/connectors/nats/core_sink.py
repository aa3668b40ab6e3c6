"""The ``nats`` sink (core NATS publish) and the publishing rules the JetStream sink shares.

Subjects are templates: ``points`` (one subject), ``blocks.{seq}`` (any per-record meta
column), ``out.{subject}`` (the subject the record came in on, for relays; a ``subject``
operator sets it from record fields, e.g. ``orders.{region}``).

Refused records: nats-py sends a payload whose size plus headers exceeds the server's
``max_payload``, and a subject longer than the server's ``max_control_line`` allows, and
the server then closes the connection (what the client had buffered after that record is
lost); it refuses a subject with whitespace itself. A subject is a property of one record
(``orders.{region}`` renders it from a field), so the sink checks every record before it
publishes: payload + headers against ``max_payload``, the subject with ``SubjectCheck``
(whitespace and control characters, empty tokens, ``*``/``>`` tokens, its length), and
refuses a record that fails (it goes to the dead-letter destination with the reason); the
rest of the batch is published and the connection stays up.

Outages: a publish that fails because of the connection (closed, or nats-py's outbound
buffer full while it reconnects) is the sink's condition. The sink remembers how far the
batch went: what nats-py had taken is not published again when the loop retries the
batch (core NATS would deliver it twice), the rest follows with the same ``Wirepipe-Seq``
numbers. A record nats-py refuses for itself in the middle of a batch is rejected alone.

Stamps: a core NATS sink with headers announces the last ``Wirepipe-Seq`` it published,
every ``stamp_interval`` and when it closes, on ``_WIREPIPE.last.<subject>`` (empty payload,
``Wirepipe-Publisher`` and ``Wirepipe-Last-Seq`` headers), so a consumer counts a loss at
the end of a run without waiting for a later record (``gaps.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Literal

from pydantic import Field, field_validator

from ...core.batch import PAYLOADS, Batch, Rejected, one_per_record
from ...core.errors import ConfigError, NotConnected, WirepipeError
from ...core.models import Duration
from ...core.stages import Stage
from ...wire import (
    HDR_LINE,
    HDR_STATUS,
    MAX_CONTROL_LINE,
    SENT_AT_SIZE,
    STAMP_PREFIX,
    STAMP_SIZE,
    Header,
    SubjectCheck,
    SubjectTemplate,
    dead_letter_payloads,
    header_lines,
    header_size,
    publish_template_problem,
    subject_room,
)
from ..connector import Configured, PublishesToSubjects, RefusesLate, Sink, Source
from .connection import NatsConnection, NatsConnectionConfig, refuse_embedded
from .frames import SEQ_LINE, bare_frames, block_frames, records_per_chunk, stamped_frames, stamped_head
from .gaps import PublisherStamp
from .reader import can_queue, queue_frames, send_queued

log = logging.getLogger("wirepipe.nats")

# Per-record header blocks are measured exactly only for payloads this close to the limit.
_HEADER_SLACK = 65536
_STAMPS = frozenset((Header.SENT_AT, Header.PUBLISHER, Header.SEQ))  # set by the sink on every record


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


def refuse_bad_subjects(batch: Batch, subjects: str | list[str], check: SubjectCheck, stage: str,
                        operator: str) -> str | list[str]:
    """Move records whose subject cannot be published (``SubjectCheck``) to ``batch.rejected``; returns the
    subjects of the records kept. The common case, every subject seen and good before, is one set lookup
    (one subject) or a ``set`` of the column."""
    bad = check.problems(subjects)
    if not bad:
        return subjects
    column = one_per_record(subjects, len(batch.values))
    keep: list[int] = []
    for i, s in enumerate(column):
        why = bad.get(s)
        if why is None:
            keep.append(i)
        else:
            batch.rejected.append(batch.reject(i, stage, operator, f"{why}: refused (the rest is published)"))
    if isinstance(subjects, str):
        batch.keep([])
        return subjects
    batch.keep(keep)
    return [subjects[i] for i in keep]


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


class _Progress:
    """How far the publish of one batch went: records before ``next`` were taken by nats-py (published),
    ``refused`` are ``(index, why)`` of records nats-py refused for themselves. Kept across an outage so the
    retry of the same batch goes on from ``next``."""

    __slots__ = ("headers", "key", "next", "refused", "subjects", "values")

    def __init__(self, key: object, subjects: str | list[str], values: list[bytes],
                 headers: dict[str, str] | list[dict[str, str] | None] | None) -> None:
        self.key = key
        self.subjects = subjects
        self.values = values
        self.headers = headers
        self.next = 0
        self.refused: list[tuple[int, str]] = []


def _refused_by_client(exc: Exception) -> str | None:
    """Why nats-py refused one record for itself (its subject, a header, its size), or None: the connection's
    condition. Each of these is raised before nats-py takes the record into its outbound buffer."""
    import nats.errors

    if isinstance(exc, nats.errors.BadSubjectError):
        return "nats-py refused the subject"
    if isinstance(exc, nats.errors.BadHeaderError):
        return f"nats-py refused a header: {exc}"
    if isinstance(exc, nats.errors.MaxPayloadError):
        return "larger than the server's max_payload"
    if isinstance(exc, UnicodeEncodeError):
        return f"the subject or a header is not valid UTF-8: {exc.reason}"
    return None


class NatsSink(Configured, Sink, PublishesToSubjects, RefusesLate):
    """Publishes every record of a batch to core NATS with the wire-contract headers."""

    type = "nats"
    takes = PAYLOADS
    stage = Stage.PUBLISH
    config: PublishConfig

    def __init__(self, subject: str, **fields: Any) -> None:
        """``fields`` are ``NatsSinkConfig``'s (``headers``, ``flush_timeout``, the connection's ``url``,
        ``auth``, ``reconnect``...), validated as the YAML is: declared once, there."""
        self._init(NatsSinkConfig, subject=subject, **fields)

    def _configure(self, config: PublishConfig) -> None:
        self.config = config
        self.subject_template = SubjectTemplate(config.subject)  # parsed: what each record's subject is rendered by
        self.conn = NatsConnection(config, role="publisher")
        self.nc: Any = None
        self.max_payload = 0
        self.subject_check = SubjectCheck(subject_room(config.max_control_line, 1 << 20), config.max_control_line)
        self.records = 0
        self.bytes = 0
        self.pipeline_name = "pipeline"  # named in the Wirepipe-Pipeline header of dead letters
        self.stamp = PublisherStamp()  # Wirepipe-Publisher / Wirepipe-Seq: consumers count gaps
        # Last-sequence stamps: every stamp_interval (None: this sink does not stamp, e.g. JetStream).
        self.stamp_interval: float | None = config.stamp_interval if isinstance(config, NatsSinkConfig) else None
        self._stamper: asyncio.Task[None] | None = None
        self._last_subject: str | None = None
        self._resume: _Progress | None = None  # a batch an outage interrupted (see the module doc)
        self._refused_letters: list[Rejected] = []  # dead letters no publish could carry: take_rejected
        self._shared: tuple[dict[str, str], bytes | None] | None = None  # the last shared headers, encoded

    @property
    def params(self) -> dict[str, Any]:
        config = self.config
        return {"subject": self.subject_template.template, "headers": config.headers, **config.public_params()}

    @property
    def publishes_to(self) -> str:
        return self.subject_template.template

    def for_worker(self, index: int, count: int) -> NatsSink:
        """The workers publish on the same subjects, on purpose."""
        refuse_embedded(self.config, count)
        return self

    def bind(self, pipeline: str, source: Source) -> None:
        self.pipeline_name = pipeline

    async def open(self) -> None:
        self.nc = await self.conn.connect()
        self.max_payload = int(self.nc.max_payload)
        self.check_subjects(reply=0)
        if self.stamp_interval and self.config.headers != "none":
            self._stamper = asyncio.ensure_future(self._stamp_periodically(self.stamp_interval))

    def check_subjects(self, reply: int) -> None:
        """Subjects are checked against what a publish line with a reply subject of ``reply`` bytes leaves."""
        limit = self.config.max_control_line
        self.subject_check = SubjectCheck(subject_room(limit, self.max_payload, reply), limit)

    async def write(self, batch: Batch) -> None:
        if not batch.values:
            return
        require_bytes(batch, self.stage, self.type)
        progress = self._resume
        if progress is None or progress.key is not batch:
            headers = wire_headers(batch, self.config.headers)
            extra = SENT_AT_SIZE + STAMP_SIZE if headers is not None else 0
            refuse_oversized(batch, headers, self.max_payload, self.stage, self.type, extra)
            subjects = refuse_bad_subjects(batch, self.subject_template.render(batch), self.subject_check, self.stage,
                                           self.type)
            if isinstance(headers, list) and len(headers) != len(batch.values):
                headers = batch.headers  # records were refused: the batch's column is aligned
            if not batch.values:
                return
            progress = _Progress(batch, subjects, batch.values, headers)
        await self._publish(progress)
        if progress.refused:
            refused = dict(progress.refused)
            for i, why in progress.refused:
                batch.rejected.append(batch.reject(i, self.stage, self.type, f"{why}: refused (the rest is published)"))
            batch.keep([i for i in range(len(batch.values)) if i not in refused])

    async def _publish(self, progress: _Progress) -> None:
        """Publish what is left of ``progress``: a record nats-py refuses is set aside, an outage keeps the
        progress for the retry of the same batch (``_resume``) and raises ``NotConnected``/``WirepipeError``."""
        import nats.errors

        self._resume = progress
        while progress.next < len(progress.values):
            try:
                if not await self._publish_frames(progress):
                    await self.publish(progress)
            except Exception as exc:
                why = _refused_by_client(exc)
                if why is not None:
                    progress.refused.append((progress.next, why))
                    progress.next += 1
                    continue
                if isinstance(exc, nats.errors.OutboundBufferLimitError):
                    await self._wait_connected()  # reconnecting, its buffer full: go on once it is back
                    continue
                if isinstance(exc, nats.errors.ConnectionClosedError):
                    raise NotConnected(f"NATS connection to {self.conn.public_url} is closed") from None
                raise WirepipeError(f"publish to {self.conn.public_url} failed: {exc}") from None
        self._resume = None
        values = progress.values
        self.records += len(values) - len(progress.refused)
        self.bytes += sum(map(len, values)) - sum(len(values[i]) for i, _ in progress.refused)

    async def _publish_frames(self, progress: _Progress) -> bool:
        """The fast path: the rest of the batch as protocol frames written into nats-py's buffer a chunk at a
        time (``frames.py``; the same bytes and numbers as ``publish``, one ``Wirepipe-Sent-At`` per chunk: the
        moment its records enter the buffer together). False when it cannot take the rest: the connection is
        not up (nats-py's ``publish`` applies its limits) or a header or subject is one nats-py must judge (it
        refuses the record and says why); ``publish`` goes on from ``progress.next``."""
        nc = self.nc
        values = progress.values
        n = len(values)
        step = records_per_chunk(values)
        while progress.next < n:
            if not can_queue(nc):
                return False
            start = progress.next
            end = min(n, start + step)
            payload = values if start == 0 and end == n else values[start:end]
            frames = self._frames(progress, start, end, payload)
            if frames is None:
                return False
            queue_frames(nc, b"".join(frames), end - start, sum(map(len, payload)))
            if progress.headers is not None:
                self.stamp.next += end - start
            subjects = progress.subjects
            self._last_subject = subjects if isinstance(subjects, str) else subjects[end - 1]
            progress.next = end  # taken: a failure from here on does not publish them again
            await send_queued(nc)
        return True

    def _frames(self, progress: _Progress, start: int, end: int, payload: list[bytes]) -> list[bytes] | None:
        """The frames of records ``start:end`` (see ``_publish_frames``), None when nats-py must judge them."""
        subjects = progress.subjects
        subs = subjects if isinstance(subjects, str) or (start == 0 and end == len(subjects)) else subjects[start:end]
        headers = progress.headers
        try:
            if headers is None:
                return bare_frames(subs, payload)
            if isinstance(headers, dict):
                shared = self._shared_lines(headers)
                if shared is None:
                    return None
                return stamped_frames(subs, payload, stamped_head(shared, self.stamp.id, time.time_ns()),
                                      self.stamp.next)
            blocks = self._blocks(headers[start:end])
            return None if blocks is None else block_frames(subs, payload, blocks)
        except UnicodeEncodeError:  # a subject that is not UTF-8 text
            return None

    def _shared_lines(self, headers: dict[str, str]) -> bytes | None:
        """The header lines of the batch's shared headers (without the stamps), encoded once per dict."""
        cached = self._shared
        if cached is not None and cached[0] == headers:
            return cached[1]
        lines = header_lines(headers, _STAMPS)
        self._shared = (dict(headers), lines)
        return lines

    def _blocks(self, headers: list[dict[str, str] | None]) -> list[bytes] | None:
        """Whole header blocks, one per record: its own headers and the stamps (its upstream stamps replaced)."""
        seq = self.stamp.next
        now = time.time_ns()
        stamps = b"%b: %b\r\n%b: %d\r\n" % (Header.PUBLISHER.encode(), self.stamp.id.encode(),
                                              Header.SENT_AT.encode(), now)
        out = []
        for i, h in enumerate(headers):
            lines = header_lines(h, _STAMPS) if h else b""
            if lines is None:
                return None
            out.append(b"%b%b%b%b%d\r\n\r\n" % (HDR_STATUS, lines, stamps, SEQ_LINE, seq + i))
        return out

    async def publish(self, progress: _Progress) -> None:
        """Record by record: one ``nc.publish`` per record from ``progress.next``, stamped just before it with
        ``Wirepipe-Sent-At`` and, with headers, the next ``Wirepipe-Seq``, so nats-py applies its own checks
        and limits (while reconnecting, or for a header it must judge). A publish that raises leaves
        ``progress.next`` at its record (the numbers go on from there: a refused record takes none)."""
        pub = self.nc.publish
        now = time.time_ns
        pid = self.stamp.id
        sent_at, seq_key = Header.SENT_AT, Header.SEQ  # locals: the loops below read them per record
        subjects, headers = progress.subjects, progress.headers
        start = progress.next
        values = progress.values[start:] if start else progress.values
        fixed = isinstance(subjects, str)
        subs: Any = subjects if isinstance(subjects, str) or not start else subjects[start:]
        base = seq = self.stamp.next
        i = start  # without headers (no numbers to count by): the next record to publish
        try:
            if headers is None:
                if fixed:
                    for v in values:
                        await pub(subs, v)
                        i += 1
                else:
                    for s, v in zip(subs, values, strict=True):
                        await pub(s, v)
                        i += 1
            elif isinstance(headers, dict):
                # nats-py encodes the headers before its first await, so one dict is reused.
                h = headers
                h[Header.PUBLISHER] = pid
                if fixed:
                    for v in values:
                        h[sent_at] = str(now())
                        h[seq_key] = str(seq)
                        await pub(subs, v, headers=h)
                        seq += 1
                else:
                    for s, v in zip(subs, values, strict=True):
                        h[sent_at] = str(now())
                        h[seq_key] = str(seq)
                        await pub(s, v, headers=h)
                        seq += 1
            else:
                hs = headers[start:] if start else headers
                publisher = Header.PUBLISHER
                for s, v, hd in zip(one_per_record(subs, len(values)), values, hs, strict=True):
                    await pub(s, v, headers={**(hd or {}), sent_at: str(now()), publisher: pid, seq_key: str(seq)})
                    seq += 1
        finally:
            self.stamp.next = seq
            taken = start + (seq - base) if headers is not None else i
            if taken > start:
                self._last_subject = subjects if isinstance(subjects, str) else subjects[taken - 1]
            progress.next = taken

    async def _wait_connected(self) -> None:
        while not self.nc.is_connected:
            if self.nc.is_closed:
                raise NotConnected(f"NATS connection to {self.conn.public_url} is closed") from None
            await asyncio.sleep(0.05)

    # --- stamps: the last Wirepipe-Seq published --------------------------------------------------

    async def _stamp(self, final: bool = False) -> None:
        """Announce the last number published on ``_WIREPIPE.last.<last subject>`` (see the module doc)."""
        last = self.stamp.next - 1
        subject = self._last_subject
        if last < 1 or subject is None or self.nc is None or not self.nc.is_connected:
            return
        stamp_subject = STAMP_PREFIX + subject
        if self.subject_check.problems(stamp_subject):
            return  # a subject at the length limit leaves no room for the prefix: no stamp for it
        headers = {Header.PUBLISHER: self.stamp.id, Header.LAST_SEQ: str(last)}
        if final:
            headers[Header.FINAL] = "true"
        await self.nc.publish(stamp_subject, b"", headers=headers)

    async def _stamp_periodically(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self._stamp()
            except Exception as exc:  # the connection's condition: the next stamp (or the final one) says it
                log.debug("stamp on %s not sent: %s", self.conn.public_url, exc)

    async def write_rejected(self, rejected: list[Rejected]) -> None:
        """As a dead-letter destination: publish the original payloads with stage and error headers."""
        progress = self._resume
        if progress is None or progress.key is not rejected:
            batch = dead_letter_payloads(rejected, self.pipeline_name, self.subject_check.room
                                         - len(self.subject_template.template))
            refuse_oversized(batch, batch.headers, self.max_payload, self.stage, self.type, SENT_AT_SIZE + STAMP_SIZE)
            subjects = refuse_bad_subjects(batch, self.subject_template.render(batch), self.subject_check, self.stage,
                                           self.type)
            self._refused_letters += batch.rejected
            if not batch.values:
                return
            progress = _Progress(rejected, subjects, batch.values, batch.headers)
        await self._publish(progress)
        headers = progress.headers
        self._refused_letters += [
            Rejected(self.stage, self.type, why, progress.values[i],
                     headers=headers[i] if isinstance(headers, list) else headers)
            for i, why in progress.refused]

    def take_rejected(self) -> list[Rejected]:
        """Dead letters (this sink is a ``dead_letter``) that no publish could carry (too large, a subject refused):
        the pipeline writes them to its default dead-letter file."""
        refused, self._refused_letters = self._refused_letters, []
        return refused

    async def flush(self) -> None:
        if self.nc is not None and self.nc.is_connected:
            try:
                await self.nc.flush(timeout=self.config.flush_timeout)
            except Exception as exc:
                raise WirepipeError(f"flush to {self.conn.public_url} failed: {type(exc).__name__}") from None

    async def close(self) -> None:
        if self._stamper is not None:
            self._stamper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._stamper
            self._stamper = None
        with contextlib.suppress(WirepipeError):
            await self.flush()
        if self.stamp_interval is not None and self.config.headers != "none":
            with contextlib.suppress(Exception):  # the final stamp: what a consumer counts the tail by
                await self._stamp(final=True)
                await self.flush()
        await self.conn.close()


class PublishConfig(NatsConnectionConfig):
    """The fields both NATS sinks have (``nats``, ``jetstream``): the connection, where and how they publish."""

    subject: str = Field(description="subject or template: points, blocks.{seq}, out.{subject}")
    headers: Literal["wire", "none"] = Field(default="wire", description="wire: Content-Type, Content-Encoding and "
                                             "the loss-accounting stamps on every message; none: the payload alone (a "
                                             "consumer must be told the chain, and losses are not counted)")
    flush_timeout: Duration = Field(default=10.0, description="how long a flush waits for the server")
    max_control_line: int = Field(default=MAX_CONTROL_LINE, ge=256, description=(
        "the server's max_control_line (its INFO does not say it): a record whose subject makes a longer "
        "publish line is refused"))

    @field_validator("subject")
    @classmethod
    def _template(cls, v: str) -> str:
        problem = publish_template_problem(v)
        if problem is not None:
            raise ValueError(problem)
        return v


class NatsSinkConfig(PublishConfig):
    """``sink: {type: nats, url: "${NATS_URL:-embedded}", subject: points}``"""

    type: Literal["nats"]
    stamp_interval: Duration = Field(default=1.0, description=(
        "announce the last Wirepipe-Seq published this often (and at close) on _WIREPIPE.last.<subject>; "
        "0: only at close"))

    def build(self) -> NatsSink:
        return NatsSink.from_config(self)


SINKS = {"nats": NatsSinkConfig}
RANK = 4  # where its types come in the "allowed" lists (connectors/__init__.py)
