"""A hot reload's switch: a run goes on with another config's operators, dead letter and metrics.

``reload.py`` decides what may change in place and asks the run (``PipelineRun.switch_to``); at the next batch
boundary the run commits what the running config wrote, then ``open_beside`` opens the new config's parts beside
the running source and sink, checked against them as at a start. Parts the new config shares with the running
one (the same objects: ``reload.LiveConfig`` keeps what did not change) stay open as they are. Opening is all or
nothing: when a part cannot open (a dictionary bucket not there), the ones opened are closed and the error
raised, and the running config goes on. Once every part is open the run takes them over (``Takeover``) and
closes the ones they replace: from there nothing can fail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .parts import close_each, io_errors, new_recorder, open_recorder

if TYPE_CHECKING:
    from ..connectors.connector import Sink
    from .pipeline import Pipeline


@dataclass
class Takeover:
    """What a switch opened, ready to take over from the running parts: ``pipeline``, the running one with the new
    config's parts (``Pipeline.reloaded``); its metrics ``recorder`` (the running one when the section did not
    change), and the ``stages`` it stamps; the parts ``opened`` for it and the running ones it ``replaces``."""

    pipeline: Pipeline
    recorder: Any
    stages: list[tuple[str, str, Any]]
    opened: list[Any]
    replaces: list[Any]


async def open_beside(running: Pipeline, new: Pipeline, sink: Sink, recorder: Any) -> Takeover:
    """Open ``new``'s parts beside the parts of ``running`` (its source and the run's ``sink`` stay open; its
    ``recorder``, the running one, is kept when ``new`` has the same metrics); when one cannot open, the ones
    opened are closed and the error raised: nothing changed."""
    from ..metrics.recorder import pipeline_stages

    source = running.source
    current = running.reloaded(new)  # checked against the running source and sink, as at a start
    # the running stores (a changed `resources:` needs a restart): a store only the new operators name opens now
    current.resources.bind(current.operators, (source, sink))
    await current.resources.open()
    fresh = [op for op in current.operators if not any(op is o for o in running.operators)]
    dead_letter = current.dead_letter if current.dead_letter is not running.dead_letter else None
    kept = current.metrics_spec is running.metrics_spec
    takeover_recorder = recorder if kept else new_recorder(current)
    stages = pipeline_stages(source, current.operators, sink)
    opened: list[Any] = []
    try:
        if dead_letter is not None:
            dead_letter.bind(running.name, source)
            with io_errors(f"dead_letter {dead_letter.name}", None):
                await dead_letter.open()
            opened.append(dead_letter)
        for op in fresh:
            opened.append(op)
            await op.open((source, sink))
        if takeover_recorder is not None and takeover_recorder is not recorder:
            open_recorder(takeover_recorder, stages, current.config_digest)
    except BaseException:
        await close_each(opened)
        raise
    replaces: list[Any] = [op for op in running.operators if not any(op is o for o in current.operators)]
    if dead_letter is not None and running.dead_letter is not None:
        replaces.append(running.dead_letter)
    return Takeover(current, takeover_recorder, stages, opened, replaces)
