"""Issue 11, defect 9: JetStream pulls are bounded by bytes as well as by count.

A pull for 2 x batch_size messages of 512 KiB asked for ~1 GB: the server disconnected the
worker again and again (it exceeds the client's pending bytes) and the worker then stalled
until ack_wait. Pull requests now carry ``max_bytes`` derived from ``pending_bytes_limit``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from wirepipe.connectors.nats.jetstream_source import JetStreamSource
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.testing import TestingSink


async def _fill(url: str, n: int, size: int) -> list[str]:
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="BIG", subjects=["big"])
    digests = []
    for i in range(n):
        payload = os.urandom(size)
        digests.append(hashlib.sha256(payload).hexdigest())
        await js.publish("big", payload, headers={"Nats-Msg-Id": str(i)})
    await nc.close()
    return digests


@pytest.mark.timeout(150)
async def test_large_messages_are_pulled_without_disconnects_or_stalls(tmp_path: Path) -> None:
    n, size = 240, 512 * 1024  # 120 MiB: two default batches' worth of pull would ask for ~1 GB
    with EmbeddedServer(store_dir=tmp_path / "js", max_payload=1024 * 1024) as server:
        digests = await _fill(server.url, n, size)
        sink = TestingSink()
        # ack_wait is long: a pull the server gave up on would stall the run for minutes (the test times out)
        source = JetStreamSource("big", stream="BIG", durable="big", url=server.url,
                                 count=n, ack_wait=300, pending_bytes_limit=16 * 1024 * 1024)
        stats = await Pipeline(source, [], sink, name="big").run_async()
    assert stats.records_out == n and stats.acked == n
    assert [hashlib.sha256(v).hexdigest() for v in sink.records] == digests
    assert source.conn.stats.disconnects == 0 and source.repulls == 0
