"""The ``capture`` source: a capture read back in capture order, whole or a slice, at full speed or the
original pace.

Batches are shaped like a NATS source's (``capture_format.batch_from_arrow``). A slice
(``subject``, ``since``, ``until``) keeps the records received on matching subjects in that
time, each with its place in the whole capture as its ``seq``; ``pace: original`` releases
them at their recorded inter-arrival times (``pacing.py``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import Field, field_validator

from ..core.batch import PAYLOADS, Batch, describe_error
from ..core.errors import WirepipeError
from ..core.models import Duration, SourceLimits
from ..storage.files import Paths, fspaths
from ..wire import subject_regex
from .capture_format import RowGroup, batch_from_arrow, capture_files, plan_row_groups
from .connector import Unreadable
from .files import FileSource

log = logging.getLogger("wirepipe.capture")


class CaptureSource(FileSource):
    """Reads a capture in capture order, row group by row group, optionally at the original pace.

    ``pace="original"`` releases records at their recorded inter-arrival times (by
    ``received_ns``, or ``sent_ns`` with ``pace_by="sent"``) divided by ``speed``; gaps
    longer than ``max_gap`` seconds are shortened to it. A file or row group that cannot be
    read (a truncated file, a corrupt page) is gone past and listed in ``unreadable()`` (the run
    reports it and ends non-zero), unless ``stop_on_error``. Set after building: ``row_groups``
    restricts the read to a share of the capture (what a replay worker gets); ``pacer``
    overrides the pacing (a replay worker's, or one on a test clock). ``subject``, ``since`` and
    ``until`` read a slice: the records received on matching subjects in that time (each keeps its
    ``seq``, its place in the whole capture); ``count`` then takes the first N of the slice. ``Bounded``:
    ``replay --workers N`` splits its row groups, a pool would read all of it N times.
    """

    type = "capture"
    gives = PAYLOADS
    config: CaptureSourceConfig

    def __init__(self, path: Paths, **fields: Any) -> None:
        """``fields`` are ``CaptureSourceConfig``'s (``batch_size``, ``count``, ``pace``, ``speed``...)."""
        self._init(CaptureSourceConfig, path=fspaths(path), **fields)

    def _configure(self, config: CaptureSourceConfig) -> None:
        super()._configure(config)
        self.row_groups: list[RowGroup] | None = None
        self.pacer: Any = None
        self._unreadable: list[Unreadable] = []

    @property
    def params(self) -> dict[str, Any]:
        config = self.config
        return {"path": config.path, "batch_size": config.batch_size, "count": self.count, "pace": config.pace,
                "speed": config.speed}

    def check_input(self) -> None:
        if self.row_groups is None:
            capture_files(self.config.path)

    def plan(self) -> list[RowGroup]:
        if self.row_groups is None:
            self.row_groups = plan_row_groups(self.config.path, None if self.config.stop_on_error else self._unreadable)
        return self.row_groups

    def unreadable(self) -> list[Unreadable]:
        return list(self._unreadable)

    async def batches(self) -> AsyncIterator[Batch]:
        import pyarrow.parquet as pq

        config = self.config
        pacer = self.pacer
        if pacer is None and config.pace == "original":
            from .pacing import Pacer

            pacer = self.pacer = Pacer(speed=config.speed, max_gap=config.max_gap)
        files: dict[str, Any] = {}
        for group in self.plan():
            pf = files.get(group.path)
            if pf is None:
                files.clear()
                pf = files[group.path] = pq.ParquetFile(group.path)
            reader = pf.iter_batches(batch_size=config.batch_size, row_groups=[group.index])
            position = group.position
            left = group.rows  # a plan cut at a count reads a row group in part
            while left > 0:
                # Parquet decoding releases the GIL: overlap it with the operators downstream.
                try:
                    rb = await asyncio.to_thread(next, reader, None)
                except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
                    why = f"cannot be read (a corrupt file?): {describe_error(exc)}"
                    if config.stop_on_error:
                        raise WirepipeError(f"{group.path}: row group {group.index} {why}") from None
                    self._unreadable.append(Unreadable(group.path, group.index, left, why))
                    log.error("%s: row group %d %s: %d records not read; replaying the rest", group.path,
                              group.index, why, left)
                    files.clear()  # the next row group opens the file afresh
                    break
                if rb is None:
                    break
                if rb.num_rows > left:
                    rb = rb.slice(0, left)
                left -= rb.num_rows
                rows, seqs = self._selected(rb, position)
                if pacer is None:
                    if rows.num_rows:
                        yield batch_from_arrow(rows, seqs)
                else:
                    for start, stop, due in pacer.schedule(pace_column(rows, config.pace_by)):
                        if not await pacer.wait(due, self.stopping):
                            return
                        yield batch_from_arrow(rows.slice(start, stop - start),
                                               position + start if isinstance(seqs, int) else seqs[start:stop])
                position += rb.num_rows
                if self.stopping.is_set():
                    return


    def _selected(self, rb: Any, position: int) -> tuple[Any, int | list[int]]:
        """The rows of the slice (``subject``, ``since``, ``until``) and their positions in the capture:
        the first one's (all rows kept) or each one's."""
        config = self.config
        if config.subject is None and config.since is None and config.until is None:
            return rb, position
        import pyarrow as pa
        import pyarrow.compute as pc

        names = rb.schema.names
        keep = pa.array([True] * rb.num_rows)
        if config.subject is not None:
            if "subject" not in names:
                return rb.slice(0, 0), []
            pattern = "^(?:" + subject_regex(config.subject) + ")$"
            keep = pc.and_(keep, pc.fill_null(pc.match_substring_regex(rb.column("subject"), pattern), False))
        for bound, compare in ((config.since, pc.greater_equal), (config.until, pc.less)):
            if bound is None:
                continue
            if "received_ns" not in names:
                return rb.slice(0, 0), []
            ns = pa.scalar(_epoch_ns(bound), pa.int64())
            keep = pc.and_(keep, pc.fill_null(compare(rb.column("received_ns"), ns), False))
        index = pc.indices_nonzero(keep).to_pylist()
        return rb.take(pa.array(index, pa.int64())), [position + i for i in index]


def _epoch_ns(when: dt.datetime) -> int:
    """ns since the epoch; a time without a zone is UTC (as ``--from-time`` reads it)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000


def pace_column(rb: Any, pace_by: str) -> Any:
    """The timestamps to pace by: ``received_ns`` (or ``sent_ns``), the other one where it is missing."""
    import pyarrow.compute as pc

    first, second = ("sent_ns", "received_ns") if pace_by == "sent" else ("received_ns", "sent_ns")
    names = rb.schema.names
    col = rb.column(first) if first in names else None
    if col is None or col.null_count:
        other = rb.column(second) if second in names else None
        if col is None:
            col = other
        elif other is not None:
            col = pc.coalesce(col, other)
    if col is None:
        raise WirepipeError("the capture has neither received_ns nor sent_ns: it cannot be paced (use --pace max)")
    return col


class CaptureSourceConfig(SourceLimits):
    """``source: {type: capture, path: captures/blocks, pace: original, speed: 2}``"""

    type: Literal["capture"]
    path: str | list[str] = Field(description="capture files, folders and globs, read in the order given")
    batch_size: int = Field(default=8192, ge=1, description="records per batch: the unit operators, metrics and commits work on")
    pace: Literal["max", "original"] = Field(default="max", description="max: as fast as possible; original: "
                                             "the recorded inter-arrival times, divided by speed")
    speed: float = Field(default=1.0, gt=0, description="with pace: original, how many times faster than recorded")
    pace_by: Literal["received", "sent"] = Field(default="received", description="with pace: original, the "
                                                 "times to follow: received_ns, or the publishers' sent_ns")
    max_gap: Duration | None = Field(default=None, description="with pace: original, shorten longer pauses to this")
    subject: str | None = Field(default=None, description="only the records received on subjects this pattern "
                                "matches (NATS wildcards: orders.*.eu, orders.>)")
    since: dt.datetime | None = Field(default=None, description="only the records received at or after this time "
                                      "(ISO 8601; without a zone, UTC)")
    until: dt.datetime | None = Field(default=None, description="only the records received before this time")

    @field_validator("subject")
    @classmethod
    def _pattern(cls, v: str | None) -> str | None:
        if v is not None:
            subject_regex(v)
        return v
    stop_on_error: bool = Field(default=False, description="stop at the first file or row group that cannot be "
                                "read; default: read every readable one, list the others, end non-zero")

    def build(self) -> CaptureSource:
        return CaptureSource.from_config(self)


SOURCES = {"capture": CaptureSourceConfig}
RANK = 6  # where its types come in the "allowed" lists (connectors/__init__.py)
