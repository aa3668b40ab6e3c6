"""Every retry waits through one bounded exponential backoff (``core/backoff.py``): the waits each user gets."""

from __future__ import annotations

import asyncio

import pytest

from wirepipe.connectors.generate import GenerateSource
from wirepipe.connectors.nats.connection import ReconnectConfig
from wirepipe.connectors.nats.jetstream_source import JetStreamSource
from wirepipe.core.backoff import ExponentialBackoff
from wirepipe.core.errors import BackOff, NotConnected
from wirepipe.pipelines.restarts import RestartPolicy
from wirepipe.pipelines.sink_retry import SinkRetry


def test_waits_double_up_to_the_cap_and_start_again_after_a_reset() -> None:
    retry = ExponentialBackoff(first=0.25, cap=5.0)
    assert [retry.next() for _ in range(7)] == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert retry.failures == 7
    retry.reset()
    assert (retry.failures, retry.next()) == (0, 0.25)
    assert ExponentialBackoff(1.0, 30.0).delay(10_000) == 30.0  # no overflow however long the outage


def test_a_backoff_signal_sets_the_wait_within_the_cap_and_counts_as_a_failure() -> None:
    retry = ExponentialBackoff(first=0.1, cap=2.0)
    assert retry.next(BackOff("stream full", wait=0.7)) == 0.7
    assert retry.next(BackOff("rate limited", wait=60.0)) == 2.0
    assert retry.next(BackOff("clock skew", wait=-1.0)) == 0.0
    assert retry.next(NotConnected("down")) == 0.1 * 2 ** 3  # the fourth failure in a row
    assert retry.failures == 4


def test_jitter_spreads_the_wait_within_its_fraction() -> None:
    retry = ExponentialBackoff(first=1.0, cap=8.0, jitter=0.2)
    waits = [retry.delay(2) for _ in range(200)]
    assert all(3.2 <= w <= 4.8 for w in waits) and len(set(waits)) > 1


async def test_sleep_ends_when_stopped() -> None:
    stop = asyncio.Event()
    retry = ExponentialBackoff(first=30.0, cap=30.0)
    asyncio.get_running_loop().call_later(0.05, stop.set)
    assert await asyncio.wait_for(retry.sleep(stop=stop), 20) is True  # not the 30 s wait
    assert await ExponentialBackoff(first=0.0, cap=1.0).sleep(stop=asyncio.Event()) is False


def test_the_run_loop_retries_a_sink_within_a_third_of_ack_wait() -> None:
    """In-progress acks go out at every retry: they must reach the server before ack_wait runs out."""
    plain = SinkRetry(GenerateSource("point", count=1), lambda: ([], 0)).backoff
    assert [plain.next(OSError("disk")) for _ in range(8)] == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    assert plain.next(BackOff("x", 60.0)) == 5.0
    acked = SinkRetry(JetStreamSource(stream="S", durable="d", ack_wait=0.9), lambda: ([], 0)).backoff
    assert acked.next(BackOff("x", 60.0)) == pytest.approx(0.3)


def test_reconnects_and_restarts_wait_through_it() -> None:
    reconnect = ReconnectConfig(wait=0.1, max_wait=5.0, jitter=0.0)
    assert [reconnect.delay(k) for k in range(8)] == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    default = RestartPolicy()
    restarts = default.delays()
    assert [restarts.next() for _ in range(8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert (default.max_failures, default.stable_after) == (5, 60.0)  # what docs/how-to/scale-out.md says
    restarts = RestartPolicy.model_validate({"backoff": "100ms", "max_backoff": "1s"}).delays()  # the `restart:` section
    assert [restarts.next() for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
