"""A full disk loses nothing: a real worker fills a small tmpfs, waits, and resumes when there is room.

The disk is a 2 MiB tmpfs (it needs root: elsewhere the test is skipped with the reason, in CI it fails). A
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
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.chaos.tmpfs import resize, tmpfs
from tests.cli import start_wirepipe
from tests.nats_fixtures import consumer_info

N = 4000
PAYLOAD = 2000  # bytes per record: N * PAYLOAD is ~8 MB, four times the disk


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs; ``grow(small_disk)`` makes room (``tmpfs`` says what happens where it cannot mount)."""
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
    from wirepipe.pipelines.monitor import snapshot
    from wirepipe.pipelines.pipeline import Pipeline
    from wirepipe.pipelines.prometheus import MetricsCollector
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
        collector = MetricsCollector(lambda: [({"pipeline": "held"}, snapshot(pipe.last_run))])
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
    assert stats.records_out == n and pipe.last_run.sink_error is None
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


# --- metrics on a full disk --------------------------------------------------------------------------


def fill(disk: Path) -> Path:
    """Fill ``disk`` to its last byte with one file; deleting it frees the room."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        for size in (1 << 16, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while f.write(b"\0" * size):
                    pass
    return filler


def metrics_rows(folder: Path) -> list[dict[str, object]]:
    import pyarrow.parquet as pq

    from wirepipe.storage.parts import list_parts

    return [row for part in list_parts(folder) for row in pq.read_table(part).to_pylist()]


def delay_figures(text: str, folder: Path) -> tuple[int, int]:
    """The summary's metrics line: rows that waited for room, failed writes."""
    import re

    found = re.search(re.escape(f"metrics: {folder} (") + r"([\d,]+) row\(s\) waited for room on the disk; "
                      r"([\d,]+) failed write\(s\), each tried again\)", text)
    assert found, text[-3000:]
    return int(found[1].replace(",", "")), int(found[2].replace(",", ""))


def retries_reported(text: str) -> int:
    """The failures the writers' recovery lines count (one line per outage)."""
    import re

    return sum(int(n) for n in re.findall(r"written again after [\d.]+s and (\d+) failure\(s\)", text))


def free_room(filler: Path, proc: subprocess.Popen[str], log: Path, ready: Callable[[], bool], what: str,
              hold: float) -> tuple[int, str]:
    """Once ``ready()``, let the full disk refuse ``hold`` s more (the worker must still run: its metrics wait),
    then free it: the worker's exit code and its log."""
    try:
        wait_for(ready, 30, what, proc, log)
        time.sleep(hold)
        assert proc.poll() is None, f"the metrics wait for room, they do not end the run: {log.read_text()[-3000:]}"
        filler.unlink()
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, log.read_text()


GENERATED = 12_000  # records at 2,000/s: batches of 200 (about ten a second), 6 s of run


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sink", ["jsonl elsewhere", "parquet parts on the same disk"])
def test_metrics_on_a_full_disk_wait_for_room_and_lose_no_row(small_disk: Path, tmp_path: Path, sink: str) -> None:
    """The disk is full from the start and freed 2 s after the first failed part: the run goes on, every record
    is written, every metrics row reaches the folder once, the summary prints what the wait cost, exit 0."""
    filler = fill(small_disk)
    folder = small_disk / "metrics.parquet"
    if sink == "jsonl elsewhere":
        out = tmp_path / "out.jsonl"
        spec: dict[str, object] = {"type": "jsonl", "path": str(out)}
        written = lambda: len(out.read_bytes().splitlines())  # noqa: E731
    else:
        out = small_disk / "parts"
        spec = {"type": "parquet", "path": str(out / "part-{part}.parquet"), "compression": "none"}
        written = lambda: len(parquet_numbers(out))  # noqa: E731
    config = tmp_path / "metrics.yaml"
    config.write_text(json.dumps({
        "name": "full-metrics",
        "source": {"type": "generate", "dataset": "point", "count": GENERATED, "rate": 2000, "batch_size": 500},
        "operators": [{"serialize": {"format": "msgpack"}}],
        "sink": spec,
        "metrics": {"path": str(folder), "flush_interval": "0.5s"},
        "flush_interval": 0.5,
        "monitor": {"status_interval": "0.5s"},
    }))
    log = tmp_path / "run.log"
    proc = start(["run", str(config)], log)
    # parts keep failing for 2 s while the run goes on
    code, text = free_room(filler, proc, log, lambda: "wait for room" in log.read_text(),
                           "the metrics never met the full disk", hold=2)
    assert code == 0, text[-3000:]
    assert f"full-metrics: {GENERATED} records out of {GENERATED}" in text and "Traceback" not in text
    assert written() == GENERATED
    rows = metrics_rows(folder)
    batches = GENERATED // 200
    assert len(rows) == 3 * batches, "source, serialize and sink rows of every batch"
    assert sorted({(r["batch"], r["step"]) for r in rows}) == [(b, s) for b in range(batches) for s in range(3)]
    assert [sum(r["records"] for r in rows if r["step"] == s) for s in range(3)] == [GENERATED] * 3  # type: ignore[misc]
    delayed, errors = delay_figures(text, folder)
    print(f"{sink}: {GENERATED} records, {len(rows)} metrics rows; {delayed} rows delayed, {errors} failed writes")
    assert errors == retries_reported(text), "each failed write is counted once"
    assert errors >= 2 and 0 < delayed <= len(rows)
    assert f"metrics wait for room: {folder}: No space left on device" in text, "the status line says it"
    assert not [p for p in folder.iterdir() if p.name.startswith(".")], "no temporary part is left"


