"""What runs on Beam workers: the DoFn that replays one row group, and its writers.

Importing this module imports ``apache_beam`` (quietly, see ``beam.import_beam``); only
the Beam runner and Beam workers (when they unpickle the DoFn) import it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import WirepipeError
from .beam import import_beam

beam = import_beam()

from apache_beam.io.filesystems import FileSystems  # noqa: E402 - after the quiet import
from apache_beam.metrics import Metrics  # noqa: E402


def join(folder: str, *parts: str) -> str:
    """A path under ``folder``, on whatever filesystem Beam reads it from."""
    return FileSystems.join(folder, *parts)


class ReplayRowGroupFn(beam.DoFn):
    """One row group through the operator chain: writes its results part, yields its metrics rows.

    Holds only plain data (the validated config, file positions, paths); the pipeline's
    operators, with their codec contexts, are built in ``setup()`` on the worker.
    """

    def __init__(self, config: dict[str, Any], file: str, positions: dict[str, tuple[int, int]], limit: int,
                 output: str, batch_size: int, run_id: str, write_results: bool) -> None:
        super().__init__()
        self.config = config
        self.file = file
        self.positions = positions
        self.limit = limit
        self.output = output
        self.batch_size = batch_size
        self.run_id = run_id
        self.write_results = write_results

    def setup(self) -> None:
        from ..pipelines.config import build_pipeline, validate_config

        self.pipe = build_pipeline(validate_config(self.config, file=self.file), file=self.file)
        self.counters: dict[str, Any] = {}

    def count(self, stage: str, operator: str, records: int) -> None:
        key = f"{stage}|{operator}"
        counter = self.counters.get(key)
        if counter is None:
            counter = self.counters[key] = Metrics.counter("wirepipe", key)
        counter.inc(records)

    def process(self, element: tuple[str, Any]) -> Iterator[dict[str, Any]]:
        path, table = element
        where = self.positions.get(path)
        if where is None:
            raise WirepipeError(f"{path}: read a file that was not planned")
        start = where[0] + table.column("seq")[0].as_py() - where[1]
        if start >= self.limit:
            return
        table = table.slice(0, self.limit - start)
        recorder = RowRecorder(self.pipe.name, self.config, self.run_id)
        results: list[Any] = []
        rejected: list[Any] = []
        position = start
        for rb in table.to_batches(max_chunksize=self.batch_size):
            out, bad = run_chain(self.pipe, rb, position, recorder, self.count)
            if out is not None:
                results.append(out)
            rejected += bad
            position += rb.num_rows
        if self.write_results and results:
            write_part(join(self.output, "results"), start, results)
        if rejected and self.pipe.dead_letter is not None:
            from ..connectors.files import batch_table
            from ..pipelines.pipeline import dead_letter_batch

            write_part(join(self.output, "dead_letter"), start, [batch_table(dead_letter_batch(rejected))])
        yield from recorder.rows()


def run_chain(pipe: Any, rb: Any, position: int, recorder: RowRecorder,
              count: Callable[[str, str, int], None]) -> tuple[Any, list[Any]]:
    """One batch of capture rows through the operators, stamped as the local run loop stamps it.

    Returns the results as an Arrow table (``None`` when no record is left or the sink is
    ``null``) and the rejected records.
    """
    from ..connectors.capture import batch_from_arrow
    from ..connectors.files import batch_table

    ns = time.monotonic_ns
    index = recorder.batches
    recorder.batches += 1
    source, sink = pipe.source, pipe.sink
    t0 = ns()
    batch = batch_from_arrow(rb, position)
    t1 = ns()
    prev = batch.nbytes()
    recorder.stamp(index, source.stage, source.name, source.params, len(batch.values), 0, None, prev, t0, t1)
    count(source.stage, source.name, len(batch.values))
    for op in pipe.operators:
        before = len(batch.rejected)
        t0 = ns()
        batch = op(batch)
        t1 = ns()
        out = batch.nbytes()
        recorder.stamp(index, op.stage, op.name, op.params, len(batch.values), len(batch.rejected) - before,
                       prev, out, t0, t1)
        count(op.stage, op.name, len(batch.values))
        if len(batch.rejected) > before:
            count("rejected", op.stage, len(batch.rejected) - before)
        prev = out
    t0 = ns()
    table = batch_table(batch) if batch.values and sink.type != "null" else None
    t1 = ns()
    recorder.stamp(index, sink.stage, sink.name, sink.params, len(batch.values), 0, prev, prev, t0, t1)
    count(sink.stage, sink.name, len(batch.values))
    return table, batch.rejected


def write_part(folder: str, position: int, tables: list[Any]) -> str:
    """Tables as one Parquet file ``folder/part-<position>.parquet``, written under a temporary name first."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
    final = join(folder, f"part-{position:012d}.parquet")
    temp = join(folder, f".part-{position:012d}.{uuid.uuid4().hex[:8]}.parquet.inprogress")
    if "://" not in folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
    with FileSystems.create(temp) as f:
        pq.write_table(table, f, compression="zstd")
    if FileSystems.exists(final):  # a retried bundle: the same records under the same name
        FileSystems.delete([final])
    FileSystems.rename([temp], [final])
    return final


class RowRecorder:
    """Metrics rows (the metrics file's columns), kept in memory for Beam to write."""

    def __init__(self, pipeline: str, config: dict[str, Any], run_id: str) -> None:
        from ..operators.metrics import MetricsRecorder

        self._recorder = MetricsRecorder("unused", pipeline=pipeline, config=config, run_id=run_id,
                                         row_group_rows=1 << 62)
        self.stamp = self._recorder.stamp
        self.batches = 0

    def rows(self) -> list[dict[str, Any]]:
        cols = self._recorder._cols
        names = list(cols)
        return [dict(zip(names, values, strict=True)) for values in zip(*cols.values(), strict=True)]


def metrics_schema(pipeline: str, config: dict[str, Any], run_id: str) -> Any:
    """The metrics file schema, with the run metadata, for Beam's ``WriteToParquet``."""
    from ..operators.metrics import MetricsRecorder

    return MetricsRecorder("unused", pipeline=pipeline, config=config, run_id=run_id)._schema()
