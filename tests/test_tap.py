"""``wirepipe tap`` against pipelines publishing to a real nats-server: decoding from headers alone, the
filter language, the table's loss per publisher, and a stream tap that takes nothing from a durable."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.cli import invoke, start_wirepipe, wirepipe
from tests.nats_fixtures import consumer_info, expected
from wirepipe import Pipeline, generate_source, nats_sink
from wirepipe.codecs.compression import CODECS
from wirepipe.codecs.formats import FORMATS
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.operators.compress import Compress
from wirepipe.operators.serialize import Serialize

POINTS = 20


def start_tap(url: str, *args: str) -> subprocess.Popen[str]:
    """``wirepipe tap ARGS`` in the background, returned once it listens (its announce line on stderr); 200 columns
    wide, so its table keeps every column."""
    proc = start_wirepipe("tap", *args, "--url", url, columns=200)
    assert proc.stderr is not None
    for _ in range(50):
        line = proc.stderr.readline()
        if line.startswith("tap: watching") or not line:
            break
    assert line.startswith("tap: watching"), line
    return proc


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[str, str]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    return out, err


def publish(url: str, subject: str, fmt: str, codec: str, n: int = POINTS) -> None:
    """A publishing pipeline: points in one format and codec on core NATS (the wire contract's headers)."""
    schema = "point" if FORMATS[fmt].needs_schema else None
    Pipeline(generate_source("point", count=n, batch_size=7), [Serialize(fmt, schema=schema), Compress(codec)],
             nats_sink(subject, url=url), name=f"pub-{fmt}-{codec}").run()


@pytest.mark.slow
def test_tap_decodes_every_format_and_codec_of_the_wire_contract_from_headers_alone(nats_server: EmbeddedServer
                                                                                     ) -> None:
    url = nats_server.url
    runs = [(fmt, "zstd") for fmt in FORMATS] + [("msgpack", codec) for codec in CODECS if codec != "zstd"]
    total = len(runs) * POINTS
    tap = start_tap(url, "tap.>", "--envelope", "--schema", "point", "--allow-pickle", "--limit", str(total))
    for fmt, codec in runs:
        publish(url, f"tap.{fmt}.{codec}", fmt, codec)
    out, err = finish(tap)
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == total, err
    by_subject: dict[str, list[Any]] = {}
    for line in lines:
        by_subject.setdefault(line["subject"], []).append(line)
    points = expected("point", POINTS)
    for fmt, codec in runs:
        got = by_subject[f"tap.{fmt}.{codec}"]
        assert [g["value"] for g in got] == points, (fmt, codec)
        assert got[0]["headers"]["Content-Type"] == FORMATS[fmt].content_type
        assert got[0]["headers"]["Content-Encoding"] == CODECS[codec].content_encoding
    assert "not decoded" not in err


def test_formats_without_a_schema_on_the_wire_print_raw_with_the_reason(nats_server: EmbeddedServer) -> None:
    url = nats_server.url
    tap = start_tap(url, "raw.>", "--raw", "--limit", "4")
    publish(url, "raw.protobuf", "protobuf", "none", n=2)
    publish(url, "raw.json", "json", "none", n=2)
    out, _ = finish(tap)
    lines = [json.loads(line) for line in out.splitlines()]
    raw = [line for line in lines if "error" in line]
    assert [line["subject"] for line in raw] == ["raw.protobuf", "raw.protobuf"]
    assert "application/x-protobuf (protobuf) carries no schema on the wire: give --schema" in raw[0]["error"]
    from wirepipe.core.batch import Batch

    first = Serialize("protobuf", schema="point")(Batch(expected("point", 1))).values[0]
    assert raw[0]["hex"] == first.hex() and raw[0]["size"] == len(first)
    assert [line for line in lines if "error" not in line] == expected("point", 2)


@pytest.mark.slow
def test_without_raw_undecodable_messages_are_named_on_stderr_and_counted(nats_server: EmbeddedServer) -> None:
    url = nats_server.url
    tap = start_tap(url, "mixed.>", "--limit", "3")

    async def send() -> None:
        import nats

        nc = await nats.connect(url)
        await nc.publish("mixed.a", b"\x00\x01", headers={"Content-Type": "application/msgpack",
                                                          "Content-Encoding": "zstd"})
        await nc.publish("mixed.b", b"hello", headers={"Content-Type": "text/plain"})
        await nc.flush()
        await nc.close()

    asyncio.run(send())
    publish(url, "mixed.c", "json", "gzip", n=3)
    out, err = finish(tap)
    assert [json.loads(line) for line in out.splitlines()] == expected("point", 3)
    assert "tap: not decoded (decompress: not a zstd frame" in err and "e.g. on mixed.a" in err
    assert "unknown Content-Type 'text/plain'" in err
    assert "tap: 5 messages, 3 shown, 2 not decoded" in err


def test_filter_sample_and_limit(nats_server: EmbeddedServer) -> None:
    url = nats_server.url
    points = expected("point", 200)
    wanted = [p for p in points if p["x"] >= 64 and p["y"] != 0][::3][:5]
    tap = start_tap(url, "f.>", "--filter", "x >= 64", "--filter", "y != 0", "--sample", "3", "--limit", "5")
    publish(url, "f.points", "msgpack", "lz4", n=200)
    out, err = finish(tap)
    assert [json.loads(line) for line in out.splitlines()] == wanted
    assert "5 shown" in err


def test_a_bad_filter_is_a_usage_error(nats_server: EmbeddedServer) -> None:
    result = invoke("tap", "x", "--url", nats_server.url, "--filter", "x =< 3")  # refused before it connects
    assert result.returncode == 2 and isinstance(result.exception, SystemExit)  # an exit, not a crash
    assert "error: --filter 'x =< 3': expected `field OP value`" in result.stderr
    result = invoke("tap", "--url", nats_server.url)
    assert result.returncode == 2 and "give a SUBJECT (core NATS) or --stream NAME" in result.stderr


@pytest.mark.slow
def test_the_table_counts_loss_per_publisher_from_seq_gaps(nats_server: EmbeddedServer) -> None:
    """Two publishers' stamps: A skips 4 and 5 and 9 (3 missing), B sends 1..5 (none missing)."""
    url = nats_server.url
    a = [1, 2, 3, 6, 7, 8, 10]
    b = [1, 2, 3, 4, 5]
    tap = start_tap(url, "loss.>", "--table", "--limit", str(len(a) + len(b)))

    async def send() -> None:
        import msgpack
        import nats

        nc = await nats.connect(url)
        for pid, seqs in (("aaaaaaaaaaaa", a), ("bbbbbbbbbbbb", b)):
            for n in seqs:
                await nc.publish(f"loss.{pid[0]}", msgpack.packb({"n": n}), headers={
                    "Content-Type": "application/msgpack", "Wirepipe-Publisher": pid, "Wirepipe-Seq": str(n),
                    "Wirepipe-Sent-At": str(1)})
        await nc.flush()
        await nc.close()

    asyncio.run(send())
    out, _ = finish(tap)
    rows = _table_rows(out)
    assert rows["aaaaaaaaaaaa"]["msgs"] == "7" and rows["aaaaaaaaaaaa"]["missing"] == "3"
    assert rows["bbbbbbbbbbbb"]["msgs"] == "5" and rows["bbbbbbbbbbbb"]["missing"] == "0"
    assert rows["aaaaaaaaaaaa"]["subjects"] == "loss.a"
    assert rows["bbbbbbbbbbbb"]["B/rec wire"] == "4.0"  # {"n": 1} is 4 bytes of msgpack


async def _durable(url: str, stream: str, durable: str) -> dict[str, int]:
    info = await consumer_info(url, stream, durable)
    return {"delivered": info.delivered.consumer_seq, "ack_floor": info.ack_floor.consumer_seq,
            "pending": info.num_pending, "ack_pending": info.num_ack_pending, "redelivered": info.num_redelivered}


async def _consumers_left(url: str, stream: str, expect: list[str]) -> list[str]:
    """The stream's consumers, once the server has removed an ephemeral one whose client is gone (it does
    so after the consumer's inactivity threshold: a few seconds; 30 s at most here)."""
    import nats

    nc = await nats.connect(url)
    try:
        for _ in range(60):
            names = sorted(c.name for c in await nc.jetstream().consumers_info(stream))
            if names == expect:
                break
            await asyncio.sleep(0.5)
        return names
    finally:
        await nc.close()


def _worker_config(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "worker.yaml"
    path.write_text(f"""name: points-worker
source: {{type: jetstream, url: "{url}", stream: TAPPED, durable: worker, batch_size: 100}}
operators:
  - decompress: {{codec: auto}}
  - deserialize: {{format: auto}}
sink: {{type: jsonl, path: "{tmp_path / 'worker.jsonl'}", append: true}}
flush_interval: 0.2s
""")
    return path


def _publish_to_stream(url: str, n: int, start: int) -> None:
    from wirepipe import jetstream_sink
    from wirepipe.testing import TestingSource

    records = [{"i": i} for i in range(start, start + n)]
    Pipeline(TestingSource(records, batch_size=50), [Serialize("msgpack"), Compress("zstd")],
             jetstream_sink("tapped.points", url=url, stream={"name": "TAPPED", "subjects": ["tapped.>"]}),
             name=f"fill-{start}").run()


@pytest.mark.slow
def test_a_stream_tap_takes_nothing_from_a_durable(nats_server: EmbeddedServer, tmp_path: Path) -> None:
    url = nats_server.url
    _publish_to_stream(url, 300, 0)
    worker = _worker_config(tmp_path, url)
    # The worker reads all 300 and stops: its durable has delivered and acknowledged exactly those.
    assert wirepipe("run", str(worker), "--count", "300", "--no-status").returncode == 0
    before = asyncio.run(_durable(url, "TAPPED", "worker"))
    assert before == {"delivered": 300, "ack_floor": 300, "pending": 0, "ack_pending": 0, "redelivered": 0}

    # A tap from the start of the stream while nothing reads the durable: it sees all 300 and 200 more,
    # and the durable has not moved (the 200 new ones wait for the worker).
    tap = start_tap(url, "--stream", "TAPPED", "--deliver", "all", "--limit", "500")
    _publish_to_stream(url, 200, 300)
    out, _ = finish(tap)
    assert sorted(json.loads(line)["i"] for line in out.splitlines()) == list(range(500))
    after = asyncio.run(_durable(url, "TAPPED", "worker"))
    assert after == {**before, "pending": 200}
    assert asyncio.run(_consumers_left(url, "TAPPED", ["worker"])) == ["worker"]  # the tap's consumer went with it

    # The tap and the worker together: the worker gets every record, each once; the tap sees them too.
    tap = start_tap(url, "--stream", "TAPPED", "--limit", "100")
    proc = start_wirepipe("run", str(worker), "--count", "300", "--no-status")
    _publish_to_stream(url, 100, 500)
    out, _ = finish(tap)
    assert sorted(json.loads(line)["i"] for line in out.splitlines()) == list(range(500, 600))
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    written = [json.loads(line)["i"] for line in (tmp_path / "worker.jsonl").read_text().splitlines()]
    assert sorted(written) == list(range(600))  # 300, then the 200 the tap saw first, then 100: once each
    final = asyncio.run(_durable(url, "TAPPED", "worker"))
    assert final == {"delivered": 600, "ack_floor": 600, "pending": 0, "ack_pending": 0, "redelivered": 0}


def test_a_work_queue_stream_is_refused_with_the_way_to_see_it(nats_server: EmbeddedServer) -> None:
    async def make() -> None:
        import nats
        from nats.js import api

        nc = await nats.connect(nats_server.url)
        await nc.jetstream().add_stream(name="WQ", subjects=["wq.>"], retention=api.RetentionPolicy.WORK_QUEUE)
        await nc.close()

    asyncio.run(make())
    result = wirepipe("tap", "--stream", "WQ", "--url", nats_server.url)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "cannot create an ordered consumer on stream WQ" in result.stderr
    assert "read its subjects on core NATS" in result.stderr


@pytest.mark.parametrize("args", [["x", "--deliver", "all"], ["--stream", "S", "--from-seq", "1", "--from-time", "1m"]])
def test_stream_options_need_a_stream_and_one_start(args: list[str]) -> None:
    result = invoke("tap", *args, "--url", "nats://127.0.0.1:1")  # refused before it connects
    assert result.returncode == 2 and isinstance(result.exception, SystemExit)  # an exit, not a crash


def test_a_codec_or_format_whose_library_is_missing_is_not_decoded_with_the_extra_to_install() -> None:
    """In a lean install (brotli and cbor2 absent, simulated in a child process), such messages are refused
    one by one with the reason; the others decode (``decompress: auto`` and ``deserialize: auto`` alike)."""
    import sys

    code = """import sys
sys.modules["brotli"] = None
sys.modules["cbor2"] = None
from wirepipe.core.batch import Batch
from wirepipe.operators.by_headers import HeaderDecoder
decode = HeaderDecoder()
for headers in ({"Content-Type": "application/json", "Content-Encoding": "br"},
                {"Content-Type": "application/cbor"}, {"Content-Type": "application/json"}):
    b = decode(Batch([b'{"x": 1}'], headers=headers))
    print(b.values, [r.stage + ": " + r.error for r in b.rejected])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("[] ") and "decompress: codec brotli needs brotli, which is not installed" in lines[0]
    assert "'.[brotli]'" in lines[0]
    assert lines[1].startswith("[] ") and "deserialize: format cbor needs cbor2, which is not installed" in lines[1]
    assert "'.[cbor]'" in lines[1]
    assert lines[2] == "[{'x': 1}] []"


@pytest.mark.slow
def test_a_tap_that_stops_at_its_limit_reports_no_loss_it_caused(nats_server: EmbeddedServer) -> None:
    """`tap --limit 5` while 2,000 messages arrive: the ones it received past its limit are nobody's loss (each
    subscriber has its own copy): no loss warning, exit 0."""
    tap = start_tap(nats_server.url, "lim.>", "--limit", "5", "--verbose")
    publish(nats_server.url, "lim.points", "msgpack", "none", n=2000)
    out, err = finish(tap)
    assert len(out.splitlines()) == 5 and ", 5 shown" in err, err
    assert "lost" not in err and "not processed at stop" not in err and "discarded" not in err, err


# --- what the tap tracks and prints is bounded ---------------------------------------------------------------


def _table_rows(text: str) -> dict[str, dict[str, str]]:
    """The rows of a tap table as printed (``core/table.py``'s grid: cells two spaces apart, a rule under the
    headers), by publisher, each cell by its header."""
    from wirepipe.tap.live import COLUMNS

    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if line and set(line) == {"-"})
    cells = [re.split(r" {2,}", line.strip()) for line in lines[rule + 1:]]
    return {row[0]: dict(zip(COLUMNS, row, strict=True)) for row in cells if len(row) == len(COLUMNS)}


def test_forged_publisher_ids_cost_a_bounded_table() -> None:
    """100,000 ids, one message each: MAX_PUBLISHERS rows, the rest in one (others) row; SHOWN rows drawn."""
    from wirepipe.tap.live import MAX_PUBLISHERS, OTHERS, SHOWN, TapStats

    stats = TapStats(clock=lambda: 1.0)
    n = 100_000
    for start in range(0, n, 10_000):
        headers = [{"Wirepipe-Publisher": f"{i:012x}", "Wirepipe-Seq": "1"} for i in range(start, start + 10_000)]
        stats.observe([b"x"] * 10_000, ["s"] * 10_000, headers, [None] * 10_000, [None] * 10_000, {}, set())
    assert len(stats.rows) == MAX_PUBLISHERS + 1 and stats.rows[OTHERS].messages == n - MAX_PUBLISHERS
    assert len(stats.gaps.publishers) == MAX_PUBLISHERS  # losses counted for the tracked ones only
    text = stats.text(200)
    assert len(_table_rows(text)) == SHOWN
    assert f"... and {MAX_PUBLISHERS + 1 - SHOWN:,} more publisher row(s)" in text
    assert f"{OTHERS}: publishers past the first {MAX_PUBLISHERS:,} ids" in text


def test_the_table_says_why_a_jetstream_publishers_loss_is_not_shown() -> None:
    from wirepipe.tap.live import TapStats

    stats = TapStats(clock=lambda: 1.0)
    stats.observe([b"x", b"y"], ["s", "s"], [{"Content-Type": "application/json"}, None], [None] * 2, [None] * 2,
                  {}, set())
    text = stats.text(200)
    assert _table_rows(text)["-"]["missing"] == "-"
    assert "publisher -: messages without Wirepipe-Publisher/Wirepipe-Seq (a JetStream sink" in text.replace("\n", " ")


def test_a_narrow_terminal_keeps_the_publisher_its_rate_and_its_losses() -> None:
    """At 60 columns the table leaves out its least telling columns and says which; the publisher, messages,
    rate and missing stay, one publisher per line."""
    from wirepipe.tap.live import TapStats

    stats = TapStats(clock=iter([1.0, 3.0]).__next__)
    for seq in ("1", "3"):
        stats.observe([b"xyz"], ["orders.eu"], [{"Wirepipe-Publisher": "aaaaaaaaaaaa", "Wirepipe-Seq": seq}],
                      [None], [None], {0: 9}, set())
    text = stats.text(60)
    lines = text.splitlines()
    assert lines[0] == "wirepipe tap" and max(map(len, lines)) <= 60
    assert "(not shown at 60 columns: subjects, B/rec raw, raw/wire, undecoded; widen the terminal to see them)" \
        in " ".join(lines)
    row = lines[lines.index("aaaaaaaaaaaa") + 1].split()  # the name on its line, its cells beneath
    assert row == ["?", "identity", "2", "1", "3.0", "-", "-", "1"]  # msgs, msg/s over 2 s, B/rec wire; missing: seq 2


def test_raw_and_long_records_print_bounded_lines() -> None:
    """An 8 MiB payload that does not decode prints MAX_LINE // 2 bytes in hex and how many were cut; a decoded
    record longer than MAX_LINE prints its head and the characters cut: one JSON line each."""
    import io

    from wirepipe.core.batch import Batch
    from wirepipe.tap.sink import MAX_LINE, TapSink

    out = io.StringIO()
    sink = TapSink(out, raw=True, err=io.StringIO())
    payload = bytes(range(256)) * (8 * 4096)
    record = json.dumps({"text": "a" * (2 * MAX_LINE)}).encode()
    asyncio.run(sink.write(Batch([payload, record], subjects="big",
                                 headers=[{"Content-Type": "text/plain"}, {"Content-Type": "application/json"}])))
    raw, long = (json.loads(line) for line in out.getvalue().splitlines())
    assert raw["size"] == len(payload) and raw["cut"] == len(payload) - MAX_LINE // 2
    assert bytes.fromhex(raw["hex"]) == payload[: MAX_LINE // 2]
    text = json.dumps({"text": "a" * (2 * MAX_LINE)}, separators=(",", ":"))  # as orjson writes it
    head = text[: MAX_LINE // 2]  # its quotes escaped again would pass MAX_LINE: half of it
    assert long == {"subject": "big", "cut": len(text) - len(head), "head": head}
    assert max(map(len, out.getvalue().splitlines())) < MAX_LINE + 1024  # the reason and the fields besides


def _wait_idle(pid: int, quiet: float = 0.5, at_most: float = 60) -> None:
    """Until the process's CPU time stops growing for ``quiet`` seconds: it has handled what it was sent."""
    import time

    def cpu() -> int:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime

    last, since, end = cpu(), time.monotonic(), time.monotonic() + at_most
    while time.monotonic() < end:
        time.sleep(0.1)
        now = cpu()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return



@pytest.mark.slow
def test_a_table_of_60000_forged_publishers_stops_at_sigint(nats_server: EmbeddedServer) -> None:
    """One message from each of 60,000 publisher ids (fewer than the client's pending_msgs_limit, so none is
    dropped): the tap counts them all, stops at SIGINT (the communicate timeout is only a guard) and prints a
    bounded table, a line for the rows not shown."""
    import signal

    from wirepipe.tap.live import MAX_PUBLISHERS, SHOWN

    url = nats_server.url
    tap = start_tap(url, "forged.>", "--table")
    n = 60_000

    async def send() -> None:
        import nats

        nc = await nats.connect(url)
        for i in range(n):
            await nc.publish("forged.x", b"1", headers={"Content-Type": "application/json",
                                                        "Wirepipe-Publisher": f"{i:012x}", "Wirepipe-Seq": "7"})
        await nc.flush()
        await nc.close()

    asyncio.run(send())
    _wait_idle(tap.pid)
    tap.send_signal(signal.SIGINT)
    out, err = tap.communicate(timeout=30)
    assert "Traceback" not in err, err
    assert tap.returncode == 0, err
    assert f"tap: {n:,} messages" in err, err
    assert len(_table_rows(out)) == SHOWN, out
    hidden = MAX_PUBLISHERS + 1 - SHOWN  # the busiest row is (others): the rows left out have one message each
    assert f"... and {hidden:,} more publisher row(s), {hidden:,} messages (the {SHOWN} busiest are shown)" in out
    assert f"(others): publishers past the first {MAX_PUBLISHERS:,} ids" in out


def test_the_help_shows_the_filter_language_as_written() -> None:
    from tests.cli import invoke

    done = invoke("tap", "--help", columns=200)
    assert done.returncode == 0 and "in [a, b]" in done.stdout and "\\[" not in done.stdout, done.stdout


def test_the_header_decoder_leaves_the_headers_as_read() -> None:
    """Its decompress hands its bytes to its deserialize, not to a sink: the records keep the headers they came
    with (a relay's decompress takes Content-Encoding away; this one has no reason to, and no copy to pay)."""
    import msgpack
    import zstandard

    from wirepipe.core.batch import Batch
    from wirepipe.operators.by_headers import HeaderDecoder

    headers = [{"Content-Encoding": "zstd", "Content-Type": "application/msgpack", "traceparent": f"00-{i}"}
               for i in range(3)]
    out = HeaderDecoder()(Batch([zstandard.compress(msgpack.packb({"a": i})) for i in range(3)], headers=headers))
    assert out.values == [{"a": 0}, {"a": 1}, {"a": 2}] and out.headers == headers
    assert all(got is given for got, given in zip(out.headers, headers, strict=True))  # not copied
