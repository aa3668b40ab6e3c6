"""Record-derived subjects: a bad subject is one record's problem, never the batch's or the sink's.

Real nats-server, real ``wirepipe run`` processes publishing ``orders.{region}`` from JSONL
records through ``subject: "{subject}"``. One record's region makes a subject no publish can
carry (5,000 characters, a CR/LF, a space, a ``>`` or ``*`` token, an empty token, a subject no
JetStream stream stores): that record is dead-lettered with the reason and every other record
arrives exactly once; the summary counts the rejected record. Every output is read back: what a
subscriber received, the stream, the dead letters and the summary line.
"""

from __future__ import annotations

import asyncio
import json
import re
from base64 import b64decode
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.cli import wirepipe
from wirepipe.connectors.jsonl import JsonlSink
from wirepipe.connectors.nats.core_sink import NatsSink
from wirepipe.connectors.nats.server import EmbeddedServer, ServerOptions
from wirepipe.core.batch import Batch
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.testing import TestingSource
from wirepipe.wire import Header, subject_room

pytestmark = pytest.mark.timeout(180)

N = 2000
BAD = {300: "x" * 5000, 500: "a b", 700: "x\r\ny", 900: "b.>", 1100: "*", 1300: "a..b", 1500: ""}


def records(bad: dict[int, str]) -> list[dict[str, Any]]:
    return [{"i": i, "region": bad.get(i, "eu" if i % 2 else "us")} for i in range(N)]


def write_config(folder: Path, url: str, sink: dict[str, Any], bad: dict[int, str]) -> Path:
    (folder / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records(bad)), encoding="utf-8")
    cfg = {
        "name": "orders",
        "source": {"type": "jsonl", "path": str(folder / "in.jsonl"), "batch_size": 500},
        "operators": [{"subject": "orders.{region}"}, {"serialize": {"format": "json"}}],
        "sink": {"url": url, "subject": "{subject}", **sink},
        "dead_letter": {"type": "jsonl", "path": str(folder / "dead.jsonl")},
    }
    path = folder / "orders.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def summary(stderr: str) -> tuple[int, int, int]:
    """(records out, records in, rejected) from the run summary."""
    m = re.search(r"orders: (\d+) records out of (\d+) in .*?, (\d+) rejected", stderr)
    assert m, stderr[-3000:]
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def dead_letters(folder: Path) -> dict[int, str]:
    """``{i: error}`` of every dead letter written."""
    out = {}
    for line in (folder / "dead.jsonl").read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        record = json.loads(d["value_json"]) if d["value_json"] else json.loads(b64decode(d["payload"]["$base64"]))
        out[record["i"]] = d["error"]
    return out


async def run_while_subscribed(url: str, config: Path) -> tuple[Any, Counter[int], list[str]]:
    """``wirepipe run config`` while a subscriber on ``orders.>`` collects what arrives: (process, how many
    times each ``i`` arrived, the subjects)."""
    import nats

    nc = await nats.connect(url)
    got: Counter[int] = Counter()
    subjects: list[str] = []

    async def on_msg(msg: Any) -> None:
        got[json.loads(msg.data)["i"]] += 1
        subjects.append(msg.subject)

    await nc.subscribe("orders.>", cb=on_msg)
    await nc.flush()
    res = await asyncio.to_thread(wirepipe, "run", str(config), timeout=90)
    await asyncio.sleep(0.5)
    await nc.flush()
    await nc.close()
    return res, got, subjects