@pytest.mark.timeout(120)
def test_past_max_rows_held_the_pipeline_waits_for_the_metrics_and_loses_nothing(small_disk: Path,
                                                                               tmp_path: Path) -> None:
    """The disk is full from the start and ``max_rows_held: 30``: once more than 30 metrics rows wait for room the
    pipeline stops taking batches (its output stays where it was) instead of holding rows without bound; when the
    disk is freed it goes on, and every record and every metrics row is written once, exit 0. Before: the rows
    piled up in memory for as long as the disk refused them."""
    filler = fill(small_disk)
    folder = small_disk / "metrics.parquet"
    out = tmp_path / "out.jsonl"
    config = tmp_path / "bounded.yaml"
    config.write_text(json.dumps({
        "name": "bounded",
        "source": {"type": "generate", "dataset": "point", "count": GENERATED, "rate": 2000, "batch_size": 500},
        "operators": [{"serialize": {"format": "msgpack"}}],
        "sink": {"type": "jsonl", "path": str(out)},
        "metrics": {"path": str(folder), "flush_interval": "0.5s", "max_rows_held": 30},
        "flush_interval": 0.5,
        "monitor": {"status_interval": "0.3s"},
    }))
    log = tmp_path / "bounded.log"
    proc = start(["run", str(config)], log)
    written = lambda: len(out.read_bytes().splitlines()) if out.exists() else 0  # noqa: E731
    try:
        wait_for(lambda: "the pipeline waits for room on the disk for" in log.read_text(), 30,
                 "the pipeline never waited for its metrics", proc, log)
        held = written()
        time.sleep(1.5)  # at 2,000 records/s, 3,000 more would be written if the pipeline went on
        assert (written(), proc.poll()) == (held, None), log.read_text()[-3000:]
        assert held < GENERATED
        assert "waiting for room on the disk for" in log.read_text(), "the status line says what it waits for"
        filler.unlink()
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert code == 0, text[-3000:]
    assert f"bounded: {GENERATED} records out of {GENERATED}" in text and "Traceback" not in text
    assert written() == GENERATED
    rows = metrics_rows(folder)
    batches = GENERATED // 200
    assert len(rows) == 3 * batches and [sum(r["records"] for r in rows if r["step"] == s)  # type: ignore[misc]
                                         for s in range(3)] == [GENERATED] * 3
    import re

    waits = re.search(r"([\d,]+) time\(s\) the pipeline waited for them \(max_rows_held rows held\)", text)
    assert waits and int(waits[1]) >= 1 and text.count("the pipeline waits for room on the disk") == int(waits[1])
    print(f"{held} of {GENERATED} records written while the metrics waited; {waits[1]} wait(s); {len(rows)} rows")


