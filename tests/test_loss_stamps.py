"""Core NATS loss stamps read strictly, and what only a stamp claims shown apart from what the data shows.

``Wirepipe-Seq`` (on each message) and ``Wirepipe-Last-Seq`` (on a publisher's stamp) are positive int64s in
plain decimal; anything else is a malformed stamp, counted apart and never a loss figure. A *gap* is numbers
missing between two data messages of a publisher; a *tail* is numbers a stamp claims past the last data
message received, unconfirmed until a data message passes them (docs/concepts/loss-accounting.md). A queue
group shares the messages, so counting gaps in one is refused at validation.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli import invoke, start_wirepipe, wirepipe
from wirepipe.connectors.nats.gaps import INT64_MAX, GapCounter
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.core.errors import ConfigError
from wirepipe.wire import STAMP_PREFIX, Header


def stamped(publisher: str, *seqs: Any) -> list[dict[str, str] | None]:
    return [{Header.PUBLISHER: publisher, Header.SEQ: s if isinstance(s, str) else str(s)} for s in seqs]


def test_a_forged_stamp_is_a_claimed_tail_and_the_publishers_own_numbers_stay_counted() -> None:
    gaps = GapCounter()
    assert gaps.observe(stamped("p", *range(1, 1001))) == 0
    assert gaps.stamp("p", 1_000_000_000) == 999_999_000  # claimed past the last message received
    assert (gaps.gap, gaps.tail, gaps.missing) == (0, 999_999_000, 999_999_000)
    # the publisher goes on: its messages are neither late nor duplicates, and what they reach is no longer tail
    assert gaps.observe(stamped("p", *range(1001, 1101))) == -100
    assert (gaps.gap, gaps.tail, gaps.reordered, gaps.duplicates) == (0, 999_998_900, 0, 0)


def test_a_data_message_past_a_claim_turns_what_it_did_not_see_into_a_gap() -> None:
    gaps = GapCounter()
    gaps.observe(stamped("p", 1, 2, 3))
    assert gaps.stamp("p", 10) == 7  # 4..10 claimed
    assert gaps.observe(stamped("p", 4, 5)) == -2  # two of them arrive after all: the claim shrinks
    assert gaps.observe(stamped("p", 12)) == 1  # past the claim: 6..11 missing between messages, seen
    assert (gaps.gap, gaps.tail, gaps.missing_from("p")) == (6, 0, 6)
    assert gaps.observe(stamped("p", 8)) == -1  # a late one still fills its place in the gap
    assert (gaps.gap, gaps.tail, gaps.reordered) == (5, 0, 1)
    assert gaps.stamp("p", 9) == 0  # a stamp behind the messages received claims nothing


def test_a_claim_a_batch_reaches_on_the_fast_path_shrinks_alike() -> None:
    gaps = GapCounter()
    gaps.observe(stamped("p", 1))
    assert gaps.stamp("p", 50) == 49  # 2..50
    assert gaps.observe(stamped("p", *range(2, 22))) == -20  # consecutive: the one-publisher fast path
    assert (gaps.gap, gaps.tail) == (0, 29)
    assert gaps.observe(stamped("p", *range(22, 72))) == -29
    assert (gaps.gap, gaps.tail) == (0, 0)


@pytest.mark.parametrize("value", ["99999999999999999999999999999", "9223372036854775808", "0", "-3", "+4", " 4",
                                   "04", "4.0", "1e3", "\u0664", "", "four"])
def test_a_number_that_is_not_a_positive_int64_is_a_malformed_stamp_never_a_loss(value: str) -> None:
    gaps = GapCounter()
    gaps.observe(stamped("p", 1, 2, 3))
    assert gaps.observe(stamped("p", value)) == 0  # on the fast path's batch shape: one publisher
    assert gaps.observe([*stamped("p", 4), *stamped("p", value), *stamped("p", 5)]) == 0
    assert (gaps.missing, gaps.malformed, gaps.duplicates, gaps.reordered, gaps.unstamped) == (0, 2, 0, 0, 0)


def test_100k_forged_publisher_ids_keep_the_table_bounded_and_the_forgotten_are_counted() -> None:
    """One message each from 100,000 publisher ids: the table keeps the 10,000 heard from most recently; the other
    90,000 are counted as forgotten. A publisher heard from again is kept (the least recently heard goes), and a
    forgotten one starts over: the gap it had opened stays counted, what it skipped since is not."""
    gaps = GapCounter()
    gaps.observe([h for i in range(100_000) for h in stamped(f"f{i}", 1)])
    assert (len(gaps.publishers), gaps.forgotten, gaps.missing) == (10_000, 90_000, 0)
    assert next(iter(gaps.publishers)) == "f90000" and "f89999" not in gaps.publishers

    small = GapCounter(max_publishers=2)
    small.observe([*stamped("a", 1, 3), *stamped("b", 1)])  # a: number 2 missing
    small.observe(stamped("a", 4))  # a heard again (the fast path): b is now the least recently heard
    small.stamp("b", 1)
    small.observe(stamped("c", 1))  # past 2: the least recently heard, a (b's stamp was heard since), is forgotten
    assert (list(small.publishers), small.forgotten, small.gap) == (["b", "c"], 1, 1)
    assert small.observe(stamped("a", 10)) == 0  # a new publisher now: 5..9 cannot be counted
    assert (list(small.publishers), small.forgotten, small.gap, small.missing_from("a")) == (["c", "a"], 2, 1, 0)


def test_a_publisher_forgotten_before_its_final_stamp_makes_the_count_incomplete_and_the_run_exit_5() -> None:
    from wirepipe.core.exit_codes import ExitCode, LossLimit, Outcome, verdict

    gaps = GapCounter(max_publishers=2)
    gaps.observe([*stamped("done", 1, 2), *stamped("running", 1)])
    gaps.stamp("done", 2, final=True)  # said it was done: nothing it loses afterwards can go uncounted
    gaps.observe(stamped("c", 1))
    gaps.observe(stamped("d", 1))  # past 2: "running" then "done" forgotten (each least recently heard in turn)
    assert (gaps.forgotten, gaps.forgotten_running, gaps.missing) == (2, 1, 0)

    assert verdict(Outcome(records=4, forgotten=1)) == [(ExitCode.LOST, (
        "an unknown number of records lost: 1 publisher(s) forgotten before their final stamp (past the 10,000 a "
        "core NATS source keeps count of: their later gaps were not counted); --max-lost 100% accepts it"))]
    assert verdict(Outcome(records=4, forgotten=1), lost=LossLimit.parse("100%")) == []
    assert verdict(Outcome(records=4, forgotten=0)) == []  # forgotten after their final stamp only: complete
    both = verdict(Outcome(records=4, unsure=2, forgotten=3))
    assert [code for code, _ in both] == [ExitCode.LOST] and "2 publisher(s) not heard from since a disconnect" \
        in both[0][1] and "; 3 publisher(s) forgotten before their final stamp" in both[0][1]


def test_an_unsure_publisher_forgotten_stays_unsure() -> None:
    gaps = GapCounter(max_publishers=1)
    gaps.observe(stamped("a", 1))
    gaps.disconnected()
    gaps.observe(stamped("b", 1))
    assert (gaps.forgotten, gaps.unsure) == (1, 1)


def test_numbers_without_a_publisher_are_malformed_and_messages_without_either_are_unstamped() -> None:
    gaps = GapCounter()
    gaps.observe([{Header.SEQ: "1"}, None, {"Content-Type": "application/json"}, *stamped("p", 1)])
    assert (gaps.malformed, gaps.unstamped, gaps.missing) == (1, 2, 0)


def test_the_largest_int64_is_read_and_every_figure_handed_on_stays_within_int64() -> None:
    from wirepipe.connectors.nats.core_source import NatsSource

    source = NatsSource("x", url="nats://127.0.0.1:4999")
    assert source.gaps is not None
    source.gaps.observe([*stamped("a", 1, INT64_MAX), *stamped("b", 1, INT64_MAX)])  # two forged jumps
    assert source.gaps.gap == 2 * (INT64_MAX - 2)  # counted exactly ...
    losses = source.losses()
    assert losses["lost"] == losses["missing"] == losses["gap"] == INT64_MAX == source.lost  # ... handed on within int64


def test_gaps_in_a_queue_group_are_refused_with_the_reason(tmp_path: Path) -> None:
    from wirepipe.connectors.nats.core_source import NatsSource

    with pytest.raises(ConfigError) as info:
        NatsSource("pd.>", queue="pdq", gaps=True)
    assert info.value.path == "source.gaps"
    assert "true with queue 'pdq': each member receives a share of every publisher's messages, so the numbers " \
           "the other members received would count as lost" in str(info.value)
    assert NatsSource("pd.>", queue="pdq").gaps is None and NatsSource("pd.>", queue="pdq", gaps=False).gaps is None

    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump({"name": "pool", "source": {"type": "nats", "url": "nats://127.0.0.1:4222",
                                                               "subject": "pd.>", "gaps": True},
                                    "sink": {"type": "null"}}))
    done = invoke("validate", str(path), "--workers", "2")  # N workers join one queue group; one sees every message
    assert done.returncode == 2 and "Traceback" not in done.output, done.output
    assert (f"{path}: source.gaps: true: --workers 2 share the messages in one queue group, and each member "
            "receives a share of every publisher's messages") in done.stderr


# --- on real processes ------------------------------------------------------------------------------------------


class Forger:
    """What anyone allowed to publish on the subjects can send, once the real publisher has closed: a stamp
    claiming a billion numbers for it, a stamp and a message whose numbers are not int64s (that message ends
    the consumer's count)."""

    def __init__(self, url: str, subject: str) -> None:
        self.url, self.subject = url, subject
        self.listening = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self.thread.start()
        assert self.listening.wait(30)

    async def _run(self) -> None:
        import nats

        nc = await nats.connect(self.url)
        loop = asyncio.get_running_loop()
        publisher: asyncio.Future[str] = loop.create_future()
        final: asyncio.Future[None] = loop.create_future()

        async def on_data(msg: Any) -> None:
            if not publisher.done():
                publisher.set_result(msg.headers[Header.PUBLISHER])

        async def on_stamp(msg: Any) -> None:
            if Header.FINAL in (msg.headers or {}) and not final.done():
                final.set_result(None)

        await nc.subscribe(self.subject, cb=on_data)
        await nc.subscribe(STAMP_PREFIX + self.subject, cb=on_stamp)
        await nc.flush()
        self.listening.set()
        pid = await asyncio.wait_for(publisher, 60)
        await asyncio.wait_for(final, 60)
        stamp = STAMP_PREFIX + self.subject
        await nc.publish(stamp, b"", headers={Header.PUBLISHER: pid, Header.LAST_SEQ: "1000000000"})
        await nc.publish(stamp, b"", headers={Header.PUBLISHER: pid, Header.LAST_SEQ: "99999999999999999999999999999"})
        await nc.publish(self.subject, b'{"x": 1, "y": 2}', headers={Header.PUBLISHER: pid,
                                                                     Header.SEQ: "99999999999999999999999999999"})
        await nc.flush()
        await nc.close()


@pytest.mark.slow
def test_forged_and_absurd_stamps_on_real_processes(nats_server: EmbeddedServer, tmp_path: Path) -> None:
    """Before: one forged stamp made 999,999,000 lost and a 29-digit Wirepipe-Seq 1e29, and the batch's metrics
    rows vanished. Now: 1,000 published and received, the claim shown as an unconfirmed tail, the two
    malformed stamps counted apart, every metrics row written."""
    import pyarrow.parquet as pq

    url, subject = nats_server.url, "stamped"
    metrics = tmp_path / "metrics.parquet"
    consumer = tmp_path / "consumer.yaml"
    consumer.write_text(yaml.safe_dump({
        "name": "consumer", "source": {"type": "nats", "url": url, "subject": subject, "batch_size": 100},
        "sink": {"type": "null"}, "monitor": {"status_interval": "0.2s"},
        "metrics": {"path": str(metrics), "flush_interval": "1s"}}))
    publisher = tmp_path / "publisher.yaml"
    publisher.write_text(yaml.safe_dump({
        "name": "publisher", "source": {"type": "generate", "dataset": "point", "count": 1000, "batch_size": 100},
        "operators": [{"serialize": {"format": "json"}}],
        "sink": {"type": "nats", "url": url, "subject": subject, "stamp_interval": "0.2s"}}))
    worker = start_wirepipe("run", consumer, "--count", "1001")
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(worker.stderr or []), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not any("consumer:" in ln for ln in lines):  # its first status line: subscribed
            assert worker.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.05)
        forger = Forger(url, subject)
        assert wirepipe("run", publisher, "--no-status").returncode == 0
        forger.thread.join(60)
        assert worker.wait(60) == 5  # a tail claimed by a stamp is counted lost (unconfirmed): past --max-lost 0
    finally:
        if worker.poll() is None:
            worker.kill()
    reader.join(5)
    summary = next(ln for ln in lines if "records out of" in ln)
    assert "consumer: 1001 records out of 1001 " in summary  # the malformed message is a record like any other
    assert ("999999000 lost (999999000 missing from publisher sequences (0 in gaps between messages, 999999000 "
            "claimed by stamps past the last message received: unconfirmed), 0 dropped by the client, 0 discarded "
            "at stop, 2 malformed stamp(s) ignored), 0 duplicates") in summary
    rows = pq.read_table(metrics, columns=["step", "records", "lost", "lost_tail"]).to_pylist()
    assert sum(r["records"] for r in rows if r["step"] == 0) == 1001  # no batch's rows dropped
    assert all(0 <= (r["lost"] or 0) <= INT64_MAX for r in rows)
    # the metrics say which is which, as the summary does: all 999,999,000 claimed by a stamp alone, no gap seen
    assert (sum(r["lost"] or 0 for r in rows), sum(r["lost_tail"] or 0 for r in rows)) == (999_999_000, 999_999_000)
    assert all(r["lost_tail"] is None for r in rows if r["step"] != 0)


