"""A run's parts: opened in order, closed last first, whatever fails in between.

A run opens the source, the stores its parts and operators read (``resources.py``) with what they fetch from them
(registered schemas, dictionaries), then the sink and the dead letter, in that order: a name a store does not hold
is refused before any output exists. Each one opened is noted, so closing, last first, closes exactly what opened,
even when a later one failed half-way. A part that fails to close is logged and the others close. An output that
cannot be opened (read-only, a file where a folder is expected) is one line: what, where, the OS error. The
metrics recorder is opened with the stages it stamps and flushes its rows periodically while the run lasts. A hot
reload opens a new config's parts beside the running ones the same way (``switch.py``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..connectors.connector import Sink, Source
from ..core.errors import WirepipeError
from ..core.stores import FetchesFromStores
from .checks import check_dead_letter_loop

if TYPE_CHECKING:
    from .pipeline import Pipeline

log = logging.getLogger("wirepipe")


async def open_parts(pipeline: Pipeline, source: Source, sink: Sink, opened: list[Any]) -> None:
    """Open the source, the stores with what the parts and operators fetch from them (``open_stored``), the sink
    and the dead letter of ``pipeline``, in that order; each one opened is appended to ``opened`` (closed in
    reverse by ``close_each``, even when a later one fails)."""
    await source.open()
    opened.append(source)
    check_dead_letter_loop(source, pipeline.dead_letter)  # a JetStream stream's subjects are known now
    await open_stored(pipeline, source, sink, opened)
    with io_errors(f"sink {sink.name}", None):
        await sink.open()
    opened.append(sink)
    if pipeline.dead_letter is not None:
        with io_errors(f"dead_letter {pipeline.dead_letter.name}", None):
            await pipeline.dead_letter.open()
        opened.append(pipeline.dead_letter)


async def open_stored(pipeline: Pipeline, source: Source, sink: Sink | None, opened: list[Any]) -> None:
    """Open the stores ``pipeline`` names (a schema registry, zstd dictionaries) and what reads from them: a
    ``csv`` source's registered schema, then each operator (the schema a ``serialize`` writes with, a ``compress``
    dictionary), fetched. Before any output opens, so a name a store does not hold leaves no file behind; and
    ``wirepipe validate`` checks a pipeline's stored references by it, as ``run`` would."""
    from ..core.errors import ConfigError
    from ..core.stores import DictionaryUnusable

    opened.append(pipeline.resources)
    await pipeline.resources.open()
    try:
        for part in (source, sink):
            if isinstance(part, FetchesFromStores):
                await part.fetch_from_stores()
        for op in pipeline.operators:
            opened.append(op)  # closed even when its open fails half-way (a connection made, then a refusal)
            await op.open((source, sink))
    except DictionaryUnusable as exc:  # a dictionary the config names and cannot have: its error, as a schema's
        raise ConfigError(str(exc)) from None


def check_stored(pipeline: Pipeline, file: str) -> str | None:
    """What ``run`` fetches from ``pipeline``'s stores when it opens (``open_stored``), fetched and closed again
    without opening its source or sink: ``wirepipe validate``'s (and ``wirepipe test``'s) check of registered
    schemas and dictionaries. A name a store does not hold is the ``ConfigError`` ``run`` gives, in ``file``; a
    store that cannot be reached is returned as the sentence saying what was not checked and why (None: all
    checked)."""
    import asyncio

    from ..core.errors import ConfigError, MissingInput

    bound = pipeline.resources.bound()  # a part or an operator that names a store was handed it
    if not bound:
        return None

    async def fetch() -> None:
        opened: list[Any] = []
        try:
            await open_stored(pipeline, pipeline.source, pipeline.sink, opened)
        finally:
            await close_each(opened)

    try:
        asyncio.run(fetch())
    except ConfigError as exc:
        raise ConfigError(exc.detail, file=exc.file or file, path=exc.path) from None
    except MissingInput as exc:
        raise ConfigError(str(exc), file=file) from None
    except WirepipeError as exc:
        stores = ", ".join(f"{getattr(b.store, 'where', b.at)} ({b.at})" for b in bound)
        return f"not checked: the names it reads from {stores}: {exc}; run fetches them when it starts"
    return None


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
