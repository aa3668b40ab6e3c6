"""The metrics recorder: one row per stage per batch, latency rows for the records of consumers.

The operators run in one place, ``Pipeline.process_batch``: it reads the clock when each
operator starts and ends, sizes each output column between the two (off the stage's
clock, while the column is in the CPU's cache) and hands the recorder the batch's
stamps at once (``record_batch``); the sink stage follows with ``stamp_sink``. The
recorder appends the batch's rows to its column buffers in bulk, one ``extend`` per
column (no tuple per row); the operator's name and parameters are looked up once, at
``open``. On consumers, whose batches
carry ``meta["sent_ns"]`` (from ``Wirepipe-Sent-At``) and ``meta["received_ns"]``, the
recorder also keeps latency rows with the wall-clock end of the batch's last stage: one row per run of
consecutive records whose latency columns are equal, with the number of records it stands for
(``records``). The records ``unpack`` took from one message share every value, as do messages published
in one write and taken in one batch: a row each was ~0.2 us of Parquet encoding per record (written, then
merged), as much as decoding a framed ``point`` record; the runs are found with numpy per batch, and no
per-record list is kept from one batch to the next.

Rows are flushed as Arrow tables by rows (``row_group_rows``) and by time
(``flush_interval``, so an idle or slow worker's results still grow) into two crash-safe
Parquet dataset folders (``storage/parts.py``): ``PATH`` (stage rows) and its sibling
``<PATH stem>.latency<suffix>`` (latency rows). Every file carries the run metadata in
its Parquet key-value metadata. With ``path=None`` the rows stay in memory
(``tables()``), for benchmarks that build their own results.

A row is never dropped. A value its column cannot hold (a forged header's 10^29, NaN) is
clamped or nulled (``columns.fit_value``), counted and warned about once per column; a full
disk delays the parts (``PartWriter``: the sinks' waits, the spool) and ``figures()`` counts
what it cost. The rows waiting for room are bounded (``max_rows_held``): past it the pipeline waits
(``room``), so memory stays bounded and no row is dropped. ``aclose`` waits for room without blocking
the event loop.

Columns: ``metrics/columns.py`` (``STAGE_COLUMNS``, ``LATENCY_COLUMNS``). Settings and their
defaults: ``MetricsConfig``, the YAML ``metrics:`` section, whose defaults are the recorder's too.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Iterable, Sequence
from itertools import islice, repeat
from operator import sub
from pathlib import Path
from typing import Any

from pydantic import Field

from ..core.batch import Batch, Rejected, Repeated
from ..core.models import Duration, Strict
from .columns import TABLES, fit_value, table_schema
from .run_metadata import latency_path, new_run_id, run_metadata

log = logging.getLogger("wirepipe")

# What a timed pass measured (``run_operators``): each operator's start and end (monotonic ns) and, per
# stage, entry 0 being the batch as the source gave it, the records that left it, the running count of
# the batch's rejects, the payload bytes that left it (None while values are objects), the running
# count of its projected records and the messages (values) that left it.
Stamps = tuple[list[int], list[int], list[int], list[int], list["int | None"], list[int], list[int]]
# A batch's latency rows (``_latency_rows``): the records each row stands for, and per ``_LATENCY_META`` column its
# values and null mask (numpy; the mask None without nulls), or None where the batch has no such column.
LatencyRows = tuple[Any, list["tuple[Any, Any] | None"]]

_LATENCY_FLUSH_ROWS = 65536
_LATENCY_META = ("seq", "stream_seq", "sent_ns", "received_ns")  # a latency row's values from the batch's meta
_GIVE_UP_GRACE = 5.0  # seconds a cancelled run's part writers get for their last try
_ROOM_POLL = 0.05  # seconds between two looks at the rows held while the pipeline waits for room (``room``)


def _shared_runs(columns: list[Sequence[Any] | None]) -> list[int] | None:
    """The counts every present column was repeated by (``Repeated`` columns of one ``Batch.repeat``), or None."""
    present = [c for c in columns if c is not None]
    if not present or not all(type(c) is Repeated for c in present):
        return None
    counts = present[0].counts  # type: ignore[attr-defined]
    return counts if all(c.counts is counts for c in present) else None  # type: ignore[attr-defined]


def _columns() -> tuple[list[Any], ...]:
    """Empty buffers of the stage rows: batch, step, records, rejected, bytes_in, bytes_out, start, end, lost,
    redelivered, reasons, projected, messages, lost_tail."""
    return ([], [], [], [], [], [], [], [], [], [], [], [], [], [])


def _reasons(rejected: Sequence[Rejected]) -> list[tuple[str, int]] | None:
    """``rejected`` counted by reason (a map cell), or None when there are none."""
    if not rejected:
        return None
    from collections import Counter

    from ..core.rejections import reason_of

    return list(Counter(reason_of(r.error) for r in rejected).items())


def pipeline_stages(source: Any, operators: Sequence[Any], sink: Any) -> list[tuple[str, str, Any]]:
    """``(stage, operator, params)`` of every stage in run order: source, operators, sink."""
    return [(source.stage, source.name, source.params), *((op.stage, op.name, op.params) for op in operators),
            (sink.stage, sink.name, sink.params)]


def _named(stages: Iterable[tuple[str, str, Any]]) -> list[tuple[str, str, str]]:
    """``(stage, operator, params as JSON)`` of each stage, as the rows name them."""
    return [(s, o, p if isinstance(p, str) else json.dumps(p, default=str)) for s, o, p in stages]


class MetricsConfig(Strict):
    """``metrics: {path: results/run.parquet}``: a folder of crash-safe Parquet parts (docs/concepts/metrics.md).

    Its defaults are the recorder's (``MetricsRecorder``'s keyword arguments take them from
    here), so a pipeline records alike from YAML, with ``Pipeline(metrics=PATH)`` and with a
    recorder made by hand.
    """

    path: str
    row_group_rows: int = Field(default=8192, ge=1, description="flush after this many stage rows")
    flush_interval: Duration = Field(default=5.0, gt=0, description="and at least this often")
    latency: bool = Field(default=True, description="per-record latency rows on consumers")
    compact_parts: int = Field(default=16, ge=0, description="merge this many small parts into one; 0 = never")
    max_rows_held: int = Field(default=1_000_000, ge=1, description="rows the disk refused that may wait in memory; "
                               "past it the pipeline waits for room (backpressure)")

    def build(self, pipeline: str, config: dict[str, Any] | None = None) -> MetricsRecorder:
        """The recorder of ``pipeline``; ``config`` (the whole validated config) goes into every file's metadata."""
        return MetricsRecorder(self.path, pipeline=pipeline, config=config, row_group_rows=self.row_group_rows,
                               flush_interval=self.flush_interval, latency=self.latency,
                               compact_parts=self.compact_parts, max_rows_held=self.max_rows_held)


