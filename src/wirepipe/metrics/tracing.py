"""OpenTelemetry traces of the payload path: one span per batch, one per stage, linked across NATS.

A pipeline with tracing on makes, for each batch, a span named after the pipeline and under it a
span per stage, from the clock readings the run loop already takes for metrics (``run_operators``):
the source's read (``consume`` on NATS, ``generate``, ``read`` ...), each operator (``serialize``,
``compress``; ``decompress``, ``deserialize`` ...) and the sink's write (``publish`` on NATS,
``write``), with the records, rejects and payload bytes in and out as attributes. Spans are made
after the fact with those timestamps, so the pass itself runs as it does without tracing.

Across the wire: the write span's context goes out in every record's ``traceparent`` header (W3C
trace context, with ``tracestate`` when there is one). A consumer's batch span is the child of the
first ``traceparent`` its records carry, and links to the others (a consumer batch can hold records
of several publisher batches), so a publisher and its consumers are one trace. A relay replaces the
``traceparent`` it received with its own, a child of it: the trace goes on.

When: a ``tracing:`` block in the pipeline (``Pipeline(tracing=...)`` in Python), or, without one,
the standard variables (``OTEL_TRACES_EXPORTER`` other than ``none``, ``OTEL_EXPORTER_OTLP_ENDPOINT``
or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); ``OTEL_SDK_DISABLED=true`` or ``enabled: false`` turns it
off. Off, nothing of OpenTelemetry is imported and the run loop pays one ``is None`` per hook and
batch (``benchmarks/bench_tracing_overhead.py``).

Where to: a tracer provider the process already has (an application that set one up, or
``opentelemetry-instrument``) gets the spans; else wirepipe makes one per process for the
exporter configured (``otlp``: OTLP over HTTP, to ``endpoint`` or where the ``OTEL_EXPORTER_OTLP_*``
variables say; ``console``; ``none``: no exporter) with ``service.name`` = ``service_name``,
``OTEL_SERVICE_NAME`` or the pipeline's name. Needs the ``otel`` extra.

A collector that does not answer costs a run little and is said: one export (its retries included) takes at
most ``timeout``; at the end of a run, what is left is handed to the exporter for at most ``timeout`` (or the
pipeline's ``shutdown_timeout``, if shorter), and what could not be exported, then or during the run, is
dropped and counted in one warning (``tracing: 40 of 40 span(s) of this run not exported ...: dropped``).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import Field

from ..core.batch import Batch, payload_nbytes
from ..core.models import Duration, Secret, Strict
from ..core.redact import redact_secrets
from ..core.registry import install_hint, library_installed
from ..wire import Header, set_header

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger("wirepipe.metrics.tracing")

EXPORT_TIMEOUT = 2.0  # seconds one export may take, its retries included, unless tracing.timeout or OTEL_* say
MAX_LINKS = 128  # links a consumer batch span keeps to the publisher spans of its records (the rest are counted)
_NATS = ("nats", "jetstream")


class TracingConfig(Strict):
    """``tracing: {exporter: otlp, endpoint: http://collector:4318/v1/traces}`` (every field optional)."""

    enabled: bool = True
    exporter: Literal["otlp", "console", "none"] | None = Field(
        default=None, description="otlp (OTLP over HTTP), console, or none (only a tracer provider the process "
                                  "already has); default: OTEL_TRACES_EXPORTER, else otlp")
    endpoint: str | None = Field(default=None, description="the OTLP/HTTP traces URL; default: "
                                 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT, else localhost:4318")
    headers: dict[str, Secret] = Field(default_factory=dict, description="HTTP headers of the export (auth), "
                                       "e.g. {Authorization: \"${OTLP_AUTH}\"}: secrets, never shown")
    service_name: str | None = Field(default=None, description="default: OTEL_SERVICE_NAME, else the pipeline's name")
    sample_ratio: float | None = Field(default=None, ge=0, le=1, description="share of traces kept, parent-based "
                                       "(default: OTEL_TRACES_SAMPLER, else all)")
    timeout: Duration | None = Field(default=None, gt=0, description="how long one export of spans may take, its "
                                     "retries included, and the end of a run waits for the last ones (at most the "
                                     "pipeline's shutdown_timeout); past it they are dropped and counted in the log "
                                     "(default: OTEL_EXPORTER_OTLP_TRACES_TIMEOUT / OTEL_EXPORTER_OTLP_TIMEOUT, "
                                     "else 2s)")

    def export_timeout(self, env: Mapping[str, str] | None = None) -> float:
        """``timeout``, else the OTEL_* variables', else ``EXPORT_TIMEOUT`` (seconds)."""
        env = os.environ if env is None else env
        if self.timeout is not None:
            return self.timeout
        for name in ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"):
            try:
                seconds = float(env.get(name, ""))
            except ValueError:
                continue
            if seconds > 0:
                return seconds
        return EXPORT_TIMEOUT

    def http_headers(self) -> dict[str, str]:
        """The export's headers as they are sent (the model keeps them as secrets)."""
        return {k: v.get_secret_value() for k, v in self.headers.items()}


def available() -> bool:
    return library_installed("opentelemetry.sdk")


def check_installed(config: TracingConfig | None) -> None:
    """``ValueError`` naming the extra when a ``tracing:`` block asks for what is not installed."""
    if config is not None and config.enabled and not available():
        raise ValueError(f"tracing needs OpenTelemetry, which is not installed: {install_hint('otel')}")


def wanted(spec: Any, env: dict[str, str] | os._Environ[str] | None = None) -> bool:
    """Whether a pipeline with tracing ``spec`` (None: not said; False; True; a config; a tracer provider)
    traces: the spec when it says, else the OTEL_* variables."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true" or spec is False:
        return False
    if isinstance(spec, TracingConfig):
        return spec.enabled
    if spec is not None:
        return True
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def open_tracing(spec: Any, pipeline: Any) -> PipelineTracer | None:
    """The tracer of one run of ``pipeline``, or None when tracing is off (nothing imported then)."""
    if not wanted(spec):
        return None
    if not available():
        log.warning("tracing asked for (tracing: or OTEL_* variables) but OpenTelemetry is not installed: %s; "
                    "running without", install_hint("otel"))
        return None
    config = spec if isinstance(spec, TracingConfig) else TracingConfig()
    provider = spec if _is_provider(spec) else _provider(config, pipeline.name)
    return PipelineTracer(provider, pipeline)


def _is_provider(spec: Any) -> bool:
    return hasattr(spec, "get_tracer") and not isinstance(spec, (bool, TracingConfig))


_PROVIDERS: dict[tuple[Any, ...], Any] = {}  # wirepipe's own, one per export setting, for the process's life
_EXPORTERS: dict[int, CountingExporter] = {}  # the exporter of each of them, by id (they live as long as the process)


def _provider(config: TracingConfig, pipeline: str) -> Any:
    """A tracer provider the process already has (set globally by an application), else wirepipe's own."""
    from opentelemetry import trace

    current = trace.get_tracer_provider()
    if not isinstance(current, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return current
    env = os.environ
    exporter = config.exporter or env.get("OTEL_TRACES_EXPORTER", "otlp").split(",")[0].strip().lower() or "otlp"
    service = config.service_name or env.get("OTEL_SERVICE_NAME") or pipeline
    key = (exporter, config.endpoint, tuple(sorted(config.http_headers().items())), service, config.sample_ratio,
           config.export_timeout())
    provider = _PROVIDERS.get(key)
    if provider is None:
        provider = _PROVIDERS[key] = _new_provider(exporter, config, service)
    return provider


def _new_provider(exporter: str, config: TracingConfig, service: str) -> Any:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    sampler = None
    if config.sample_ratio is not None:
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        sampler = ParentBased(TraceIdRatioBased(config.sample_ratio))
    provider = TracerProvider(sampler=sampler, resource=Resource.create({SERVICE_NAME: service}),
                              shutdown_on_exit=False)
    timeout = config.export_timeout()
    inner: Any = None
    if exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        inner = OTLPSpanExporter(endpoint=config.endpoint, headers=config.http_headers() or None, timeout=timeout)
        where = redact_secrets(getattr(inner, "_endpoint", None) or config.endpoint or "the OTLP endpoint")
    elif exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        inner, where = ConsoleSpanExporter(), "the console"
    elif exporter != "none":
        log.warning("tracing: exporter %r is not one wirepipe makes (otlp, console, none): spans are not exported",
                    exporter)
    if inner is not None:
        counting = _EXPORTERS[id(provider)] = CountingExporter(inner, where, timeout)
        provider.add_span_processor(BatchSpanProcessor(cast("SpanExporter", counting)))
    atexit.register(provider.shutdown)  # what is still buffered goes out when the process ends
    return provider


class CountingExporter:
    """wirepipe's exporter (a ``SpanExporter`` by its methods: OpenTelemetry is imported only when tracing is on)
    around the one configured: it counts the spans exported and those dropped (an export
    that failed: the collector did not answer within the exporter's ``timeout``), and past a ``deadline`` (the end
    of a run waiting for the last ones) drops what it is given at once, counted, instead of trying again."""

    def __init__(self, exporter: Any, where: str, timeout: float) -> None:
        self.exporter = exporter
        self.where = where  # the endpoint, for the warning
        self.timeout = timeout
        self.exported = self.dropped = 0
        self.deadline: float | None = None  # time.monotonic() past which spans are dropped without an export
        self._lock = threading.Lock()  # the processor's worker thread and the run's thread both export

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        if self.deadline is not None and time.monotonic() >= self.deadline:
            result = SpanExportResult.FAILURE
        else:
            result = self.exporter.export(spans)
        with self._lock:
            if result == SpanExportResult.SUCCESS:
                self.exported += len(spans)
            else:
                self.dropped += len(spans)
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.exporter.force_flush(timeout_millis))

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.exported, self.dropped


class BatchTrace:
    """One batch's spans while it is processed: the batch span, and the write span once the write started."""

    __slots__ = ("context", "span", "write")

    def __init__(self, span: Any, context: Any) -> None:
        self.span = span
        self.context = context
        self.write: Any = None


class PipelineTracer:
    """Makes the spans of one run of a pipeline (``Pipeline`` calls ``begin``, ``writing``, ``end``)."""

    def __init__(self, provider: Any, pipeline: Any) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        from .. import __version__

        self.provider = provider
        self.exporter = _EXPORTERS.get(id(provider))  # None: a provider the process had, with its own exporter
        self._counts = self.exporter.counts() if self.exporter is not None else (0, 0)  # before this run
        self._shutdown_timeout = getattr(pipeline, "shutdown_timeout", None)
        self.tracer = provider.get_tracer("wirepipe", __version__)
        self._trace = trace
        self._propagator = TraceContextTextMapPropagator()
        self.name = pipeline.name
        source, sink = pipeline.source, pipeline.sink
        self._operators = [(op.stage, op.name) for op in pipeline.operators]
        self._source = (source.stage, source.name, source.type in _NATS, _destination(source.params))
        self._sink = (sink.stage if sink is not None else "write", sink.name if sink is not None else "null",
                      sink is not None and sink.type in _NATS,
                      _destination(sink.params) if sink is not None else None)
        self._offset = time.time_ns() - time.monotonic_ns()  # monotonic stamps -> Unix ns, read once

    def begin(self, batch: Batch, read_start: int, read_end: int) -> BatchTrace:
        """The batch span (from when the source started reading it), the child of the first ``traceparent``
        its records carry, linked to the others."""
        trace = self._trace
        parents = _distinct(batch.headers)
        parent_ctx = None
        links = []
        for i, carrier in enumerate(parents[:MAX_LINKS + 1]):
            ctx = self._propagator.extract(carrier)
            span_context = trace.get_current_span(ctx).get_span_context()
            if not span_context.is_valid:
                continue
            if parent_ctx is None:
                parent_ctx = ctx
            elif i <= MAX_LINKS:
                links.append(trace.Link(span_context))
        attributes: dict[str, Any] = {"wirepipe.pipeline": self.name,
                                      "wirepipe.records": len(batch.values) + len(batch.rejected)}
        if len(parents) > 1:
            attributes["wirepipe.traces_in"] = len(parents)  # distinct publisher contexts, linked up to MAX_LINKS
        span = self.tracer.start_span(self.name, context=parent_ctx, links=links, attributes=attributes,
                                      start_time=read_start + self._offset)
        ctx = trace.set_span_in_context(span)
        stage, name, nats, destination = self._source
        read = self.tracer.start_span(stage, context=ctx, kind=trace.SpanKind.CONSUMER if nats else
                                      trace.SpanKind.INTERNAL, start_time=read_start + self._offset,
                                      attributes=_attrs(stage, name, len(batch.values), len(batch.rejected), None,
                                                        payload_nbytes(batch.values), nats, destination))
        read.end(end_time=read_end + self._offset)
        return BatchTrace(span, ctx)

    def writing(self, state: BatchTrace, batch: Batch, start: int) -> None:
        """Start the write span and put its context in every record's headers (``traceparent``)."""
        trace = self._trace
        stage, _, nats, _ = self._sink
        state.write = span = self.tracer.start_span(stage, context=state.context, start_time=start + self._offset,
                                                    kind=trace.SpanKind.PRODUCER if nats else trace.SpanKind.INTERNAL)
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=trace.set_span_in_context(span))
        state_out = carrier.get(Header.TRACESTATE)
        # a tracestate the records came with belongs to the context replaced: it goes, or is the new one's
        set_header(batch, Header.TRACEPARENT, carrier[Header.TRACEPARENT], drop=None if state_out else Header.TRACESTATE)
        if state_out:
            set_header(batch, Header.TRACESTATE, state_out)

    def end(self, state: BatchTrace, stamps: Any, batch: Batch, end: int, refused: int) -> None:
        """The operators' spans from the pass's ``stamps`` (``run_operators``), then the end of the write span
        (``refused``: the records the sink refused) and of the batch span."""
        offset = self._offset
        tracer, ctx = self.tracer, state.context
        starts, ends, records, rejects, sizes, *_ = stamps
        for i, (stage, name) in enumerate(self._operators):
            tracer.start_span(stage, context=ctx, start_time=starts[i] + offset, attributes=_attrs(
                stage, name, records[i + 1], rejects[i + 1] - rejects[i], sizes[i], sizes[i + 1])
            ).end(end_time=ends[i] + offset)
        stage, name, nats, destination = self._sink
        write = state.write
        if write is not None:
            write.set_attributes(_attrs(stage, name, len(batch.values), refused, None, sizes[-1], nats, destination))
            write.end(end_time=end + offset)
        state.span.set_attribute("wirepipe.rejected", rejects[-1] + refused)
        state.span.end(end_time=end + offset)

    def finish(self) -> None:
        """Hand what was recorded to the exporter (a short run's spans go out before the process ends), for at
        most the exporter's timeout (or the pipeline's ``shutdown_timeout``, if shorter): what is left then is
        dropped; one warning counts what this run could not export."""
        exporter = self.exporter
        if exporter is None:  # a provider of another make: its own exporter and timeouts
            flush = getattr(self.provider, "force_flush", None)
            if flush is not None:
                flush()
            return
        budget = min(exporter.timeout, self._shutdown_timeout or exporter.timeout)
        exporter.deadline = time.monotonic() + budget
        try:
            self.provider.force_flush()
        finally:
            exporter.deadline = None
        exported, dropped = (now - before for now, before in zip(exporter.counts(), self._counts, strict=True))
        if dropped:
            log.warning("tracing: %d of %d span(s) of this run not exported to %s (it did not take them within "
                        "%gs: tracing.timeout): dropped", dropped, exported + dropped, exporter.where, exporter.timeout)


def _attrs(stage: str, name: str, records: int, rejected: int, bytes_in: int | None, bytes_out: int | None,
           nats: bool = False, destination: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"wirepipe.stage": stage, "wirepipe.operator": name, "wirepipe.records": records,
                           "wirepipe.rejected": rejected}
    if bytes_in is not None:
        out["wirepipe.bytes_in"] = bytes_in
    if bytes_out is not None:
        out["wirepipe.bytes_out"] = bytes_out
    if nats:
        out["messaging.system"] = "nats"
        out["messaging.batch.message_count"] = records
        if destination:
            out["messaging.destination.name"] = destination
    return out


def _destination(params: dict[str, Any]) -> str | None:
    value = params.get("subject") or params.get("stream")
    return str(value) if value else None


def _distinct(headers: Any) -> list[dict[str, str]]:
    """The distinct trace contexts (``traceparent`` + ``tracestate``) the records carry, in record order."""
    if headers is None:
        return []
    if isinstance(headers, dict):
        return [headers] if Header.TRACEPARENT in headers else []
    seen: dict[str, dict[str, str]] = {}
    for h in headers:
        if h:
            tp = h.get(Header.TRACEPARENT)
            if tp is not None and tp not in seen:
                seen[tp] = h
    return list(seen.values())



__all__ = ["MAX_LINKS", "BatchTrace", "PipelineTracer", "TracingConfig", "check_installed", "open_tracing", "wanted"]
