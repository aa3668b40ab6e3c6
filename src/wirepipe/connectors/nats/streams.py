"""JetStream stream management: the ``stream:`` block of a jetstream sink, created on open when missing."""

from __future__ import annotations

import logging
from typing import Any, Literal

from pydantic import Field, field_validator

from ...core.errors import WirepipeError
from ...core.models import Duration, Size, Strict

log = logging.getLogger("wirepipe.jetstream")


class PlacementConfig(Strict):
    """``placement: {cluster: east, tags: [ssd]}``: which servers hold the stream's replicas (as JetStream's)."""

    cluster: str | None = None
    tags: list[str] = Field(default_factory=list)


class StreamConfig(Strict):
    """``stream: {name: POINTS, subjects: ["points.>"], storage: file, duplicate_window: 2m, replicas: 3}``"""

    name: str
    subjects: list[str] | None = Field(default=None, description="default: the sink's subject")
    storage: Literal["file", "memory"] = "file"
    retention: Literal["limits", "interest", "workqueue"] = "limits"
    duplicate_window: Duration = 120.0
    max_age: Duration | None = None
    max_bytes: Size | None = None
    max_msgs: int | None = None
    max_msg_size: Size | None = None
    # At a limit: "old" (NATS's default) deletes the oldest messages, retention as the stream's owner chose it;
    # "new" refuses the publish, and the sink holds the records and backs off until room comes (BackOff).
    discard: Literal["old", "new"] = "old"
    replicas: int = Field(default=1, ge=1, le=5, description="R1..R5: copies on distinct servers of a cluster")
    placement: PlacementConfig | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not v or any(ch in v for ch in " .*>\t\r\n/\\"):
            raise ValueError(f"stream name {v!r} may not contain spaces, '.', '*', '>' or slashes")
        return v

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


async def ensure_stream(js: Any, spec: StreamConfig, default_subject: str) -> None:
    """Create the stream if it does not exist; an existing stream is used as it is."""
    import nats.js.errors

    try:
        await js.stream_info(spec.name)
        return
    except nats.js.errors.NotFoundError:
        pass
    try:
        await js.add_stream(spec.api_config(default_subject))
        log.info("created stream %s for %s", spec.name, ", ".join(spec.subjects or [default_subject]))
    except nats.js.errors.BadRequestError as exc:
        raise WirepipeError(f"cannot create stream {spec.name}: {exc.description}") from None
