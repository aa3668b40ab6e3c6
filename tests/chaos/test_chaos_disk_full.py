"""A full disk loses nothing: a real worker fills a small tmpfs, waits, and resumes when there is room.

The disk is a 2 MiB tmpfs (CI runs as root; a test that cannot mount fails, it does not skip). A
``wirepipe capture`` / ``wirepipe run`` worker reads a JetStream stream of N records of incompressible
payload, about four times what fits, with ``max_deliver: 2`` so that a sink failure counted as a
delivery would lose records within seconds. When the worker says ``sink unavailable`` the tmpfs is
resized (``mount -o remount,size=...``) and the worker must write every record, once (duplicates are
counted and bounded), without a redelivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.tmpfs import resize, tmpfs
from tests.cli import start_wirepipe
from tests.nats_fixtures import consumer_info

N = 4000
PAYLOAD = 2000  # bytes per record: N * PAYLOAD is ~8 MB, four times the disk


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs; ``grow(small_disk)`` makes room. Fails (never skips) when it cannot mount."""
    with tmpfs(tmp_path / "disk", "size=2m") as disk:
        yield disk


def grow(disk: Path, size: str = "64m") -> None:
    resize(disk, size)


async def publish_random(url: str, n: int, stream: str = "DISK", subject: str = "disk") -> None:
    """``n`` records of random bytes (incompressible), record i starting with its number."""
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name=stream, subjects=[subject])
    futures = []
    for i in range(n):
        payload = i.to_bytes(4, "big") + os.urandom(PAYLOAD - 4)
        futures.append(await js.publish_async(subject, payload, headers={"Nats-Msg-Id": str(i)}))
        if len(futures) >= 500:
            await asyncio.gather(*futures)
            futures = []
    await asyncio.gather(*futures)
    await nc.close()


def start(args: list[str], log: Path) -> subprocess.Popen[str]:
    with open(log, "w") as err:
        return start_wirepipe(*args, stdout=subprocess.DEVNULL, stderr=err)


def wait_for(check, timeout: float, what: str, proc: subprocess.Popen[str], log: Path) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"{what} (worker exit {proc.poll()}); its log ends with:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(10)


def captured_numbers(folder: Path) -> list[int]:
    import pyarrow.parquet as pq

    numbers: list[int] = []
    for f in sorted(folder.glob("*.parquet")):
        with contextlib.suppress(Exception):  # a file being renamed into place is read next time
            numbers += [int.from_bytes(p[:4], "big") for p in pq.read_table(f, columns=["payload"])["payload"].to_pylist()]
    return numbers


def jsonl_numbers(path: Path) -> list[int]:
    import base64

    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().splitlines():
        with contextlib.suppress(ValueError, KeyError):
            out.append(int.from_bytes(base64.b64decode(json.loads(line)["$base64"])[:4], "big"))
    return out


def scenario(name: str, numbers: list[int], log: Path) -> dict[str, int]:
    got = set(numbers)
    counts = {"sent": N, "received": len(numbers), "lost": N - len(got & set(range(N))),
              "duplicated": len(numbers) - len(got)}
    print(f"{name}: {counts}")
    return counts


@pytest.mark.timeout(120)
def test_a_capture_worker_on_a_full_disk_loses_nothing_and_writes_each_record_once(
        nats_url: str, small_disk: Path, tmp_path: Path) -> None:
    asyncio.run(publish_random(nats_url, N))
    log = tmp_path / "capture.log"
    proc = start(["capture", "--url", nats_url, "--stream", "DISK", "--durable", "cap", "--out", str(small_disk),
                  "--max-file-age", "0.5s", "--set", "source.max_deliver=2",
                  "--set", "source.ack_wait=4"], log)
    try:
        wait_for(lambda: "sink unavailable" in log.read_text(), 40, "the worker never reported the full disk",
                 proc, log)
        time.sleep(6)  # longer than ack_wait: held records must not be redelivered meanwhile
        grow(small_disk)
        wait_for(lambda: set(range(N)) <= set(captured_numbers(small_disk)), 40,
                 "not every record reached the disk after it had room again", proc, log)
    finally:
        code = stop(proc)
    counts = scenario("capture, disk full", captured_numbers(small_disk), log)
    assert code == 0, log.read_text()[-3000:]
    assert counts["lost"] == 0
    assert counts["duplicated"] == 0, "a file completed before the disk filled is not written again"
    info = asyncio.run(consumer_info(nats_url, "DISK", "cap"))
    assert info.num_ack_pending == 0 and info.num_pending == 0
    assert info.num_redelivered == 0, "held records were kept alive (+WPI), not redelivered"
    assert not list(small_disk.glob(".*")), "no unfinished temporary file is left behind"


