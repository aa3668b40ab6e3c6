"""JetStream: the ``jetstream`` sink (at-least-once publish) and source (durable pull or ordered consumer).

Where each concept lives: stream management in ``jetstream_streams``, the sink in
``jetstream_sink``, the source in ``jetstream_source`` (its pull inbox reader in
``nats_reader``). This module keeps the names importable from
``wirepipe.connectors.jetstream`` (the registry, user code).
"""

from __future__ import annotations

from .jetstream_sink import MSG_ID, JetStreamSink, JetStreamSinkConfig
from .jetstream_source import JetStreamSource, JetStreamSourceConfig, parse_ack_reply
from .jetstream_streams import PlacementConfig, StreamConfig, ensure_stream

__all__ = ["MSG_ID", "JetStreamSink", "JetStreamSinkConfig", "JetStreamSource", "JetStreamSourceConfig",
           "PlacementConfig", "StreamConfig", "ensure_stream", "parse_ack_reply"]