@pytest.mark.slow
async def test_the_tail_and_the_malformed_stamps_reach_prometheus_and_the_status_line(nats_url: str) -> None:
    import urllib.request

    import nats

    from wirepipe.connectors.nats.core_source import NatsSource
    from wirepipe.connectors.null import NullSink
    from wirepipe.pipelines.monitor import snapshot, status_line
    from wirepipe.pipelines.pipeline import Pipeline

    source = NatsSource("stamped", url=nats_url, duration=60)
    pipe = Pipeline(source, [], NullSink(), name="tails", monitor={"status_interval": 0, "prometheus": {"port": 0}})
    stop = asyncio.Event()
    run = asyncio.ensure_future(pipe.run_async(stop))
    while not source.ready.is_set():
        await asyncio.sleep(0.01)
    nc = await nats.connect(nats_url)
    for seq in ("1", "2", "3", "+4"):  # the last one malformed: a record, not a number
        await nc.publish("stamped", b"x", headers={Header.PUBLISHER: "p1", Header.SEQ: seq})
    await nc.publish(STAMP_PREFIX + "stamped", b"", headers={Header.PUBLISHER: "p1", Header.LAST_SEQ: "10"})
    await nc.flush()
    while pipe.stats.records_in < 4 or source.gaps is None or source.gaps.tail < 7:
        await asyncio.sleep(0.01)
    port = pipe.last_run.monitor.port
    body = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode())
    line = status_line("tails", snapshot(pipe.last_run), None, 1.0)
    stop.set()
    stats = await asyncio.wait_for(run, 30)
    await nc.close()
    assert 'wirepipe_lost_total{pipeline="tails"} 7.0' in body
    assert 'wirepipe_lost_tail{pipeline="tails"} 7.0' in body
    assert 'wirepipe_malformed_stamps_total{pipeline="tails"} 1.0' in body
    assert "7 lost, 7 of them claimed by stamps alone" in line and "1 malformed stamps" in line
    assert {k: stats.losses[k] for k in ("lost", "gap", "tail", "malformed")} == {"lost": 7, "gap": 0, "tail": 7,
                                                                                  "malformed": 1}


