"""OpenTelemetry traces across the wire, on a real nats-server: a publisher pipeline and a consumer
pipeline are one trace (the consumer's batch spans are children of the publisher's publish spans, by
the ``traceparent`` each message carries), with a span per stage and its counts and bytes; exported
by OTLP from real processes where configured; off (and nothing imported) otherwise."""

from __future__ import annotations

import asyncio
import http.server
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli import cli_env, invoke, wirepipe
from tests.nats_fixtures import expected
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.metrics.tracing import wanted


def provider() -> tuple[Any, Any]:
    """A tracer provider of its own (one per pipeline, as two processes would have) and its in-memory exporter."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    p = TracerProvider()
    p.add_span_processor(SimpleSpanProcessor(exporter))
    return p, exporter


def by_name(spans: Any, name: str) -> list[Any]:
    return [s for s in spans if s.name == name]


def test_a_publisher_and_a_consumer_over_nats_are_one_trace(nats_server: EmbeddedServer) -> None:
    from wirepipe import Pipeline, generate_source
    from wirepipe.connectors.nats.jetstream_sink import JetStreamSink
    from wirepipe.connectors.nats.jetstream_source import JetStreamSource
    from wirepipe.operators.compress import Compress
    from wirepipe.operators.decompress import Decompress
    from wirepipe.operators.deserialize import Deserialize
    from wirepipe.operators.serialize import Serialize
    from wirepipe.testing import TestingSink

    url = nats_server.url
    pub_provider, pub_spans = provider()
    con_provider, con_spans = provider()
    sink = TestingSink()

    async def scenario() -> None:
        await Pipeline(generate_source("point", count=200, batch_size=50), [Serialize("msgpack"), Compress("zstd")],
                       JetStreamSink("tr.js", url=url, stream={"name": "TR", "subjects": ["tr.js"]}),
                       name="pub", tracing=pub_provider).run_async()
        await Pipeline(JetStreamSource(stream="TR", durable="c", url=url, count=200, batch_size=80),
                       [Decompress("auto"), Deserialize("auto")], sink, name="con",
                       tracing=con_provider).run_async()

    asyncio.run(scenario())
    assert sink.records == expected("point", 200)
    from opentelemetry.trace import SpanKind

    published = pub_spans.get_finished_spans()
    batches = by_name(published, "pub")
    assert len(batches) == 4 and len(published) == 4 * 5  # per batch: itself, generate, serialize, compress, publish
    publish = by_name(published, "publish")
    assert [s.kind for s in publish] == [SpanKind.PRODUCER] * 4
    assert {s.parent.span_id for s in publish} == {b.context.span_id for b in batches}
    assert [s.attributes["wirepipe.records"] for s in by_name(published, "serialize")] == [50] * 4
    compress = by_name(published, "compress")
    assert [c.attributes["wirepipe.bytes_in"] for c in compress] == [350] * 4  # 7-byte msgpack points
    assert [p.attributes["wirepipe.bytes_out"] for p in publish] == [c.attributes["wirepipe.bytes_out"]
                                                                     for c in compress]
    assert publish[0].attributes["messaging.destination.name"] == "tr.js"

    consumed = con_spans.get_finished_spans()
    con_batches = by_name(consumed, "con")
    publish_by_id = {s.context.span_id: s for s in publish}
    reached = set()
    for b in con_batches:  # a child of a publish span, in that span's trace; linked to the others it holds
        parent = publish_by_id[b.parent.span_id]
        assert b.context.trace_id == parent.context.trace_id
        reached |= {b.parent.span_id} | {link.context.span_id for link in b.links}
        assert b.attributes.get("wirepipe.traces_in", 1) == 1 + len(b.links)
        children = [s for s in consumed if s.parent is not None and s.parent.span_id == b.context.span_id]
        assert [s.name for s in children] == ["consume", "decompress", "deserialize", "write"]
        assert all(s.context.trace_id == b.context.trace_id for s in children)
        assert children[0].kind == SpanKind.CONSUMER and children[0].attributes["messaging.system"] == "nats"
    assert reached == set(publish_by_id)  # every publisher batch is reached from the consumer's trace
    assert sum(s.attributes["wirepipe.records"] for s in by_name(consumed, "consume")) == 200
    assert sum(s.attributes["wirepipe.bytes_in"] for s in by_name(consumed, "decompress")) == \
        sum(p.attributes["wirepipe.bytes_out"] for p in publish)  # the same payloads, counted at both ends
    assert sum(s.attributes["wirepipe.bytes_out"] for s in by_name(consumed, "decompress")) == 200 * 7


def test_a_relay_continues_the_trace(nats_server: EmbeddedServer) -> None:
    """Publisher -> relay (consume, re-encode, publish) -> consumer: the relay's publish spans are in the
    publisher's trace, and the consumer's batch spans are their children."""
    from wirepipe import Pipeline, generate_source
    from wirepipe.connectors.nats.jetstream_sink import JetStreamSink
    from wirepipe.connectors.nats.jetstream_source import JetStreamSource
    from wirepipe.operators.compress import Compress
    from wirepipe.operators.decompress import Decompress
    from wirepipe.operators.deserialize import Deserialize
    from wirepipe.operators.serialize import Serialize
    from wirepipe.testing import TestingSink

    url = nats_server.url
    (pp, ps), (rp, rs), (cp, cs) = provider(), provider(), provider()

    async def scenario() -> None:
        await Pipeline(generate_source("point", count=60, batch_size=60), [Serialize("msgpack"), Compress("zstd")],
                       JetStreamSink("a", url=url, stream={"name": "A", "subjects": ["a"]}), name="pub",
                       tracing=pp).run_async()
        await Pipeline(JetStreamSource(stream="A", durable="r", url=url, count=60, batch_size=60),
                       [Decompress("auto"), Deserialize("auto"), Serialize("json"), Compress("gzip")],
                       JetStreamSink("b", url=url, stream={"name": "B", "subjects": ["b"]}), name="relay",
                       tracing=rp).run_async()
        await Pipeline(JetStreamSource(stream="B", durable="c", url=url, count=60, batch_size=60),
                       [Decompress("auto"), Deserialize("auto")], TestingSink(), name="con",
                       tracing=cp).run_async()

    asyncio.run(scenario())
    (first,) = by_name(ps.get_finished_spans(), "publish")
    relayed = by_name(rs.get_finished_spans(), "publish")
    assert {s.context.trace_id for s in relayed} == {first.context.trace_id}
    ends = by_name(cs.get_finished_spans(), "con")
    assert {s.parent.span_id for s in ends} <= {s.context.span_id for s in relayed}
    assert {s.context.trace_id for s in ends} == {first.context.trace_id}


class Collector(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP receiver on loopback: keeps the spans of every ExportTraceServiceRequest it is sent."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, Any]] = []  # (service.name, span)
        self.requests: list[tuple[str, dict[str, str]]] = []  # (path with its query, headers by lower-case name) of each export
        super().__init__(("127.0.0.1", 0), _Receive)


class _Receive(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest.FromString(body)
        server: Any = self.server
        server.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
        for rs in request.resource_spans:
            service = next(a.value.string_value for a in rs.resource.attributes if a.key == "service.name")
            for ss in rs.scope_spans:
                server.spans += [(service, s) for s in ss.spans]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()


@pytest.mark.slow
def test_worker_processes_export_one_trace_by_otlp(nats_server: EmbeddedServer, collector: Collector,
                                                   make_pipeline: Callable[..., Path]) -> None:
    """``wirepipe run`` processes: the publisher by its ``tracing:`` block, the consumer by the standard
    OTEL_* variables alone; both export to one OTLP receiver, and the consumer's spans join the
    publisher's traces."""
    endpoint = f"http://127.0.0.1:{collector.server_address[1]}"
    pub = make_pipeline({
        "name": "points-publish", "source": {"type": "generate", "dataset": "point", "count": 300, "batch_size": 100},
        "operators": [{"serialize": {"format": "msgpack"}}, {"compress": {"codec": "zstd"}}],
        "sink": {"type": "jetstream", "url": nats_server.url, "subject": "p.js",
                 "stream": {"name": "P", "subjects": ["p.js"]}},
        "tracing": {"endpoint": f"{endpoint}/v1/traces"}})
    con = make_pipeline({
        "name": "points-archive",
        "source": {"type": "jetstream", "url": nats_server.url, "stream": "P", "durable": "a", "batch_size": 300},
        "operators": [{"decompress": {"codec": "auto"}}, {"deserialize": {"format": "auto"}}],
        "sink": {"type": "null"}})
    done = wirepipe("run", str(pub), "--no-status")
    assert done.returncode == 0, done.stderr
    done = wirepipe("run", str(con), "--no-status", "--count", "300",
                    env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SERVICE_NAME": "archive"})
    assert done.returncode == 0, done.stderr
    services = {service for service, _ in collector.spans}
    assert services == {"points-publish", "archive"}
    publish = {s.span_id: s for service, s in collector.spans if s.name == "publish"}
    consumer = [s for service, s in collector.spans if service == "archive" and s.name == "points-archive"]
    assert len(publish) == 3 and consumer
    for span in consumer:
        assert span.parent_span_id in publish and span.trace_id == publish[span.parent_span_id].trace_id
    records = [a.value.int_value for _, s in collector.spans if s.name == "consume"
               for a in s.attributes if a.key == "wirepipe.records"]
    assert sum(records) == 300


@pytest.mark.slow
def test_tracing_headers_and_the_endpoint_query_are_secrets_on_every_surface(collector: Collector, tmp_path: Path,
                                                                            make_pipeline: Callable[..., Path]
                                                                            ) -> None:
    """The exporter sends the header and the query as given; neither reaches a metrics file's metadata (every
    file of both runs), stdout or stderr, nor the exporter's warnings when the endpoint does not answer, nor a
    config error."""
    import glob

    import pyarrow.parquet as pq

    header, query = "Bearer HDR-SECRET-1", "QRY-SECRET-2"
    port = collector.server_address[1]

    def traced(endpoint: str, name: str) -> Path:
        return make_pipeline({
            "name": name, "source": {"type": "generate", "dataset": "point", "count": 200, "batch_size": 100},
            "operators": [{"serialize": {"format": "json"}}], "sink": {"type": "null"},
            "metrics": {"path": str(tmp_path / f"{name}.parquet")},
            "tracing": {"endpoint": endpoint, "headers": {"Authorization": "${OTLP_AUTH}"}}})

    good = traced(f"http://127.0.0.1:{port}/v1/traces?token={query}", "good")
    done = wirepipe("run", str(good), "--no-status", env={"OTLP_AUTH": header})
    assert done.returncode == 0, done.stderr
    assert collector.requests and {(path, h["authorization"]) for path, h in collector.requests} == {
        (f"/v1/traces?token={query}", header)}  # what the exporter sends: the secrets as given
    unreachable = traced(f"http://127.0.0.1:1/v1/traces?token={query}", "unreachable")
    lost = wirepipe("run", str(unreachable), "--no-status", env={"OTLP_AUTH": header})
    assert lost.returncode == 0, lost.stderr
    assert "/v1/traces?***" in lost.stderr  # the exporter's warning, its query hidden
    files = sorted(f for f in glob.glob(str(tmp_path / "**" / "*.parquet"), recursive=True) if Path(f).is_file())
    assert [Path(f).parent.name for f in files] == ["good.parquet", "unreachable.parquet"], files  # every one
    for f in files:
        config = pq.read_schema(f).metadata[b"wirepipe.config"].decode()
        assert "HDR-SECRET" not in config and "QRY-SECRET" not in config, (f, config)
        assert '"headers": {"Authorization": "***"}' in config and "/v1/traces?***" in config
    for text in (done.stdout, done.stderr, lost.stdout, lost.stderr):
        assert "HDR-SECRET" not in text and "QRY-SECRET" not in text, text
    bad = make_pipeline({"name": "bad", "source": {"type": "generate", "dataset": "point", "count": 1},
                         "tracing": {"headers": {"Authorization": 98765432101}, "endpoint": f"x?token={query}",
                                     "exporter": "zipkin"}})
    refused = wirepipe("validate", str(bad))
    assert refused.returncode == 2 and "tracing.headers.Authorization" in refused.stderr, refused.stderr
    assert "98765432101" not in refused.stderr and "QRY-SECRET" not in refused.stderr, refused.stderr


@pytest.mark.parametrize(("spec", "env", "on"), [
    (None, {}, False),
    (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    (None, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
    (None, {"OTEL_TRACES_EXPORTER": "console"}, True),
    (None, {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
    (True, {"OTEL_SDK_DISABLED": "true"}, False),
    (False, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
    (True, {}, True),
])
def test_when_tracing_is_on(spec: Any, env: dict[str, str], on: bool) -> None:
    assert wanted(spec, env) is on


def test_off_nothing_of_opentelemetry_is_imported(tmp_path: Path) -> None:
    code = ("import sys\nfrom wirepipe import generate_source, serialize, null_sink\n"
            "(generate_source('point', count=10) | serialize('msgpack') | null_sink()).run()\n"
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    env = {k: v for k, v in cli_env().items() if not k.startswith("OTEL_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_bad_tracing_block_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("name: t\nsource: {type: generate, dataset: point, count: 1}\ntracing: {exporter: zipkin}\n")
    done = invoke("validate", str(path))
    assert done.returncode == 2 and f"{path}: tracing.exporter: " in done.stderr, done.stderr
    assert "'otlp', 'console' or 'none'" in done.stderr, done.stderr


def test_a_tracing_block_without_opentelemetry_names_the_extra(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("name: t\nsource: {type: generate, dataset: point, count: 1}\ntracing: {}\n")
    code = ("import sys\nsys.modules['opentelemetry'] = None  # as if the otel extra were not installed\n"
            "from wirepipe.cli import main\nsys.argv = ['wirepipe', 'validate', sys.argv[1]]\nmain()")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert (f"{path}: tracing: tracing needs OpenTelemetry, which is not installed: pip install '.[otel]' in wirepipe's clone"
            in out.stderr), out.stderr


def test_an_unreachable_collector_costs_a_run_one_export_timeout_and_its_dropped_spans_are_counted(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spans for a collector that refuses: the end of the run hands them over for at most the exporter's timeout
    (retries included), then says how many of the run's spans were dropped (before: it waited through the
    exporter's retries, 7.2 s for a closed port, and said nothing of the spans)."""
    from wirepipe import Pipeline, generate_source
    from wirepipe.metrics.tracing import TracingConfig
    from wirepipe.operators.serialize import Serialize
    from wirepipe.testing import TestingSink

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0.5")  # as OpenTelemetry's exporter reads it: seconds
    config = TracingConfig(endpoint="http://127.0.0.1:1/v1/traces?token=QRY-SECRET-3")  # nothing listens on port 1
    for _ in range(2):  # the process's provider for this endpoint, its counts per run
        caplog.clear()
        stats = Pipeline(generate_source("point", count=1000, batch_size=100), [Serialize("msgpack")],
                         TestingSink(keep=False), name="traced", tracing=config).run()
        assert stats.records_out == 1000
        warned = [r.getMessage() for r in caplog.records if r.name == "wirepipe.metrics.tracing"]
        # a span per batch, its read, its serialize and its write: 10 batches
        assert warned == ["tracing: 40 of 40 span(s) of this run not exported to http://127.0.0.1:1/v1/traces?*** (it "
                          "did not take them within 0.5s: tracing.timeout): dropped"]


def test_the_export_timeout_is_the_tracing_blocks_else_the_otel_variables_else_two_seconds() -> None:
    from wirepipe.metrics.tracing import TracingConfig

    assert TracingConfig(timeout="300ms").export_timeout({"OTEL_EXPORTER_OTLP_TIMEOUT": "7"}) == 0.3
    assert TracingConfig().export_timeout({"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "4",
                                           "OTEL_EXPORTER_OTLP_TIMEOUT": "7"}) == 4.0
    assert TracingConfig().export_timeout({"OTEL_EXPORTER_OTLP_TIMEOUT": "7"}) == 7.0
    assert TracingConfig().export_timeout({"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}) == 2.0
