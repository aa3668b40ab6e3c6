"""Issue 11, defect 1: core NATS overload is never invisible.

Real nats-server, real worker and publisher processes (``tests/chaos/overload.py``): what
the publisher sent must equal what the worker received plus what it counted as lost, and
the loss must show in the status line, the run summary, Prometheus and the metrics Parquet.
"""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.chaos.overload import run_scenario
from wirepipe.connectors.nats.core_source import NatsSource
from wirepipe.connectors.nats.server import EmbeddedServer, ServerOptions
from wirepipe.connectors.null import NullSink
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.wire import Header


# The scenarios need a worker slower than its publisher, and losses: alone (serial), so other tests' load does not
# decide it.
@pytest.mark.timeout(240)
@pytest.mark.serial
def test_a_worker_slower_than_its_publisher_counts_every_loss(nats_url: str, tmp_path: Path) -> None:
    # The scenario, scaled down: a 2 ms/record map against 13k records/s; the worker's pending buffer
    # (500 messages) and batches (100 records) are small so the client drops too, and what the worker still
    # holds when it stops is ~1,000 records, not 3 batches of 1,000 and 5,000 pending.
    # Before: 7,182 of 100,000 received, 0 counted.
    metrics = tmp_path / "metrics.parquet"
    out = run_scenario(nats_url, tmp_path, count=10_000, rate=13_000, spin_us=2000, pending_msgs_limit=500,
                       batch_size=100, stop_after=1.0,
                       extra={"metrics": {"path": str(metrics), "flush_interval": "1s"}, "queue_size": 1})
    assert out.sent == 10_000
    assert out.received < out.sent
    assert out.lost == out.sent - out.received, out.summary  # every loss counted, none twice
    assert out.counters["dropped"] > 0 and out.counters["duplicates"] == 0
    assert any("lost" in line for line in out.status_lines), out.status_lines[-3:]
    lost_rows = pq.read_table(metrics, columns=["step", "lost"]).to_pylist()
    in_batches = sum(r["lost"] or 0 for r in lost_rows if r["step"] == 0)
    assert 0 < in_batches <= out.counters["lost"]  # found while batches ran; the rest at stop


@pytest.mark.timeout(240)
@pytest.mark.serial
def test_bursts_dropped_by_the_server_show_as_gaps(tmp_path: Path) -> None:
    # A server that holds only 2 MiB per client, two bursts of 1,000 records of 32 kB (more than the socket
    # buffers take) against a 2 ms/record map: what the server drops (slow consumer, disconnect) shows as gaps
    # in Wirepipe-Seq; trailing records after a pause close the count.
    with EmbeddedServer(options=ServerOptions(extra={"max_pending": 2 * 1024 * 1024}),
                        log_file=tmp_path / "server.log") as server:
        out = run_scenario(server.url, tmp_path, count=2000, burst=1000, pause=1.0, pad=32_000, tail=50,
                           spin_us=2000, idle=1.5, server_log=str(tmp_path / "server.log"))
    assert out.sent == 2050
    assert out.received + out.counters["lost"] == out.sent, out.summary
    assert out.counters["duplicates"] == 0


async def test_gaps_reordering_and_duplicates_reach_prometheus(nats_url: str) -> None:
    """Stamped messages with a gap (6, 7), a late one (4) and a duplicate (5): counted exactly, scraped."""
    import nats

    source = NatsSource("stamped", url=nats_url, duration=60)
    pipe = Pipeline(source, [], NullSink(), name="gaps", monitor={"status_interval": 0, "prometheus": {"port": 0}})
    stop = asyncio.Event()
    run = asyncio.ensure_future(pipe.run_async(stop))
    while not source.ready.is_set():
        await asyncio.sleep(0.01)
    nc = await nats.connect(nats_url)
    for seq in (1, 2, 3, 5, 5, 4, 8):
        await nc.publish("stamped", b"x", headers={Header.PUBLISHER: "p1", Header.SEQ: str(seq)})
    await nc.publish("stamped", b"y")  # unstamped: a foreign publisher, not counted
    await nc.flush()
    while pipe.stats.records_in < 8:
        await asyncio.sleep(0.01)
    port = pipe.last_run.monitor.port
    body = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode())
    stop.set()
    stats = await asyncio.wait_for(run, 30)
    await nc.close()
    assert 'wirepipe_lost_total{pipeline="gaps"} 2.0' in body
    assert 'wirepipe_duplicates_total{pipeline="gaps"} 1.0' in body
    assert stats.losses == {"lost": 2, "missing": 2, "gap": 2, "tail": 0, "dropped": 0, "discarded": 0,
                            "duplicates": 1, "reordered": 1, "malformed": 0, "disconnects": 0, "unsure": 0,
                            "forgotten": 0, "forgotten_running": 0, "skipped": 0}