_DEFAULT: dict[str, Any] = {name: f.default for name, f in MetricsConfig.model_fields.items() if name != "path"}


class MetricsRecorder:
    """Buffers stage and latency rows; writes them as crash-safe Parquet parts by rows and by time.

    ``path=None`` keeps the rows in memory; ``flush_interval=None`` flushes by rows only.
    """

    def __init__(self, path: str | Path | None, *, pipeline: str = "pipeline", config: dict[str, Any] | None = None,
                 row_group_rows: int = _DEFAULT["row_group_rows"],
                 flush_interval: float | None = _DEFAULT["flush_interval"], latency: bool = _DEFAULT["latency"],
                 compact_parts: int = _DEFAULT["compact_parts"], max_rows_held: int = _DEFAULT["max_rows_held"],
                 run_id: str | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.pipeline = pipeline
        self.config = config
        self.row_group_rows = row_group_rows
        self.flush_interval = flush_interval
        self.latency = latency
        self.compact_parts = compact_parts
        self.max_rows_held = max_rows_held
        self.waits = 0  # times the pipeline waited for the disk to take the rows held (``room``)
        self.waiting: str | None = None  # what the pipeline waits for while it does (the status line)
        self.run_id = run_id or new_run_id()
        # The config the batches run under (the ``config_digest`` column: ``wirepipe run`` sets it, a hot reload
        # changes it with ``restage``); None: unknown.
        self.config_digest: str | None = None
        self.rows_written = 0
        self.latency_rows_written = 0
        self._cols: tuple[list[Any], ...] = _columns()  # the stage rows, column by column
        self._pending_nbytes: int | None = None  # payload bytes the last operator left for the sink
        self._lat: list[tuple[Any, ...]] = []  # a batch's latency rows: (index, done_ns, LatencyRows)
        self._lat_rows = 0
        self._stages: list[tuple[str, str, str]] = []
        self._writers: dict[str, Any] = {}
        self._memory: dict[str, list[Any]] = {"stages": [], "latency": []}
        self._schemas: dict[str, Any] = {}
        self._closed: list[Any] = []  # the part writers of the run, once handed its end (their figures stay)
        self.values_fixed = 0  # values a column could not hold, clamped or nulled (their rows kept)
        self._warned: set[str] = set()  # columns whose first fixed value was logged

    # --- lifecycle -------------------------------------------------------------------------------

    def open(self, stages: Iterable[tuple[str, str, Any]]) -> None:
        """Fix the run's stages (index = position) and prepare the output; call once before stamping."""
        from ..storage.parts import check_folder

        self._stages = _named(stages)
        meta = run_metadata(self.pipeline, self.config, self.run_id)
        self._schemas = {table: table_schema(table, meta) for table in TABLES}
        if self.path is not None:
            from ..storage.spool import check_writable

            check_folder(self.path)
            check_folder(latency_path(self.path))
            check_writable(self.path)  # fail at start, not at the first flush

    def restage(self, stages: Iterable[tuple[str, str, Any]], config_digest: str | None) -> None:
        """A hot reload: the rows recorded so far are written with the stages and config they ran under, the next
        ones name ``stages`` and ``config_digest``."""
        self.flush()
        self._stages = _named(stages)
        self.config_digest = config_digest

    def mark_opened(self) -> None:
        """The pipeline's parts are open (it connected, its stream is there): the files written from now on
        say so, so a run that then recorded no batch reads as idle, not as a failed start."""
        opened = {"wirepipe.opened_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self._schemas = {kind: schema.with_metadata({**(schema.metadata or {}), **opened})
                         for kind, schema in self._schemas.items()}

    def close(self) -> None:
        """Flush the buffers and finish the part files: everything recorded is on disk after this (it waits
        for room while the disk is full; ``aclose`` waits without blocking an event loop).

        The last rows go to each writer with its ``finish``: a short run that never flushed
        writes its one file here, without starting a writer thread (see ``PartWriter``).
        """
        writers = self._finish()
        for writer in writers:
            writer.join()
        for writer in writers:
            writer.raise_error()

    async def aclose(self, *, wait: bool = True) -> None:
        """``close`` on an event loop: the loop runs on while the disk is full. ``wait=False``, or a cancellation
        while it waits (a run stopped past its deadline), gives the parts left one more try and counts what the
        disk still refuses (``figures``: ``metrics_rows_unwritten``)."""
        writers = self._finish()
        if not wait:
            for writer in writers:
                writer.stop_waiting()
        try:
            for writer in writers:
                if not writer.join(0):
                    await asyncio.to_thread(writer.join)
        except asyncio.CancelledError:
            for writer in writers:
                writer.stop_waiting()
            for writer in writers:
                writer.join(_GIVE_UP_GRACE)
            raise
        for writer in writers:
            writer.raise_error()

    def _finish(self) -> list[Any]:
        """Hand the last rows and the end of the run to the part writers (none in memory); returns them."""
        if not self._schemas:
            return []
        last = self._take()
        if self.path is None:
            for kind, table in last.items():
                self._memory[kind].append(table)
            return []
        if "stages" not in self._writers and "stages" not in last:  # a run with no batches is still listed
            last["stages"] = self._schemas["stages"].empty_table()
        for kind in last:
            self._writer(kind)
        writers, self._writers = self._writers, {}
        for kind, writer in writers.items():
            writer.finish(last.get(kind))
        self._closed += writers.values()
        return list(writers.values())

    def figures(self) -> dict[str, int]:
        """What writing the metrics met, for the run summary and Prometheus: ``metrics_write_errors`` (failed
        writes of a part, each tried again), ``metrics_rows_delayed`` (rows held in memory while the disk
        refused them), ``metrics_rows_unwritten`` (given up: the run was stopped past its deadline while the
        disk was still full), ``metrics_values_fixed`` (values a column could not hold, clamped or nulled) and
        ``metrics_waits`` (times the pipeline waited because ``max_rows_held`` rows waited for room)."""
        writers = [*self._writers.values(), *self._closed]
        return {"metrics_write_errors": sum(w.errors for w in writers),
                "metrics_rows_delayed": sum(w.rows_delayed for w in writers),
                "metrics_rows_unwritten": sum(w.rows_unwritten for w in writers),
                "metrics_values_fixed": self.values_fixed,
                "metrics_waits": self.waits}

    @property
    def failing(self) -> str | None:
        """``<folder>: <error>`` while the disk refuses the metrics (the status line), else None."""
        for writer in [*self._writers.values(), *self._closed]:
            if writer.failing is not None:
                return f"{writer.folder}: {writer.failing}"
        return None

    @property
    def rows_held(self) -> int:
        """Rows handed to the part writers and not on disk yet (most of them: rows the disk refused)."""
        return sum(w.rows_held for w in self._writers.values())

    async def room(self, stopping: asyncio.Event) -> None:
        """Wait while more than ``max_rows_held`` rows wait for room on the disk: the pipeline stops taking batches
        (backpressure, as a failing sink's retries hold it) rather than grow memory without limit or drop rows.
        A stop ends the wait: its drain is bounded (the queued batches), and the close waits for room itself."""
        if self.rows_held <= self.max_rows_held or stopping.is_set():
            return
        self.waits += 1
        self.waiting = f"room on the disk for {self.rows_held:,} metrics rows (max_rows_held {self.max_rows_held:,})"
        log.warning("%s: the pipeline waits for %s", self.pipeline, self.waiting)
        try:
            while self.rows_held > self.max_rows_held and not stopping.is_set():
                await asyncio.sleep(_ROOM_POLL)
        finally:
            self.waiting = None
        log.info("%s: the metrics have room again: the pipeline goes on", self.pipeline)

    async def flush_periodically(self) -> None:
        """Flush every ``flush_interval`` seconds; the pipeline runs this as a task and cancels it at the end."""
        if not self.flush_interval:
            return
        while True:
            await asyncio.sleep(self.flush_interval)
            self.flush()

    # --- the hot path ----------------------------------------------------------------------------

    def record_batch(self, index: int, read: tuple[int, int] | None, stamps: Stamps,
                     raw_nbytes: int | None = None, lost: int | None = None, redelivered: int | None = None,
                     rejected: Sequence[Rejected] = (), lost_tail: int | None = None) -> None:
        """The rows of the source stage and of every operator of one batch, appended column by column.

        ``read`` is when the source read the batch (``None``: when the pass began); ``stamps``
        what ``run_operators`` measured: each operator's start and end, and per stage (entry 0
        the batch as the source gave it) the records that left it, the running count of the
        batch's rejects and the payload bytes that left it; ``raw_nbytes`` the records'
        declared raw size (the first operator's input when the source gave objects); ``lost``
        what the source found lost since the previous batch (``lost_tail``: the change in what of it only
        publishers' stamps claim) and ``redelivered`` the batch's records
        delivered before (the source row's ``lost`` and ``redelivered``); ``rejected`` the batch's
        rejected records, in the order the stages rejected them (each stage's share counted by
        reason). Call it on the event loop (the periodic flush runs there); the operators may have
        run in a thread.
        """
        starts, ends, records, running, sizes, projected, messages = stamps
        if read is None:
            t = starts[0] if starts else time.monotonic_ns()
            read = (t, t)
        n = len(sizes)
        (batch, step, rec, rej, bytes_in, bytes_out, start, end, lost_col, redelivered_col, reasons, proj,
         msgs, tail_col) = self._cols
        batch += repeat(index, n)
        step += range(n)
        rec += records
        msgs += messages
        rej.append(running[0])
        rej += map(sub, islice(running, 1, None), running)
        if rejected:  # each stage's slice of the batch's rejects, by reason
            reasons += (_reasons(rejected[a:b]) for a, b in zip([0, *running], running, strict=False))
        else:
            reasons += repeat(None, n)
        proj.append(projected[0])
        proj += map(sub, islice(projected, 1, None), projected)
        bytes_in.append(None)
        if n > 1:
            bytes_in.append(sizes[0] if sizes[0] is not None else raw_nbytes)
            bytes_in += islice(sizes, 1, n - 1)
        bytes_out += sizes
        start.append(read[0])
        start += starts
        end.append(read[1])
        end += ends
        lost_col.append(lost)
        lost_col += repeat(None, n - 1)
        tail_col.append(lost_tail)
        tail_col += repeat(None, n - 1)
        redelivered_col.append(redelivered)
        redelivered_col += repeat(None, n - 1)
        last = sizes[-1]
        self._pending_nbytes = last if last is not None or n > 1 else raw_nbytes

    def stamp_sink(self, index: int, batch: Batch, start: int, end: int,
                   refused: Sequence[Rejected] = ()) -> int | None:
        """Stamp the sink stage (the last one) and, on consumers, the batch's per-record latency;
        ``refused`` are the records the sink refused (a value it cannot represent).

        Returns the payload bytes the sink was given (what ``record_batch`` measured last).
        """
        nbytes, self._pending_nbytes = self._pending_nbytes, None
        records = len(batch.values)  # values: a latency row each
        self._sink_row(index, batch.record_count(), refused, nbytes, start, end, records)
        cols = self._cols
        if self.latency:
            meta = batch.meta
            sent = meta.get("sent_ns")
            # Without the header (``headers: none``) the column is all None: no rows, no cost.
            if sent and (sent[0] is not None or sent[-1] is not None):
                rows = self._latency_rows([meta.get(k) for k in _LATENCY_META], records)
                self._lat.append((index, time.time_ns(), rows))
                self._lat_rows += len(rows[0])
        if len(cols[0]) >= self.row_group_rows or self._lat_rows >= _LATENCY_FLUSH_ROWS:
            self.flush()
        return nbytes

    def stamp_source_lost(self, index: int, lost: int, lost_tail: int | None = None) -> None:
        """A source row of no records for what the source found lost after its last batch (core NATS: the
        records discarded at a drain, a tail the last stamps count: ``lost_tail``), so the ``lost`` and
        ``lost_tail`` columns add up to the run summary's figures; ``index`` the batch after the last one."""
        now = time.monotonic_ns()
        cols = self._cols
        for col, value in zip(cols, (index, 0, 0, 0, None, None, now, now, lost, None, None, 0, 0, lost_tail),
                              strict=True):
            col.append(value)

    def stamp_sink_refused(self, index: int, refused: Sequence[Rejected]) -> None:
        """A sink row of no records for what the destination refused after the write (JetStream, at its
        ack), so the stage rows count every reject the run summary does; ``index`` the last batch written."""
        now = time.monotonic_ns()
        self._sink_row(index, 0, refused, None, now, now, 0)

    def _sink_row(self, index: int, records: int, refused: Sequence[Rejected], nbytes: int | None, start: int,
                  end: int, messages: int) -> None:
        cols = self._cols
        cols[0].append(index)
        cols[1].append(len(self._stages) - 1)
        cols[2].append(records)
        cols[3].append(len(refused))
        cols[4].append(nbytes)
        cols[5].append(nbytes)
        cols[6].append(start)
        cols[7].append(end)
        cols[8].append(None)
        cols[9].append(None)
        cols[10].append(_reasons(refused))
        cols[11].append(0)
        cols[12].append(messages)
        cols[13].append(None)

    # --- writing ---------------------------------------------------------------------------------

    def flush(self) -> None:
        """Write the buffered rows: one part file per table that has rows."""
        for kind, table in self._take().items():
            self._write(kind, table)

    def _take(self) -> dict[str, Any]:
        """The buffered rows as Arrow tables by kind (``stages``, ``latency``); the buffers start empty."""
        tables = {}
        if self._cols[0]:
            cols, self._cols = self._cols, _columns()
            tables["stages"] = self._stage_table(cols)
            self.rows_written += len(cols[0])
        if self._lat:
            lat, self._lat, self._lat_rows = self._lat, [], 0
            tables["latency"] = table = self._latency_table(lat)
            self.latency_rows_written += table.num_rows
        return tables

    def tables(self) -> tuple[Any, Any]:
        """(stage rows, latency rows) recorded so far by an in-memory recorder (``path=None``)."""
        import pyarrow as pa

        self.flush()
        return tuple(pa.concat_tables(self._memory[k]) if self._memory[k] else self._schemas[k].empty_table()
                     for k in ("stages", "latency"))

    def _write(self, kind: str, table: Any) -> None:
        if self.path is None:
            self._memory[kind].append(table)
            return
        self._writer(kind).write(table)

    def _writer(self, kind: str) -> Any:
        """The part writer of ``kind``'s folder, made at its first table."""
        writer = self._writers.get(kind)
        if writer is None:
            from ..storage.parts import PartWriter

            assert self.path is not None
            folder = self.path if kind == "stages" else latency_path(self.path)
            writer = self._writers[kind] = PartWriter(folder, self.run_id, self._schemas[kind],
                                                      compact_parts=self.compact_parts)
        return writer

    def _stage_table(self, cols: tuple[list[Any], ...]) -> Any:
        import pyarrow as pa

        (batch, stage, records, rejected, bytes_in, bytes_out, start, end, lost, redelivered, reasons, projected,
         messages, lost_tail) = cols
        n = len(batch)
        index = self._array("stages", "step", stage)
        names = [pa.array([s[k] for s in self._stages], pa.string()).take(index) for k in range(3)]
        array = functools.partial(self._array, "stages")
        return pa.Table.from_arrays(
            [pa.repeat(self.run_id, n), pa.repeat(self.pipeline, n), pa.repeat(pa.scalar(self.config_digest, pa.string()), n),
             array("batch", batch), index, *names,
             array("records", records), array("rejected", rejected), array("bytes_in", bytes_in),
             array("bytes_out", bytes_out), array("start_ns", start), array("end_ns", end), array("lost", lost),
             array("redelivered", redelivered), array("reasons", reasons), array("projected", projected),
             array("messages", messages), array("lost_tail", lost_tail)],
            schema=self._schemas["stages"])

    def _latency_table(self, lat: list[tuple[Any, ...]]) -> Any:
        import numpy as np
        import pyarrow as pa

        sizes = [len(t[2][0]) for t in lat]
        n = sum(sizes)

        def column(pos: int) -> Any:
            parts = [t[2][1][pos] for t in lat]
            if all(p is None for p in parts):
                return pa.nulls(n, pa.int64())
            pairs = list(zip(parts, sizes, strict=True))
            values = np.concatenate([p[0] if p is not None else np.zeros(k, np.int64) for p, k in pairs])
            mask = np.concatenate([np.full(k, p is None) if p is None or p[1] is None else p[1] for p, k in pairs])
            return pa.array(values, mask=mask if mask.any() else None)

        batch = pa.array(np.repeat(np.array([t[0] for t in lat], np.int64), sizes))
        done = pa.array(np.repeat(np.array([t[1] for t in lat], np.int64), sizes))
        weights = pa.array(np.concatenate([t[2][0] for t in lat]))
        return pa.Table.from_arrays([pa.repeat(self.run_id, n), batch, *map(column, range(len(_LATENCY_META))), done,
                                     weights], schema=self._schemas["latency"])

    def _latency_rows(self, columns: list[Sequence[Any] | None], n: int) -> LatencyRows:
        """A batch's latency rows: a row where any of ``columns`` (``_LATENCY_META``'s, per record; None: the
        batch has none) changes from the record before, with the number of records until the next one."""
        import numpy as np

        counts = _shared_runs(columns)
        if counts is not None:  # all repeated alike (unpack's): one value per run, not per record
            kept = [i for i, k in enumerate(counts) if k]  # a run of no records (an empty message) has no row
            if len(kept) < len(counts):
                columns = [None if c is None else [c.runs[i] for i in kept] for c in columns]  # type: ignore[attr-defined]
            else:
                columns = [None if c is None else c.runs for c in columns]  # type: ignore[attr-defined]
            n = len(kept)
        arrays = [None if c is None else self._int64s(name, c) for name, c in zip(_LATENCY_META, columns, strict=True)]
        change = np.zeros(n, dtype=bool)
        change[0] = True
        for a in arrays:
            if a is not None:
                for v in a:
                    if v is not None:
                        change[1:] |= v[1:] != v[:-1]
        starts = np.flatnonzero(change)
        weights = np.diff(starts, append=n) if counts is None else \
            np.add.reduceat(np.array([counts[i] for i in kept], np.int64), starts)
        return weights, [None if a is None else (a[0][starts], None if a[1] is None else a[1][starts])
                         for a in arrays]

    def _int64s(self, column: str, values: Sequence[Any]) -> tuple[Any, Any]:
        """A latency column as int64 values (0 where null) and a null mask (None: no nulls): numpy reads a list of
        ints in one C loop; a column with a None, or a value to fit (``_array``), goes through Arrow."""
        import numpy as np
        import pyarrow.compute as pc

        try:
            return np.array(values, np.int64), None
        except (TypeError, ValueError, OverflowError):
            pass
        arr = self._array("latency", column, list(values))
        mask = arr.is_null().to_numpy(zero_copy_only=False)
        return pc.fill_null(arr, 0).to_numpy(), (mask if mask.any() else None)

    def _array(self, table: str, column: str, values: list[Any]) -> Any:
        """``values`` as ``column``'s Arrow array; what the column cannot hold is fitted to it (``fit_value``),
        counted and, the first time in a column, logged: the row is always written."""
        import pyarrow as pa

        kind = self._schemas[table].field(column).type
        try:
            return pa.array(values, kind)
        except (OverflowError, TypeError, ValueError, UnicodeError, pa.ArrowException):
            pass
        declared = TABLES[table][column][0]
        fitted = []
        for value in values:
            fit, changed = fit_value(value, declared)
            fitted.append(fit)
            if changed:
                self.values_fixed += 1
                if column not in self._warned:
                    self._warned.add(column)
                    log.warning("metrics: the %s column (%s) cannot hold %.80r: written as %r, its row kept (every "
                                "value so changed is counted: metrics_values_fixed; this is said once a column)",
                                column, declared, value, fit)
        return pa.array(fitted, kind)
