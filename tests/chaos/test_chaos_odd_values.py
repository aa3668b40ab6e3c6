"""One odd but well-formed value never kills a worker: that record is dead-lettered, the others written.

Decoders return values a sink cannot write: msgpack ext types and timestamps, CBOR bignums,
unknown tags, sets and shared-reference cycles. Between every two of them sit 10 good records.
Before the fix, core NATS died with a traceback and JetStream dead-lettered whole batches with
an empty payload; now each poison goes to the dead letter with its original bytes and the reason.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import cbor2
import msgpack
import pyarrow.parquet as pq
import pytest

from wirepipe.connectors.jsonl import JsonlSink
from wirepipe.connectors.nats.core_source import NatsSource
from wirepipe.connectors.nats.jetstream_source import JetStreamSource
from wirepipe.connectors.parquet import ParquetSink
from wirepipe.operators.deserialize import Deserialize
from wirepipe.pipelines.pipeline import Pipeline

MSGPACK = {"Content-Type": "application/msgpack"}
CBOR = {"Content-Type": "application/cbor"}


def poisons() -> list[tuple[str, bytes, dict[str, str]]]:
    cycle: list[Any] = []
    cycle.append(cycle)
    return [
        ("msgpack ext type", msgpack.packb({"i": -1, "v": msgpack.ExtType(5, b"xx")}), MSGPACK),
        ("msgpack timestamp", msgpack.packb({"i": -1, "v": msgpack.Timestamp(1, 5)}, datetime=False), MSGPACK),
        ("cbor bignum", cbor2.dumps({"i": -1, "v": 2 ** 70}), CBOR),
        ("cbor unknown tag", cbor2.dumps({"i": -1, "v": cbor2.CBORTag(4000, "x")}), CBOR),
        ("cbor set", cbor2.dumps({"i": -1, "v": {1, 2}}), CBOR),
        ("cbor cycle", cbor2.dumps({"i": -1, "v": cycle}, value_sharing=True), CBOR),
    ]


def messages() -> tuple[list[tuple[bytes, dict[str, str]]], list[bytes]]:
    """10 good records, a poison, 10 good, a poison ... 10 good; and the poisons' bytes."""
    out: list[tuple[bytes, dict[str, str]]] = []
    bad = []
    i = 0
    for _name, payload, headers in [*poisons(), ("end", b"", MSGPACK)]:
        for _ in range(10):
            out.append((msgpack.packb({"i": i, "v": i}), MSGPACK))
            i += 1
        if payload:
            out.append((payload, headers))
            bad.append(payload)
    return out, bad


def make_sink(kind: str, tmp_path: Path) -> Any:
    return JsonlSink(tmp_path / "out.jsonl") if kind == "jsonl" else ParquetSink(tmp_path / "out" / "p-{part}.parquet")


def written(kind: str, tmp_path: Path) -> list[int]:
    if kind == "jsonl":
        return [json.loads(line)["i"] for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    return [i for f in sorted((tmp_path / "out").glob("*.parquet")) for i in pq.read_table(f)["i"].to_pylist()]


async def publish(url: str, jetstream: bool, msgs: list[tuple[bytes, dict[str, str]]]) -> None:
    import nats

    nc = await nats.connect(url)
    if jetstream:
        js = nc.jetstream()
        await js.add_stream(name="ODD", subjects=["odd"])
        for n, (payload, headers) in enumerate(msgs):
            await js.publish("odd", payload, headers={**headers, "Nats-Msg-Id": str(n)})
    else:
        for payload, headers in msgs:
            await nc.publish("odd", payload, headers=headers)
        await nc.flush()
    await nc.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sink_kind", ["jsonl", "parquet"])
@pytest.mark.parametrize("source_kind", ["nats", "jetstream"])
async def test_each_odd_value_is_dead_lettered_alone(nats_url: str, tmp_path: Path, source_kind: str,
                                                     sink_kind: str) -> None:
    msgs, bad = messages()
    good = len(msgs) - len(bad)
    opts = dict(url=nats_url)
    if source_kind == "jetstream":
        await publish(nats_url, True, msgs)
        source: Any = JetStreamSource(stream="ODD", durable="odd", **opts, count=len(msgs), max_deliver=2)
    else:
        source = NatsSource("odd", **opts, count=len(msgs))
    dead = JsonlSink(tmp_path / "dead.jsonl")
    pipe = Pipeline(source, [Deserialize("auto")], make_sink(sink_kind, tmp_path), dead_letter=dead,
                    flush_interval=0.2)
    task = asyncio.ensure_future(pipe.run_async())
    if source_kind == "nats":
        while not pipe.running:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # the subscription is in place
        await publish(nats_url, False, msgs)
    stats = await asyncio.wait_for(task, 40)
    got = written(sink_kind, tmp_path)
    letters = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    print(f"{source_kind} -> {sink_kind}: sent {len(msgs)}, written {len(got)}, dead-lettered {len(letters)}, "
          f"lost {len(msgs) - len(got) - len(letters)}")
    assert got == list(range(good)), "every good record, once, in order"
    assert stats.records_out == good and stats.rejected == len(bad)
    import base64

    assert [base64.b64decode(d["payload"]["$base64"]) for d in letters] == bad, "the original bytes"
    assert all(d["stage"] == "write" and d["operator"] == sink_kind and d["error"] for d in letters)
    if source_kind == "jetstream":
        assert source.acked == good and source.terminated == len(bad)