def parquet_numbers(folder: Path) -> list[int]:
    import pyarrow.parquet as pq

    numbers: list[int] = []
    for f in sorted(folder.glob("*.parquet")):  # complete parts only (hidden .inprogress ones are skipped)
        numbers += [int.from_bytes(v[:4], "big") for v in pq.read_table(f, columns=["value"])["value"].to_pylist()]
    return numbers


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sink", ["jsonl", "parquet parts"])
def test_a_run_worker_on_a_full_disk_loses_nothing(nats_url: str, small_disk: Path, tmp_path: Path,
                                                   sink: str) -> None:
    asyncio.run(publish_random(nats_url, N))
    config = tmp_path / "worker.yaml"
    if sink == "jsonl":
        out = small_disk / "out.jsonl"
        spec = {"type": "jsonl", "path": str(out)}
        numbers = lambda: jsonl_numbers(out)  # noqa: E731
    else:
        out = small_disk / "parts"
        spec = {"type": "parquet", "path": str(out / "part-{part}.parquet"), "compression": "none"}
        numbers = lambda: parquet_numbers(out)  # noqa: E731
    config.write_text(json.dumps({
        "name": "disk-worker",
        "source": {"type": "jetstream", "url": nats_url, "stream": "DISK", "durable": "worker", "max_deliver": 2,
                   "ack_wait": 4, "batch_size": 200},
        "sink": spec,
        "flush_interval": 0.2,
    }))
    log = tmp_path / "run.log"
    proc = start(["run", str(config)], log)
    try:
        wait_for(lambda: "sink unavailable" in log.read_text(), 40, "the worker never reported the full disk",
                 proc, log)
        time.sleep(6)
        grow(small_disk)
        wait_for(lambda: set(range(N)) <= set(numbers()), 40,
                 "not every record reached the disk after it had room again", proc, log)
    finally:
        code = stop(proc)
    counts = scenario(f"{sink}, disk full", numbers(), log)
    assert code == 0, log.read_text()[-3000:]
    assert counts["lost"] == 0 and counts["duplicated"] == 0
    if sink == "jsonl":
        assert len(out.read_bytes().splitlines()) == N, "no partial or repeated line"
    else:
        assert not list(out.glob(".*")), "no unfinished part is left behind"
    info = asyncio.run(consumer_info(nats_url, "DISK", "worker"))
    assert info.num_ack_pending == 0 and info.num_redelivered == 0


@pytest.mark.timeout(60)
async def test_a_core_nats_worker_holds_its_batches_while_the_sink_fails(nats_url: str, tmp_path: Path) -> None:
    """Core NATS cannot redeliver: a failing sink holds the batch and retries (backpressure), never drops it."""
    import nats

    from wirepipe.connectors.nats.core_source import NatsSource
    from wirepipe.core.batch import Batch
    from wirepipe.pipelines.monitor import MetricsCollector, snapshot
    from wirepipe.pipelines.pipeline import Pipeline
    from wirepipe.testing import TestingSink

    class FullDisk(TestingSink):
        broken = True

        async def write(self, batch: Batch) -> None:
            if self.broken:
                raise OSError(28, "No space left on device")
            await super().write(batch)

    n = 3000
    sink = FullDisk()
    pipe = Pipeline(NatsSource("held", url=nats_url, batch_size=100, count=n), [], sink,
                    name="held")
    task = asyncio.ensure_future(pipe.run_async())
    while not pipe.running:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)
    nc = await nats.connect(nats_url)
    for i in range(n):
        await nc.publish("held", i.to_bytes(4, "big"))
    await nc.flush()
    await nc.close()
    for _ in range(200):
        if pipe.stats.sink_errors >= 3:
            break
        await asyncio.sleep(0.05)
    def gauges() -> dict[str, float]:
        collector = MetricsCollector(lambda: [({"pipeline": "held"}, snapshot(pipe))])
        return {m.name: m.samples[0].value for m in collector.collect()}

    down = gauges()
    assert down["wirepipe_sink_up"] == 0.0 and down["wirepipe_sink_errors"] >= 3
    await asyncio.sleep(2.0)
    sink.broken = False
    stats = await asyncio.wait_for(task, 40)
    got = [int.from_bytes(v, "big") for v in sink.records]
    print("core NATS, sink down 2 s:", {"sent": n, "received": len(got), "lost": n - len(set(got)),
                                         "duplicated": len(got) - len(set(got))})
    assert got == list(range(n)), "every record once, in order"
    assert stats.records_out == n and pipe.sink_error is None
    assert gauges()["wirepipe_sink_up"] == 1.0


