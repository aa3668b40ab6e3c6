"""A consumer-like test source: batches whose meta carries ``sent_ns`` / ``received_ns``.

The NATS sources fill these columns from ``Wirepipe-Sent-At`` and the receive time; this
source fills them with values a test chooses, so latency code is tested without a server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from wirepipe.batch import Batch
from wirepipe.connectors.base import Source


class StampedSource(Source):
    """A consumer-like source: batches whose meta carries sent_ns / received_ns, as NATS sources fill them."""

    type = "stamped"
    stage = "consume"

    def __init__(self, batches: list[tuple[list[int | None], list[int]]]) -> None:
        super().__init__()
        self.items = batches

    async def batches(self) -> AsyncIterator[Batch]:
        seq = 0
        for sent, received in self.items:
            n = len(sent)
            yield Batch([b"\x82\xa1x\x01\xa1y\x02"] * n, meta={"seq": list(range(seq, seq + n)), "sent_ns": sent,
                                                              "received_ns": received})
            seq += n
