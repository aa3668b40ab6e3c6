"""The wire contract in one place: header names, header-block sizes, dead letters, subject templates.

A wirepipe record on NATS is payload = compress(serialize(value)) plus a header block
(README, "The wire contract"). Every module that reads or writes those headers takes
their names from ``Header``; the NATS sinks measure header blocks with ``header_size`` so
they refuse a record the server would answer with a closed connection; the dead-letter
encodings (envelopes for files, original payloads for NATS subjects) are built here from
one per-record header rule; and the ``subject`` operator and the NATS sinks parse
``orders.{region}``-style templates with the same ``template_fields``; ``subject_regex`` reads a
subscription's wildcards (``orders.*.>``) where no server does (a capture sliced by subject).
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Sequence
from enum import Enum
from typing import Any

from .core.batch import Batch, Rejected


class Header(str, Enum):
    """The header names wirepipe reads and writes (``str`` values, usable as dict keys as they are)."""

    CONTENT_TYPE = "Content-Type"  # set by ``serialize``; ``deserialize format: auto`` reads it
    CONTENT_ENCODING = "Content-Encoding"  # set by ``compress``; ``decompress codec: auto`` reads it
    SENT_AT = "Wirepipe-Sent-At"  # publish time, integer ns since the Unix epoch
    PUBLISHER = "Wirepipe-Publisher"  # a publishing sink's id for one run (core NATS gap counting)
    SEQ = "Wirepipe-Seq"  # 1, 2, 3 ... per publisher
    STAGE = "Wirepipe-Stage"  # dead letters: the stage that refused the record
    ERROR = "Wirepipe-Error"  # dead letters: why
    SUBJECT = "Wirepipe-Subject"  # dead letters: the subject the record had
    STREAM_SEQ = "Wirepipe-Stream-Seq"  # dead letters: its JetStream stream sequence
    MSG_ID = "Nats-Msg-Id"  # JetStream deduplication id
    PENDING = "Nats-Pending-Messages"  # JetStream pull status: messages the request left undelivered
    TRACEPARENT = "traceparent"  # W3C trace context: kept as it came, or the pipeline's own with tracing on
    TRACESTATE = "tracestate"  # W3C trace context's vendor part, beside traceparent

    def __str__(self) -> str:
        return self.value


def set_header(batch: Batch, key: str, value: str, drop: str | None = None) -> None:
    """Set a wire header on every record of a batch, keeping the headers the records came with (a trace
    id from the source): one shared dict when the batch has one, per record otherwise (the one way
    operators add a header; they declare which in ``Operator.adds_headers``). ``drop`` names a header
    the new value makes wrong (``serialize`` writes fresh bytes: an old ``Content-Encoding`` goes).

    >>> b = Batch([b"a", b"b"], headers=[{"traceparent": "00-1"}, None])
    >>> set_header(b, "Content-Type", "application/json")
    >>> b.headers
    [{'traceparent': '00-1', 'Content-Type': 'application/json'}, {'Content-Type': 'application/json'}]
    """
    h = batch.headers
    if h is None or (not isinstance(h, dict) and not any(h)):  # no record has a header: one shared dict
        batch.headers = {key: value}
    elif isinstance(h, dict):
        batch.headers = _merged(h, key, value, drop)
    elif drop is None:
        batch.headers = [{**d, key: value} if d else {key: value} for d in h]
    else:  # a record's headers are copied once; only one that holds ``drop`` pays for dropping it
        batch.headers = [({**d, key: value} if drop not in d else _merged(d, key, value, drop)) if d else {key: value}
                         for d in h]


def _merged(headers: dict[str, str], key: str, value: str, drop: str | None) -> dict[str, str]:
    out = {**headers, key: value}
    if drop is not None:
        out.pop(drop, None)
    return out


# --- header-block sizes ---------------------------------------------------------------------------

HDR_LINE = len(b"NATS/1.0\r\n") + 2  # status line + the blank line that ends the block
SENT_AT_SIZE = len(Header.SENT_AT.value) + 4 + 19  # "key: value\r\n" with a 19-digit ns timestamp
# The two gap-counting stamps: "Wirepipe-Publisher: <12 hex>\r\n" + "Wirepipe-Seq: <up to 12 digits>\r\n"
STAMP_SIZE = len(Header.PUBLISHER.value) + 4 + 12 + len(Header.SEQ.value) + 4 + 12


def header_size(headers: dict[str, str] | None) -> int:
    """Bytes nats-py puts on the wire for a header block (0 without headers)."""
    if not headers:
        return 0
    return HDR_LINE + sum(len(k.encode()) + len(str(v).encode()) + 4 for k, v in headers.items())


def entry_size(key: str, value_len: int) -> int:
    """Bytes one ``key: value\\r\\n`` line takes, for a value ``value_len`` bytes long."""
    return len(key) + 4 + value_len


def sent_at_column(headers: list[dict[str, str] | None]) -> list[int | None]:
    """``Wirepipe-Sent-At`` of each record as int ns, None when absent or malformed."""
    key = Header.SENT_AT.value
    try:
        return [int(h[key]) if h and key in h else None for h in headers]
    except ValueError:  # a malformed value: redo record by record
        out: list[int | None] = []
        for h in headers:
            try:
                out.append(int(h[key]) if h and key in h else None)
            except ValueError:
                out.append(None)
        return out


# --- subject templates ----------------------------------------------------------------------------


def template_fields(template: str) -> list[str]:
    """The ``{field}`` names of a subject template (``orders.{region}`` -> ``["region"]``).

    Raises ``ValueError`` with the template in the message for a malformed template, an
    empty ``{}`` placeholder, or whitespace (a NATS subject cannot hold it).
    """
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise ValueError(f"subject template {template!r}: {exc}") from None
    if any(not f for f in fields):
        raise ValueError(f"subject template {template!r}: empty {{}} placeholder; name a field such as {{seq}}")
    if any(ch in template for ch in " \t\r\n"):
        raise ValueError(f"subject {template!r} contains whitespace")
    return fields


def subject_regex(pattern: str) -> str:
    """A NATS subject pattern as a regular expression over whole subjects: ``*`` is one token, ``>`` one
    or more tokens at the end (what a subscription to ``pattern`` receives).

    >>> import re
    >>> [bool(re.fullmatch(subject_regex("orders.*.>"), s)) for s in ("orders.eu.1", "orders.eu", "orders.eu.1.2")]
    [True, False, True]
    """
    tokens = pattern.split(".")
    if any(not t for t in tokens) or any(t == ">" for t in tokens[:-1]):
        raise ValueError(f"subject pattern {pattern!r}: tokens are separated by single dots, and `>` comes last")
    parts = ["[^.]+" if t == "*" else ".+" if t == ">" else re.escape(t) for t in tokens]
    return r"\.".join(parts)


# --- dead letters ---------------------------------------------------------------------------------


def dead_letter_headers(r: Rejected) -> dict[str, str]:
    """The record's headers plus why it was refused (``Wirepipe-Stage``, ``Wirepipe-Error``)."""
    return {**(r.headers or {}), Header.STAGE.value: r.stage, Header.ERROR.value: r.error[:1024]}