@pytest.mark.timeout(120)
def test_latency_rows_wait_for_room_at_the_end_of_a_bounded_run(nats_url: str, small_disk: Path,
                                                                tmp_path: Path) -> None:
    """A JetStream consumer reads its 3,000 records at once, then its metrics wait at the close for room:
    every stage and latency row is written once it comes."""
    import nats

    n = 3000

    async def publish() -> None:
        nc = await nats.connect(nats_url)
        js = nc.jetstream()
        await js.add_stream(name="LAT", subjects=["lat"])
        for i in range(n):
            await js.publish("lat", b"%d" % i, headers={"Wirepipe-Sent-At": str(time.time_ns())})
        await nc.close()

    asyncio.run(publish())
    filler = fill(small_disk)
    folder = small_disk / "lat.parquet"
    out = tmp_path / "lat.jsonl"
    config = tmp_path / "lat.yaml"
    config.write_text(json.dumps({
        "name": "lat", "source": {"type": "jetstream", "url": nats_url, "stream": "LAT", "durable": "lat", "count": n},
        "sink": {"type": "jsonl", "path": str(out)}, "metrics": {"path": str(folder)},
    }))
    log = tmp_path / "lat.log"
    proc = start(["run", str(config), "--no-status"], log)
    code, text = free_room(filler, proc, log, lambda: out.exists() and len(out.read_bytes().splitlines()) == n
                           and "wait for room" in log.read_text(), "the run did not end its records and wait for room",
                           hold=1)
    assert code == 0, text[-3000:]
    assert f"lat: {n} records out of {n}" in text
    from wirepipe.metrics.run_metadata import latency_path

    latency = metrics_rows(latency_path(folder))
    assert sorted(r["stream_seq"] for r in latency) == list(range(1, n + 1))  # type: ignore[type-var]
    stages = metrics_rows(folder)
    assert sum(r["records"] for r in stages if r["step"] == 0) == n  # type: ignore[misc]
    assert len(stages) == 2 * len({r["batch"] for r in stages})
    delayed, errors = delay_figures(text, folder)
    print(f"jetstream: {n} records, {len(stages)} stage rows, {len(latency)} latency rows; {delayed} rows delayed, "
          f"{errors} failed writes")
    assert delayed == len(stages) + n, "every row was held while the disk refused them"
    assert errors == retries_reported(text)


@pytest.mark.timeout(90)
def test_metrics_a_stop_gives_up_on_are_counted_in_the_error(small_disk: Path, tmp_path: Path) -> None:
    """The disk stays full; SIGTERM after the run's records are written: the drain deadline passes, the process
    exits 1 and its error counts the metrics rows it could not write, exactly; nothing half-written is left."""
    fill(small_disk)
    folder = small_disk / "stuck.parquet"
    out = tmp_path / "out.jsonl"
    config = tmp_path / "stuck.yaml"
    config.write_text(json.dumps({
        "name": "stuck",
        "source": {"type": "generate", "dataset": "point", "count": 4000, "rate": 2000, "batch_size": 500},
        "operators": [{"serialize": {"format": "msgpack"}}],
        "sink": {"type": "jsonl", "path": str(out)},
        "metrics": {"path": str(folder), "flush_interval": "0.5s"},
        "shutdown_timeout": "2s",
    }))
    log = tmp_path / "stuck.log"
    proc = start(["run", str(config), "--no-status"], log)
    wait_for(lambda: out.exists() and len(out.read_bytes().splitlines()) == 4000 and "wait for room" in log.read_text(),
             30, "the run did not write its records", proc, log)
    code = stop(proc)
    text = log.read_text()
    assert code == 1, text[-3000:]
    rows = 3 * 4000 // 200
    assert "stuck: the drain took longer than shutdown_timeout (2s): " \
           f"{rows} metrics row(s) not written (the disk refused them)" in text, text[-3000:]
    assert f"{folder}: {rows} row(s) not written: the disk still refused them when the run was stopped" in text
    assert "Traceback" not in text
    assert list(folder.iterdir()) == [], "no part, no temporary"


def test_a_metrics_part_waits_for_room_and_is_written_once(small_disk: Path) -> None:
    """``PartWriter``: the closing thread hands a full disk to a writer thread; the parts are written in order,
    each row once, when the room comes."""
    import pyarrow as pa

    from wirepipe.storage.parts import PartWriter, list_parts

    filler = fill(small_disk)
    folder = small_disk / "parts.parquet"
    schema = pa.schema([("i", pa.int64())])
    w = PartWriter(folder, "run", schema, compact_parts=0)
    w.finish(pa.table({"i": list(range(1000))}, schema=schema))  # never waits: a full disk is handed over
    assert not w.join(0.5) and w.errors >= 1 and w.rows_held == 1000 and w.failing == "No space left on device"
    assert list_parts(folder) == []
    filler.unlink()
    assert w.join(10)
    assert w.error is None and (w.rows_delayed, w.rows_unwritten, w.failing) == (1000, 0, None)
    (part,) = list_parts(folder)
    import pyarrow.parquet as pq

    assert pq.read_table(part)["i"].to_pylist() == list(range(1000))
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]