def test_the_summary_says_how_many_publishers_were_forgotten() -> None:
    from wirepipe.pipelines.monitor import loss_summary

    assert loss_summary({"lost": 2, "missing": 2, "forgotten": 3, "forgotten_running": 1}) == (
        ", 2 lost (2 missing from publisher sequences, 0 dropped by the client, 0 discarded at stop, 3 publishers "
        "forgotten, 1 of them before their final stamp: their later gaps cannot be counted), 0 duplicates")
    assert "3 publishers forgotten after their final stamp (nothing left to count)" in loss_summary(
        {"lost": 0, "forgotten": 3})
    assert "forgotten" not in loss_summary({"lost": 0, "forgotten": 0})


@pytest.mark.slow
def test_a_run_that_forgot_running_publishers_exits_5_not_0(nats_server: EmbeddedServer, tmp_path: Path) -> None:
    """10,002 publisher ids, one message each, none said it was done: the source keeps 10,000 and forgets 2 still
    running, whose later gaps it cannot count. Before: the summary said so and the run exited 0."""
    url, subject = nats_server.url, "fleet"
    consumer = tmp_path / "consumer.yaml"
    consumer.write_text(yaml.safe_dump({
        "name": "consumer", "source": {"type": "nats", "url": url, "subject": subject, "batch_size": 500},
        "sink": {"type": "null"}, "monitor": {"status_interval": "0.2s"}}))
    worker = start_wirepipe("run", consumer, "--count", "10002")
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(worker.stderr or []), daemon=True)  # type: ignore[arg-type]
    reader.start()

    async def publish() -> None:
        import nats

        nc = await nats.connect(url)
        for i in range(10_002):
            await nc.publish(subject, b"{}", headers={Header.PUBLISHER: f"p{i}", Header.SEQ: "1"})
        await nc.flush()
        await nc.close()

    try:
        deadline = time.monotonic() + 60
        while not any("consumer:" in ln for ln in lines):  # its first status line: subscribed
            assert worker.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.05)
        asyncio.run(publish())
        assert worker.wait(60) == 5, "".join(lines)
    finally:
        if worker.poll() is None:
            worker.kill()
    reader.join(5)
    output = "".join(lines)
    assert "consumer: 10002 records out of 10002 " in output and "0 lost (" in output
    assert "2 publishers forgotten, 2 of them before their final stamp: their later gaps cannot be counted" in output
    assert ("an unknown number of records lost: 2 publisher(s) forgotten before their final stamp (past the 10,000 a "
            "core NATS source keeps count of: their later gaps were not counted); --max-lost 100% accepts it") in output
