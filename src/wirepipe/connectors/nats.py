"""Core NATS: the ``nats`` sink (publish) and source (consume), and the wire mapping both NATS connectors use.

Core NATS is at-most-once: a message published while no subscriber listens, or dropped
because a subscriber's pending buffer was full (a slow consumer), is gone. Use the
``jetstream`` connectors where every record must arrive.

The wire contract (DESIGN.md): payload = compress(serialize(value)); headers
``Content-Type`` and ``Content-Encoding`` (set by the operators), ``Wirepipe-Sent-At``
(integer ns since the Unix epoch, stamped here when each record is published),
``Nats-Msg-Id`` on JetStream. ``headers: none`` publishes bare payloads for pipelines
whose two ends are configured alike.

Where each concept lives: the connection (options, auth, TLS, reconnects, client drops)
in ``natsconn``; reading a subscription in batches (and every nats-py private attribute
wirepipe touches) in ``nats_reader``; the sink in ``nats_sink``; the source in
``nats_source``; header names, header sizes and dead letters in ``wirepipe.wire``. This
module keeps the names importable from ``wirepipe.connectors.nats`` (the registry, user code).
"""

from __future__ import annotations

from .nats_reader import NATS_PY_PRIVATE, Received, SubscriptionReader, publish_many
from .nats_sink import (
    ERROR_HEADER,
    SENT_AT,
    STAGE_HEADER,
    NatsSink,
    NatsSinkConfig,
    SubjectTemplate,
    refuse_oversized,
    require_bytes,
    wire_headers,
)
from .nats_source import NatsSource, NatsSourceConfig

__all__ = ["ERROR_HEADER", "NATS_PY_PRIVATE", "SENT_AT", "STAGE_HEADER", "NatsSink", "NatsSinkConfig", "NatsSource",
           "NatsSourceConfig", "Received", "SubjectTemplate", "SubscriptionReader", "publish_many", "refuse_oversized",
           "require_bytes", "wire_headers"]
