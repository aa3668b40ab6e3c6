"""Every running pipeline a NATS service: ``nats micro ls``, ``wirepipe ps`` and ``wirepipe top`` find it.

A worker (``wirepipe run``, each worker of a pool, a capture, a local replay's processes) registers with
the NATS services protocol (nats-py's ``nats.micro``) once its parts are open, and is gone when its
connection is: the protocol discovers by asking (``$SRV.PING|INFO|STATS``, to every service, to every
instance of a name, or to one instance), so a killed worker simply stops answering; there is no heartbeat.

- **Who it is.** The service's name is the pipeline's name with every character the protocol does not allow
  (it allows A-Z, a-z, 0-9, ``-`` and ``_``) replaced by ``_`` (``points.publish`` -> ``points_publish``), or
  ``service.name``; the exact pipeline name, the worker's index and the pool's size, host, pid, source and
  sink are in its metadata, which ``wirepipe ps`` reads. Its version is wirepipe's, written as SemVer.
- **What it answers.** Two endpoints, ``stats`` and ``health``, on ``_WIREPIPE.service.<name>.<id>.stats``
  and ``.health`` (``wire.SERVICE_PREFIX``): the counts of ``monitor.snapshot`` (what the status line, the
  summary and Prometheus read: records in and out, rejected, lost, lag, redelivered ...) and the health
  ``/healthz`` gives. A ``$SRV.STATS`` answer carries both as its endpoints' ``data``: one broadcast lists
  every pipeline with its counts. Answers come from a snapshot at most ``FRESH`` seconds old, so a storm of
  requests costs the run loop one snapshot per ``FRESH``, never one per request.
- **On which connection.** The pipeline's own: its source's when the source is on NATS, else its sink's, else
  its dead letter's; no second connection. A pipeline with no NATS part (``generate`` -> ``jsonl``) registers
  no service: nothing in its file says which NATS system it belongs to, and a run must not open a connection
  its file does not declare (``NATS_URL`` set in a shell would make a file-to-file job join a production
  system, and wait for it when it is down).
- **Never in the way.** Registering happens beside the run, as soon as that connection is up (a worker
  waiting for its stream is listed, waiting), never holding the run back; an account that may not
  subscribe to ``$SRV.>`` (or to the endpoints' subjects) gets one warning in the log and the pipeline runs
  on, unregistered. ``service: {enabled: false}`` turns it off.

The other side, what ``wirepipe ps`` and ``top`` (``cli/services.py``) read: ``discover`` asks ``$SRV.STATS``
once and turns each wirepipe answer into a ``Process``; another kind of service's answer is left out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import socket
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import Field, field_validator, model_validator

from ..core.models import Strict, short_repr
from ..core.redact import redact_secrets
from ..wire import SERVICE_PREFIX

if TYPE_CHECKING:
    from .run import PipelineRun

log = logging.getLogger("wirepipe.service")

T = TypeVar("T")

FRESH = 0.5  # seconds a snapshot answers requests for
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")  # the protocol's service and endpoint names
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_-]")
# The metadata wirepipe writes; ``service.metadata`` adds to it and may not reuse these keys.
RESERVED = ("wirepipe", "pipeline", "worker", "workers", "pool", "host", "pid", "source", "sink")
API = "$SRV"  # the protocol's subject prefix (nats.micro's DEFAULT_PREFIX)
STATS_TYPE = "io.nats.micro.v1.stats_response"


class ServiceConfig(Strict):
    """``service: {enabled: false}`` turns the pipeline's NATS service off; ``name`` and ``metadata`` describe
    it to ``nats micro`` and ``wirepipe ps``."""

    enabled: bool = Field(default=True, description="register the running pipeline as a NATS service "
                                                    "(`wirepipe ps`, `wirepipe top`, `nats micro ls`)")
    name: str | None = Field(default=None, description="the service's name (A-Z, a-z, 0-9, - and _); default: the "
                                                       "pipeline's name, any other character replaced by _")
    metadata: dict[str, str] = Field(default_factory=dict, description="more metadata for the service (team, "
                                                                       "region ...) beside wirepipe's own")

    @model_validator(mode="before")
    @classmethod
    def _mapping(cls, data: Any) -> Any:
        if not isinstance(data, (dict, ServiceConfig)):
            raise ValueError("give a mapping: {enabled: false} turns the NATS service off, {name, metadata} describe "
                             f"it (got {short_repr(data)})")
        return data

    @field_validator("name")
    @classmethod
    def _protocol_name(cls, value: str | None) -> str | None:
        if value is not None and not _NAME.match(value):
            raise ValueError(f"{value!r} is not a NATS service name: use A-Z, a-z, 0-9, - and _ only")
        return value

    @field_validator("metadata")
    @classmethod
    def _own_keys(cls, value: dict[str, str]) -> dict[str, str]:
        taken = [key for key in value if key in RESERVED]
        if taken:
            raise ValueError(f"{', '.join(map(repr, taken))}: wirepipe writes these keys itself "
                             f"({', '.join(RESERVED)}); choose other names")
        return value


def service_name(pipeline: str) -> str:
    """The service name of a pipeline: every character the protocol does not allow becomes ``_``.

    >>> service_name("points.publish"), service_name("orders-eu_1"), service_name("débit 2")
    ('points_publish', 'orders-eu_1', 'd_bit_2')
    """
    return _NOT_IN_NAME.sub("_", pipeline)


_PEP440 = re.compile(r"^(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:\.\d+)*(?:(a|b|rc)(\d+))?(?:\.post(\d+))?(?:\.dev(\d+))?"
                     r"(?:\+([A-Za-z0-9.]+))?$")


def semver(version: str) -> str:
    """A Python package version as the SemVer the protocol requires.

    >>> [semver(v) for v in ("0.1.0", "1.2", "2.0.0rc1", "0.3.0.dev4", "1.0.post2", "0.1.0+g1a2b")]
    ['0.1.0', '1.2.0', '2.0.0-rc.1', '0.3.0-dev.4', '1.0.0+post.2', '0.1.0+g1a2b']
    """
    m = _PEP440.match(version)
    if m is None:
        return "0.0.0+unknown"
    major, minor, patch, pre, pre_n, post, dev, local = m.groups()
    text = f"{int(major)}.{int(minor or 0)}.{int(patch or 0)}"
    text += "".join(f"-{tag}" for tag in [f"{pre}.{pre_n}" if pre else "", f"dev.{dev}" if dev else ""] if tag)
    build = [f"post.{post}" if post else "", local or ""]
    return text + ("+" + ".".join(b for b in build if b) if any(build) else "")


def wirepipe_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("wirepipe")
    except PackageNotFoundError:
        return "0.0.0"


# --- a worker's service ----------------------------------------------------------------------------


def service_config(pipeline: Any) -> ServiceConfig:
    """The ``service`` section of the config the pipeline was built from (the defaults for a pipeline built in
    Python)."""
    section = (getattr(pipeline, "config", None) or {}).get("service")
    return ServiceConfig.model_validate(section or {})


def service_connection(pipeline: Any) -> Any:
    """The connection the service rides on: the source's when the source is on NATS, else the sink's, else the dead
    letter's; None for a pipeline with no NATS part."""
    from ..connectors.nats.connection import NatsConnection

    for part in (pipeline.source, pipeline.sink, pipeline.dead_letter):
        conn = getattr(part, "conn", None)
        if isinstance(conn, NatsConnection):
            return conn
    return None


