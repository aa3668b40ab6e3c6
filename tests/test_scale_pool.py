"""``wirepipe run --workers N``: a supervised pool of real worker processes on a real nats-server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pyarrow.parquet as pq
import pytest

from tests.cli import invoke, start_wirepipe, wirepipe
from tests.nats_fixtures import publish_numbered
from wirepipe.connectors.connector import AtLeastOnce, Bounded, Configured, SharedByWorkers, Sink, Source
from wirepipe.connectors.nats.server import EmbeddedServer, ServerOptions, free_port
from wirepipe.core.batch import Batch, Rejected
from wirepipe.core.errors import CannotShare, ConfigError, Refusal
from wirepipe.core.models import Strict
from wirepipe.core.workers import Worker
from wirepipe.pipelines.pool import Pool, combine, pool_config, resolve_workers

TESTS = Path(__file__).parent

DURABLE = """
name: archive
source:
  type: jetstream
  url: "${NATS_URL}"
  stream: NUM
  batch_size: 200
  ack_wait: 2s
operators:
  - deserialize: {format: auto}
  - map: {function: "nats_fixtures:slow_identity"}
sink: {type: parquet, path: "${OUT}/part-{part}.parquet"}
flush_interval: 200ms
shutdown_timeout: 20s
monitor: {status_interval: 500ms, prometheus: {port: 0}}
"""

QUEUE = """
name: qgroup
source: {type: nats, url: "${NATS_URL}", subject: q.test, batch_size: 500}
operators:
  - deserialize: {format: msgpack}
