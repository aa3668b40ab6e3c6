"""What runs on Beam workers: the DoFn that replays one row group, and its writers.

Importing this module imports ``apache_beam`` (quietly, see ``beam_import.import_beam``); only
the Beam runner and Beam workers (when they unpickle the DoFn) import it.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..core.allocator import between_batches
from ..core.errors import WirepipeError
from .beam_files import JobFile, place_job_files, restore_names
from .beam_import import import_beam

import_beam()  # quietly, before the apache_beam imports below

from apache_beam import DoFn  # noqa: E402 - after the quiet import
from apache_beam.io.filesystems import FileSystems  # noqa: E402
from apache_beam.metrics import Metrics  # noqa: E402


def join(folder: str, *parts: str) -> str:
    """A path under ``folder``, on whatever filesystem Beam reads it from."""
    return FileSystems.join(folder, *parts)


REASON = "reason"  # counters "reason|<stage>|<operator>|<reason>": rejected records by reason

class ReplayRowGroupFn(DoFn):
    """One row group through the operator chain: writes its results part, yields its metrics rows (a table).

    Holds only plain data (the validated config, the files and stores its operators read, file positions,
    paths); the pipeline's operators, with their codec contexts, are built in ``setup()`` on the worker, which
    also opens the stores (folders of what the job builder fetched: ``beam_files.read_job_stores``) and the
    operators' I/O (``open``; ``prepare`` before each batch), as the run loop does, on an event loop of its own.
    ``recorded`` is the config the metrics rows name (the pipeline's, before its stores became folders).
    """

    def __init__(self, config: dict[str, Any], file: str, positions: dict[str, tuple[int, int]], limit: int,
                 output: str, batch_size: int, run_id: str, write_results: bool,
                 files: dict[str, JobFile] | None = None, recorded: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.config = config
        self.recorded = recorded if recorded is not None else config
        self.files = files or {}
        self.file = file
        self.positions = positions
        self.limit = limit
        self.output = output
        self.batch_size = batch_size
        self.run_id = run_id
        self.write_results = write_results

    def setup(self) -> None:
        from ..core.allocator import asked_in_environment, keep_freed_memory
        from ..pipelines.config import build_pipeline, validate_config

        if asked_in_environment():  # a runner's worker is not wirepipe's process: only when asked
            keep_freed_memory()

        # The job's files, and the folders of its stores (read while it runs), for this DoFn's life.
        self.folder = tempfile.mkdtemp(prefix="wirepipe-beam-job-")
        config, originals = place_job_files(self.config, self.files, Path(self.folder))
        self.pipe = build_pipeline(validate_config(config, file=self.file), file=self.file)
        restore_names(self.pipe.operators, originals)
        self.counters: dict[str, Any] = {}
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self._open())
        self.preparing = [op for op in self.pipe.operators if op.prepares]

    async def _open(self) -> None:
        pipe = self.pipe
        await pipe.resources.open_operators(pipe.operators, (pipe.source, pipe.sink))

    async def _close(self) -> None:
        await self.pipe.resources.close_operators()

    def prepare(self, batch: Any) -> None:
        """The I/O the operators need before their pass over ``batch`` (the dictionaries its frames name)."""
        async def each() -> None:
            for op in self.preparing:
                await op.prepare(batch)

        self.loop.run_until_complete(each())

    def teardown(self) -> None:
        if getattr(self, "loop", None) is not None:
            try:
                self.loop.run_until_complete(self._close())
            finally:
                self.loop.close()
        if getattr(self, "folder", None) is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def count(self, stage: str, operator: str, records: int) -> None:
        key = f"{stage}|{operator}"
        counter = self.counters.get(key)
        if counter is None:
            counter = self.counters[key] = Metrics.counter("wirepipe", key)
        counter.inc(records)

    def process(self, element: tuple[str, Any]) -> Iterator[Any]:
        from ..metrics.recorder import MetricsRecorder, pipeline_stages

        path, table = element
        where = self.positions.get(path)
        if where is None:
            raise WirepipeError(f"{path}: read a file that was not planned")
        start = where[0] + table.column("seq")[0].as_py() - where[1]
        if start >= self.limit:
            return
        table = table.slice(0, self.limit - start)
        pipe = self.pipe
        # Latency rows describe a live run, not a replay (the capture holds the recorded times).
        recorder = MetricsRecorder(None, pipeline=pipe.name, config=self.recorded, run_id=self.run_id,
                                   flush_interval=None, latency=False)
        recorder.open(pipeline_stages(pipe.source, pipe.operators, pipe.sink))
        results: list[Any] = []
        rejected: list[Any] = []
        position = start
        for rb in table.to_batches(max_chunksize=self.batch_size):
            out, bad = run_chain(pipe, rb, position, recorder, self.write_results,
                                 self.prepare if self.preparing else None)
            if out is not None:
                results.append(out)
            rejected += bad
            position += rb.num_rows
        if self.write_results and results:
            write_part(join(self.output, "results"), start, results)
        if rejected:  # the replay's own folder holds them, whether or not the pipeline names a dead letter
            from ..connectors.parquet import batch_table
            from ..wire import dead_letter_batch

            write_part(join(self.output, "dead_letter"), start, [batch_table(dead_letter_batch(rejected))])
        stages, _ = recorder.tables()
        for stage, operator, records, bad, reasons in zip(*(stages.column(c).to_pylist() for c in (
                "stage", "operator", "records", "rejected", "reasons")), strict=True):
            self.count(stage, operator, records)
            if bad:
                self.count("rejected", stage, bad)
                for reason, n in reasons or ():  # by reason: the summary's groups (beam.py reads them back)
                    self.count(f"{REASON}|{stage}", f"{operator}|{reason}", n)
        yield stages


def run_chain(pipe: Any, rb: Any, position: int, recorder: Any, write_results: bool,
              prepare: Callable[[Any], None] | None = None) -> tuple[Any, list[Any]]:
    """One batch of capture rows through the operators (``prepare`` first: their I/O), stamped as the local run
    loop stamps it.

    The batch index in the metrics rows is the capture position of the batch's first
    record: unique in the run whichever worker ran it. Returns the results as an Arrow
    table (``None`` when no record is left or the sink keeps no results: ``write_results``) and the
    rejected records.
    """
    from ..connectors.capture_format import batch_from_arrow
    from ..connectors.parquet import batch_table

    between_batches()  # as the local run loop does before each batch
    ns = time.monotonic_ns
    t0 = ns()
    batch = batch_from_arrow(rb, position)
    t1 = ns()
    if prepare is not None:
        prepare(batch)
    batch = pipe.process_batch(batch, position, (t0, t1), recorder=recorder)
    t0 = ns()
    table = batch_table(batch) if write_results and batch.values else None
    t1 = ns()
    recorder.stamp_sink(position, batch, t0, t1)
    return table, batch.rejected


def write_part(folder: str, position: int, tables: list[Any]) -> str:
    """Tables as one Parquet file ``folder/part-<position>.parquet``: the one life of a Parquet file
    (``storage.lifecycle.write_parquet``), through Beam's ``FileSystems`` so that ``gs://``, ``s3://`` and HDFS
    folders take it as a local one does (``storage.files``'s module doc says how such a file commits)."""
    import pyarrow as pa

    from ..storage.lifecycle import write_table

    table = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
    final = join(folder, f"part-{position:012d}.parquet")
    write_table(final, table, filesystem=FileSystems, owner=uuid.uuid4().hex[:8])  # bundles of a worker: concurrent
    return final


def metrics_schema(pipeline: str, config: dict[str, Any], run_id: str) -> Any:
    """The stage rows' schema, with the run metadata, for Beam's ``WriteToParquetBatched``."""
    from ..metrics.columns import table_schema
    from ..metrics.run_metadata import run_metadata

    return table_schema("stages", run_metadata(pipeline, config, run_id))