def test_a_spooling_file_resumes_exactly_where_the_disk_filled(small_disk: Path) -> None:
    from wirepipe.storage.spool import SpoolingFile

    data = os.urandom(3 << 20)  # 3 MiB into 2 MiB
    f = SpoolingFile(small_disk / "out.bin", spool_bytes=64 << 10)
    for i in range(0, len(data), 100_000):
        assert f.write(data[i:i + 100_000]) == len(data[i:i + 100_000])  # never fails
    with pytest.raises(OSError, match="No space left"):
        f.drain()
    assert 0 < f.spooled < len(data) and f.tell() == len(data)
    with pytest.raises(OSError):
        f.drain()  # still full: nothing written twice, nothing dropped
    grow(small_disk)
    f.close()
    assert (small_disk / "out.bin").read_bytes() == data


def test_a_capture_file_is_completed_once_the_disk_has_room(small_disk: Path) -> None:
    import pyarrow.parquet as pq

    from wirepipe.connectors.capture_format import capture_table
    from wirepipe.connectors.capture_sink import CaptureWriter
    from wirepipe.core.batch import Batch
    from wirepipe.core.errors import SinkUnavailable
    from wirepipe.storage.files import TEMP_SUFFIX

    writer = CaptureWriter(small_disk, row_group_rows=500, compression="none", fsync=True)
    payloads = [i.to_bytes(4, "big") + os.urandom(996) for i in range(3000)]  # 3 MB
    for start in range(0, 3000, 500):
        writer.append(capture_table(Batch(payloads[start:start + 500], subjects="s"), start, writer.schema()))
    with pytest.raises(SinkUnavailable, match="No space left"):
        writer.finish_file()
    grow(small_disk)
    path = writer.finish_file()
    assert path is not None and writer.files == [path]
    assert pq.read_table(path)["payload"].to_pylist() == payloads, "every row once, in order"
    assert not list(small_disk.glob(f".*{TEMP_SUFFIX}"))


@pytest.mark.timeout(90)
@pytest.mark.parametrize("sink", ["jsonl", "parquet parts"])
def test_stopped_while_the_disk_is_full_a_worker_exits_non_zero_and_acks_nothing_unwritten(
        nats_url: str, small_disk: Path, tmp_path: Path, sink: str) -> None:
    """The drain cannot flush: after shutdown_timeout the worker exits 1; what it held comes back to the next one,
    and what it left unfinished (a part without its footer) is named by the next one."""
    asyncio.run(publish_random(nats_url, N))
    if sink == "jsonl":
        out = small_disk / "out.jsonl"
        spec = {"type": "jsonl", "path": str(out), "append": True}
        numbers = lambda: jsonl_numbers(out)  # noqa: E731
    else:
        out = small_disk / "parts"
        spec = {"type": "parquet", "path": str(out / "part-{part}.parquet"), "compression": "none"}
        numbers = lambda: parquet_numbers(out)  # noqa: E731
    config = tmp_path / "worker.yaml"
    config.write_text(json.dumps({
        "name": "disk-stop",
        "source": {"type": "jetstream", "url": nats_url, "stream": "DISK", "durable": "stop", "ack_wait": 4,
                   "batch_size": 200},
        "sink": spec,
        "flush_interval": 0.2,
        "shutdown_timeout": 3,
    }))
    log = tmp_path / "run.log"
    proc = start(["run", str(config)], log)
    wait_for(lambda: "sink unavailable" in log.read_text(), 40, "the worker never reported the full disk", proc, log)
    code = stop(proc)
    assert code == 1, f"exit {code}: {log.read_text()[-2000:]}"
    assert "Traceback" not in log.read_text()
    acked = asyncio.run(consumer_info(nats_url, "DISK", "stop")).ack_floor.consumer_seq
    assert acked <= len(numbers()), "nothing acknowledged that is not on disk"
    if sink == "jsonl":
        lines = out.read_bytes().splitlines()
        assert len(jsonl_numbers(out)) == len(lines), f"a torn line is left: {lines[-1][-80:]!r}; {log.read_text()[-2500:]}"
        left: list[Path] = []
    else:
        left = list(out.glob(".part-*.inprogress"))
        assert len(left) == 1 and left[0].stat().st_size > 0, "the part being written when the disk filled"
    grow(small_disk)
    first = log.read_text()
    proc = start(["run", str(config)], log)  # the next worker gets what the first one held
    try:
        wait_for(lambda: set(range(N)) <= set(numbers()), 40, "the next worker did not complete it", proc, log)
    finally:
        stop(proc)
    counts = scenario(f"{sink}, stopped while full, then restarted", numbers(), log)
    assert counts["lost"] == 0
    assert counts["duplicated"] <= 1000, "at most what was written since the last flush (a few batches)"
    if sink == "jsonl":
        assert len(jsonl_numbers(out)) == len(out.read_bytes().splitlines()), "every line whole"
    else:
        second = log.read_text()
        assert f"{out} has 1 unfinished parquet file(s), {left[0].stat().st_size:,} bytes, from a run that did not " \
               f"stop cleanly" in second and left[0].name in second, second[-3000:]
        assert "unfinished" not in first
