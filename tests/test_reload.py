"""Hot reload (``pipelines/reload.py``, ``config_versions.py``, ``PipelineRun.switch_to``): what changes reload in
place and what needs a restart, the digest of a config version, the file watch, and a switch between two batches,
in this process. The process
tests (a JetStream durable under load, a pool of two) are in ``test_reload_processes.py``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from wirepipe.connectors.connector import Source
from wirepipe.connectors.generate import GenerateSource
from wirepipe.core.batch import Batch
from wirepipe.core.errors import WirepipeError
from wirepipe.operators.map import Map
from wirepipe.pipelines.config import load_pipeline, pipeline_model
from wirepipe.pipelines.config_versions import (
    IN_PLACE,
    RESTART,
    Version,
    Watch,
    classify,
    config_digest,
    named_files,
)
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.pipelines.reload import FileReloads
from wirepipe.testing import TestingSink


def config(**changes: Any) -> dict[str, Any]:
    """A validated config as JSON data (``Pipeline.config``), with ``changes`` to its top-level fields."""
    data = {"name": "p", "source": {"type": "generate", "count": 10}, "operators": [{"serialize": {"format": "msgpack"}}]}
    data.update(changes)
    return pipeline_model().model_validate(data).model_dump(mode="json", by_alias=True)


def source_of(data: dict[str, Any]) -> Source:
    """The source a config builds (nothing is opened)."""
    from wirepipe.pipelines.config import build_connector, validate_config

    return build_connector(validate_config(data).source, "source")


def test_every_field_of_a_pipeline_is_classified() -> None:
    """A field added to the pipeline model must say whether it reloads in place (``IN_PLACE``) or needs a
    restart (``RESTART``); one that says neither is refused as needing a restart, with a reason that says so."""
    fields = set(pipeline_model().model_fields)
    assert fields - set(IN_PLACE) - set(RESTART) == set()
    assert not set(IN_PLACE) & set(RESTART)


def test_operators_dead_letters_metrics_and_intervals_reload_in_place() -> None:
    new = config(operators=[{"serialize": {"format": "json"}}], dead_letter={"type": "jsonl", "path": "dl.jsonl"},
                 metrics={"path": "m.parquet"}, flush_interval="5s", shutdown_timeout="1m")
    changes = classify(config(), new, GenerateSource("point"))
    assert [(c.path, c.restart) for c in changes] == [
        ("operators", None), ("dead_letter", None), ("metrics", None), ("shutdown_timeout", None),
        ("flush_interval", None)]


@pytest.mark.parametrize(("source", "field", "value", "reason"), [
    ({"type": "jetstream", "url": "nats://127.0.0.1:4222", "stream": "S", "durable": "a"}, "durable", "b",
     "a new position in a stream, which its deliver policy decides"),
    ({"type": "jetstream", "url": "nats://127.0.0.1:4222", "stream": "S", "durable": "a"}, "stream", "T",
     "a new position in a stream"),
    ({"type": "nats", "url": "nats://127.0.0.1:4222", "subject": "s"}, "subject", "t",
     "would lose the messages in flight (core NATS is at most once)"),
    ({"type": "generate", "count": 10, "dataset": "point"}, "dataset", "transaction", "its input read from the start"),
], ids=["durable", "stream", "core-nats", "generate"])
def test_a_source_change_needs_a_restart_and_says_why_for_this_kind_of_source(
        source: dict[str, Any], field: str, value: Any, reason: str) -> None:
    old = config(source=source)
    [change] = classify(old, config(source={**source, field: value}), source_of(old))
    assert change.path == f"source.{field}"
    assert reason in change.restart  # type: ignore[operator]
    assert change.describe() == f"source.{field}: {source[field]!r} -> {value!r}"


def test_everything_else_needs_a_restart_with_the_field_the_values_and_the_reason() -> None:
    old = config(sink={"type": "jsonl", "path": "a.jsonl"})
    new = config(sink={"type": "jsonl", "path": "b.jsonl"}, name="q", queue_size=16, monitor={"status_interval": "1s"})
    changes = {c.path: c for c in classify(old, new, GenerateSource("point"))}
    assert list(changes) == ["name", "sink.path", "queue_size", "monitor"]
    assert changes["sink.path"].describe() == "sink.path: 'a.jsonl' -> 'b.jsonl'"
    assert changes["sink.path"].restart.startswith("the sink is opened once per run")  # type: ignore[union-attr]
    assert changes["monitor"].describe() == "monitor: None -> {'status_interval': 1.0, 'live': False, 'prometheus': None}"
    unknown = classify({"name": "p"}, {"name": "p", "plugins": {"x": 1}}, GenerateSource("point"))
    assert [(c.path, c.describe()) for c in unknown] == [("plugins", "plugins: (not set) -> {'x': 1}")]
    assert "does not know this field" in unknown[0].restart  # type: ignore[operator]


def test_credentials_never_show_in_a_refusal() -> None:
    base = {"type": "jetstream", "stream": "S", "durable": "a"}
    old = config(source={**base, "url": "nats://u:old-secret@127.0.0.1:4222"})
    new = config(source={**base, "url": "nats://u:new-secret@127.0.0.1:4222"})
    changes = classify(old, new, source_of(old))
    text = " ".join(c.describe() for c in changes)
    assert [c.path for c in changes] == ["source.url"]
    assert "secret" not in text and "***" in text


def test_the_digest_covers_the_files_the_operators_name_and_masks_credentials(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("point.avsc").write_text(json.dumps({"type": "record", "name": "P", "fields": [
        {"name": "x", "type": "long"}, {"name": "y", "type": "long"}]}))
    data = config(operators=[{"serialize": {"format": "avro", "schema": "point.avsc"}}, {"compress": {"codec": "zstd"}}])
    assert named_files(data) == ["point.avsc"]  # `zstd`, `avro` name no file here
    first = Version.of(data)
    assert first.digest == Version.of(data).digest and len(first.digest) == 12
    Path("point.avsc").write_text(Path("point.avsc").read_text() + "\n")
    assert Version.of(data).digest != first.digest
    assert Version.of(data).changed_files(first) == ["point.avsc"]
    with_url = config(source={"type": "nats", "url": "nats://u:one@h:4222", "subject": "s"})
    other_password = config(source={"type": "nats", "url": "nats://u:two@h:4222", "subject": "s"})
    assert config_digest(with_url, {}) == config_digest(other_password, {})


async def test_a_watch_reports_a_change_once_it_settled(tmp_path: Path) -> None:
    """An editor's save as a rename (the file missing for a moment) and a burst of writes are one change, read once
    it stopped changing; a write that restores the same bytes is no change."""
    path = tmp_path / "p.yaml"
    path.write_text("a")
    watch = Watch([str(path)], poll=0.01, settle=0.05)
    first = await watch.changed()  # nothing seen yet: what is there now
    watch.follow([str(path)], first)

    async def edits() -> None:
        path.unlink()
        await asyncio.sleep(0.02)
        (tmp_path / "p.yaml.tmp").write_text("b")
        (tmp_path / "p.yaml.tmp").rename(path)
        for text in ("c", "cd", "cde"):
            await asyncio.sleep(0.01)
            path.write_text(text)

    editing = asyncio.ensure_future(edits())
    seen = await asyncio.wait_for(watch.changed(), 5)
    await editing
    assert seen == {str(path): _sha(b"cde")}
    watch.follow([str(path)], seen)
    path.write_text("cde")  # the same bytes
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(watch.changed(), 0.2)


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


class GatedSource(Source):
    """Batches a test hands over one at a time (``give``), then the end (``end``)."""

    type = "gated"

    def __init__(self) -> None:
        super().__init__()
        self.queue: asyncio.Queue[list[Any] | None] = asyncio.Queue()

    def give(self, *values: Any) -> None:
        self.queue.put_nowait(list(values))

    def end(self) -> None:
        self.queue.put_nowait(None)

    async def batches(self) -> AsyncIterator[Batch]:
        while (values := await self.queue.get()) is not None:
            yield Batch(values)


class Opening(Map):
    """A map that counts its opens and closes, and refuses to open when told."""

    def __init__(self, fn: Any, refuse: bool = False) -> None:
        super().__init__(fn)
        self.refuse = refuse
        self.opened = self.closed = 0

    async def open(self, parts: Any) -> None:
        if self.refuse:
            raise WirepipeError("the dictionary bucket DICTS is not there")
        self.opened += 1

    async def close(self) -> None:
        self.closed += 1


async def until(condition: Any, timeout: float = 5.0) -> None:
    async def wait() -> None:
        while not condition():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(wait(), timeout)


async def test_a_switch_happens_between_two_batches_after_a_commit() -> None:
    """Batches before the switch run the old operators, the ones after it (the queued ones too) the new ones; what
    the old config wrote is committed first; the operators replaced are closed, the new ones opened once."""
    source, sink = GatedSource(), TestingSink()
    old, new_op = Opening(lambda v: v + 1), Opening(lambda v: v + 100)
    pipe = Pipeline(source, [old], sink, flush_interval=3600)
    run = pipe.new_run()
    task = asyncio.ensure_future(run.execute())
    source.give(0, 1)
    source.give(2)
    await until(lambda: len(sink.records) == 3)
    switched = run.switch_to(Pipeline(GenerateSource("point"), [new_op], name="ignored"))
    source.give(3, 4)
    assert await asyncio.wait_for(switched, 5) == 2  # the first batch the new operators run
    assert run.stats.commits == 1 and run.stats.acked == 3  # the switch's commit
    source.give(5)
    source.end()
    stats = await asyncio.wait_for(task, 5)
    assert sink.records == [1, 2, 3, 103, 104, 105]
    assert (old.opened, old.closed, new_op.opened, new_op.closed) == (1, 1, 1, 1)
    assert run.pipeline.name == "pipeline" and run.pipeline.operators == [new_op] and stats.records_out == 6
    assert pipe.operators == [old]  # the pipeline built is as it was: the run went on with another


async def test_a_part_that_cannot_open_keeps_the_running_operators() -> None:
    source, sink = GatedSource(), TestingSink()
    old = Opening(lambda v: v + 1)
    pipe = Pipeline(source, [old], sink)
    run = pipe.new_run()
    task = asyncio.ensure_future(run.execute())
    source.give(0)
    await until(lambda: len(sink.records) == 1)
    with pytest.raises(WirepipeError, match="DICTS is not there"):
        await asyncio.wait_for(run.switch_to(Pipeline(source, [Opening(lambda v: -v, refuse=True)])), 5)
    source.give(1)
    source.end()
    await asyncio.wait_for(task, 5)
    assert sink.records == [1, 2]
    assert run.pipeline is pipe and pipe.operators == [old] and (old.opened, old.closed) == (1, 1)


async def test_a_switch_is_refused_once_the_run_stops() -> None:
    source = GatedSource()
    pipe = Pipeline(source, [], TestingSink())
    with pytest.raises(WirepipeError, match="not running"):
        await pipe.new_run().switch_to(Pipeline(source, []))


PIPELINE = """
name: points
source: {{type: generate, dataset: point, batch_size: 50, rate: 10}}
operators:
  - select: {select}