def dead_letter_batch(rejected: list[Rejected]) -> Batch:
    """Rejected records as a batch any sink can write.

    Values are envelopes ``{stage, operator, error, subject, seq, payload, value_json}``:
    ``payload`` is the record as it entered the failing stage when that was bytes, and
    ``value_json`` is the record as JSON text when it was an object (one type per
    column, so Parquet can hold both). Per-record headers carry ``Wirepipe-Stage`` and
    ``Wirepipe-Error``; the original values are in ``meta["payload"]``.
    """
    from .codecs.formats import json_default

    values = []
    for r in rejected:
        raw = r.value if isinstance(r.value, (bytes, bytearray)) else None
        values.append({
            "stage": r.stage,
            "operator": r.operator,
            "error": r.error,
            "subject": r.subject,
            "seq": r.meta.get("seq"),
            "payload": bytes(raw) if raw is not None else None,
            "value_json": None if raw is not None else _json_text(r.value, json_default),
        })
    return Batch(values, subjects=[r.subject or "" for r in rejected], headers=[dead_letter_headers(r) for r in rejected],
                 meta={"payload": [r.value for r in rejected]})


def dead_letter_payloads(rejected: list[Rejected]) -> Batch:
    """Dead letters for a NATS subject: the original payload (JSON when the record was an object)
    with its headers plus ``Wirepipe-Stage`` and ``Wirepipe-Error`` (one line), ``Wirepipe-Subject``
    and ``Wirepipe-Stream-Seq`` when known; ``Wirepipe-Sent-At`` is dropped (the sink stamps its own)."""
    import orjson

    from .codecs.formats import json_default

    values: list[bytes] = []
    headers: list[dict[str, str] | None] = []
    for r in rejected:
        v = r.value
        if isinstance(v, (bytes, bytearray, memoryview)):
            values.append(bytes(v))
            h = dict(r.headers or {})
        else:
            try:
                values.append(orjson.dumps(v, default=json_default))
            except TypeError:
                values.append(repr(v).encode())
            h = {k: val for k, val in (r.headers or {}).items()
                 if k not in (Header.CONTENT_TYPE.value, Header.CONTENT_ENCODING.value)}
            h[Header.CONTENT_TYPE.value] = "application/json"
        h.pop(Header.SENT_AT.value, None)
        h[Header.STAGE.value] = r.stage
        h[Header.ERROR.value] = " ".join(r.error.split())[:1024]
        if r.subject:
            h[Header.SUBJECT.value] = r.subject
        if r.meta.get("stream_seq") is not None:
            h[Header.STREAM_SEQ.value] = str(r.meta["stream_seq"])
        headers.append(h)
    meta: dict[str, Sequence[Any]] = {"seq": [r.meta.get("seq") for r in rejected]}
    return Batch(values, subjects=[r.subject or "" for r in rejected], headers=headers, meta=meta)


def _json_text(value: Any, default: Any) -> str:
    """The value as JSON text, or its ``repr`` when JSON cannot hold it (a cycle, a huge int...)."""
    try:
        return json.dumps(value, default=_safe_json(default))
    except (ValueError, TypeError, RecursionError):
        return repr(value)


def _safe_json(default: Any) -> Any:
    def encode(obj: Any) -> Any:
        try:
            return default(obj)
        except TypeError:
            return repr(obj)

    return encode
