"""Where rejected records go when a pipeline names no ``dead_letter``: a JSONL file beside its output.

A rejected record is never thrown away (the promise every connector keeps: delivered,
dead-lettered, left for redelivery, or counted as lost). So a pipeline without a ``dead_letter``
writes its rejects as the dead-letter envelopes a ``jsonl`` dead letter would
(``{stage, operator, error, subject, seq, payload, value_json}``, ``wire.dead_letter_batch``) to
a file it names after its output (``default_path``):

- beside the sink's file (``WritesFiles.beside``): ``out/records.jsonl`` -> ``out/records.dead.jsonl``; beside a
  folder that is read as a whole, never in it: Parquet parts ``archive/part-w0-{part}.parquet`` ->
  ``archive.part-w0.dead.jsonl`` (``pyarrow.dataset("archive")`` reads the parts alone), a capture
  folder ``cap`` -> ``cap.<prefix>.dead.jsonl``;
- else (a NATS or null sink) beside the metrics folder, ``results/run.parquet`` ->
  ``results/run.dead.jsonl``, else ``results/<pipeline>.dead.jsonl``; one of several workers adds
  its tag (``core/workers.py``: ``results/run.w0.dead.jsonl``), since the workers share those folders.

A replay names its file apart (``role``: ``out.replay.dead.jsonl``, ``results/run.w0.replay.dead.jsonl``),
so replaying a capture through a pipeline never appends to the file a live run or pool of the same
pipeline writes. The file is created at the first rejected record (a run that rejects nothing leaves
none) and appended to, so a re-run never overwrites rejects nobody has looked at yet. The run summary
names it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..connectors.connector import Sink, WritesFiles
from ..core.batch import Batch
from ..core.stages import Stage
from ..core.workers import Worker

SUFFIX = ".dead.jsonl"


def default_path(name: str, sink: Sink | None, metrics: Any, role: str | None = None) -> Path:
    """The default dead-letter file of pipeline ``name`` (``role``: a replay's, see the module doc)."""
    suffix = f".{role}{SUFFIX}" if role else SUFFIX
    beside = sink.beside(suffix) if isinstance(sink, WritesFiles) else None
    if beside is not None:
        return Path(beside)
    worker = Worker.current()
    tag = f".{worker.tag}" if worker.shared else ""
    path = metrics if isinstance(metrics, (str, Path)) else getattr(metrics, "path", None)
    if path is not None:
        p = Path(path)
        return p.with_name(f"{p.stem if p.suffix else p.name}{tag}{suffix}")
    return Path("results") / f"{name}{tag}{suffix}"


class DefaultDeadLetter(Sink, WritesFiles):
    """The JSONL file of dead-letter envelopes a pipeline writes when it names no ``dead_letter``,
    created at the first rejected record and appended to."""

    type = "jsonl"
    stage = Stage.WRITE

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records = 0
        self._file: Any = None  # the JsonlSink, once a record was rejected

    @property
    def params(self) -> dict[str, Any]:
        return {"path": str(self.path), "default": True}

    @property
    def files(self) -> list[Path]:
        """The file, once it exists (what the run summary names)."""
        return [self.path] if self._file is not None else []

    def beside(self, suffix: str) -> None:
        """Nothing goes beside the dead letters."""
        return None

    async def _opened(self) -> Any:
        if self._file is None:
            from ..connectors.jsonl import JsonlSink

            file = JsonlSink(self.path, append=True)
            await file.open()
            self._file = file
        return self._file

    async def write(self, batch: Batch) -> None:
        file = await self._opened()
        await file.write(batch)
        self.records += len(batch.values)

    async def flush(self) -> None:
        if self._file is not None:
            await self._file.flush()

    async def close(self) -> None:
        if self._file is not None:
            await self._file.close()
