"""The pull requests of a durable JetStream consumer: what the ``jetstream`` source asks the server for.

nats-py's ``fetch`` calls ``next_msg`` once per message; instead, ``PullRequester`` publishes
requests straight to ``$JS.API.CONSUMER.MSG.NEXT`` with replies on one inbox, which the source
reads as raw protocol tuples (``reader.RawSubscription``). It keeps the buffer's ``max_buffered`` asked
for (a few batches, ``jetstream_source.PULL_AHEAD``): a new request goes out as soon as the pipeline
has taken a batch, so the server is never idle while the pipeline works. Every request carries ``max_bytes``: what is in
flight plus what is buffered stays within half of ``pending_bytes_limit`` (a pull for 2,000
messages of 512 KiB would ask for ~1 GB and get the client disconnected), sized by the average
payload seen so far.

The server answers with status messages as well as records (``on_status``): a request that
ended (404, 408, 409) or was partly filled (``Nats-Pending-Messages``) gives back what it had
asked for. A request the server forgot (it restarted) is detected by the idle heartbeat, and
on reconnect (``repull``), and made again; a consumer the server lost is re-created (``lost``).
A request that fails to go out is retried with the backoff of ``core/backoff.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ...core.backoff import ExponentialBackoff
from ...wire import Header
from .reader import Received

log = logging.getLogger("wirepipe.jetstream")

_RETRY_FIRST, _RETRY_MAX = 0.2, 5.0  # seconds before a failed pull request is made again
IDLE_TURN = 1.0  # seconds: a turn of the loop (``idle()``, the heartbeat check) at least this often


class PullRequester:
    """Keeps a durable pull consumer's requests going (see the module doc) while the source reads the replies.

    ``left()`` is how many more messages the source may read (None: no limit), ``idle()`` runs at every turn
    (the source refreshes its lag) and ``lost()`` after a request went unanswered for two heartbeats (the
    source re-creates a consumer the server lost).
    """

    def __init__(self, *, batch_size: int, expires: float, heartbeat: float, pending_bytes_limit: int,
                 left: Callable[[], int | None], idle: Callable[[], Awaitable[None]],
                 lost: Callable[[], Awaitable[None]]) -> None:
        self.batch_size = batch_size
        self.expires = expires
        self.heartbeat = heartbeat
        self.pending_bytes_limit = pending_bytes_limit
        self._left = left
        self._idle = idle
        self._lost = lost
        self.requested = 0  # messages asked for and not yet taken by the pipeline (nor given up by the server)
        self.repulls = 0
        self.consumer = ""  # its name, for the log
        self._wake = asyncio.Event()
        self._halted = False  # ``stop`` was called: the loop ends even if its cancellation was lost
        self._last_activity = time.monotonic()
        self._avg_size = 0.0  # payload bytes per message seen so far: sizes the requests
        self._max_payload = 1024 * 1024
        self._retry = ExponentialBackoff(_RETRY_FIRST, _RETRY_MAX)
        self._task: asyncio.Task[None] | None = None
        self._nc: Any = None
        self._buffer: Any = None
        self._next_subject = ""
        self._inbox = ""

    def start(self, nc: Any, buffer: Any, stream: str, consumer: str, inbox: str, stopping: asyncio.Event) -> None:
        """Begin asking ``consumer`` of ``stream`` for messages, replies to ``inbox`` (read into ``buffer``, a
        ``RawSubscription``), until ``stopping`` is set or ``stop``."""
        self._nc, self._buffer, self.consumer, self._inbox = nc, buffer, consumer, inbox
        self._next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._max_payload = int(nc.max_payload)
        self._task = asyncio.ensure_future(self._run(stopping))

    async def stop(self) -> None:
        """End the requests. A flag as well as the cancellation: Python 3.11's ``asyncio.wait_for`` swallows a
        cancellation that arrives as the event it waits for is set (gh-86296), and the loop would go on."""
        if self._task is not None:
            self._halted = True
            self._wake.set()
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None

    @property
    def in_flight(self) -> int:
        """Messages asked for that have not arrived yet (nor been given up by the server)."""
        return max(0, self.requested - len(self._buffer)) if self._buffer is not None else 0

    def taken(self, got: Received) -> None:
        """The pipeline took ``got`` off the buffer: ask for more, sized by what the messages weigh."""
        size = sum(map(len, got.data)) / len(got)
        self._avg_size = size if size > self._avg_size else 0.9 * self._avg_size + 0.1 * size
        self.requested = max(0, self.requested - len(got))
        self._wake.set()

    def on_status(self, h: dict[str, str]) -> None:
        """A status message on the inbox (the reader's ``status`` hook): what it says about our requests."""
        status = h.get("Status")
        if status == "100":
            return  # idle heartbeat: the pull request is alive
        left = h.get(Header.PENDING)
        if left is not None:
            with contextlib.suppress(ValueError):
                self.requested = max(0, self.requested - int(left))
        elif status in ("404", "408", "409"):
            self.requested = 0
        if status == "409":
            desc = h.get("Description", "")
            if "Deleted" in desc or "Leadership" in desc:
                log.warning("pull consumer %s: %s", self.consumer, desc)
        self._wake.set()

    async def repull(self) -> None:
        """After a reconnect the server may have forgotten our pull requests: ask again."""
        self.requested = len(self._buffer)  # what arrived is still to be taken; the rest is forgotten
        self.repulls += 1
        self._wake.set()

    async def _run(self, stopping: asyncio.Event) -> None:
        """Keep ``max_buffered`` requested; ask again once a batch was taken; stop with ``stopping``."""
        target = self._buffer.max_buffered
        received = -1
        expires_ns = int(self.expires * 1e9)
        hb = self.heartbeat
        body_extra = {"expires": expires_ns, "idle_heartbeat": int(hb * 1e9)} if hb > 0 else {"expires": expires_ns}
        while not stopping.is_set() and not self._halted:
            try:
                want = target - self.requested
                left = self._left()
                if left is not None:
                    want = min(want, left - self.requested)
                want, max_bytes = self._byte_bound(want)
                worth = want >= min(self.batch_size, target // 2) or (want > 0 and self.requested == 0)
                if worth and self._nc.is_connected:
                    body = json.dumps({"batch": want, "max_bytes": max_bytes, **body_extra}).encode()
                    await self._nc.publish(self._next_subject, body, reply=self._inbox)
                    self.requested += want
                    self._last_activity = time.monotonic()
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), IDLE_TURN)
                if self._buffer.received != received:  # any message, heartbeat or status: the request is alive
                    received = self._buffer.received
                    self._last_activity = time.monotonic()
                await self._idle()
                if self.requested and hb > 0 and time.monotonic() - self._last_activity > 2 * hb + 1:
                    # No message, heartbeat or status for two heartbeats: the request is lost.
                    log.warning("pull consumer %s: no heartbeat for %.0fs, pulling again", self.consumer,
                                time.monotonic() - self._last_activity)
                    await self.repull()
                    await self._lost()
                self._retry.reset()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                wait = self._retry.next(exc)
                log.warning("pull request failed (%s); retrying in %.1fs", type(exc).__name__, wait)
                await asyncio.sleep(wait)

    def _byte_bound(self, want: int) -> tuple[int, int]:
        """Messages and bytes to ask for, so what is in flight plus what is buffered stays within half of
        ``pending_bytes_limit`` (the server's own per-client limit is 64 MiB by default). A request may always
        take one message of the server's ``max_payload``, or it could never deliver a large one."""
        budget = self.pending_bytes_limit // 2
        floor = self._max_payload + 4096
        if budget <= 0:
            return want, 0
        avg = self._avg_size
        if not avg:  # nothing seen yet: two requests of a quarter each
            return want, max(floor, budget // 4)
        buffered = self._buffer.pending_bytes
        in_flight = self.in_flight
        room = int((budget - buffered) / avg) - in_flight
        want = min(want, max(room, 0 if in_flight or len(self._buffer) else 1))
        return want, max(floor, min(budget, int(want * avg * 1.5)))
