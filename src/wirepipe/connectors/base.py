"""The connector shapes: sources are async iterators of batches, sinks write batches.

A source produces ``Batch`` objects from ``batches()`` and stops on its own when it
is exhausted, when ``count`` records or ``duration`` seconds are reached, or when the
pipeline sets ``stopping``. Sources that need acknowledgements (JetStream) implement
``ack`` and set ``redelivers``; the pipeline calls ``ack`` only after the sink has
flushed the batch (made it durable), and ``in_progress`` while the sink is unavailable
(a sink failure is never a reason to redeliver a record).

A sink has ``write(batch)``, ``flush()`` and ``close()``; ``flush`` makes everything
written so far durable (or sent), ``close`` flushes and releases the resource.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar

from ..batch import Batch, Rejected

_NOT_IDENTITY = frozenset({"count", "duration", "batch_size", "batch_timeout", "rate", "url", "auth", "tls",
                           "durable", "ordered", "queue"})


class Source:
    """Base class of sources."""

    type: ClassVar[str] = "source"
    stage: ClassVar[str] = "source"
    redelivers: bool = False  # True: an unacknowledged record comes back (the pipeline may let go of it)
    # True: messages are lost when the source is not read for a while (core NATS), so the
    # pipeline runs long operator passes off the event loop and the client keeps reading.
    drops_when_unread: ClassVar[bool] = False

    def __init__(self, *, count: int | None = None, duration: float | None = None) -> None:
        self.count = count
        self.duration = duration
        self.stopping = asyncio.Event()
        self.schema: Sequence[str] | None = None  # field names, or a typed RecordSchema

    @property
    def name(self) -> str:
        return self.type

    @property
    def params(self) -> dict[str, Any]:
        return {"count": self.count, "duration": self.duration}

    @property
    def identity(self) -> str:
        """What this source reads, independent of how much and how (type and parameters without limits,
        batching or connection): the same input gives the same identity, so the default JetStream
        ``Nats-Msg-Id`` deduplicates a re-run of it."""
        import json

        params = {k: v for k, v in self.params.items() if k not in _NOT_IDENTITY}
        return f"{self.type}:{json.dumps(params, sort_keys=True, default=str)}"

    def check_input(self) -> None:
        """Raise ``WirepipeError`` if the input is not there (a missing file or capture).

        ``wirepipe run`` calls it before anything opens, so a run that cannot read leaves no empty
        output file or metrics behind and exits as a usage error. Sources that read files override it.
        """

    async def open(self) -> None:
        """Connect or open files; called once before ``batches``."""

    async def close(self) -> None:
        """Release what ``open`` took; called once, also after errors."""

    def batches(self) -> AsyncIterator[Batch]:  # pragma: no cover - abstract
        raise NotImplementedError

    async def ack(self, batch: Batch) -> None:
        """Acknowledge the records of a batch the sink has written (no-op for sources without acks)."""

    async def settle_rejected(self, rejected: list[Rejected]) -> None:
        """Settle records that went to the dead-letter destination (ack/term them; no-op by default)."""

    async def in_progress(self, batches: list[Batch]) -> None:
        """The sink is unavailable and these records wait for it: keep them from being redelivered
        (JetStream: an in-progress ack extends their ack deadline). No-op for sources without acks."""

    def lag(self) -> int | None:
        """Records waiting upstream of this source (stream pending, buffered), when it knows."""
        return None

    async def let_read(self) -> None:
        """Yield to the event loop between slices of a long operator pass so the client reads the socket."""
        await asyncio.sleep(0)

    def losses(self) -> dict[str, int] | None:
        """What the source knows it lost (``lost`` is the total), or None for a source that cannot lose."""
        return None

    @property
    def lost(self) -> int:
        """Records known lost so far (the ``lost`` of ``losses()``; 0 for a source that cannot lose)."""
        return 0

    def wants_commit(self) -> bool:
        """True when the source waits for acks to go on (it read its ``count``): commit without delay."""
        return False

    def __or__(self, other: Any) -> Any:
        """``source | op | ... | sink`` builds a ``Pipeline``."""
        from ..pipelines.pipeline import Pipeline

        return Pipeline(self) | other


class Sink:
    """Base class of sinks."""

    type: ClassVar[str] = "sink"
    stage: ClassVar[str] = "sink"

    @property
    def name(self) -> str:
        return self.type

    @property
    def params(self) -> dict[str, Any]:
        return {}

    async def open(self) -> None:
        """Connect or open files; called once before the first ``write``."""

    async def write(self, batch: Batch) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    async def write_rejected(self, rejected: list[Rejected]) -> None:
        """Write dead letters (this sink is a ``dead_letter`` destination): envelopes by default,
        the original payloads with stage/error headers for NATS sinks."""
        from ..pipelines.pipeline import dead_letter_batch

        await self.write(dead_letter_batch(rejected))

    def take_rejected(self) -> list[Rejected]:
        """Records the sink refused after ``write`` returned (e.g. JetStream refused them at ack time)."""
        return []

    async def flush(self) -> None:
        """Make everything written so far durable or sent."""

    async def close(self) -> None:
        """Flush and release; called once, also after errors."""
        await self.flush()