sink: {type: parquet, path: "${OUT}/part-{part}.parquet"}
flush_interval: 200ms
shutdown_timeout: 20s
monitor: {status_interval: 1s}
"""


def column(out: Path, name: str) -> list[Any]:
    """A column of every complete part file (a file without its final name is not read)."""
    return [v for f in sorted(out.glob("part-*.parquet")) for v in pq.read_table(f).column(name).to_pylist()]


def wait_for(condition: Callable[[], Any], timeout: float, proc: subprocess.Popen[str] | None = None,
             log: Path | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = condition()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the pool exited ({proc.returncode}): {log.read_text() if log else ''}")
        time.sleep(0.1)
    raise AssertionError(f"timed out: {log.read_text()[-3000:] if log else ''}")


@contextlib.contextmanager
def running_pool(config: Path, workers: int, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[str]]:
    """``wirepipe run CONFIG --workers N`` (stderr to ``log``); killed on the way out if a test failed first."""
    with open(log, "w") as err:
        proc = start_wirepipe("run", config, "--workers", str(workers), stderr=err, env=env, cwd=TESTS)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def drain(proc: subprocess.Popen[str], log: Path) -> None:
    """SIGTERM to the supervisor: every worker drains and the pool exits 0."""
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, log.read_text()[-3000:]


# --- config rules -------------------------------------------------------------------------------------


def test_workers_is_a_positive_integer_or_auto() -> None:
    assert resolve_workers("3") == 3
    assert resolve_workers("auto") == len(os.sched_getaffinity(0))
    for bad in ("0", "-1", "many"):
        with pytest.raises(ValueError, match="positive integer or auto"):
            resolve_workers(bad)


def base(**over: Any) -> dict[str, Any]:
    data = {"name": "p", "source": {"type": "nats", "url": "nats://127.0.0.1:1", "subject": "s"},
            "sink": {"type": "parquet", "path": "out/part-{part}.parquet"}}
    data.update(over)
    return data


def worker_parts(data: dict[str, Any], worker: Worker) -> Any:
    """The pipeline ``worker`` builds from the config it is sent: its own copy of each part."""
    from wirepipe.pipelines.config import build_pipeline, validate_config

    return build_pipeline(validate_config(data), worker=worker)


def test_the_pool_shares_the_source_and_gives_each_worker_its_own_files() -> None:
    cfg = pool_config(base(), 3)
    assert cfg["source"]["queue"] == "p"  # a queue group named after the pipeline
    js = pool_config(base(source={"type": "jetstream", "url": "nats://h:1", "stream": "S"}), 2)
    assert js["source"]["durable"] == "p"  # one durable shared by all
    assert pool_config(base(source={"type": "nats", "url": "nats://h:1", "subject": "s", "queue": "mine"}),
                       2)["source"]["queue"] == "mine"
    sent = Pool(base(dead_letter={"type": "jsonl", "path": "dead-{worker}.jsonl"},
                     monitor={"prometheus": {"port": 9464}}), 2).worker_config()
    assert sent["monitor"] is None  # the supervisor reports for the pool
    w1 = worker_parts(sent, Worker(1, 2))  # what worker 1 builds from it
    assert w1.sink.config.path == "out/part-w1-{part}.parquet"
    assert w1.dead_letter.config.path == "dead-1.jsonl"
    assert sent["sink"]["path"] == "out/part-{part}.parquet"  # every worker is sent the same config
    # a single file: each worker writes a copy of its own, named as a multi-process replay names it
    one_file = pool_config(base(sink={"type": "parquet", "path": "out.parquet"},
                                dead_letter={"type": "jsonl", "path": "dead.jsonl"}), 2)
    assert [worker_parts(one_file, Worker(i, 2)).sink.config.path for i in range(2)] == ["out.w0.parquet",
                                                                                          "out.w1.parquet"]
    assert worker_parts(one_file, Worker(1, 2)).dead_letter.config.path == "dead.w1.jsonl"
    assert pool_config(base(source={"type": "generate", "dataset": "point"}), 1)["source"]["type"] == "generate"


@pytest.mark.parametrize(("over", "message"), [
    ({"source": {"type": "generate", "dataset": "point", "count": 10}},
     r"p.yaml: source.type: 'generate' is a bounded source that every worker would read whole: --workers 2 "
     r"would process its records 2 times; run it with --workers 1, or publish"),
    ({"dead_letter": {"type": "jsonl", "path": "-"}},
     r"p.yaml: dead_letter.path: '-' \(stdout\) cannot be shared by several workers \(2\): give a file"),
    ({"source": {"type": "jetstream", "url": "nats://h:1", "stream": "S", "ordered": True}},
     r"p.yaml: source.ordered: true: an ordered consumer delivers the whole stream to each reader"),
    ({"source": {"type": "nats", "subject": "s"}},
     r"p.yaml: source.url: 'embedded' \(the default\) starts a private server in each process, so 2 workers "
     r"would not share one: start one with `wirepipe server`"),
])
def test_what_n_workers_cannot_share_is_a_config_error(over: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        pool_config(base(**over), 2, file="p.yaml")


def test_cli_refuses_a_sink_to_stdout_with_exit_2(tmp_path: Path) -> None:
    cfg = tmp_path / "stdout.yaml"
    cfg.write_text("name: one\nsource: {type: nats, url: 'nats://127.0.0.1:1', subject: s}\n"
                   "sink: {type: jsonl, path: '-'}\n")
    res = invoke("run", str(cfg), "--workers", "2")  # refused before a worker starts
    assert res.returncode == 2 and isinstance(res.exception, SystemExit)
    assert f"error: {cfg}: sink.path: '-' (stdout) cannot be shared by several workers" in res.stderr
    assert "Traceback" not in res.stderr
    bad = invoke("run", str(cfg), "--workers", "none")
    assert bad.returncode == 2 and "--workers 'none': give a positive integer or auto" in bad.stderr


def test_pool_totals_sum_counters_and_take_the_max_lag() -> None:
    total = combine([{"records_out": 5, "lag": 10, "running": True, "dropped": 1, "new_counter": 2},
                     {"records_out": 7, "lag": 4, "running": False, "dropped": 0, "new_counter": 3}])
    assert total == {"records_out": 12, "lag": 10, "running": 1, "dropped": 1, "new_counter": 5}


def test_the_pool_takes_the_durables_outstanding_records_once_not_once_per_worker() -> None:
    """Three workers of one durable end a bounded read seeing the same 40 records held elsewhere (each counts the
    durable's num_ack_pending): the pool reports 40, not 120, and a worker's own unsettled records (50) when it
    saw more; a slot's ended processes keep theirs, retired or not."""
    from wirepipe.core.backoff import ExponentialBackoff
    from wirepipe.pipelines.pool import Slot

    assert combine([{"outstanding": 40}, {"outstanding": 40}, {"outstanding": 40}])["outstanding"] == 40
    slots = [Slot(i, ExponentialBackoff(1.0, 30.0)) for i in range(3)]
    for slot, seen in zip(slots, (40, 50, 40), strict=True):
        slot.snapshot = {"records_out": 10, "acked": 10, "outstanding": seen}
        slot.retire()
    slots[2].snapshot = {"records_out": 1, "acked": 1, "outstanding": 0}  # a restarted process, running
    total = combine([s.totals() for s in slots])
    assert (total["outstanding"], total["records_out"]) == (50, 31)


# --- a plugin's connectors declare what the pool and the config checks need ---------------------------


class FeedSource(Configured, Source, SharedByWorkers):
    """A plugin's partitioned log whose readers share it in a consumer group (as Kafka's do)."""

    type = "feed"
    shared_by = "group"  # N workers join one group, named after the pipeline unless given
    identity_ignores = Source.identity_ignores | {"group"}

    def __init__(self, **fields: Any) -> None:
        self._init(FeedConfig, **fields)

    def _configure(self, config: FeedConfig) -> None:
        super().__init__(count=config.count)
        self.config = config

    @property
    def params(self) -> dict[str, Any]:
        return {"topic": self.config.topic, "group": self.config.group, "count": self.count}

    def for_worker(self, index: int, count: int) -> FeedSource:
        if self.config.from_start and count > 1:
            raise CannotShare("from_start", f"true: each of the {count} workers would read the topic from its start")
        return self

    async def batches(self) -> AsyncIterator[Batch]:
        yield Batch([b"a", b"b"], meta={"seq": [0, 1]})


class AckedFeedSource(FeedSource, AtLeastOnce):
    """The feed read with acknowledgements: what it delivered comes back until acknowledged."""

    ack_wait, ack_pressure, redelivered = 30.0, 100, 0

    async def ack(self, batch: Batch) -> None:
        pass

    async def in_progress(self, batches: list[Batch]) -> None:
        pass

    async def settle_rejected(self, rejected: list[Rejected]) -> None:
        pass


class FeedConfig(Strict):
    type: Literal["feed"]
    topic: str
    group: str | None = None
    from_start: bool = False
    acked: bool = False
    count: int | None = None

    def build(self) -> FeedSource:
        return (AckedFeedSource if self.acked else FeedSource).from_config(self)


class DumpSource(Source, Bounded):
    """A plugin's finite export: every reader reads all of it."""

    type = "dump"

    async def batches(self) -> AsyncIterator[Batch]:
        yield Batch([b"x"])


class DumpConfig(Strict):
    type: Literal["dump"]

    def build(self) -> DumpSource:
        return DumpSource()


class BlobSink(Configured, Sink):
    """A plugin's object-store sink: one object per worker, uploaded only when closed."""

    type = "blob"
    batch_results = "files"

    def __init__(self, **fields: Any) -> None:
        self._init(BlobConfig, **fields)

    def _configure(self, config: BlobConfig) -> None:
        self.config = config

    def refuse_source(self, source: Source) -> Refusal | None:
        if isinstance(source, AtLeastOnce) and not self.config.multipart:
            return Refusal("multipart", f"false: the object is uploaded at close, after the {source.type} source "
                                        "acknowledged its records")
        return None

    def for_worker(self, index: int, count: int) -> BlobSink:
        if count == 1:
            return self
        if self.config.shared:
            raise CannotShare("key", f"{self.config.key!r} is one object for {count} writers")
        return self.reconfigured(key=f"{self.config.key}.{Worker(index, count).tag}")

    async def write(self, batch: Batch) -> None:
        pass


class BlobConfig(Strict):
    type: Literal["blob"]
    key: str
    multipart: bool = True
    shared: bool = False

    def build(self) -> BlobSink:
        return BlobSink.from_config(self)


@pytest.fixture
def plugin_connectors(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``feed`` and ``dump`` sources and a ``blob`` sink registered as a plugin's entry points would be, for one
    test (the registries and the pipeline model are put back afterwards)."""
    from wirepipe.connectors import SINKS, SOURCES
    from wirepipe.pipelines.config import pipeline_model

    for registry in (SOURCES, SINKS):
        monkeypatch.setattr(registry, "_pending", dict(registry._table()))
        monkeypatch.setattr(registry, "_loaded", dict(registry._loaded))
    SOURCES.register("feed", FeedConfig)
    SOURCES.register("dump", DumpConfig)
    SINKS.register("blob", BlobConfig)
    pipeline_model.cache_clear()
    yield
    pipeline_model.cache_clear()


def test_a_plugin_connector_declares_how_n_workers_share_it(plugin_connectors: None) -> None:
    feed = {"type": "feed", "topic": "orders"}
    cfg = pool_config(base(source=feed, sink={"type": "blob", "key": "out"}), 3)
    assert cfg["source"]["group"] == "p"  # shared_by: the pool names the group after the pipeline
    assert pool_config(base(source={**feed, "group": "mine"}), 2)["source"]["group"] == "mine"
    assert [worker_parts(cfg, Worker(i, 3)).sink.config.key for i in range(3)] == ["out.w0", "out.w1", "out.w2"]
    assert pool_config(base(source={"type": "dump"}), 1)["source"] == {"type": "dump"}  # one worker: as it is
    for over, message in [
        ({"source": {"type": "dump"}}, r"p.yaml: source.type: 'dump' is a bounded source that every worker would "
                                       r"read whole: --workers 2 would process its records 2 times"),
        ({"source": {**feed, "from_start": True}}, r"p.yaml: source.from_start: true: each of the 2 workers"),
        ({"source": feed, "sink": {"type": "blob", "key": "k", "shared": True}},
         r"p.yaml: sink.key: 'k' is one object for 2 writers"),
        ({"source": feed, "dead_letter": {"type": "blob", "key": "d", "shared": True}},
         r"p.yaml: dead_letter.key: 'd' is one object for 2 writers"),
    ]:
        with pytest.raises(ConfigError, match=message):
            pool_config(base(**over), 2, file="p.yaml")


def test_a_plugin_sink_declares_the_source_it_cannot_follow(plugin_connectors: None) -> None:
    from wirepipe.pipelines.config import build_pipeline, validate_config
    from wirepipe.pipelines.pipeline import Pipeline
    from wirepipe.replay.beam import result_sinks

    message = "sink.multipart: false: the object is uploaded at close, after the feed source acknowledged"
    with pytest.raises(ConfigError, match=f"^{message}"):
        Pipeline(AckedFeedSource(topic="t", acked=True), [], BlobSink(key="k", multipart=False))
    data = {"name": "p", "source": {"type": "feed", "topic": "t", "acked": True},
            "sink": {"type": "blob", "key": "k", "multipart": False}}
    with pytest.raises(ConfigError, match=f"^p.yaml: {message}"):
        build_pipeline(validate_config(data, file="p.yaml"), file="p.yaml")
    Pipeline(FeedSource(topic="t"), [], BlobSink(key="k", multipart=False))  # nothing acked: nothing to lose
    assert "blob" in result_sinks() and "nats" not in result_sinks()  # Beam replay may stand in for it
    assert FeedSource(topic="t", group="g", count=5).identity == FeedSource(topic="t").identity


def test_the_pool_names_no_connector_type() -> None:
    """What the pool, the config checks and Beam replay know about connectors, the connectors declare."""
    for module in ("pipelines/pool.py", "pipelines/config.py", "replay/beam.py", "pipelines/pipeline.py",
                   "pipelines/run.py", "pipelines/checks.py"):
        text = (TESTS.parent / "src" / "wirepipe" / module).read_text(encoding="utf-8")
        for name in ("generate", "jsonl", "parquet", "capture", "nats", "jetstream", "null"):
            assert not re.search(rf"""[=!]= ["']{name}["']|in \(["']{name}["']|["']{name}["'],""", text), (module, name)


# --- real pools --------------------------------------------------------------------------------------


def per_worker(body: str, name: str) -> dict[str, float]:
    """``wirepipe_<name>`` (``records_out_total``, ``lag``) per worker from a Prometheus scrape."""
    return {m[1]: float(m[2]) for m in re.finditer(rf'^wirepipe_{name}{{pipeline="[^"]+",worker="(\d+)"}} (\S+)$', body,
                                                 re.M)}


@pytest.mark.timeout(150)
@pytest.mark.slow
def test_three_workers_on_one_durable_survive_a_sigkill(nats_server: EmbeddedServer, tmp_path: Path) -> None:
    """SIGKILL one of 3 workers mid-run: the supervisor restarts it, all N are written (duplicates counted),
    one Prometheus endpoint labels each worker, and SIGTERM drains the pool (exit 0). Records out and acked
    count what is in complete part files (what died with the killed worker is not counted, what it committed
    before it died is) but for a kill between its sink's flush and its report of the commit: those rows stay in
    its complete parts uncounted, are redelivered and counted where they are written again (a machine loaded
    enough widens that window). The lag of a drained stream is 0."""
    n = 12000
    asyncio.run(publish_numbered(nats_server.url, n))
    out = tmp_path / "out"
    cfg = tmp_path / "archive.yaml"
    cfg.write_text(DURABLE)
    log = tmp_path / "pool.log"
    env = {"NATS_URL": nats_server.url, "OUT": str(out), "PYTHONPATH": str(TESTS)}
    with running_pool(cfg, 3, env, log) as proc:
        pid = int(wait_for(lambda: re.search(r"worker 1 started \(pid (\d+)\)", log.read_text()), 60, proc, log)[1])
        port = int(wait_for(lambda: re.search(r"metrics on http://127.0.0.1:(\d+)/metrics", log.read_text()),
                            60, proc, log)[1])
        wait_for(lambda: len(column(out, "i")) >= n // 4, 90, proc, log)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: "worker 1 died (killed by SIGKILL)" in log.read_text(), 30, proc, log)
        wait_for(lambda: len(re.findall(r"worker 1 started", log.read_text())) >= 2, 30, proc, log)
        wait_for(lambda: len(set(column(out, "i"))) >= n, 120, proc, log)
        metrics = wait_for(lambda: scrape(port, 'wirepipe_restarts_total{pipeline="archive",worker="1"} 1.0'),
                           30, proc, log)

        def settled() -> str | None:  # every row committed and counted, nothing pending upstream
            body = scrape(port, "wirepipe_lag")
            rows = len(column(out, "i"))
            counted = [sum(per_worker(body or "", k).values()) for k in ("records_out_total", "acked_total")]
            lag = per_worker(body or "", "lag")
            counts_agree = counted[0] == counted[1] and n <= counted[0] <= rows
            return body if counts_agree and len(lag) == 3 and not any(lag.values()) else None

        metrics = wait_for(settled, 30, proc, log)
        drain(proc, log)
    seen = column(out, "i")
    assert set(seen) == set(range(n))  # all N written
    duplicates = len(seen) - n  # rows a worker committed twice (an ack lost with the killed worker)
    text = log.read_text()
    print(f"{duplicates} duplicates after the SIGKILL")
    assert all(f'worker="{w}"' in metrics for w in "012")
    assert re.search(r"archive \[3 workers\]: [\d,]+ rec/s.* \| w0 .*; w1 .*1 restarts; w2 ", text)
    files = {f.name.split("-")[1] for f in out.glob("part-*.parquet")}
    assert files == {"w0", "w1", "w2"}  # distinct parts per worker
    summary = re.search(r"archive: 3 workers, (\d+) records out of (\d+) in .*, (\d+) redelivered, 1 restarts", text)
    assert summary is not None, text[-3000:]
    uncounted = len(seen) - int(summary[1])  # rows flushed by the killed worker after its last report
    assert 0 <= uncounted <= duplicates  # records out: the rows in complete part files, but those
    assert int(summary[3]) >= duplicates  # every duplicate row is among the redelivered records


@pytest.mark.slow
def test_a_pool_with_stop_at_end_ends_when_the_durable_has_nothing_left(nats_server: EmbeddedServer,
                                                                       tmp_path: Path) -> None:
    """Two workers on one durable with ``stop_at_end``: a worker the other left no message to never sees a
    last message of its own; it asks the consumer when idle and ends once nothing is pending or unacked."""
    n = 50  # one pull of the first worker takes them all
    asyncio.run(publish_numbered(nats_server.url, n))
    out = tmp_path / "out"
    cfg = tmp_path / "archive.yaml"
    cfg.write_text(DURABLE.replace("  ack_wait: 2s\n", "  ack_wait: 2s\n  stop_at_end: true\n")
                   .replace('  - map: {function: "nats_fixtures:slow_identity"}\n', "")
                   .replace("monitor: {status_interval: 500ms, prometheus: {port: 0}}\n", "monitor: {status_interval: 200ms}\n"))
    done = wirepipe("run", str(cfg), "--workers", "2", "--no-status", timeout=90,
                    env={"NATS_URL": nats_server.url, "OUT": str(out)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(column(out, "i")) == list(range(n))
    assert "rec/s" not in done.stderr.split("archive: 2 workers")[0]  # --no-status: no status line, the summary


def scrape(port: int, wanted: str) -> str | None:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return body if wanted in body else None


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_a_worker_that_keeps_dying_makes_the_pool_give_up_loudly(tmp_path: Path) -> None:
    """A worker that cannot connect (nothing listens, connect_timeout 300ms) crashes for real, each time: it is
    restarted after the policy's backoff, and its third death in a row (``restart.max_failures``) ends the pool."""
    cfg = tmp_path / "dies.yaml"
    cfg.write_text("name: dies\nsource: {type: jetstream, url: '${NATS_URL}', subject: s, connect_timeout: 300ms}\n"
                   "sink: {type: parquet, path: 'out/part-{part}.parquet'}\n"
                   "restart: {backoff: 100ms, max_failures: 3, stable_after: 50s}\n")
    res = wirepipe("run", str(cfg), "--workers", "2", timeout=110,
                   env={"NATS_URL": f"nats://127.0.0.1:{free_port()}"})
    assert res.returncode == 1
    assert re.search(r"error: dies: worker \d died 3 times in a row, each within 50s of starting "
                     r"\(last: exit code 1\); giving up", res.stderr), res.stderr[-3000:]
    # the restarts waited through the backoff: 100ms, then 200ms
    for wait, failure in (("0.1", 1), ("0.2", 2)):
        assert re.search(rf"restarting in {wait}s \(failure {failure} of 3\)", res.stderr), res.stderr[-3000:]
    assert re.search(r"cannot connect to NATS at nats://127.0.0.1:\d+ within 0.3s \(connect_timeout\): "
                     r"connection refused", res.stderr), res.stderr[-3000:]


async def _publish_seq(url: str, n: int, rate: float) -> None:
    """``{"pub": id, "seq": i}`` on core NATS at a sustainable rate: our own sequence to count losses."""
    import msgpack
    import nats

    nc = await nats.connect(url)
    chunk = 250
    for start in range(0, n, chunk):
        for i in range(start, min(n, start + chunk)):
            await nc.publish("q.test", msgpack.packb({"pub": "t", "seq": i}))
        await nc.flush(timeout=10)
        await asyncio.sleep(chunk / rate)
    await nc.close()


def _queue_members(http_port: int) -> int:
    body = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{http_port}/connz?subs=1", timeout=5).read())
    return sum(1 for c in body.get("connections", []) if "q.test" in (c.get("subscriptions_list") or []))


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_a_core_queue_group_hands_each_message_to_exactly_one_of_two_workers(tmp_path: Path) -> None:
    n = 20000
    http_port = free_port()
    with EmbeddedServer(options=ServerOptions(http_port=http_port)) as server:
        out = tmp_path / "out"
        cfg = tmp_path / "qgroup.yaml"
        cfg.write_text(QUEUE)
        log = tmp_path / "pool.log"
        with running_pool(cfg, 2, {"NATS_URL": server.url, "OUT": str(out)}, log) as proc:
            wait_for(lambda: _queue_members(http_port) == 2, 60, proc, log)
            asyncio.run(_publish_seq(server.url, n, rate=5000))
            wait_for(lambda: len(column(out, "seq")) >= n, 60, proc, log)
            drain(proc, log)
    by_worker = {w: [s for f in out.glob(f"part-{w}-*.parquet") for s in pq.read_table(f).column("seq").to_pylist()]
                 for w in ("w0", "w1")}
    seqs = by_worker["w0"] + by_worker["w1"]
    assert len(seqs) == len(set(seqs)) == n  # sent == received, and no message went to both workers
    assert not set(by_worker["w0"]) & set(by_worker["w1"])
    assert by_worker["w0"] and by_worker["w1"]  # both members got a share
    # no slow-consumer loss reported (each worker's final summary spells out its zeros: "0 dropped by the client")
    assert not re.search(r"[1-9][\d,]* dropped", log.read_text())


def test_a_single_process_run_is_worker_0(tmp_path: Path) -> None:
    cfg = tmp_path / "one.yaml"
    cfg.write_text(f"name: one\nsource: {{type: generate, dataset: point, count: 10}}\n"
                   f"sink: {{type: jsonl, path: '{tmp_path}/out-{{worker}}.jsonl'}}\n")
    res = wirepipe("run", str(cfg))
    assert res.returncode == 0, res.stderr
    assert len((tmp_path / "out-0.jsonl").read_text().splitlines()) == 10


def test_counters_stay_monotonic_across_restarts_and_the_status_line_shows_each_worker() -> None:
    pool = Pool(base(), 2)
    w0, w1 = pool.slots
    w0.snapshot = {"records_out": 100, "rejected": 1, "lag": 50, "running": True, "connected": True}
    w0.retire()  # the process died: its counters carry over, its gauges do not
    w0.restarts = 1
    w0.snapshot = {"records_out": 30, "rejected": 0, "lag": 20, "running": True, "connected": True}
    w1.snapshot = {"records_out": 70, "dropped": 4, "lag": 25, "running": True, "connected": True}
    assert w0.totals()["records_out"] == 130 and w0.totals()["lag"] == 20 and w0.totals()["restarts"] == 1
    total = pool.total()
    assert total["records_out"] == 200 and total["lag"] == 25 and total["dropped"] == 4
    line = pool.status(None, [{}, {}], 2.0)
    # monitor.status_line: rates, totals, lag, then every non-zero counter (restarts included)
    assert line.startswith("p [2 workers]: 100 rec/s, 0.00 MB/s, 200 out, lag 25, 1 rejected, 4 dropped, 1 restarts")
    assert line.endswith("| w0 down 65/s 1 err 1 restarts; w1 down 35/s 0 err 4 lost")  # no process yet: down


def test_the_final_line_counts_records_per_second_of_work_and_where_each_worker_wrote() -> None:
    """Work is the time at least one worker had its parts open: a wait before opening, the gap between a
    death and the restart, are not work. Output lines the workers share are said once."""
    pool = Pool(base(), 2)
    w0, w1 = pool.slots
    w0.snapshot, w0.working, w0.reported = {"records_out": 600}, 10.0, 10.0  # worked 0..10 s, then died
    w0.outputs = ["output: parquet part-w0-a.parquet (0.10 MB)", "metrics: m.parquet"]
    w0.retire()
    w0.snapshot, w0.working, w0.reported = {"records_out": 100}, 5.0, 25.0  # restarted: worked 20..25 s
    w0.outputs = ["output: parquet part-w0-b.parquet (0.02 MB)", "metrics: m.parquet"]
    w1.snapshot, w1.working, w1.reported = {"records_out": 1000}, 7.0, 12.0  # waited 5 s for its stream: 5..12 s
    w1.outputs = ["output: parquet part-w1-a.parquet (0.20 MB)", "metrics: m.parquet"]
    assert pool.work_seconds() == 17.0  # 0..12 and 20..25
    assert pool.summary().splitlines() == [
        "p: 2 workers, 1700 records out of 0 in 17.00s of work (100 records/s), 0 rejected, 0 restarts",
        "  w0 output: parquet part-w0-a.parquet (0.10 MB)", "  w0 output: parquet part-w0-b.parquet (0.02 MB)",
        "  w1 output: parquet part-w1-a.parquet (0.20 MB)", "  metrics: m.parquet"]


def test_a_pool_counts_records_and_messages_as_a_single_run_does() -> None:
    """A durable's workers ``pack`` 10 records a message: the pool said `2000 records out of 20000 (1,622
    records/s)` where one worker says `20000 records out of 20000 (...; 2000 messages)`. A worker killed after
    writing 10,400 records one a message and committing 10,000 made the pool say `; 20400 messages` of them."""
    from wirepipe.pipelines.pool import committed

    packed = committed({"records_out": 10_000, "messages_out": 1_000, "acked": 10_000, "acked_messages": 1_000})
    assert (packed["records_out"], packed["messages_out"]) == (10_000, 1_000)
    killed = committed({"records_out": 10_400, "messages_out": 10_400, "acked": 10_000, "acked_messages": 10_000})
    assert (killed["records_out"], killed["messages_out"]) == (10_000, 10_000)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_pool_that_packs_says_records_and_messages(nats_server: EmbeddedServer, tmp_path: Path) -> None:
    asyncio.run(publish_numbered(nats_server.url, 2000, "PACKS", "packs"))
    config = tmp_path / "p.yaml"
    config.write_text(f"""
name: packs
source: {{type: jetstream, url: "{nats_server.url}", stream: PACKS, durable: packs, stop_at_end: true,
          batch_size: 100}}
operators:
  - pack: {{records: 10}}
  - serialize: {{format: msgpack}}
sink: {{type: nats, url: "{nats_server.url}", subject: packs.out}}
""")
    ran = wirepipe("run", config, "--workers", "2", "--no-status", timeout=100)
    assert ran.returncode == 0, ran.stderr
    line = next(x for x in ran.stderr.splitlines() if x.startswith("packs: 2 workers"))
    assert "2000 records out of 2000" in line and "; 200 messages" in line, line


def test_the_final_line_sums_what_the_workers_metrics_met() -> None:
    """Each worker says what writing its metrics met; two that met the same (4,472 rows delayed, 12 failed
    writes each on a full disk) had their one shared line read as the pool's, half the real figures."""
    pool = Pool(base(metrics={"path": "m"}), 2)
    w0, w1 = pool.slots
    figures = {"metrics_rows_delayed": 4472, "metrics_write_errors": 12}
    line = "metrics: m (4,472 row(s) waited for room on the disk; 12 failed write(s), each tried again)"
    w0.snapshot, w0.outputs = {"records_out": 10000, **figures}, ["output: null (discarded)", line]
    w1.snapshot, w1.outputs = {"records_out": 10000, **figures}, ["output: null (discarded)", line]
    assert pool.summary().splitlines()[1:] == [
        "  output: null (discarded)",
        "  metrics: m (8,944 row(s) waited for room on the disk; 24 failed write(s), each tried again)"]
    w1.snapshot, w1.outputs = {"records_out": 10000}, ["output: null (discarded)", "metrics: m"]
    assert pool.summary().splitlines()[-1] == (
        "  metrics: m (4,472 row(s) waited for room on the disk; 12 failed write(s), each tried again)")

CONSUME_EVENTS = """
name: events
source: {type: jetstream, url: "${NATS_URL}", stream: EVENTS, batch_size: 200}
operators:
  - deserialize: {format: auto}
sink: {type: parquet, path: "${OUT}/part-{part}.parquet"}
metrics: {path: "${OUT}/metrics.parquet"}
flush_interval: 200ms
shutdown_timeout: 20s
monitor: {status_interval: 500ms}
"""

PUBLISH_EVENTS = """
name: events-publish
source: {type: generate, dataset: point, batch_size: 500}
operators:
  - serialize: {format: msgpack}
sink: {type: jetstream, url: "${NATS_URL}", subject: events, stream: {name: EVENTS, subjects: [events]}}
"""


@pytest.mark.timeout(180)
@pytest.mark.slow
def test_a_pool_started_before_its_stream_waits_for_it_and_loses_no_worker(nats_server: EmbeddedServer,
                                                                          tmp_path: Path) -> None:
    """`wirepipe run consume.yaml --workers 2` before the publisher creates the stream: the workers wait
    (status line and log name the stream), then every record arrives, no worker dies, the lag comes back
    to 0, and the final line counts the seconds of work and says where the output and metrics went."""
    n = 5000
    out = tmp_path / "out"
    (tmp_path / "consume.yaml").write_text(CONSUME_EVENTS)
    (tmp_path / "publish.yaml").write_text(PUBLISH_EVENTS)
    log = tmp_path / "pool.log"
    env = {"NATS_URL": nats_server.url, "OUT": str(out)}
    with running_pool(tmp_path / "consume.yaml", 2, env, log) as proc:
        wait_for(lambda: log.read_text().count("waiting for stream EVENTS (it does not exist yet)") >= 2, 60,
                 proc, log)
        wait_for(lambda: re.search(r"events \[2 workers\]: .*waiting for stream EVENTS \| w0 waiting .*; w1 waiting",
                                   log.read_text()), 30, proc, log)
        time.sleep(3)  # waiting is not dying: several restart periods pass without a death
        published = wirepipe("run", str(tmp_path / "publish.yaml"), "--count", str(n), env=env, timeout=120)
        assert published.returncode == 0, published.stderr[-3000:]
        wait_for(lambda: len(column(out, "x")) >= n, 90, proc, log)
        wait_for(lambda: re.search(rf"events \[2 workers\]: [\d,]+ rec/s, [\d.]+ MB/s, {n:,} out, lag 0\b",
                                   log.read_text()), 30, proc, log)
        drain(proc, log)
    text = log.read_text()
    assert len(column(out, "x")) == n  # every record once: nobody crashed, so nothing was redelivered
    assert "died" not in text and "restarting" not in text, text[-3000:]
    summary = re.search(r"events: 2 workers, (\d+) records out of (\d+) in ([\d.]+)s of work "
                        r"\(([\d,]+) records/s\), 0 rejected, 0 redelivered, 0 restarts\n((?:  .*\n?)+)", text)
    assert summary, text[-3000:]
    assert int(summary[1]) == n == int(summary[2])
    where = summary[5]
    for w in (0, 1):  # each worker's own part files (a worker that got no record names its pattern)
        assert re.search(rf"^  w{w} output: parquet {re.escape(str(out))}/part-w{w}-", where, re.M), where
    assert f"  metrics: {out / 'metrics.parquet'}" in where  # the workers share it: said once


# --- a core NATS pool's losses: summed, and its exit code follows them ----------------------------------------

LOSSY = """
name: pd
source: {type: nats, url: "${NATS_URL}", subject: "pd.>", queue: pdq, pending_msgs_limit: 100}
operators:
  - map: {function: "tests.chaos.busy:spin"}
sink: {type: "null"}
shutdown_timeout: 1s
"""
_FIGURES = ("records out of", "rejected", "lost", "missing from publisher sequences", "dropped by the client",
            "discarded at stop")


def _figures(line: str) -> dict[str, int]:
    """The counts of a run summary's first line (a worker's or the pool's)."""
    found = {what: re.search(rf"([\d,]+) {re.escape(what)}", line) for what in _FIGURES}
    assert all(found.values()), line
    return {what: int(m.group(1).replace(",", "")) for what, m in found.items() if m}


def _lossy_pool(tmp_path: Path, stop: Literal["duration", "sigterm"]) -> tuple[int, str, list[dict[str, int]],
                                                                            dict[str, int]]:
    """Two core NATS workers of a queue group, each 15 ms a record behind a 100-message pending limit; 5,000
    stamped records published at once. Ends by ``--duration`` or by a SIGTERM whose drain ``shutdown_timeout``
    cuts (then with room for 1,000 pending records each). (exit code, the output, each worker's figures, the
    pool's)."""
    import sys

    http_port = free_port()
    cfg = tmp_path / "pd.yaml"
    cfg.write_text(LOSSY)
    log = tmp_path / "pool.log"
    env = {"WIREPIPE_TEST_SPIN_US": "15000"}
    with EmbeddedServer(options=ServerOptions(http_port=http_port)) as server:
        env["NATS_URL"] = server.url
        # Stopped by SIGTERM, each worker holds far more than its 1 s drain can finish (1,000 records, 15 s).
        args = ["--duration", "7s"] if stop == "duration" else ["--set", "source.pending_msgs_limit=1000",
                                                                 "--set", "source.batch_size=50"]
        with open(log, "w") as err:
            proc = start_wirepipe("run", cfg, "--workers", "2", "--no-status", *args, stderr=err, env=env, cwd=TESTS)
        try:
            members = lambda: sum(1 for c in json.loads(urllib.request.urlopen(  # noqa: E731
                f"http://127.0.0.1:{http_port}/connz?subs=1", timeout=5).read()).get("connections", [])
                                  if "pd.>" in (c.get("subscriptions_list") or []))
            wait_for(lambda: members() == 2, 60, proc, log)
            pub = subprocess.run([sys.executable, "-m", "tests.chaos.overload", "publish", server.url, "pd.x", "5000"],
                                 capture_output=True, text=True, env={**os.environ, **env}, cwd=TESTS.parent,
                                 timeout=60)
            assert pub.returncode == 0 and json.loads(pub.stdout)["sent"] == 5000, pub.stderr[-2000:]
            if stop == "sigterm":
                time.sleep(1.5)
                proc.send_signal(signal.SIGTERM)
            code = proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = log.read_text()
    workers = [_figures(line) for line in re.findall(r"\[w\d\]: (pd: \d+ records out of .*)", text)]
    pool = _figures(text[text.rindex("pd: 2 workers"):].splitlines()[0])
    return code, text, workers, pool


@pytest.mark.timeout(120)
@pytest.mark.slow
@pytest.mark.parametrize("stop", ["duration", "sigterm"])
def test_a_core_pool_sums_what_its_workers_lost_and_exits_5(tmp_path: Path, stop: Literal["duration", "sigterm"]
                                                            ) -> None:
    """The final line is the sum of every count the workers report (the losses by kind among them), so
    published = out + rejected + lost over the pool, exactly; its exit code follows them (5: records lost).
    Ended by its duration the losses are the client's drops; a SIGTERM whose drain is cut adds what the workers
    had read and could not finish (discarded at stop)."""
    code, text, workers, pool = _lossy_pool(tmp_path, stop)
    print(text[text.rindex("pd: 2 workers"):])
    assert len(workers) == 2, text[-3000:]
    assert pool == {what: sum(w[what] for w in workers) for what in _FIGURES}  # the pool's line: the workers' sums
    assert pool["records out of"] + pool["rejected"] + pool["lost"] == 5000  # every record published accounted
    assert pool["lost"] == pool["missing from publisher sequences"] + pool["dropped by the client"] \
        + pool["discarded at stop"]
    if stop == "sigterm":
        assert pool["discarded at stop"] and text.count("drain cut: pd: the drain took longer than shutdown_timeout "
                                                        "(1s)") == 2, text[-3000:]
    else:
        assert pool["discarded at stop"] == 0  # the duration's drain finished what each worker held
    assert code == 5, text[-3000:]
    assert re.search(rf"^error: {pool['lost']:,} of 5,000 records lost \([\d.]+%\), more than --max-lost 0$", text,
                     re.M), text[-2000:]