def test_core_nats_one_bad_subject_per_record_is_dead_lettered_and_the_rest_arrive_once(
        nats_server: EmbeddedServer, tmp_path: Path) -> None:
    # A subject too long closes the connection (what was buffered after it is lost); a CR/LF or a space is
    # refused by nats-py mid-batch (not a sink outage: the batch must not be held nor the records before it
    # published again); "b.>" and "*" would go out as literal wildcard subjects.
    config = write_config(tmp_path, nats_server.url, {"type": "nats"}, BAD)
    res, got, subjects = asyncio.run(run_while_subscribed(nats_server.url, config))
    assert res.returncode == 0, res.stderr[-3000:]
    good = set(range(N)) - set(BAD)
    assert set(got) == good and max(got.values()) == 1  # every good record, once
    assert not [s for s in subjects if "*" in s or ">" in s]
    dead = dead_letters(tmp_path)
    assert set(dead) == set(BAD)
    assert "5,007 bytes" in dead[300] and "max_control_line 4,096" in dead[300]
    assert "contains a space" in dead[500] and "contains a CR" in dead[700]
    assert "wildcard token '>'" in dead[900] and "wildcard token '*'" in dead[1100]
    assert "empty token" in dead[1300] and "empty token" in dead[1500]
    assert summary(res.stderr) == (N - len(BAD), N, len(BAD))


