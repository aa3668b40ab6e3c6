"""Issue 11, defect 8: ``shutdown_timeout`` holds for a JetStream publisher whose server hangs.

The nats-server process is SIGSTOPped mid-publish (it keeps its sockets open and answers
nothing); the worker is then asked to stop. It must exit non-zero soon after its
``shutdown_timeout``, saying what it could not settle. Before the fix it logged "stopping
now" at 30 s and was still republishing 596 s later.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli import start_wirepipe
from wirepipe.connectors.nats.server import EmbeddedServer


async def _stored(url: str) -> int:
    import nats

    nc = await nats.connect(url)
    try:
        return int((await nc.jetstream().stream_info("HANG")).state.messages)
    except Exception:
        return 0
    finally:
        await nc.close()


@pytest.mark.timeout(150)
def test_publisher_to_a_hung_server_exits_after_shutdown_timeout(nats_server: EmbeddedServer,
                                                                  make_pipeline: Callable[..., Path]) -> None:
    cfg = {
        "name": "hang-pub",
        "source": {"type": "generate", "dataset": "point", "count": 10_000_000, "rate": 5000},
        "operators": [{"serialize": {"format": "msgpack"}}],
        "sink": {"type": "jetstream", "url": nats_server.url, "subject": "hang", "stream": {"name": "HANG"},
                 "ack_timeout": "1s"},
        "shutdown_timeout": "3s",
    }
    worker = start_wirepipe("run", make_pipeline(cfg))
    assert nats_server.proc is not None
    pid = nats_server.proc.pid
    stopped = False
    try:
        deadline = time.monotonic() + 60
        while asyncio.run(_stored(nats_server.url)) < 2000:
            assert worker.poll() is None, worker.communicate()[1]
            assert time.monotonic() < deadline, "the publisher stored nothing"
            time.sleep(0.2)
        os.kill(pid, signal.SIGSTOP)  # the server hangs: no acks, no errors, the socket stays open
        stopped = True
        time.sleep(2.0)
        worker.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        try:
            _, err = worker.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            worker.kill()
            _, err = worker.communicate()
            raise AssertionError(f"still running 90 s after SIGTERM with shutdown_timeout 3s: {err[-3000:]}") from None
        waited = time.monotonic() - t0
    finally:
        if stopped:
            os.kill(pid, signal.SIGCONT)
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode not in (0, None), err[-3000:]
    assert "shutdown_timeout" in err, err[-3000:]
    assert "unconfirmed" in err or "not acknowledged" in err, err[-3000:]
    assert waited < 60, f"took {waited:.0f}s to exit"
