"""The connector shapes: sources are async iterators of batches, sinks write batches.

A source produces ``Batch`` objects from ``batches()`` and stops on its own when it
is exhausted, when ``count`` records or ``duration`` seconds are reached, or when the
pipeline sets ``stopping``. Sources that need acknowledgements (JetStream) implement
``ack``/``nak``; the pipeline calls ``ack`` only after the sink has written the batch.

A sink has ``write(batch)``, ``flush()`` and ``close()``; ``flush`` makes everything
written so far durable (or sent), ``close`` flushes and releases the resource.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from ..batch import Batch, Rejected


class Source:
    """Base class of sources."""

    type: ClassVar[str] = "source"
    stage: ClassVar[str] = "source"

    def __init__(self, *, count: int | None = None, duration: float | None = None) -> None:
        self.count = count
        self.duration = duration
        self.stopping = asyncio.Event()
        self.schema: tuple[str, ...] | None = None

    @property
    def name(self) -> str:
        return self.type

    @property
    def params(self) -> dict[str, Any]:
        return {"count": self.count, "duration": self.duration}

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

    async def flush(self) -> None:
        """Make everything written so far durable or sent."""

    async def close(self) -> None:
        """Flush and release; called once, also after errors."""
        await self.flush()
