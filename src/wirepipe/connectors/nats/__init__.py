"""The NATS connectors, one module each, and what they share.

``connection`` (options, auth, TLS, reconnects; the managed connection), ``reader`` (a subscription read a
batch at a time: every nats-py private attribute wirepipe touches), ``core_sink`` and ``core_source`` (core
NATS, at-most-once, gaps counted by ``gaps``), ``jetstream_sink`` and the ``jetstream`` source
(``jetstream_source``: its config and the durable pull consumer, at-least-once; ``jetstream_ordered``: the
ordered consumer, no acks; ``jetstream_reader``: what both share),
``streams`` (the stream a sink creates), ``server`` (the embedded nats-server process), ``deferred_aiohttp``
(nats-py's WebSocket library imported when a ws:// connection uses it, not at every start). Header names, sizes
and dead letters are the wire contract's, in ``wirepipe.wire``.
"""

from .deferred_aiohttp import defer

defer()

