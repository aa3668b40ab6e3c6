"""A record the JetStream server gives up on (delivered ``max_deliver`` times without an acknowledgement) reaches the
dead letter with the reason, never leaves silently (``connectors/nats/max_deliveries.py``)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import nats
import pytest

from tests.cli import cli_env, wirepipe
from tests.nats_fixtures import consumer_info, publish_numbered
from wirepipe.connectors.nats.jetstream_source import JetStreamSource
from wirepipe.connectors.nats.max_deliveries import MaxDeliveries
from wirepipe.connectors.nats.server import EmbeddedServer, ServerOptions
from wirepipe.operators.deserialize import Deserialize
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.testing import TestingSink

TESTS = Path(__file__).parent

# One record delivered at a time (max_ack_pending: 1): when the poison record is, nothing else is held, so the worker
# it kills holds only it, and the counts are exact.
WORKER = """
name: poisoned
source:
  type: jetstream
  url: "${NATS_URL}"
  stream: NUM
  durable: poisoned
  batch_size: 1
  max_ack_pending: 1
  max_deliver: 2
  ack_wait: 1s
  stop_at_end: ${STOP_AT_END:-false}
operators:
  - deserialize: {format: auto}
  - map: {function: "nats_fixtures:poison_kills"}
sink: {type: jsonl, path: "${OUT}/out.jsonl", append: true}
dead_letter: {type: jsonl, path: "${OUT}/dead.jsonl", append: true}
flush_interval: 100ms
"""


@pytest.mark.slow
async def test_a_record_delivered_max_deliver_times_is_dead_lettered_with_the_reason(
        nats_server: EmbeddedServer, tmp_path: Path) -> None:
    """Record 5 of 12 kills its worker each time it is delivered (max_deliver 2): two workers die holding it, the
    server gives up on it, and the third worker (``stop_at_end``) dead-letters it from the stream, with its payload,
    subject, stream sequence and the reason, and writes the other 6: every record is written once or dead-lettered,
    and the exit code is 0 (one record of 7 rejected is under the default --max-rejected)."""
    n, poison = 12, 5
    url = nats_server.url
    await publish_numbered(url, n, retention="workqueue")  # a pool's queue of work: what is done leaves it
    config = tmp_path / "worker.yaml"
    config.write_text(WORKER)
    out = tmp_path / "out"
    env = {"NATS_URL": url, "OUT": str(out), "POISON": str(poison),
           "PYTHONPATH": os.pathsep.join([str(TESTS), cli_env()["PYTHONPATH"]])}

    for delivery in (1, 2):
        killed = await asyncio.to_thread(wirepipe, "run", str(config), env=env, timeout=60)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        info = await consumer_info(url, "NUM", "poisoned")
        assert (info.ack_floor.stream_seq, info.num_ack_pending) == (poison, 1), delivery  # it holds the poison alone

    env["STOP_AT_END"] = "true"
    done = await asyncio.to_thread(wirepipe, "run", str(config), env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "poisoned: 6 records out of 7 in " in done.stderr
    assert "1 rejected" in done.stderr
    assert "stream sequence 6 was delivered 2 times without being acknowledged (max_deliver)" in done.stderr
    written = [json.loads(line)["i"] for line in (out / "out.jsonl").read_text().splitlines()]
    assert written == [i for i in range(n) if i != poison]  # each once, in order
    (letter,) = [json.loads(line) for line in (out / "dead.jsonl").read_text().splitlines()]
    assert (letter["stage"], letter["operator"], letter["subject"], letter["seq"]) == ("consume", "jetstream", "num", 6)
    assert letter["error"] == "delivered 2 times (max_deliver) without being acknowledged"
    assert msgpack.unpackb(base64.b64decode(letter["payload"]["$base64"])) == {"i": poison}
    info = await consumer_info(url, "NUM", "poisoned")
    assert (info.num_pending, info.num_ack_pending, info.ack_floor.stream_seq) == (0, 0, n)
    nc = await nats.connect(url)
    try:  # dead-lettered, the poison record left the work queue as the 11 acknowledged did (before: it stayed)
        assert (await nc.jetstream().stream_info("NUM")).state.messages == 0
    finally:
        await nc.close()


@pytest.mark.parametrize(("retention", "left"), [("workqueue", [1, 3]), ("interest", [1, 2, 3]),
                                                 ("limits", [1, 2, 3])])
async def test_a_dead_lettered_record_leaves_a_work_queue_and_stays_in_other_streams(
        nats_url: str, retention: str, left: list[int]) -> None:
    """Once its dead letter is written (``settle``), a record the server gave up on is deleted from a work-queue
    stream, as an acknowledgement would have; a limits or interest stream keeps it (other readers may need it)."""
    from nats.js.api import ConsumerConfig, RetentionPolicy

    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="NUM", subjects=["num"], retention=RetentionPolicy(retention))
        for durable in ("mine", "other")[:2 if retention == "interest" else 1]:  # a work queue has one consumer
            await js.add_consumer("NUM", ConsumerConfig(durable_name=durable))
        for i in range(3):
            await js.publish("num", msgpack.packb({"i": i}))
        given_up = MaxDeliveries("jetstream")
        given_up.announced = [(2, 5)]
        letters = await given_up.take(js, "NUM")
        await given_up.settle(js, "NUM", letters)
        await given_up.settle(js, "NUM", letters)  # settled twice (a commit retried): nothing more, no error
        state = (await js.stream_info("NUM")).state
        kept = [seq for seq in (1, 2, 3) if await _in_stream(js, seq)]
    finally:
        await nc.close()
    assert (kept, state.messages, given_up.removed) == (left, len(left), 1 if retention == "workqueue" else 0)


async def _in_stream(js: Any, seq: int) -> bool:
    import nats.js.errors

    try:
        await js.get_msg("NUM", seq)
    except nats.js.errors.NotFoundError:
        return False
    return True


async def test_a_record_no_longer_in_the_stream_is_dead_lettered_without_its_payload_and_the_sequence_named(
        nats_url: str) -> None:
    """The advisory names a stream sequence that a limit removed since: the dead letter has no payload, and its
    reason says so and names the sequence (counted among the rejected, never dropped)."""
    await publish_numbered(nats_url, 3)
    nc = await nats.connect(nats_url)
    try:
        given_up = MaxDeliveries("jetstream")
        given_up.announced = [(2, 5), (99, 5)]
        letters = await given_up.take(nc.jetstream(), "NUM")
    finally:
        await nc.close()
    assert [(r.stage, r.error, r.value, r.subject, r.meta["seq"]) for r in letters] == [
        ("consume", "delivered 5 times (max_deliver) without being acknowledged", msgpack.packb({"i": 1}), "num", 2),
        ("consume", "delivered 5 times (max_deliver) without being acknowledged; stream sequence 99 is no longer in "
                    "stream NUM: its payload is lost", b"", None, 99)]
    assert (given_up.given_up, given_up.announced) == (2, [])


async def test_an_account_that_may_not_subscribe_to_the_advisory_says_so_once_and_reads_on(
        make_server: Callable[..., EmbeddedServer], caplog: pytest.LogCaptureFixture) -> None:
    users = [{"user": "worker", "password": "pw-1", "permissions": {"subscribe": {"deny": ["$JS.EVENT.>"]}}}]
    server = make_server(options=ServerOptions(extra={"authorization": {"users": users}}))
    url = server.url.replace("nats://", "nats://worker:pw-1@")
    await publish_numbered(url, 3)
    sink = TestingSink()
    source = JetStreamSource(url=url, stream="NUM", durable="refused", stop_at_end=True, ack_wait=1)
    with caplog.at_level(logging.INFO, logger="wirepipe"):
        stats = await Pipeline(source, [Deserialize("msgpack")], sink, name="refused").run_async()
    assert (stats.records_out, stats.rejected, [v["i"] for v in sink.records]) == (3, 0, [0, 1, 2])
    said = [r.getMessage() for r in caplog.records if "permissions violation" in r.getMessage().lower()]
    assert len(said) == 1, said
    assert said[0].startswith("not subscribed to $JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.NUM.refused (")
    assert "allow the account to subscribe to $JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.> or set max_deliver: -1" \
        in said[0]
