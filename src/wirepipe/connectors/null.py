"""The ``null`` sink: discards every record and counts them (the sink for benchmarks and dry runs)."""

from __future__ import annotations

from typing import Literal

from ..core.batch import Batch
from ..core.models import Strict
from ..core.stages import Stage
from .connector import Configured, Sink


class NullSink(Configured, Sink):
    """Discards every record and counts them (the sink for benchmarks)."""

    type = "null"
    stage = Stage.WRITE
    batch_results = "nothing"  # Beam replay: no results to write

    def __init__(self) -> None:
        self._init(NullSinkConfig)

    def _configure(self, config: NullSinkConfig) -> None:
        self.config = config
        self.records = 0

    async def write(self, batch: Batch) -> None:
        self.records += len(batch.values)


class NullSinkConfig(Strict):
    type: Literal["null"]

    def build(self) -> NullSink:
        return NullSink.from_config(self)


SINKS = {"null": NullSinkConfig}
RANK = 1  # where its types come in the "allowed" lists (connectors/__init__.py)
