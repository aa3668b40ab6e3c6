"""Issue 11, defect 3: the default ``Nats-Msg-Id`` deduplicates re-runs of the same input, never different data.

Real nats-server, real ``wirepipe run`` processes: two different JSONL inputs through one
pipeline name, the same input twice, a file rewritten in place, and a core NATS ->
JetStream relay with the default id (it used to die on its first batch: ``no column 'seq'``).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli import start_wirepipe, wirepipe

pytestmark = pytest.mark.timeout(180)


def stream_messages(url: str, stream: str) -> int:
    async def go() -> int:
        import nats

        nc = await nats.connect(url)
        try:
            return int((await nc.jetstream().stream_info(stream)).state.messages)
        finally:
            await nc.close()

    return asyncio.run(go())


def stored_values(url: str, stream: str) -> list[Any]:
    """Every record in the stream, decoded (msgpack), in stream order."""
    async def go() -> list[Any]:
        import msgpack
        import nats

        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            n = int((await js.stream_info(stream)).state.messages)
            sub = await js.subscribe(">", stream=stream, ordered_consumer=True)
            out = []
            for _ in range(n):
                msg = await sub.next_msg(timeout=10)
                out.append(msgpack.unpackb(msg.data))
            return out
        finally:
            await nc.close()

    return asyncio.run(go())


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def ingest_config(folder: Path, url: str, source_path: Path) -> Path:
    cfg = {
        "name": "ingest",
        "source": {"type": "jsonl", "path": str(source_path)},
        "operators": [{"serialize": {"format": "msgpack"}}],
        "sink": {"type": "jetstream", "url": url, "subject": "ingest", "stream": {"name": "INGEST"}},
    }
    path = folder / f"ingest-{source_path.stem}.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def test_two_inputs_are_both_stored_and_a_rerun_is_deduplicated(nats_url: str, tmp_path: Path) -> None:
    n = 1000
    a = write_jsonl(tmp_path / "A.jsonl", [{"file": "A", "i": i} for i in range(n)])
    b = write_jsonl(tmp_path / "B.jsonl", [{"file": "B", "i": i} for i in range(n)])
    for source in (a, b):
        done = wirepipe("run", str(ingest_config(tmp_path, nats_url, source)), timeout=90)
        assert done.returncode == 0, done.stderr
    # Before the fix the B run reported "1000 out" and the stream held only A's records.
    assert stream_messages(nats_url, "INGEST") == 2 * n

    again = wirepipe("run", str(ingest_config(tmp_path, nats_url, a)), timeout=90)
    assert again.returncode == 0, again.stderr
    assert stream_messages(nats_url, "INGEST") == 2 * n  # the same input again: every record deduplicated

    # The same file name with new content: stored (the payload hash differs), unchanged lines are not.
    write_jsonl(a, [{"file": "A", "i": i} if i % 2 else {"file": "A2", "i": i} for i in range(n)])
    changed = wirepipe("run", str(ingest_config(tmp_path, nats_url, a)), timeout=90)
    assert changed.returncode == 0, changed.stderr
    assert stream_messages(nats_url, "INGEST") == 2 * n + n // 2

    stored = stored_values(nats_url, "INGEST")
    assert sorted((r["file"], r["i"]) for r in stored) == sorted(
        [("A", i) for i in range(n)] + [("B", i) for i in range(n)] + [("A2", i) for i in range(0, n, 2)])


def test_core_nats_to_jetstream_relay_with_the_default_id(nats_url: str, tmp_path: Path) -> None:
    n = 2000
    relay_cfg = {
        "name": "relay",
        "source": {"type": "nats", "url": nats_url, "subject": "live", "count": n},
        "sink": {"type": "jetstream", "url": nats_url, "subject": "stored", "stream": {"name": "STORED"}},
        "monitor": {"status_interval": "0.2s"},
    }
    pub_cfg = {
        "name": "live-publisher",
        "source": {"type": "generate", "dataset": "point", "count": n, "rate": 20000},
        "operators": [{"serialize": {"format": "msgpack"}}],
        "sink": {"type": "nats", "url": nats_url, "subject": "live"},
    }
    (tmp_path / "relay.yaml").write_text(yaml.safe_dump(relay_cfg), encoding="utf-8")
    (tmp_path / "pub.yaml").write_text(yaml.safe_dump(pub_cfg), encoding="utf-8")
    relay = start_wirepipe("run", str(tmp_path / "relay.yaml"))
    try:
        assert relay.stderr is not None
        deadline = time.monotonic() + 60
        while "relay:" not in relay.stderr.readline():  # the first status line: subscribed and running
            assert relay.poll() is None and time.monotonic() < deadline, "the relay did not start"
        pub = wirepipe("run", str(tmp_path / "pub.yaml"), timeout=90)
        assert pub.returncode == 0, pub.stderr
        _, err = relay.communicate(timeout=90)
    finally:
        if relay.poll() is None:
            relay.kill()
            relay.wait()
    assert relay.returncode == 0, err
    assert f"{n} records out of {n}" in err
    assert stream_messages(nats_url, "STORED") == n
    assert len(stored_values(nats_url, "STORED")) == n


def test_a_constant_msg_id_is_said_once_with_its_count_and_in_the_summary(nats_url: str, tmp_path: Path) -> None:
    """``msg_id: constant``: the stream keeps 1 of 10 records; the run says why, not only "already stored"."""
    source = write_jsonl(tmp_path / "ten.jsonl", [{"i": i} for i in range(10)])
    cfg = yaml.safe_load(ingest_config(tmp_path, nats_url, source).read_text(encoding="utf-8"))
    cfg["sink"]["msg_id"] = "constant"
    path = tmp_path / "constant.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    done = wirepipe("run", str(path), timeout=90)
    assert done.returncode == 0, done.stderr
    assert stream_messages(nats_url, "INGEST") == 1
    assert done.stderr.count("msg_id 'constant' gave 9 of the 10 records of a batch the Nats-Msg-Id of another "
                             "record of the batch (it names no field") == 1, done.stderr
    assert ("10 records out of 10" in done.stderr and "9 already stored (deduplicated), 9 given the Nats-Msg-Id of "
            "another record of their batch by the sink's msg_id (the stream keeps one record per id)" in done.stderr)