def stats_data(snap: dict[str, Any]) -> dict[str, Any]:
    """What the ``stats`` endpoint answers: every figure of the snapshot (counters, lag, the states) and the
    rejections by stage, operator and reason, without their example (it holds a record's values)."""
    data: dict[str, Any] = {key: redact_secrets(value) if isinstance(value, str) else value
                            for key, value in snap.items() if value is None or isinstance(value, (bool, int, float, str))}
    data["rejections"] = [list(row[:4]) for row in snap.get("rejections") or []]
    return data


def health_data(snap: dict[str, Any], draining: bool) -> dict[str, Any]:
    """What the ``health`` endpoint answers: healthy as ``/healthz`` says it (running, every connection up), and
    why not."""
    sink_error = snap.get("sink_error")
    return {"healthy": bool(snap.get("running") and snap.get("connected")), "running": bool(snap.get("running")),
            "connected": bool(snap.get("connected")), "draining": draining, "waiting": snap.get("waiting"),
            "sink_error": redact_secrets(sink_error) if sink_error else None}


class PipelineService:
    """One pipeline process registered with the services protocol on ``conn`` (see the module doc): its ``run``'s
    figures."""

    def __init__(self, run: PipelineRun, config: ServiceConfig, conn: Any) -> None:
        import nats.micro  # noqa: F401 - here, before the run reads: nothing is imported on its event loop later

        self.run = run
        self.pipeline = pipeline = run.pipeline  # what the service says of itself: a hot reload does not change it
        self.conn = conn
        self.name = config.name or service_name(pipeline.name)
        self.version = semver(wirepipe_version())
        self.description = (getattr(pipeline, "config", None) or {}).get("description") or \
            f"wirepipe pipeline {pipeline.name}"
        self.metadata = {**config.metadata, **own_metadata(pipeline)}
        self.service: Any = None
        self.refused: str | None = None  # the error of the first subscription the server refused
        self._snap: dict[str, Any] = {}
        self._taken = float("-inf")

    def snapshot(self) -> dict[str, Any]:
        """The pipeline's snapshot (``monitor.snapshot``), taken again only when the last is ``FRESH`` seconds
        old."""
        from .monitor import snapshot

        now = time.monotonic()
        if now - self._taken >= FRESH:
            self._snap, self._taken = snapshot(self.run), now
        return self._snap

    def data(self, endpoint: str) -> dict[str, Any]:
        snap = self.snapshot()
        if endpoint == "health":
            return health_data(snap, self.pipeline.source.stopping.is_set())
        return stats_data(snap)

    async def start(self) -> bool:
        """Register; False (said once in the log) when the server refuses the subscriptions."""
        from nats.micro import add_service
        from nats.micro.request import Request, ServiceError

        self.conn.on_error(self._refusal)
        self.service = service = await add_service(
            self.conn.nc, name=self.name, version=self.version, description=self.description,
            metadata=self.metadata, stats_handler=lambda endpoint: self.data(endpoint.name))
        prefix = f"{SERVICE_PREFIX}{self.name}.{service.id}"

        async def stats(request: Request) -> None:
            await request.respond(json.dumps(self.data("stats")).encode())

        async def health(request: Request) -> None:
            answer = self.data("health")
            if not answer["healthy"]:  # the protocol's error headers (503): counted in the endpoint's errors
                raise ServiceError("503", _unhealthy(answer))
            await request.respond(json.dumps(answer).encode())

        for name, handler, what in (("stats", stats, "the pipeline's counts (monitor.snapshot)"),
                                    ("health", health, "healthy as /healthz says: running, connections up")):
            await service.add_endpoint(name=name, subject=f"{prefix}.{name}", handler=handler,
                                       metadata={"description": what})
        await self.conn.flush(5.0)  # the server's refusals, if any, arrive before the flush's answer
        if self.refused is not None:
            await self.stop()
            return False
        log.info("%s: NATS service %s (id %s) on %s: `wirepipe ps` and `nats micro ls` list it",
                 self.pipeline.name, self.name, service.id, self.conn.public_url)
        return True

    def _refusal(self, exc: Exception) -> bool:
        """The connection's error hook: a permissions violation on the service's subjects is taken here (said once,
        in the log) instead of being logged as the connection's error."""
        text = str(exc).lower()
        if "permissions violation" not in text or not any(f'"{p.lower()}' in text for p in (API + ".", SERVICE_PREFIX)):
            return False
        if self.refused is None:
            self.refused = str(exc).removeprefix("nats: ")
            log.warning("%s: not registered as a NATS service, running on: the server refused it (%s); "
                        "`wirepipe ps` and `nats micro` will not list it. Allow the account to subscribe to %s.> "
                        "and %s> (and to publish to _INBOX.>), or turn it off: service: {enabled: false}",
                        self.pipeline.name, self.refused, API, SERVICE_PREFIX)
        return True

    async def stop(self) -> None:
        """Unsubscribe (nothing to do once the connection is closed: the server dropped the subscriptions)."""
        service, self.service = self.service, None
        nc = self.conn.nc
        if service is None or nc is None or nc.is_closed:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(service.stop(), 5.0)


