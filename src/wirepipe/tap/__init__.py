"""``wirepipe tap``: see what flows on NATS, decoded, without touching the pipelines that carry it.

A tap is an ordinary pipeline (``tap_config``) whose sink prints (``sink.TapSink``):

- core NATS (``SUBJECT``): a plain subscription, no queue group, so it takes nothing from the
  workers (each subscriber gets its own copy of a message);
- JetStream (``--stream NAME``): an ephemeral ordered consumer (no acks, no durable, gone when
  the tap stops), delivering what the stream holds from ``--deliver`` on. It never reads through a
  worker's durable, so that durable's delivered and acknowledged counts do not move. A work-queue
  stream allows no second consumer: tap its subjects on core NATS instead.

Each message is decoded from its headers alone (``operators.by_headers``), as any consumer in any
language could; the table (``table.TapStats``) counts rate, sizes, latency and loss per publisher.
"""

from __future__ import annotations

from typing import Any

from ..core.errors import ConfigError
from .live import TapStats
from .sink import TapSink

__all__ = ["TapSink", "TapStats", "tap_config"]

DELIVER = ("new", "all", "last")


def tap_config(*, subject: str | None, stream: str | None, url: str | None, deliver: str = "new",
               from_seq: int | None = None, from_time: str | None = None, batch_size: int = 1000) -> dict[str, Any]:
    """The tap's pipeline config (its sink, a ``null`` one here, is replaced by a ``TapSink``)."""
    from ..connectors.nats.names import check_flags, stream_name
    from ..pipelines.capture_worker import parse_start_time
    from ..wire import subscription_pattern

    if not url:
        raise ConfigError("give --url (or set NATS_URL): a tap listens to the server the pipelines use")
    if subject is None and stream is None:
        raise ConfigError("give a SUBJECT (core NATS) or --stream NAME (JetStream)")
    if stream is None and (from_seq is not None or from_time is not None or deliver != "new"):
        raise ConfigError("--deliver, --from-seq and --from-time read a stream: add --stream NAME")
    if from_seq is not None and from_time is not None:
        raise ConfigError("--from-seq and --from-time: give one start position")
    if deliver not in DELIVER:
        raise ConfigError(f"--deliver {deliver!r}: allowed {', '.join(DELIVER)}")
    check_flags(("--stream", stream_name, stream), ("SUBJECT", subscription_pattern, subject))
    source: dict[str, Any] = {"url": url, "batch_size": batch_size}
    if stream is not None:
        source.update(type="jetstream", stream=stream, ordered=True, deliver=deliver)
        if subject:
            source["subject"] = subject  # a filter within the stream
        if from_seq is not None:
            source.update(deliver="by_start_sequence", start_seq=from_seq)
        elif from_time is not None:
            source.update(deliver="by_start_time", start_time=parse_start_time(from_time))
    else:
        # Gaps are counted per publisher by the tap's own table; the source's count would be the same sum.
        source.update(type="nats", subject=subject, gaps=False)
    name = f"tap-{stream or subject}".replace(">", "all").replace("*", "any")
    # A tap looks at a pipeline's traffic; it is no pipeline of the system: `wirepipe ps` does not list it.
    return {"name": name, "source": source, "sink": {"type": "null"}, "shutdown_timeout": 5,
            "service": {"enabled": False}}


def build(data: dict[str, Any], sink: TapSink) -> Any:
    """The tap's pipeline: the config's source into ``sink``; ``--limit`` stops the source."""
    from ..connectors.connector import CountsLoss
    from ..pipelines.config import build_pipeline, validate_config

    pipe = build_pipeline(validate_config(data, file="wirepipe tap"), file="wirepipe tap")
    if isinstance(pipe.source, CountsLoss):
        pipe.source.observer = True  # what the tap leaves unread at its stop (--limit, Ctrl-C) is nobody's loss
    pipe.sink = sink
    sink.on_done = lambda: pipe.source.stopping.set()
    return pipe
