"""The dead-letter envelope: rejected records as a batch any sink can write.

Its own module, below connectors and pipelines, because both the run loop and every
sink's default ``write_rejected`` encode dead letters the same way.
"""

from __future__ import annotations

import json
from typing import Any

from .batch import Batch, Rejected


def dead_letter_batch(rejected: list[Rejected]) -> Batch:
    """Rejected records as a batch any sink can write.

    Values are envelopes ``{stage, operator, error, subject, seq, payload, value_json}``:
    ``payload`` is the record as it entered the failing stage when that was bytes, and
    ``value_json`` is the record as JSON text when it was an object (one type per
    column, so Parquet can hold both). Per-record headers carry ``Wirepipe-Stage`` and
    ``Wirepipe-Error`` for sinks that publish the original payload (NATS); the original
    values are in ``meta["payload"]``.
    """
    from .codecs.formats import json_default

    values = []
    headers = []
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
        headers.append({**(r.headers or {}), "Wirepipe-Stage": r.stage, "Wirepipe-Error": r.error[:1024]})
    return Batch(values, subjects=[r.subject or "" for r in rejected], headers=headers,
                 meta={"payload": [r.value for r in rejected]})


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