def own_metadata(pipeline: Any) -> dict[str, str]:
    """What wirepipe says of a process in its service's metadata (all strings, as the protocol wants)."""
    from ..core.workers import POOL_ENV, Worker

    worker = Worker.current()
    out = {"wirepipe": wirepipe_version(), "pipeline": pipeline.name, "worker": str(worker.index),
           "workers": str(worker.workers), "host": socket.gethostname(), "pid": str(os.getpid()),
           "source": describe_part(pipeline.source), "sink": describe_part(pipeline.sink)}
    if os.environ.get(POOL_ENV):
        out["pool"] = os.environ[POOL_ENV]
    return out


def describe_part(part: Any) -> str:
    """``jetstream NUM``, ``nats points.>``, ``jsonl out.jsonl``: a part's type and what it reads or writes (never
    its URL)."""
    if part is None:
        return "null"
    params = getattr(part, "params", None) or {}
    what = next((params[key] for key in ("stream", "subject", "path", "dir", "dataset") if params.get(key)), None)
    return f"{part.type} {what}" if what is not None else str(part.type)


def _unhealthy(answer: dict[str, Any]) -> str:
    if answer["draining"]:
        return "draining"
    if not answer["running"]:
        return f"waiting for {answer['waiting']}" if answer.get("waiting") else "not running"
    return "NATS disconnected" + (f"; sink unavailable: {answer['sink_error']}" if answer.get("sink_error") else "")


