"""A run's parts: opened in order, closed last first, whatever fails in between.

A run opens the source, the sink, the dead letter, the stores its operators read (``resources.py``) and the
operators, in that order (an operator's I/O may need a store, a store the source's or sink's server); each one
opened is noted, so closing, last first, closes exactly what opened, even when a later one failed half-way. A part
that fails to close is logged and the others close. An output that cannot be opened (read-only, a file where a
folder is expected) is one line: what, where, the OS error. The metrics recorder is opened with the stages it
stamps and flushes its rows periodically while the run lasts. A hot reload opens a new config's parts beside the
running ones the same way (``switch.py``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..connectors.connector import Sink, Source
from ..core.errors import WirepipeError
from .checks import check_dead_letter_loop

if TYPE_CHECKING:
    from .pipeline import Pipeline

log = logging.getLogger("wirepipe")


async def open_parts(pipeline: Pipeline, source: Source, sink: Sink, opened: list[Any]) -> None:
    """Open the source, the sink, the dead letter, the stores and the operators of ``pipeline``, in that order; each
    one opened is appended to ``opened`` (closed in reverse by ``close_each``, even when a later one fails)."""
    await source.open()
    opened.append(source)
    check_dead_letter_loop(source, pipeline.dead_letter)  # a JetStream stream's subjects are known now
    with io_errors(f"sink {sink.name}", None):
        await sink.open()
    opened.append(sink)
    if pipeline.dead_letter is not None:
        with io_errors(f"dead_letter {pipeline.dead_letter.name}", None):
            await pipeline.dead_letter.open()
        opened.append(pipeline.dead_letter)
    opened.append(pipeline.resources)  # the stores operators read from (a schema registry), opened before them
    await pipeline.resources.open()
    for op in pipeline.operators:  # their I/O (a dictionary fetched from NATS), after the parts they may use
        opened.append(op)  # closed even when its open fails half-way (a connection made, then a refusal)
        await op.open((source, sink))


async def close_each(parts: Sequence[Any]) -> None:
    """Close ``parts`` (connectors, operators, stores), last first; one that fails to close is logged by its name
    (a store's by where it is), the others close."""
    for part in reversed(parts):
        try:
            await part.close()
        except Exception as exc:
            log.error("closing %s failed: %s", getattr(part, "name", None) or getattr(part, "where", part), exc)


def new_recorder(pipeline: Pipeline) -> Any:
    """The metrics recorder ``pipeline``'s ``metrics`` asks for (a path, or a recorder given in Python), or None."""
    spec = pipeline.metrics_spec
    if spec is None:
        return None
    from ..metrics.recorder import MetricsRecorder

    if isinstance(spec, MetricsRecorder):
        return spec
    return MetricsRecorder(Path(spec), pipeline=pipeline.name, config=pipeline.config)


def open_recorder(recorder: Any, stages: Sequence[tuple[str, str, Any]], config_digest: str | None) -> None:
    """Open ``recorder`` for ``stages`` (``metrics.recorder.pipeline_stages``), its rows named by ``config_digest``
    when there is one."""
    if config_digest is not None:
        recorder.config_digest = config_digest
    with io_errors("metrics", recorder.path):
        recorder.open(stages)


@contextlib.contextmanager
def io_errors(what: str, path: Any) -> Iterator[None]:
    """An output that cannot be opened (read-only, a file where a folder is expected) is one line:
    what, where, the OS error."""
    try:
        yield
    except OSError as exc:
        where = exc.filename or path or "?"
        raise WirepipeError(f"{what}: cannot write to {where}: {exc.strerror or exc}") from None
