"""JetStream stream management: the ``stream:`` block of a jetstream sink, created on open when missing, and
waiting for JetStream to answer (a cluster without a leader) before a connector starts."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar

from pydantic import Field

from ...core.backoff import ExponentialBackoff
from ...core.errors import WirepipeError
from ...core.models import Strict
from .names import Int32Size, Int64, Int64Size, Nanoseconds, StreamName

log = logging.getLogger("wirepipe.jetstream")
T = TypeVar("T")
_REPORT_EVERY = 30.0  # seconds between "still waiting" lines


class PlacementConfig(Strict):
    """``placement: {cluster: east, tags: [ssd]}``: which servers hold the stream's replicas (as JetStream's)."""

    cluster: str | None = Field(default=None, description="the cluster that holds the replicas")
    tags: list[str] = Field(default_factory=list, description="server tags the replicas' servers must have")


class StreamConfig(Strict):
    """``stream: {name: POINTS, subjects: ["points.>"], storage: file, duplicate_window: 2m, replicas: 3}``"""

    name: StreamName = Field(description="the stream's name")
    subjects: list[str] | None = Field(default=None, description="default: the sink's subject")
    storage: Literal["file", "memory"] = Field(default="file", description="where the stream keeps its messages")
    retention: Literal["limits", "interest", "workqueue"] = Field(default="limits", description="when messages go: at the limits, once every consumer acked, or once one did (a work queue)")
    duplicate_window: Nanoseconds = Field(default=120.0, description="how long a Nats-Msg-Id is remembered to refuse a duplicate publish")
    max_age: Nanoseconds | None = Field(default=None, description="messages older than this go")
    max_bytes: Int64Size | None = Field(default=None, description="the stream's size at most (discard says what gives way)")
    max_msgs: Int64 | None = Field(default=None, description="messages in the stream at most")
    max_msg_size: Int32Size | None = Field(default=None, description="one message's size at most: a larger record is dead-lettered")
    # At a limit: "old" (NATS's default) deletes the oldest messages, retention as the stream's owner chose it;
    # "new" refuses the publish, and the sink holds the records and backs off until room comes (BackOff).
    discard: Literal["old", "new"] = Field(default="old", description="at a limit: drop the oldest messages, or refuse new ones")
    replicas: int = Field(default=1, ge=1, le=5, description="R1..R5: copies on distinct servers of a cluster")
    placement: PlacementConfig | None = Field(default=None, description="which servers of a cluster hold the replicas")

    def api_config(self, default_subject: str) -> Any:
        from nats.js import api

        return api.StreamConfig(
            name=self.name,
            subjects=self.subjects or [default_subject],
            storage=api.StorageType(self.storage),
            retention=api.RetentionPolicy(self.retention),
            duplicate_window=self.duplicate_window,
            max_age=self.max_age,
            max_bytes=self.max_bytes,
            max_msgs=self.max_msgs,
            max_msg_size=self.max_msg_size,
            discard=api.DiscardPolicy(self.discard),
            num_replicas=self.replicas,
            placement=(api.Placement(cluster=self.placement.cluster, tags=self.placement.tags or None)
                       if self.placement is not None else None),
        )


async def when_available(call: Callable[[], Awaitable[T]], what: str,
                         stopping: asyncio.Event | None = None) -> T | None:
    """``await call()`` (a JetStream API request) once JetStream answers it.

    A cluster without a leader for the stream (or its meta group) while it elects one, or while a
    quorum of its nodes is down, lets requests time out or answers 503: that is a wait, not a
    failure, so the request is made again (backoff up to 5 s), said once and then every 30 s, until
    it is answered or ``stopping`` is set (then None). Every other error is raised as it is ("no
    responders": a server without JetStream, which waiting would not change).
    """
    import nats.errors
    import nats.js.errors

    since: float | None = None
    said = 0.0
    retry = ExponentialBackoff(first=0.25, cap=5.0)
    while True:
        try:
            result = await call()
        except (nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError,
                nats.errors.ConnectionReconnectingError) as exc:
            now = time.monotonic()
            if since is None:
                since = said = now
                log.warning("%s: JetStream does not answer (%s): waiting for the cluster to have a leader (it is "
                            "electing one, or a quorum of its nodes is down)", what, str(exc) or type(exc).__name__)
            elif now - said >= _REPORT_EVERY:
                said = now
                log.warning("%s: still waiting for JetStream (%.0fs)", what, now - since)
            if await retry.sleep(stop=stopping):
                return None
            continue
        except BaseException:
            _answered(what, since)  # an answer all the same (a consumer not found yet): the caller decides
            raise
        _answered(what, since)
        return result


def _answered(what: str, since: float | None) -> None:
    if since is not None:
        log.warning("%s: JetStream answers again after %.0fs", what, time.monotonic() - since)


async def ensure_stream(js: Any, spec: StreamConfig, default_subject: str) -> None:
    """Create the stream if it does not exist (once JetStream answers); an existing stream is used as it is."""
    import nats.js.errors

    try:
        await when_available(lambda: js.stream_info(spec.name), f"stream {spec.name}")
        return
    except nats.js.errors.NotFoundError:
        pass
    try:
        await when_available(lambda: js.add_stream(spec.api_config(default_subject)), f"stream {spec.name}")
        log.info("created stream %s for %s", spec.name, ", ".join(spec.subjects or [default_subject]))
    except nats.js.errors.BadRequestError as exc:
        raise WirepipeError(f"cannot create stream {spec.name}: {exc.description}") from None