async def with_service(run: PipelineRun, running: Awaitable[T]) -> T:
    """``running`` (``run.execute()``) with the pipeline's NATS service beside it: registered once its connection is
    up, until the run ends (see the module doc). What the service meets is logged, never raised."""
    config = service_config(run.pipeline)
    task = asyncio.ensure_future(running)
    if not config.enabled:
        return await task
    beside = asyncio.ensure_future(_serve(run, config, task))
    try:
        return await task
    finally:
        beside.cancel()
        await asyncio.wait({beside}, timeout=10.0)


async def _serve(run: PipelineRun, config: ServiceConfig, running: asyncio.Future[Any]) -> None:
    pipeline = run.pipeline
    conn = service_connection(pipeline)
    if conn is None:
        log.debug("%s: no NATS part, so no NATS service", pipeline.name)
        return
    service = PipelineService(run, config, conn)  # what takes time is done now, before the run reads
    # Registered once that part has connected, before the others open: a worker waiting for its stream is listed,
    # waiting.
    while conn.nc is None or not conn.nc.is_connected:
        if running.done():
            return
        await asyncio.wait({running}, timeout=0.1)
    try:
        if await service.start():
            await asyncio.wait({running})
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a connection lost while registering: the pipeline runs on
        log.warning("%s: not registered as a NATS service (%s: %s); running on", pipeline.name,
                    type(exc).__name__, redact_secrets(str(exc)))
    finally:
        await service.stop()


# --- the observers' side: wirepipe ps and top ------------------------------------------------------


@dataclass
class Process:
    """One running pipeline process as its service describes itself (a ``$SRV.STATS`` answer)."""

    id: str
    name: str
    version: str
    metadata: dict[str, str]
    started: datetime | None
    stats: dict[str, Any] = field(default_factory=dict)
    health: dict[str, Any] = field(default_factory=dict)
    answer: dict[str, Any] = field(default_factory=dict)  # as received

    @classmethod
    def from_answer(cls, answer: Any) -> Process | None:
        """The process a STATS answer describes; None for another kind of service (or a malformed answer)."""
        if not isinstance(answer, dict) or answer.get("type") != STATS_TYPE:
            return None
        metadata = answer.get("metadata") or {}
        if not isinstance(metadata, dict) or "wirepipe" not in metadata or "pipeline" not in metadata:
            return None
        data = {ep.get("name"): ep.get("data") or {} for ep in answer.get("endpoints") or [] if isinstance(ep, dict)}
        return cls(id=str(answer.get("id")), name=str(answer.get("name")), version=str(answer.get("version")),
                   metadata={str(k): str(v) for k, v in metadata.items()}, started=_parse_time(answer.get("started")),
                   stats=data.get("stats") or {}, health=data.get("health") or {}, answer=answer)

    @property
    def pipeline(self) -> str:
        return self.metadata["pipeline"]

    @property
    def worker(self) -> int:
        return _int(self.metadata.get("worker"))

    @property
    def workers(self) -> int:
        return max(1, _int(self.metadata.get("workers"), 1))

    @property
    def pid(self) -> int:
        return _int(self.metadata.get("pid"))

    @property
    def host(self) -> str:
        return self.metadata.get("host", "")

    def state(self) -> str:
        """``running``, ``draining``, ``waiting for ...``, ``sink unavailable``, ``disconnected``."""
        health, stats = self.health, self.stats
        if health.get("draining"):
            return "draining"
        if stats.get("waiting"):
            return f"waiting for {stats['waiting']}"
        if stats.get("sink_error"):
            return "sink unavailable"
        if not health.get("connected", True):
            return "disconnected"
        return "running" if health.get("running", stats.get("running")) else "starting"


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _parse_time(value: Any) -> datetime | None:
    """The protocol's ``started`` (RFC 3339, UTC)."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(timezone.utc)
    except ValueError:
        return None


async def discover(nc: Any, window: float) -> list[Process]:
    """Every wirepipe process that answers ``$SRV.STATS`` within ``window`` seconds (at once when no service at
    all listens: the server says there are no responders)."""
    answers: list[Any] = []
    nobody = asyncio.Event()

    async def collect(msg: Any) -> None:
        if msg.headers and msg.headers.get("Status") == "503":  # no responders
            nobody.set()
            return
        with contextlib.suppress(ValueError):
            answers.append(json.loads(msg.data))

    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=collect)
    try:
        await nc.publish(f"{API}.STATS", b"", reply=inbox)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(nobody.wait(), window)
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    found = [p for p in map(Process.from_answer, answers) if p is not None]
    return sorted({p.id: p for p in found}.values(), key=lambda p: (p.pipeline, p.worker, p.host, p.pid))