sink: {{type: jsonl, path: {out}}}
metrics: {{path: {metrics}}}
flush_interval: 50ms
"""


async def test_a_watched_file_reloads_in_place_refuses_what_needs_a_restart_and_keeps_the_running_config(
        tmp_path: Path) -> None:
    """In one process: an edit of the operators reloads in place (the records, the metrics' stages and config
    digest change together, from one batch on); an invalid edit and one that needs a restart are refused, each
    counted, and the records keep coming under the config in force. The command line's ``--set`` applies to every
    version (the file's rate is never the one that runs)."""
    file, out, metrics = tmp_path / "p.yaml", tmp_path / "out.jsonl", tmp_path / "m.parquet"

    def write(select: str, more: str = "") -> None:
        file.write_text(PIPELINE.format(select=select, out=out, metrics=metrics) + more)

    def lines() -> list[dict[str, Any]]:
        return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []

    write("[x]")
    overrides = ["source.rate=5000"]
    pipe = load_pipeline(file, overrides)
    pipe.config_digest = Version.of(pipe.config).digest
    reloads = pipe.reloader = FileReloads(str(file), overrides, poll=0.01, settle=0.02)
    stop = asyncio.Event()
    run = asyncio.ensure_future(pipe.run_async(stop))
    await until(lambda: len(lines()) >= 100)
    write("[x]", "queue_size: 16\n")  # needs a restart
    await until(lambda: reloads.counters()["reloads_refused"] == 1)
    write("[]")  # invalid: select names at least one field
    await until(lambda: reloads.counters()["reloads_refused"] == 2)
    assert "operators[0].select" in reloads.live.history.last_refusal  # type: ignore[union-attr,operator]
    write("[x, y]")
    await until(lambda: reloads.counters()["reloads"] == 1)
    before = len(lines())
    await until(lambda: len(lines()) >= before + 100)
    stop.set()
    stats = await asyncio.wait_for(run, 5)
    records = lines()
    assert len(records) == stats.records_out
    cut = next(i for i, r in enumerate(records) if "y" in r)
    assert cut > 0 and all(list(r) == ["x"] for r in records[:cut]) and all(list(r) == ["x", "y"] for r in records[cut:])
    first = reloads.live.history.versions[1][1]  # type: ignore[union-attr]
    assert cut == first * 50  # batches of 50
    rows = pq.read_table(metrics).to_pylist()
    digests = {(r["batch"] >= first, r["operator"], r["config_digest"]) for r in rows if r["stage"] == "select"}
    old, new = (d for d, _ in reloads.live.history.versions)  # type: ignore[union-attr]
    assert digests == {(False, "x", old), (True, "x,y", new)}
    assert reloads.summary(stats.batches) == (f"config: 1 reload, 2 refused (the running config stayed); {old} ran "
                                              f"batches 0-{first - 1}, {new} ran batches {first}-{stats.batches - 1}")


async def test_a_new_dead_letter_and_metrics_section_take_over_at_the_switch(tmp_path: Path) -> None:
    """Every record is rejected (``select: [z]``: points have no z): the dead letters before the switch are in the
    old file, those after it in the new one, none lost; the old metrics folder holds the old config's rows, the new
    one (a new recorder, a new run id) the new config's."""
    from wirepipe.pipelines.config import build_pipeline, validate_config
    from wirepipe.pipelines.reload import LiveConfig

    def data(n: int) -> dict[str, Any]:
        return {"name": "p", "source": {"type": "generate", "dataset": "point", "batch_size": 20, "rate": 4000},
                "operators": [{"select": ["z"]}], "sink": {"type": "null"},
                "dead_letter": {"type": "jsonl", "path": str(tmp_path / f"dead{n}.jsonl")},
                "metrics": {"path": str(tmp_path / f"m{n}.parquet")}, "flush_interval": "50ms"}

    pipe = build_pipeline(validate_config(data(1)))
    pipe.config_digest = Version.of(pipe.config).digest
    stop = asyncio.Event()
    run = pipe.new_run()
    task = asyncio.ensure_future(run.execute(stop))
    await until(lambda: run.stats.rejected >= 100)
    live = LiveConfig(run, "p.yaml")
    outcome = await asyncio.wait_for(live.apply(data(2)), 5)
    assert outcome.ok, outcome.error
    await until(lambda: run.stats.rejected >= live.history.versions[1][1] * 20 + 100)
    stop.set()
    stats = await asyncio.wait_for(task, 5)
    first = live.history.versions[1][1]
    dead = [len((tmp_path / f"dead{n}.jsonl").read_text().splitlines()) for n in (1, 2)]
    assert dead == [first * 20, stats.rejected - first * 20]
    rows = [pq.read_table(tmp_path / f"m{n}.parquet").to_pylist() for n in (1, 2)]
    assert {(r["config_digest"], r["batch"] < first) for r in rows[0]} == {(live.history.versions[0][0], True)}
    assert {(r["config_digest"], r["batch"] >= first) for r in rows[1]} == {(outcome.digest, True)}
    assert {r["run_id"] for r in rows[0]}.isdisjoint({r["run_id"] for r in rows[1]})


async def test_a_pools_refused_reloads_are_counted_on_its_prometheus_endpoint(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A pool's supervisor refuses an edit that needs a restart and an invalid one before any worker hears of them:
    its summary and log said so, and its Prometheus endpoint counts them too (``wirepipe_pool_reloads_refused``,
    labelled by pipeline, beside the workers' own series)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from wirepipe.pipelines.config import read_config
    from wirepipe.pipelines.pool import Pool
    from wirepipe.pipelines.prometheus import MetricsCollector
    from wirepipe.pipelines.reload import PoolReloads, follow

    file = tmp_path / "pool.yaml"
    text = ("name: p\nsource: {type: nats, url: 'nats://127.0.0.1:1', subject: s}\n"
            "operators: [{deserialize: {format: msgpack}}, {select: [x]}]\nsink: {type: 'null'}\n")
    file.write_text(text)
    pool = Pool(read_config(str(file)), 2, file=str(file))
    follow(pool, str(file), [], watch=True)
    reloads = pool.reloader = PoolReloads(pool, str(file), [], poll=0.01, settle=0.02)
    watching = asyncio.ensure_future(reloads.watch())
    try:
        await until(lambda: reloads._running is not None)
        file.write_text(text.replace("subject: s", "subject: t"))  # a new subject: a restart
        await until(lambda: reloads.refused == 1)
        file.write_text(text.replace("[x]", "[]"))  # invalid
        await until(lambda: reloads.refused == 2)
    finally:
        watching.cancel()
    refusals = [r.getMessage() for r in caplog.records if r.getMessage().startswith("reload refused")]
    assert len(refusals) == 2 and "source.subject: 's' -> 't' needs a restart" in refusals[0], refusals
    assert "operators[1].select.fields: List should have at least 1 item" in refusals[1], refusals
    registry = CollectorRegistry()
    registry.register(MetricsCollector(pool.snapshots, pool.supervisor_snapshot))
    scraped = generate_latest(registry).decode()
    assert 'wirepipe_pool_reloads_refused_total{pipeline="p"} 2.0' in scraped
    assert 'wirepipe_pool_reloads_total{pipeline="p"} 0.0' in scraped
    assert 'wirepipe_up{pipeline="p",worker="1"} 0.0' in scraped  # the workers' series as before
    assert "config: 0 reloads rolled out to every worker, 2 refused (the running config stayed)" in reloads.summary()