def test_jetstream_bad_subjects_and_a_subject_no_stream_stores_are_dead_lettered(
        nats_server: EmbeddedServer, tmp_path: Path) -> None:
    # A subject no stream stores is answered "no responders" for ever: the record's problem, not an outage.
    bad = {**BAD, 1700: "nowhere"}
    sink = {"type": "jetstream", "stream": {"name": "ORDERS", "subjects": ["orders.eu", "orders.us", "orders.x.>"]}}
    config = write_config(tmp_path, nats_server.url, sink, bad)
    res = wirepipe("run", str(config), timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    stored = asyncio.run(stream_values(nats_server.url, "ORDERS"))
    good = set(range(N)) - set(bad)
    assert sorted(stored) == sorted(good)  # each good record once
    dead = dead_letters(tmp_path)
    assert set(dead) == set(bad)
    assert "no JetStream stream stores subject 'orders.nowhere'" in dead[1700]
    assert "contains a CR" in dead[700] and "wildcard token '>'" in dead[900]
    assert summary(res.stderr) == (N - len(bad), N, len(bad))


async def stream_values(url: str, stream: str) -> list[int]:
    import nats

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        n = int((await js.stream_info(stream)).state.messages)
        sub = await js.subscribe(">", stream=stream, ordered_consumer=True)
        return [json.loads((await sub.next_msg(timeout=10)).data)["i"] for _ in range(n)]
    finally:
        await nc.close()


async def test_a_record_nats_py_refuses_mid_batch_is_rejected_alone(nats_url: str, tmp_path: Path) -> None:
    """A header key nats-py refuses (from a record's own headers, e.g. through a relay): that record is
    dead-lettered; the records before it are published once, not again with every retry of the batch."""
    import nats

    nc = await nats.connect(nats_url)
    got: list[bytes] = []

    async def on_msg(msg: Any) -> None:
        got.append(msg.data)

    await nc.subscribe("relay", cb=on_msg)
    await nc.flush()
    headers: list[dict[str, str] | None] = [{"trace": str(i)} for i in range(10)]
    headers[5] = {"bad key": "x"}
    source = TestingSource([str(i).encode() for i in range(10)], headers=headers)
    dead = JsonlSink(tmp_path / "dead.jsonl")
    stats = await asyncio.wait_for(Pipeline(source, [], NatsSink("relay", url=nats_url), dead_letter=dead)
                                   .run_async(), 30)
    await nc.flush()
    await asyncio.sleep(0.2)
    await nc.close()
    assert sorted(got) == sorted(str(i).encode() for i in range(10) if i != 5)  # once each
    assert (stats.records_out, stats.rejected, stats.sink_errors) == (9, 1, 0)
    (letter,) = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert letter["payload"] == {"$base64": "NQ=="} and "nats-py refused a header" in letter["error"]


async def test_subject_length_against_the_servers_max_control_line(tmp_path: Path) -> None:
    """A server with ``max_control_line: 1024`` (told to the sink): a subject exactly as long as a publish line
    allows arrives, longer ones are dead-lettered, and the connection stays up for the records after them
    (a 2,000-byte subject sent would close it, losing what was buffered after it)."""
    import nats

    mcl = 1024
    with EmbeddedServer(options=ServerOptions(extra={"max_control_line": mcl}), store_dir=tmp_path / "js") as srv:
        nc = await nats.connect(srv.url)
        sub = await nc.subscribe("long.>")
        await nc.flush()
        room = subject_room(mcl, nc.max_payload)
        fits, over, far = "long." + "f" * (room - 5), "long." + "o" * (room - 4), "long." + "x" * 2000
        subjects = ["long.a", fits, over, far] + [f"long.{i}" for i in range(4, 40)]
        source = TestingSource([str(i).encode() for i in range(40)], subjects=subjects,
                               headers={Header.CONTENT_TYPE: "text/plain"})
        sink = NatsSink("{subject}", url=srv.url, max_control_line=mcl)
        dead = JsonlSink(tmp_path / "dead.jsonl")
        stats = await Pipeline(source, [], sink, dead_letter=dead).run_async()
        arrived = [await sub.next_msg(timeout=5) for _ in range(38)]
        expected = [s for s in subjects if s not in (over, far)]
        assert [m.subject for m in arrived] == expected
        assert [m.data for m in arrived] == [str(i).encode() for i in range(40) if i not in (2, 3)]
        assert (stats.records_out, stats.rejected, sink.conn.stats.disconnects) == (38, 2, 0)
        letters = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
        assert [d["seq"] for d in letters] == [2, 3]
        assert f"{room + 1:,} bytes" in letters[0]["error"] and f"max_control_line {mcl:,}" in letters[0]["error"]
        await nc.close()


@given(st.lists(st.text(alphabet="ab.*> \r\n\t\x00\x7fü", min_size=0, max_size=8), min_size=1, max_size=30),
       st.integers(min_value=1, max_value=12))
@settings(max_examples=400, deadline=None)
def test_the_column_check_refuses_exactly_the_subjects_refused_one_by_one(column: list[str], room: int) -> None:
    """The hot path checks a column as one joined string; it must never pass a subject that the check of
    that subject alone refuses, nor refuse a good one (remembered ones included: the column is checked
    twice, then once more among new subjects)."""
    from wirepipe.wire import SubjectCheck, subject_problem

    check = SubjectCheck(room)
    for col in (column, column, [*column, "x.y"]):
        assert set(check.problems(col)) == {s for s in col if subject_problem(s, room) is not None}
    assert {s for s in column if check.problems(s)} == {s for s in column if subject_problem(s, room) is not None}


async def test_an_outage_mid_batch_never_publishes_what_nats_py_already_took(nats_server: EmbeddedServer) -> None:
    """The server dies while a batch is published: nats-py buffers what it can (``pending_size``) and then
    refuses; the sink waits for the reconnect and goes on from the first record nats-py refused. The
    buffered records go out once, at the reconnect, and are not published again behind them."""
    import nats

    got: list[int] = []

    async def on_msg(msg: Any) -> None:
        got.append(int(msg.headers["Wirepipe-Seq"]))

    consumer = await nats.connect(nats_server.url, reconnect_time_wait=0.05, max_reconnect_attempts=-1)
    await consumer.subscribe("outage", cb=on_msg)
    await consumer.flush()
    sink = NatsSink("outage", url=nats_server.url, pending_size="64KiB", stamp_interval=0,
                    reconnect={"wait": 1.0, "jitter": 0})
    await sink.open()
    nats_server.kill()
    for _ in range(200):  # what nats-py writes before it sees the dead socket is lost (core NATS): wait for it
        if not sink.nc.is_connected:
            break
        await asyncio.sleep(0.01)
    values = [b"x" * 100] * 2000  # ~250 kB with headers: nats-py's buffer fills a quarter of the way
    write = asyncio.ensure_future(sink.write(Batch(values, headers={"Content-Type": "text/plain"})))
    await asyncio.sleep(0.5)
    assert not write.done()  # waiting for the server, the rest of the batch unsent
    nats_server.start()
    await asyncio.wait_for(write, 30)
    await sink.flush()
    for _ in range(200):
        if len(got) >= 2000:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    await sink.close()
    await consumer.close()
    assert sorted(got) == list(range(1, 2001))  # each record once, none twice
    assert (sink.records, sink.conn.stats.reconnects) == (2000, 1)
