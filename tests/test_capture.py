"""The capture sink and source: columns as received, rotation, complete-files-only, capture order."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from wirepipe.connectors.capture_format import (
    capture_files,
    capture_schema,
    capture_table,
    plan_row_groups,
)
from wirepipe.connectors.capture_sink import CaptureSink, CaptureSinkConfig, CaptureWriter
from wirepipe.connectors.capture_source import CaptureSource
from wirepipe.core.batch import Batch
from wirepipe.core.errors import ConfigError, WirepipeError
from wirepipe.pipelines.config import validate_config
from wirepipe.storage.files import TEMP_SUFFIX
from wirepipe.wire import Header


def payload_batch(start: int, n: int, *, subject: str = "blocks.a", stream: bool = False) -> Batch:
    """Records as a NATS source yields them: bytes, per-record headers, timing meta."""
    values = [f"payload-{i}".encode() * (1 + i % 3) for i in range(start, start + n)]
    headers = [{"Content-Type": "application/octet-stream", Header.SENT_AT: str(1_000 + i)} for i in range(start, start + n)]
    meta = {"seq": list(range(start, start + n)), "sent_ns": [1_000 + i for i in range(start, start + n)],
            "received_ns": [2_000 + i for i in range(start, start + n)]}
    if stream:
        meta["stream_seq"] = [100 + i for i in range(start, start + n)]
    return Batch(values, subjects=[f"{subject}.{i % 2}" for i in range(start, start + n)], headers=headers, meta=meta)


def read_rows(folder: Path) -> list[dict]:
    rows = []
    for f in capture_files(folder):
        rows += pq.read_table(f).to_pylist()
    return rows


async def write_all(sink: CaptureSink, batches: list[Batch]) -> None:
    await sink.open()
    try:
        for b in batches:
            await sink.write(b)
    finally:
        await sink.close()


def test_columns_hold_what_was_received(tmp_path: Path) -> None:
    sink = CaptureSink(tmp_path, row_group_rows=100, metadata={"env": "test"})
    asyncio.run(write_all(sink, [payload_batch(0, 30, stream=True), payload_batch(30, 20, stream=True)]))
    rows = read_rows(tmp_path)
    assert [r["seq"] for r in rows] == list(range(50))
    assert rows[7]["payload"] == b"payload-7" * 2
    assert rows[7]["subject"] == "blocks.a.1"
    assert dict(rows[7]["headers"]) == {"Content-Type": "application/octet-stream", Header.SENT_AT: "1007"}
    assert (rows[7]["sent_ns"], rows[7]["received_ns"], rows[7]["stream_seq"]) == (1007, 2007, 107)
    schema = pq.read_schema(capture_files(tmp_path)[0])
    assert schema.names == capture_schema().names
    info = json.loads(schema.metadata[b"wirepipe.capture"])
    assert (info["format"], info["metadata"]) == (1, {"env": "test"})


def test_sent_ns_comes_from_the_header_when_the_source_did_not_stamp_it(tmp_path: Path) -> None:
    batch = Batch([b"a", b"b", b"c"], subjects="s", headers=[{Header.SENT_AT: "42"}, {}, {Header.SENT_AT: "x"}])
    before = time.time_ns()
    table = capture_table(batch, 0, capture_schema())
    assert table.column("sent_ns").to_pylist() == [42, None, None]
    assert all(before <= t <= time.time_ns() for t in table.column("received_ns").to_pylist())
    assert table.column("stream_seq").null_count == 3


def test_decoded_values_are_refused_with_advice(tmp_path: Path) -> None:
    with pytest.raises(WirepipeError, match="before any deserialize"):
        capture_table(Batch([{"x": 1}]), 0, capture_schema())


def test_row_groups_and_size_rotation(tmp_path: Path) -> None:
    writer = CaptureWriter(tmp_path, row_group_rows=64, max_file_size=6_000, fsync=False)
    schema = writer.schema()
    seq = 0
    for n in (50, 70, 10, 200, 33):
        writer.append(capture_table(payload_batch(seq, n), seq, schema))
        seq += n
    writer.close()
    files = capture_files(tmp_path)
    assert len(files) == len(writer.files) > 1, "small max_file_size rotates"
    assert files == writer.files, "name order is capture order"
    assert not list(tmp_path.glob(f".*{TEMP_SUFFIX}"))
    assert [r["seq"] for r in read_rows(tmp_path)] == list(range(seq))
    for f in files:
        meta = pq.ParquetFile(f).metadata
        sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        assert all(s <= 64 for s in sizes)
        assert all(s == 64 for s in sizes[:-1]), f"only a file's last row group is short: {sizes}"
    plan = plan_row_groups(tmp_path)
    assert [g.position for g in plan] == [sum(g.rows for g in plan[:i]) for i in range(len(plan))]


def test_row_groups_are_capped_by_bytes(tmp_path: Path) -> None:
    writer = CaptureWriter(tmp_path, row_group_rows=10_000, row_group_size=2_000, fsync=False)
    writer.append(capture_table(payload_batch(0, 500), 0, writer.schema()))
    writer.close()
    meta = pq.ParquetFile(writer.files[0]).metadata
    assert meta.num_row_groups > 5
    assert sum(meta.row_group(i).num_rows for i in range(meta.num_row_groups)) == 500


def test_a_file_is_hidden_until_complete(tmp_path: Path) -> None:
    clock = [0.0]
    writer = CaptureWriter(tmp_path, row_group_rows=10, max_file_age=60, fsync=False, clock=lambda: clock[0])
    writer.append(capture_table(payload_batch(0, 25), 0, writer.schema()))  # two row groups on disk
    temps = list(tmp_path.glob(f".*{TEMP_SUFFIX}"))
    assert len(temps) == 1
    with pytest.raises(WirepipeError, match="no capture files"):
        capture_files(tmp_path)
    with pytest.raises(WirepipeError, match="still being written"):
        capture_files(temps[0])
    clock[0] = 61.0
    assert writer.due()
    writer.append(capture_table(payload_batch(25, 5), 25, writer.schema()))  # age reached: the file completes
    assert not list(tmp_path.glob(f".*{TEMP_SUFFIX}"))
    assert [r["seq"] for r in read_rows(tmp_path)] == list(range(30))


def test_age_rotation_happens_without_new_records(tmp_path: Path) -> None:
    async def scenario() -> list[Path]:
        sink = CaptureSink(tmp_path, max_file_age=0.1, fsync=False)
        await sink.open()
        await sink.write(payload_batch(0, 10))
        deadline = time.monotonic() + 20
        while not sink.files and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        files = list(sink.files)
        await sink.close()
        return files

    files = asyncio.run(scenario())
    assert len(files) == 1
    assert pq.read_table(files[0]).num_rows == 10


def test_flush_completes_the_file_so_acknowledged_records_are_durable(tmp_path: Path) -> None:
    async def scenario() -> None:
        sink = CaptureSink(tmp_path, fsync=True)
        await sink.open()
        await sink.write(payload_batch(0, 10))
        await sink.flush()
        assert [r["seq"] for r in read_rows(tmp_path)] == list(range(10))
        await sink.flush()  # nothing new: no empty file
        await sink.write(payload_batch(10, 5))
        await sink.close()

    asyncio.run(scenario())
    assert [len(pq.read_table(f)) for f in capture_files(tmp_path)] == [10, 5]


def test_stale_temp_files_are_reported_not_read(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / f".capture-old-00001.parquet{TEMP_SUFFIX}").write_bytes(b"PAR1 half")
    sink = CaptureSink(tmp_path, fsync=False)
    with caplog.at_level("WARNING"):
        asyncio.run(write_all(sink, [payload_batch(0, 3)]))
    assert "did not stop cleanly" in caplog.text
    assert len(capture_files(tmp_path)) == 1


def test_source_yields_batches_like_a_nats_source(tmp_path: Path) -> None:
    writer = CaptureWriter(tmp_path, row_group_rows=16, fsync=False)
    writer.append(capture_table(payload_batch(0, 40, stream=True), 0, writer.schema()))
    writer.close()

    async def read() -> list[Batch]:
        return [b async for b in CaptureSource(str(tmp_path), batch_size=10).batches()]

    batches = asyncio.run(read())
    first = batches[0]
    assert first.values[3] == b"payload-3"
    # Wirepipe-Sent-At moves to meta; the other headers are the same for all: one shared dict.
    assert first.headers == {"Content-Type": "application/octet-stream"}
    assert first.meta["sent_ns"][3] == 1003 and first.meta["received_ns"][3] == 2003
    assert first.meta["stream_seq"][3] == 103
    assert first.subjects[:2] == ["blocks.a.0", "blocks.a.1"]
    assert [s for b in batches for s in b.meta["seq"]] == list(range(40))


def test_source_keeps_per_record_headers_when_they_differ(tmp_path: Path) -> None:
    batch = Batch([b"a", b"b", b"c", b"d"], subjects="s",
                  headers=[{"Content-Encoding": "zstd", Header.SENT_AT: "1"}, None, {"Content-Encoding": "gzip"}, {}])
    writer = CaptureWriter(tmp_path, fsync=False)
    writer.append(capture_table(batch, 0, writer.schema()))
    writer.close()

    async def read() -> list[Batch]:
        return [b async for b in CaptureSource(str(tmp_path)).batches()]

    (got,) = asyncio.run(read())
    assert got.headers == [{"Content-Encoding": "zstd"}, None, {"Content-Encoding": "gzip"}, {}]
    assert got.subjects == "s"


def test_capture_order_follows_names_and_folders(tmp_path: Path) -> None:
    for part, start in (("part001", 10), ("part000", 0)):
        writer = CaptureWriter(tmp_path / part, fsync=False)
        writer.append(capture_table(payload_batch(start, 10), start, writer.schema()))
        writer.close()
    (tmp_path / "notes.txt").write_text("not a capture")
    seqs = [r["seq"] for r in read_rows(tmp_path)]
    assert seqs == list(range(20))
    with pytest.raises(WirepipeError, match="no such file"):
        capture_files(tmp_path / "missing")


def test_sink_config_is_validated() -> None:
    base = {"name": "c", "source": {"type": "generate", "count": 1}}
    cfg = validate_config({**base, "sink": {"type": "capture", "dir": "d", "max_file_size": "64MiB",
                                            "max_file_age": "30s"}})
    assert (cfg.sink.max_file_size, cfg.sink.max_file_age) == (64 << 20, 30.0)
    with pytest.raises(ConfigError, match=r"unknown field 'folder': allowed .*dir"):
        validate_config({**base, "sink": {"type": "capture", "folder": "d"}})
    with pytest.raises(ConfigError, match="plain file name prefix"):
        validate_config({**base, "sink": {"type": "capture", "dir": "d", "prefix": "a/b"}})


def test_capture_command_config() -> None:
    import datetime as dt

    from wirepipe.pipelines.capture_worker import capture_config, parse_start_time

    core = capture_config(out="d", subject="blocks.>", url="nats://h:4222", max_file_age=30)
    assert core["source"] == {"type": "nats", "subject": "blocks.>", "url": "nats://h:4222"}
    assert core["flush_interval"] == 30 and core["sink"]["max_file_age"] == 30
    assert CaptureSinkConfig.model_validate(core["sink"]).metadata == {"subject": "blocks.>"}
    durable = capture_config(out="d", stream="BLOCKS", durable="cap", from_seq=10, url="nats://h:4222",
                             max_file_age=60, row_group_rows=20000)
    src = durable["source"]
    assert (src["type"], src["durable"], src["deliver"], src["start_seq"]) == ("jetstream", "cap", "by_start_sequence", 10)
    assert src["ack_wait"] > 60 and src["max_ack_pending"] >= 40000
    assert capture_config(out="d", stream="BLOCKS", url="u")["source"]["ordered"] is True
    now = dt.datetime(2026, 1, 31, 12, 0, tzinfo=dt.timezone.utc)
    assert parse_start_time("10m", now) == "2026-01-31T11:50:00+00:00"
    assert parse_start_time("2026-01-31T10:00:00Z") == "2026-01-31T10:00:00+00:00"
    assert parse_start_time("2026-01-31T10:00:00") == "2026-01-31T10:00:00+00:00"
    for kwargs, message in (({"subject": "s"}, "give --url"), ({"url": "u"}, "give --subject"),
                            ({"stream": "S", "from_seq": 1, "from_time": "1m", "url": "u"}, "one start position"),
                            ({"stream": "S", "queue": "q", "url": "u"}, "--queue is for core NATS")):
        with pytest.raises(ConfigError, match=message):
            capture_config(out="d", **kwargs)
    with pytest.raises(ConfigError, match="ISO 8601"):
        parse_start_time("yesterday")


def test_written_records_are_not_held_until_the_commit(tmp_path: Path) -> None:
    """A capture completes a file per commit (flush_interval): until then the run loop keeps only ack handles."""
    import gc
    import weakref
    from collections.abc import AsyncIterator

    from wirepipe.connectors.connector import Source
    from wirepipe.pipelines.pipeline import Pipeline

    class Values(list):  # a list that can be weakly referenced
        pass

    refs: list[weakref.ref] = []

    class Payloads(Source):
        type = "payloads"

        async def batches(self) -> AsyncIterator[Batch]:
            for k in range(20):
                values = Values(payload_batch(k * 50, 50).values)
                refs.append(weakref.ref(values))
                yield Batch(values, meta={"seq": list(range(k * 50, k * 50 + 50))})
                await asyncio.sleep(0)
                if k > 5:
                    gc.collect()
                    assert refs[k - 5]() is None, "a written batch's records are released before the commit"

    sink = CaptureSink(tmp_path, max_file_age=3600, fsync=False)
    stats = Pipeline(Payloads(), [], sink, flush_interval=3600, queue_size=1).run()
    assert stats.records_out == stats.acked == 1000
    assert [r["seq"] for r in read_rows(tmp_path)] == list(range(1000))


def test_decoded_values_into_a_capture_stop_the_run_instead_of_being_retried(tmp_path: Path) -> None:
    """Not a sink failure (that would be retried for ever) nor a record failure: the pipeline is wrong. Refused
    when the pipeline is built where the source says it gives records; at the first write where it cannot tell."""
    from wirepipe.connectors.generate import GenerateSource
    from wirepipe.pipelines.pipeline import Pipeline
    from wirepipe.testing import TestingSource

    with pytest.raises(ConfigError, match=r"capture sink writes payloads .*source \(generate\) gives decoded records"):
        Pipeline(GenerateSource("point", count=10), [], CaptureSink(tmp_path, fsync=False))
    with pytest.raises(ConfigError, match="put it before any deserialize"):
        Pipeline(TestingSource([{"x": 1}] * 10), [], CaptureSink(tmp_path, fsync=False)).run()
