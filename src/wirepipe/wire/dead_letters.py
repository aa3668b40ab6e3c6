"""The dead-letter encodings, built from one per-record header rule (``dead_letter_headers``): envelopes for
files (``dead_letter_batch``: any sink can write them) and the original payloads for NATS subjects
(``dead_letter_payloads``: a consumer reads them as it reads the records; the headers say why they were refused
and by which pipeline).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..core.batch import Batch, Rejected
from .headers import Header
from .subjects import MAX_CONTROL_LINE, publishable_subject


def dead_letter_headers(r: Rejected) -> dict[str, str]:
    """The record's headers plus why it was refused (``Wirepipe-Stage``, ``Wirepipe-Error``)."""
    return {**(r.headers or {}), Header.STAGE: r.stage, Header.ERROR: r.error[:1024]}


def dead_letter_batch(rejected: list[Rejected]) -> Batch:
    """Rejected records as a batch any sink can write.

    Values are envelopes ``{stage, operator, error, subject, seq, payload, value_json}``:
    ``payload`` is the record as it entered the failing stage when that was bytes, and
    ``value_json`` is the record as JSON text when it was an object (one type per
    column, so Parquet can hold both). Per-record headers carry ``Wirepipe-Stage`` and
    ``Wirepipe-Error``; the original values are in ``meta["payload"]``.
    """
    from ..codecs.formats import json_default

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


def dead_letter_payloads(rejected: list[Rejected], pipeline: str | None = None, room: int | None = None) -> Batch:
    """Dead letters for a NATS subject: the original payload (JSON when the record was an object)
    with its headers plus ``Wirepipe-Stage`` and ``Wirepipe-Error`` (one line), ``Wirepipe-Pipeline``
    (the pipeline that refused it: it never dead-letters the record again if it comes back),
    ``Wirepipe-Subject`` and ``Wirepipe-Stream-Seq`` when known; ``Wirepipe-Sent-At`` is dropped (the
    sink stamps its own). A subject no publish can carry (it may be why the record was refused) is made
    publishable for the dead letter's own subject, cut to ``room`` bytes, and shown escaped in
    ``Wirepipe-Subject``."""
    import orjson

    from ..codecs.formats import json_default

    values: list[bytes] = []
    headers: list[dict[str, str] | None] = []
    subjects: list[str] = []
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
                 if k not in (Header.CONTENT_TYPE, Header.CONTENT_ENCODING)}
            h[Header.CONTENT_TYPE] = "application/json"
        h.pop(Header.SENT_AT, None)
        h[Header.STAGE] = r.stage
        h[Header.ERROR] = " ".join(r.error.split())[:1024]
        if pipeline is not None:
            h[Header.PIPELINE] = pipeline
        subject = r.subject or ""
        if subject:
            safe = publishable_subject(subject, room if room is not None else MAX_CONTROL_LINE)
            h[Header.SUBJECT] = subject if safe == subject else repr(subject)[:1024]
            subject = safe
        if r.meta.get("stream_seq") is not None:
            h[Header.STREAM_SEQ] = str(r.meta["stream_seq"])
        headers.append(h)
        subjects.append(subject)
    meta: dict[str, Sequence[Any]] = {"seq": [r.meta.get("seq") for r in rejected]}
    return Batch(values, subjects=subjects, headers=headers, meta=meta)


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
