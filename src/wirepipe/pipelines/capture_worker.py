"""``wirepipe capture``: a long-lived worker from NATS into the capture sink.

It is an ordinary pipeline (``capture_config`` returns its config, ``--print-config``
shows it), run by the worker runtime: SIGINT/SIGTERM drain it (stop reading, write what
was read, complete the current file, acknowledge), the NATS connectors reconnect.

- Core NATS (``--subject``): a subscription (``--queue`` shares the subject among
  several capture workers). At most once, like core NATS itself.
- JetStream (``--stream``, or any of the JetStream options): an ordered consumer by
  default (no acks, no server state: a one-off capture of a stream from ``--from-seq``
  or ``--from-time``), or with ``--durable NAME`` a durable consumer whose records are
  acknowledged only once the file holding them is complete, so a capture worker that
  is killed and restarted resumes where it was, losing nothing.

Files are completed at every commit of the run loop, so the pipeline's
``flush_interval`` is ``max_file_age``; a durable consumer gets ``max_ack_pending`` and
``ack_wait`` large enough for a whole file.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..core.errors import ConfigError


def parse_start_time(text: str, now: dt.datetime | None = None) -> str:
    """``--from-time``: ISO 8601 (naive means UTC), or a duration meaning that long ago (``10m``)."""
    from ..core.units import parse_duration

    now = now or dt.datetime.now(dt.timezone.utc)
    try:
        return (now - dt.timedelta(seconds=parse_duration(text))).isoformat()
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"--from-time {text!r}: give an ISO 8601 time (2026-01-31T12:00:00Z) "
                          "or a duration ago (10m, 2h)") from None
    return (when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)).isoformat()


def capture_config(*, out: str, subject: str | None = None, stream: str | None = None, durable: str | None = None,
                   from_seq: int | None = None, from_time: str | None = None, stop_at_end: bool = False,
                   url: str | None = None, queue: str | None = None, count: int | None = None,
                   duration: float | None = None, max_file_size: int | None = None,
                   max_file_age: float = 60.0, row_group_rows: int | None = None, prefix: str | None = None,
                   batch_size: int | None = None) -> dict[str, Any]:
    """The capture worker's pipeline config (validated by the caller like any other)."""
    jetstream = bool(stream or durable or from_seq is not None or from_time is not None or stop_at_end)
    if from_seq is not None and from_time is not None:
        raise ConfigError("--from-seq and --from-time: give one start position")
    if jetstream and queue:
        raise ConfigError("--queue is for core NATS; JetStream consumers share work with --durable")
    if not jetstream and not subject:
        raise ConfigError("give --subject (core NATS) or --stream (JetStream)")
    if not url:
        raise ConfigError("give --url (or set NATS_URL): a capture listens to the server the publishers use")
    from ..connectors.nats.names import check_flags, consumer_name, queue_group, stream_name
    from ..wire import subscription_pattern

    check_flags(("--stream", stream_name, stream), ("--durable", consumer_name, durable),
                ("--subject", subscription_pattern, subject), ("--queue", queue_group, queue))
    source: dict[str, Any] = {"url": url, "count": count, "duration": duration}
    if batch_size is not None:
        source["batch_size"] = batch_size
    if jetstream:
        source.update(type="jetstream", stream=stream, subject=subject, stop_at_end=stop_at_end)
        if from_seq is not None:
            source.update(deliver="by_start_sequence", start_seq=from_seq)
        elif from_time is not None:
            source.update(deliver="by_start_time", start_time=parse_start_time(from_time))
        # The run loop commits (completes a file) when half of max_ack_pending is unacknowledged:
        # leave room for a full row group, and acknowledge well within ack_wait.
        source["max_ack_pending"] = max(20000, 2 * (row_group_rows or 65536))
        if durable:
            source.update(durable=durable, ack_wait=max(30.0, 2 * max_file_age + 10))
        else:
            source["ordered"] = True
    else:
        source.update(type="nats", subject=subject, queue=queue)
    sink: dict[str, Any] = {"type": "capture", "dir": out, "max_file_age": max_file_age,
                            "metadata": {k: str(v) for k, v in (("subject", subject), ("stream", stream),
                                                                ("durable", durable)) if v}}
    for key, value in (("max_file_size", max_file_size), ("row_group_rows", row_group_rows), ("prefix", prefix)):
        if value is not None:
            sink[key] = value
    return {
        "name": f"capture-{stream or subject}".replace(">", "all").replace("*", "any"),
        "source": {k: v for k, v in source.items() if v is not None},
        "sink": sink,
        "flush_interval": max_file_age,
    }
