"""A core NATS consumer the server disconnects, and a loss at the end of a run: counted, never "0 lost".

The server closes a consumer that does not read fast enough (its ``max_pending``) and drops what
it held for it; nothing tells the client why. Publishers stamp their last ``Wirepipe-Seq`` on
``_WIREPIPE.last.<subject>`` (periodically and when they close), so the consumer counts what it
missed even when no record follows; a publisher it never hears from again after a disconnect is
reported as an uncounted tail, not as nothing lost.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.overload import run_scenario
from wirepipe.connectors.nats.core_sink import NatsSink
from wirepipe.connectors.nats.core_source import NatsSource
from wirepipe.connectors.nats.server import EmbeddedServer, ServerOptions
from wirepipe.core.batch import Batch
from wirepipe.pipelines.monitor import loss_summary
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.testing import TestingSink


# the scenario needs a consumer the server finds slow: alone, so other tests' load does not decide it
@pytest.mark.timeout(240)
@pytest.mark.serial
def test_a_consumer_the_server_disconnects_as_slow_counts_every_lost_record(tmp_path: Path) -> None:
    # The scenario of a server holding 1 MB per client, a 20 ms/record map and a burst of 32 kB records,
    # scaled down (1,000 records: 32 MB, while the socket buffers and the server's 1 MB take ~7 MB before the
    # disconnect, so the worker spins through ~200 records, not thousands; it stops 1 s after the publisher,
    # whose stamps go out for 3 s after its last record).
    log = tmp_path / "server.log"
    with EmbeddedServer(options=ServerOptions(extra={"max_pending": 1024 * 1024}), log_file=log) as server:
        out = run_scenario(server.url, tmp_path, count=1000, burst=1000, pad=32_000, spin_us=20_000, batch_size=20,
                           stop_after=1.0, linger=3.0, extra={"queue_size": 1, "shutdown_timeout": "60s"},
                           server_log=str(log))
    print(out.line())
    assert out.sent == 1000
    assert out.received + out.counters["lost"] == out.sent, out.line()
    assert "Slow Consumer Detected" in out.server_log  # the server did disconnect it
    assert out.counters["disconnects"] >= 1, out.summary
    assert out.counters["missing"] > 0, out.summary  # what the server dropped, counted from gaps and stamps
    # shown apart: numbers missing between messages received, and the tail only the final stamp claims
    assert out.counters["gap"] + out.counters["tail"] == out.counters["missing"], out.summary
    assert "unsure" not in out.counters, out.summary  # every publisher was heard from after each disconnect
    assert out.counters["duplicates"] == 0


async def _consume(url: str, **source: Any) -> tuple[NatsSource, TestingSink, asyncio.Future[Any]]:
    src = NatsSource("tail", url=url, duration=60, **source)
    sink = TestingSink()
    run = asyncio.ensure_future(Pipeline(src, [], sink, name="tail").run_async())
    while not src.ready.is_set():
        await asyncio.sleep(0.01)
    return src, sink, run


async def _until(check: Any, timeout: float = 20.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("timed out")


async def _publish(sink: NatsSink, first: int, n: int) -> None:
    await sink.write(Batch([str(i).encode() for i in range(first, first + n)],
                           headers={"Content-Type": "text/plain"}))
    await sink.flush()


async def _lose_the_tail(server: EmbeddedServer, close_publisher_before_the_consumer_is_back: bool) -> Any:
    """100 records received, then the server restarts: the publisher (quick to reconnect) sends 50 more while
    the consumer (slow to reconnect) is away, and closes after or before the consumer is back."""
    import nats

    raw = await nats.connect(server.url, reconnect_time_wait=0.05, max_reconnect_attempts=-1)
    plain: list[Any] = []

    async def on_msg(msg: Any) -> None:
        plain.append(msg)

    await raw.subscribe("tail", cb=on_msg)  # another client on the data subject: never sees a stamp
    source, got, run = await _consume(server.url, reconnect={"wait": 3.0, "jitter": 0})
    publisher = NatsSink("tail", url=server.url, stamp_interval=0, reconnect={"wait": 0.05, "jitter": 0})
    await publisher.open()
    await _publish(publisher, 0, 100)
    await _until(lambda: got.count == 100)
    server.restart()
    await _until(lambda: publisher.nc.is_connected and publisher.conn.stats.reconnects == 1)
    assert not source.conn.nc.is_connected
    await _publish(publisher, 100, 50)  # nobody subscribes to "tail" now: the server drops them
    if close_publisher_before_the_consumer_is_back:
        await publisher.close()  # its final stamp is lost too
    await _until(lambda: source.conn.stats.reconnects == 1)
    if not close_publisher_before_the_consumer_is_back:
        await publisher.close()  # the final stamp: last Wirepipe-Seq 150
    await asyncio.sleep(0.5)
    source.stopping.set()
    stats = await asyncio.wait_for(run, 20)
    await raw.close()
    assert all(m.data for m in plain) and not [m for m in plain if "Wirepipe-Last-Seq" in (m.headers or {})]
    return stats, got


async def test_the_final_stamp_counts_a_tail_no_record_follows(nats_server: EmbeddedServer) -> None:
    # 150 sent, 100 received: no record follows the 50 lost, only the final stamp.
    stats, got = await _lose_the_tail(nats_server, close_publisher_before_the_consumer_is_back=False)
    assert got.count == 100
    assert stats.losses == {"lost": 50, "missing": 50, "gap": 0, "tail": 50, "dropped": 0, "discarded": 0,
                            "duplicates": 0, "reordered": 0, "malformed": 0, "disconnects": 1, "unsure": 0,
                            "forgotten": 0, "forgotten_running": 0, "skipped": 0}
    assert ("50 lost (50 missing from publisher sequences (0 in gaps between messages, 50 claimed by stamps past "
            "the last message received: unconfirmed)") in loss_summary(stats.losses)


async def test_a_tail_nobody_can_count_is_reported_unknown_never_zero(nats_server: EmbeddedServer) -> None:
    # The publisher ended while the consumer was away: nothing can count its last 50 records, and the
    # summary says the count is incomplete instead of "0 lost".
    stats, got = await _lose_the_tail(nats_server, close_publisher_before_the_consumer_is_back=True)
    assert got.count == 100
    assert (stats.losses["lost"], stats.losses["unsure"], stats.losses["disconnects"]) == (0, 1, 1)
    text = loss_summary(stats.losses)
    assert not re.search(r"\b0 lost\b", text), text
    assert "lost: 0 counted" in text and "an unknown number more: 1 publisher(s) not heard from" in text
