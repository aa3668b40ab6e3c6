"""The ``generate`` source: a synthetic dataset, deterministic for a seed, optionally paced."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import Field, field_validator

from ..core.batch import RECORDS, Batch
from ..core.models import SourceLimits, unknown_message
from ..core.stages import Stage
from ..datasets import DATASETS, get_dataset
from .connector import Bounded, Configured, Source


class GenerateSource(Configured, Source, Bounded):
    """Records of a dataset in batches; ``rate`` (records/s) paces them, else as fast as possible. ``Bounded``:
    every worker of a pool would generate all of it.

    >>> GenerateSource("point", count=10, batch_size=0)
    Traceback (most recent call last):
    ...
    wirepipe.core.errors.ConfigError: source.batch_size: Input should be greater than or equal to 1 (got 0)
    """

    type = "generate"
    gives = RECORDS
    stage = Stage.GENERATE
    identity_ignores = Source.identity_ignores | {"rate"}  # the pace, not the records
    config: GenerateConfig

    def __init__(self, dataset: str = "point", **fields: Any) -> None:
        """``fields`` are ``GenerateConfig``'s (``count``, ``batch_size``, ``seed``, ``rate``, ``duration``)."""
        self._init(GenerateConfig, dataset=dataset, **fields)

    def _configure(self, config: GenerateConfig) -> None:
        super().__init__(count=config.count, duration=config.duration)
        self.config = config
        self.dataset = get_dataset(config.dataset)  # the dataset the name stands for
        self.schema = self.dataset.schema  # typed: positional and schema'd formats read it

    @property
    def name(self) -> str:
        return f"generate:{self.dataset.name}"

    @property
    def ends(self) -> bool:
        return self.count is not None or self.duration is not None  # without either it generates for ever

    @property
    def params(self) -> dict[str, Any]:
        config = self.config
        return {"dataset": self.dataset.name, "count": self.count, "seed": config.seed,
                "batch_size": config.batch_size, "rate": config.rate}

    async def batches(self) -> AsyncIterator[Batch]:
        total = self.count if self.count is not None else 1 << 62
        rate, batch_size = self.config.rate, self.config.batch_size
        # With a rate, batches are sized so that about ten go out per second.
        size = batch_size if not rate else max(1, min(batch_size, int(rate / 10) or 1))
        started = time.monotonic()
        seq = 0
        for values in self.dataset.records(total, self.config.seed, size):
            if self.stopping.is_set():
                return
            n = len(values)
            yield Batch(values, meta={"seq": range(seq, seq + n)}, schema=self.schema,
                        raw_nbytes=self.dataset.raw_size(values))
            seq += n
            if rate:
                ahead = seq / rate - (time.monotonic() - started)
                if ahead > 0:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self.stopping.wait(), ahead)


class GenerateConfig(SourceLimits):
    """``source: {type: generate, dataset: point, count: 1000000, batch_size: 1000}``"""

    type: Literal["generate"]
    dataset: str = Field(default="point", description="the built-in dataset (wirepipe datasets lists them)")
    batch_size: int = Field(default=1000, ge=1, description="records per batch: the unit operators, metrics and commits work on")
    seed: int = Field(default=0, description="the random seed: the same seed gives the same records")
    rate: float | None = Field(default=None, gt=0, description="records per second; unset = as fast as possible")

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, v: str) -> str:
        if v not in DATASETS:
            raise ValueError(unknown_message("dataset", v, DATASETS))
        return v

    def build(self) -> GenerateSource:
        return GenerateSource.from_config(self)


SOURCES = {"generate": GenerateConfig}
RANK = 0  # where its types come in the "allowed" lists (connectors/__init__.py)
