"""The ``generate`` source: a synthetic dataset, deterministic for a seed, optionally paced."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import Field, field_validator

from ..batch import Batch
from ..datasets import DATASETS, get_dataset
from ..models import Duration, Strict
from .base import Source


class GenerateSource(Source):
    """Records of a dataset in batches; ``rate`` (records/s) paces them, else as fast as possible."""

    type = "generate"
    stage = "generate"

    def __init__(self, dataset: str = "point", *, count: int | None = None, duration: float | None = None,
                 batch_size: int = 1000, seed: int = 0, rate: float | None = None) -> None:
        super().__init__(count=count, duration=duration)
        self.dataset = get_dataset(dataset)
        self.batch_size = batch_size
        self.seed = seed
        self.rate = rate
        self.schema = self.dataset.schema  # typed: positional and schema'd formats read it

    @property
    def name(self) -> str:
        return f"generate:{self.dataset.name}"

    @property
    def params(self) -> dict[str, Any]:
        return {"dataset": self.dataset.name, "count": self.count, "seed": self.seed,
                "batch_size": self.batch_size, "rate": self.rate}

    async def batches(self) -> AsyncIterator[Batch]:
        total = self.count if self.count is not None else 1 << 62
        # With a rate, batches are sized so that about ten go out per second.
        size = self.batch_size if not self.rate else max(1, min(self.batch_size, int(self.rate / 10) or 1))
        started = time.monotonic()
        seq = 0
        for values in self.dataset.records(total, self.seed, size):
            if self.stopping.is_set():
                return
            n = len(values)
            yield Batch(values, meta={"seq": range(seq, seq + n)}, schema=self.schema,
                        raw_nbytes=self.dataset.raw_size(values))
            seq += n
            if self.rate:
                ahead = seq / self.rate - (time.monotonic() - started)
                if ahead > 0:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self.stopping.wait(), ahead)


class GenerateConfig(Strict):
    """``source: {type: generate, dataset: point, count: 1000000, batch_size: 1000}``"""

    type: Literal["generate"]
    dataset: str = "point"
    count: int | None = Field(default=None, ge=0)
    duration: Duration | None = None
    batch_size: int = Field(default=1000, ge=1)
    seed: int = 0
    rate: float | None = Field(default=None, gt=0, description="records per second; unset = as fast as possible")

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, v: str) -> str:
        if v not in DATASETS:
            raise ValueError(f"unknown dataset {v!r}: allowed {', '.join(DATASETS)}")
        return v

    def build(self) -> GenerateSource:
        return GenerateSource(self.dataset, count=self.count, duration=self.duration,
                              batch_size=self.batch_size, seed=self.seed, rate=self.rate)
