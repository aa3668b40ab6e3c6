"""Timing the wire: every record through a real NATS server, publisher pipeline to consumer pipeline.

For each combination that passed the in-process round trip, each iteration runs two
pipelines of the same operators a deployment would run, against one server (the
embedded one unless ``--url``; its credentials and TLS, ``--creds`` and ``--set``, reach every
connection the bench makes: ``connectors/nats/connection.py``, as a pipeline's):

    publisher:  records -> [pack] -> serialize -> compress -> publish (nats / jetstream)
    consumer:   consume -> decompress -> deserialize -> [unpack] -> null

On the first iteration the consumer keeps what it decoded and the run checks it equals
the input, in order (``round_trip``: the check the in-process phase makes). The ``publish`` and
``consume`` stage times and the per-record end-to-end latency (``Wirepipe-Sent-At`` to the end of
the consumer's last stage) come from these runs;
the codec stages keep their in-process figures (the same operators, measured without
a network competing for the two cores).

- Core NATS: the consumer subscribes first and receives while the publisher publishes,
  so ``consume`` includes waiting for the publisher: it is the time to receive N
  records, not the consumer's CPU alone. Core NATS is at-most-once; records that do not
  arrive make the combination fail with the count lost.
- JetStream: the publisher fills a fresh stream (file storage), then a durable pull
  consumer reads it with acks after the (null) sink, so ``consume`` is the consumer's
  own rate. The stream is deleted afterwards.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from ...codecs.formats import FORMATS
from ...connectors.nats.connection import NatsConnection, NatsConnectionConfig
from ...core.errors import WirepipeError
from ...core.stages import Stage
from ...testing import TestingSink, TestingSource
from .codec_timing import ComboResult, StageTime
from .combos import BenchPlan, Combo
from .data import BenchData
from .round_trip import round_trip_error
from .timing import batch_size_for, chunks, time_each

STALL_SECONDS = 10.0  # no record for this long: the rest are lost


def _operators(combo: Combo, schema: Any,
               dictionaries: dict[str, str]) -> tuple[list[Any], list[Any]]:
    from ...operators.compress import Compress
    from ...operators.decompress import Decompress
    from ...operators.deserialize import Deserialize
    from ...operators.pack import Pack
    from ...operators.serialize import Serialize
    from ...operators.unpack import Unpack

    positional = schema if FORMATS[combo.format].needs_schema else None
    d = dictionaries.get(combo.format) if combo.dictionary else None
    encode: list[Any] = [Pack(combo.records_per_message)] if combo.records_per_message > 1 else []
    encode.append(Serialize(combo.format, schema=positional))
    decode: list[Any] = []
    if combo.codec != "none":
        encode.append(Compress(combo.codec, combo.level, dictionary=d))
        decode.append(Decompress(combo.codec, dictionary=d))
    decode.append(Deserialize(combo.format, schema=positional, allow_pickle=True))
    if combo.records_per_message > 1:
        decode.append(Unpack())
    return encode, decode


def _stage_total(rows: Any, stage: str) -> tuple[int, int, int | None]:
    """(start, start + busy time, bytes) of a stage over a run: the time spent in it, from its first batch."""
    import pyarrow.compute as pc

    mine = rows.filter(pc.equal(rows.column("stage"), stage))
    if mine.num_rows == 0:
        raise WirepipeError(f"no {stage} rows were recorded")
    start = pc.min(mine.column("start_ns")).as_py()
    busy = pc.sum(pc.subtract(mine.column("end_ns"), mine.column("start_ns"))).as_py()
    nbytes = pc.sum(mine.column("bytes_in")).as_py()
    return start, start + busy, nbytes


def _publisher(nats: NatsConnectionConfig, transport: str, subject: str, data: BenchData, combo: Combo,
               chunks: list[list[Any]], dictionaries: dict[str, str]) -> tuple[Any, Any, TestingSink]:
    from ...metrics.recorder import MetricsRecorder
    from ...pipelines.pipeline import Pipeline

    if transport == "jetstream":
        from ...connectors.nats.jetstream_sink import JetStreamSink

        sink: Any = JetStreamSink(subject, **nats.settings(), stream={"name": _stream(subject), "subjects": [subject]},
                                  msg_id="{pipeline}-{seq}")
    else:
        from ...connectors.nats.core_sink import NatsSink

        sink = NatsSink(subject, **nats.settings())
    refused = TestingSink(keep=False)  # the dead-letter destination: why the publisher refused records
    encode, _ = _operators(combo, data.fields, dictionaries)
    pipe = Pipeline(TestingSource.from_batches(chunks, schema=data.fields), encode, sink, name=f"{subject}-pub",
                    metrics=MetricsRecorder(None, flush_interval=None), dead_letter=refused, flush_interval=3600)
    return pipe, sink, refused


def _publish_in_child(go: Any, out: Any, *args: Any) -> None:
    """The publisher process: waits for the consumer to be ready, publishes, sends back its rows."""
    try:
        pipe, sink, refused = _publisher(*args)
        go.wait(60)
        stats = asyncio.run(pipe.run_async())
        rows, _ = pipe.metrics_spec.tables()  # its MetricsRecorder
        out.send(("ok", _ipc(rows), stats.records_out, stats.rejected,
                  [f"{r.stage}: {r.error}" for r in refused.rejects[:3]], sink.name, sink.params))
    except BaseException as exc:  # reported to the parent, which fails the combination with it
        out.send(("error", f"publisher: {type(exc).__name__}: {exc}"))
    finally:
        out.close()


def _ipc(table: Any) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _one_iteration(nats: NatsConnectionConfig, transport: str, subject: str, data: BenchData, combo: Combo,
                   values: list[Any], chunk: int, dictionaries: dict[str, str], latency: list[Any],
                   verify: bool) -> list[StageTime]:
    """Publisher in a forked process (as in a deployment: its own process and core; forked for the records it
    publishes, see ``pipelines/spawn.py``), consumer here."""
    import pyarrow as pa

    from ...pipelines.spawn import fork

    n = len(values)
    batches = chunks(values, chunk)
    # The sources count messages: with k records per message, a chunk of c records is ceil(c / k).
    k = combo.records_per_message
    messages = sum(-(-len(c) // k) for c in batches)
    child, receive, go = fork(_publish_in_child, nats, transport, subject, data, combo, batches, dictionaries)
    result: list[Any] = []

    def published() -> int | None:
        """Records the publisher published, once it is done (None while it runs)."""
        if not result and receive.poll():
            result.append(receive.recv())
        if not result:
            return None if child.is_alive() else 0
        return result[0][2] if result[0][0] == "ok" else 0

    try:
        consumer, source = _consumer(nats, transport, subject, data, combo, messages, chunk, dictionaries, verify)
        if transport == "jetstream":
            go.set()
            while published() is None:
                time.sleep(0.005)
            if published():
                asyncio.run(_consume(consumer, n, published))
        else:
            asyncio.run(_consume(consumer, n, published, ready=source.ready, go=go))
        while published() is None:
            time.sleep(0.005)
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
        if transport == "jetstream":
            asyncio.run(_delete_stream(nats, _stream(subject)))
    if not result:
        raise WirepipeError("the publisher process ended without a result")
    if result[0][0] == "error":
        raise WirepipeError(result[0][1])
    _, rows_ipc, _published, pub_rejected, errors, sink_name, sink_params = result[0]
    if pub_rejected:
        raise WirepipeError(f"the publisher refused {pub_rejected} of {n} records"
                            + (f", e.g. {errors[0]}" if errors else ""))
    received = consumer.stats.records_out
    if received < n:
        raise WirepipeError(f"{n - received} of {n} records did not arrive"
                            + (" (core NATS is at-most-once: a slow consumer drops)" if transport == "nats" else ""))
    differs = round_trip_error(consumer.sink.records, values) if verify else None
    if differs:
        raise WirepipeError(f"the records that crossed NATS differ from the input (or arrived out of order): "
                            f"{differs}")
    pub_rows = pa.ipc.open_stream(rows_ipc).read_all()
    _, con_latency = consumer.metrics_spec.tables()
    p0, p1, p_bytes = _stage_total(pub_rows, Stage.PUBLISH)
    c0, c1 = _receive_window(con_latency)
    latency.append(con_latency)
    return [StageTime(Stage.PUBLISH, sink_name, sink_params, n, p_bytes, p_bytes, p0, p1),
            StageTime(Stage.CONSUME, source.name, source.params, n, p_bytes, p_bytes, c0, c1)]


def _stream(subject: str) -> str:
    return subject.replace(".", "_").upper()


def _consumer(nats: NatsConnectionConfig, transport: str, subject: str, data: BenchData, combo: Combo,
              messages: int, chunk: int, dictionaries: dict[str, str], verify: bool) -> tuple[Any, Any]:
    from ...metrics.recorder import MetricsRecorder
    from ...pipelines.pipeline import Pipeline

    if transport == "jetstream":
        from ...connectors.nats.jetstream_source import JetStreamSource

        stream = _stream(subject)
        source: Any = JetStreamSource(subject, stream=stream, durable=f"{stream}_C", **nats.settings(),
                                      count=messages, max_ack_pending=max(20000, chunk * 4))
    else:
        from ...connectors.nats.core_source import NatsSource

        source = NatsSource(subject, **nats.settings(), count=messages, pending_msgs_limit=messages + 16,
                            pending_bytes_limit=1 << 34)
    _, decode = _operators(combo, data.fields, dictionaries)
    pipe = Pipeline(source, decode, TestingSink(keep=verify), name=f"{subject}-con",
                    metrics=MetricsRecorder(None, flush_interval=None), flush_interval=0.2)
    return pipe, source


async def _consume(pipe: Any, n: int, published: Callable[[], int | None], ready: Any = None,
                   go: Any = None) -> None:
    """Run the consumer until it has every record the publisher published, or nothing arrives for a while."""
    task = asyncio.ensure_future(pipe.run_async())
    if ready is not None:
        while not ready.is_set() and not task.done():
            await asyncio.sleep(0.002)
        go.set()
    last, since = -1, time.monotonic()
    while not task.done():
        await asyncio.wait({task}, timeout=0.05)
        now = pipe.stats.records_out
        done = published()
        if done is not None and now >= done:
            pipe.source.stopping.set()
            break
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > STALL_SECONDS:
            pipe.source.stopping.set()
            break
    await task


def _receive_window(latency: Any) -> tuple[int, int]:
    """First to last arrival at the consumer (as ``nats bench`` counts a subscriber), on the monotonic clock.

    The consumer's own stage time would also count its wait for the publisher to connect.
    """
    import pyarrow.compute as pc

    if latency.num_rows == 0:
        raise WirepipeError("the consumer recorded no arrival times (no Wirepipe-Sent-At header?)")
    received = latency.column("received_ns")
    offset = time.monotonic_ns() - time.time_ns()
    return pc.min(received).as_py() + offset, pc.max(received).as_py() + offset


def probe(plan: BenchPlan, data: BenchData, combo: Combo, sizes: list[int]) -> list[float] | None:
    """Seconds one transport iteration takes on this machine now, for each of ``sizes`` records (``estimate``
    fits its transport figures to them), or None when it cannot run (the combination fails: the run will
    say why).

    A first, untimed iteration (``timing.time_each``) pays what only the first one does (imports, the first
    connection, a fresh server's start): the run's first step would pay it once, not per iteration."""
    import uuid

    server, nats = _server(plan)
    chunk = batch_size_for(data.raw_bytes)

    def iteration(records: int) -> None:
        subject = f"wirepipe.bench.probe.{uuid.uuid4().hex[:12]}"
        _one_iteration(nats, plan.transport, subject, data, combo, data.values(records), chunk, {}, [], verify=False)

    try:
        return time_each(iteration, sizes).seconds_each
    except WirepipeError:
        return None
    finally:
        if server is not None:
            server.close()


def check_server(nats: NatsConnectionConfig) -> None:
    """Fail before a long bench starts, with one line, when no NATS server answers at ``nats``'s url (or it refuses
    the credentials).

    The connection is the one ``wirepipe run`` makes (``NatsConnection``): the same log line
    the moment the server refuses (``waiting for NATS at ...``), the same ``connect_timeout``.
    """
    async def probe() -> None:
        conn = NatsConnection(nats, role="bench")
        try:
            await conn.connect()
        finally:
            await conn.close()

    try:
        asyncio.run(probe())
    except WirepipeError as exc:
        raise WirepipeError(f"{exc} (start one with `wirepipe server`, or leave out --url to use an embedded "
                            "one)") from None


def _server(plan: BenchPlan) -> tuple[Any, NatsConnectionConfig]:
    """(the embedded server started for the bench, or None, and the connection to bench against): the plan's
    server (``--url``, ``--creds``, ``--set``), else a fresh embedded one (the caller closes it)."""
    if plan.nats is not None:
        return None, plan.nats
    from ...connectors.nats.server import EmbeddedServer

    server = EmbeddedServer().start()
    return server, NatsConnectionConfig(url=server.url)


async def _delete_stream(nats: NatsConnectionConfig, stream: str) -> None:
    import contextlib

    conn = NatsConnection(nats, role="bench")
    nc = await conn.connect()
    try:
        with contextlib.suppress(Exception):
            await nc.jetstream().delete_stream(stream)
    finally:
        await conn.close()


def time_transport(data: BenchData, results: list[ComboResult], repetitions: int, plan: BenchPlan,
                   latency_out: dict[str, Any], dictionaries: dict[str, str] | None = None,
                   progress: Callable[[Combo], None] | None = None) -> list[ComboResult]:
    """Add publish/consume stage rows to every iteration of every combination that passed in-process.

    ``latency_out[combo label]`` gets the consumer's latency rows (an Arrow table) for the report.
    """
    server, nats = _server(plan)
    values = data.values(repetitions)
    chunk = batch_size_for(data.raw_bytes)
    try:
        for n_combo, r in enumerate(results):
            lat: list[Any] = []
            for i in range(len(r.iterations) if not r.error else plan.iterations):
                if not r.error:
                    subject = f"wirepipe.bench.{data.name}.c{n_combo}.i{i}".replace("-", "_")
                    try:
                        rows = _one_iteration(nats, plan.transport, subject, data, r.combo, values, chunk,
                                              dictionaries or {}, lat, verify=i == 0)
                        r.iterations[i] = _merge(r.iterations[i], rows)
                    except WirepipeError as exc:
                        r.error = f"{plan.transport}: {exc}"
                if progress is not None:  # after the step: the progress journal lists what finished
                    progress(r.combo)
            if lat and not r.error:
                import pyarrow as pa

                latency_out[r.combo.label] = pa.concat_tables(lat)
            r.wire_done = True
    finally:
        if server is not None:
            server.close()
    return results


def _merge(codec_rows: list[StageTime], wire: list[StageTime]) -> list[StageTime]:
    """Stage rows in pipeline order: ..., compress, publish, consume, decompress, ..."""
    publish, consume = wire
    out: list[StageTime] = []
    for row in codec_rows:
        if row.stage in Stage.DECODE and publish not in out:
            out += [publish, consume]
        out.append(row)
    return out
