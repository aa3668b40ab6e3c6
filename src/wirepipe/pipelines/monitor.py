"""Progress for humans and for Prometheus while a pipeline runs.

- A one-line status on stderr every ``status_interval``: records/s and MB/s over the
  last interval, totals, errors, dropped (slow consumer; ``reread`` when the source read them again), lag,
  reconnects, ``sink unavailable: <error>`` while the sink fails (the records wait, see run.py), and
  ``waiting for <what>`` while the run waits for a server or a stream before it can start.
- Optional ``/metrics`` and ``/healthz`` on a port (``prometheus.py``); ``wirepipe_rejections_total`` counts
  rejected records by ``stage``, ``operator`` and ``reason`` (``rejections.py``).
- At the end, ``run_summary``: counts, the rejections by reason, where output, rejected
  records and metrics went.

Configured in the pipeline YAML::

    monitor: {status_interval: 10s, prometheus: {port: 9464, host: 127.0.0.1}}
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from ..connectors.connector import AtLeastOnce, ConfirmsWrites, CountsLoss, WritesFiles
from ..core.models import Duration, Strict
from ..core.workers import Worker

if TYPE_CHECKING:
    from .run import PipelineRun

log = logging.getLogger("wirepipe")


class PrometheusConfig(Strict):
    port: int = Field(ge=0, le=65535, description="0 picks a free port (logged)")
    host: str = "127.0.0.1"


class MonitorConfig(Strict):
    """``monitor: {status_interval: 10s, prometheus: {port: 9464}}``"""

    status_interval: Duration = Field(default=10.0, description="0 turns the status line off")
    live: bool = Field(default=False, description="rewrite one status line in place (a terminal) "
                                                   "instead of printing a line per interval")
    prometheus: PrometheusConfig | None = None


def snapshot(run: PipelineRun) -> dict[str, Any]:
    """The counters of a pipeline's run (``PipelineRun``: in progress or ended), for the status line, Prometheus
    and tests."""
    stats = run.stats
    pipeline = run.pipeline
    source = pipeline.source
    conns = nats_connections(pipeline)
    lag = source.lag()
    losses = source.losses() if isinstance(source, CountsLoss) else {}
    sink = pipeline.sink
    recorder = run.metrics
    return {
        "records_in": stats.records_in,
        "records_out": stats.records_out,
        "messages_out": stats.messages_out,  # values written: several records each after ``pack``
        # bytes_out is summed by the run loop only with metrics on; NATS sinks count their own,
        # file sinks are measured on disk.
        "bytes_out": stats.bytes_out or sink_bytes(pipeline.sink),
        "rejected": stats.rejected,
        # by stage, operator and reason: [[stage, operator, reason, count, example, seq], ...]
        "rejections": stats.rejections.rows(),
        "projected": stats.projected,
        # records acknowledged to a source that takes acks (a durable); an ordered consumer or core NATS takes none
        "acked": stats.acked if isinstance(source, AtLeastOnce) else 0,
        "acked_messages": stats.acked_messages if isinstance(source, AtLeastOnce) else 0,  # a pool's messages out
        "sink_errors": stats.sink_errors,
        "sink_error": run.sink_error,  # text for the status line; sink_up for Prometheus
        "sink_up": 0 if run.sink_error else 1,
        # messages the NATS client dropped (a slow consumer): lost (core NATS: in ``lost`` too), or read again from
        # the stream by the source (``reread``: the ordered JetStream consumer), never both
        **client_drops(conns),
        # core NATS: every message known lost (sequence gaps, client drops, discarded at stop); see connectors/nats/gaps.py
        "lost": losses.get("lost", 0),
        # of the lost: what only a publisher's stamp claims, past the last message received (unconfirmed)
        "lost_tail": losses.get("tail", 0),
        # stamps whose publisher or numbers cannot be read: ignored, never a loss figure
        "malformed_stamps": losses.get("malformed", 0),
        # core NATS: publishers not heard from since a disconnect (what they sent meanwhile is not counted yet)
        "unsure": losses.get("unsure", 0),
        # core NATS: publishers forgotten past the table's bound (gaps.MAX_PUBLISHERS): their later losses not counted
        "forgotten_publishers": losses.get("forgotten", 0),
        "duplicates": losses.get("duplicates", 0),
        # at-least-once: records read again after a lost ack or a dead worker (every duplicate written is among
        # them), and records the sink's destination already had (kept once)
        "redelivered": source.redelivered if isinstance(source, AtLeastOnce) else 0,
        "deduplicated": sink.deduplicated if isinstance(sink, ConfirmsWrites) else 0,
        # JetStream sink: records given the Nats-Msg-Id of another record of their batch (a msg_id template)
        "repeated_msg_ids": getattr(pipeline.sink, "repeated_msg_ids", 0),
        # records still awaiting acknowledgement or redelivery when a bounded run ended (0 while it runs)
        "outstanding": stats.outstanding,
        # every loss figure of the source by kind (``CountsLoss.losses``: missing, dropped, discarded...), so a pool
        # sums them as a single run shows them; a dict, so neither the status line nor Prometheus repeat it
        "losses": losses,
        "reconnects": sum(c.stats.reconnects for c in conns),
        "disconnects": sum(c.stats.disconnects for c in conns),
        "lag": lag,
        "running": run.running,
        "connected": all(c.nc is not None and c.nc.is_connected for c in conns),
        # what the run waits for before it can read or write: a server that refuses, a stream not created yet
        "waiting": source.waiting or next((c.waiting for c in conns if getattr(c, "waiting", None)), None)
        or (recorder.waiting if recorder is not None else None),
        # the metrics' own writing (a full disk delays them, never drops them): counters, and the error while it lasts
        **(recorder.figures() if recorder is not None else {}),
        "metrics_error": recorder.failing if recorder is not None else None,
        "metrics_up": 0 if recorder is not None and recorder.failing else 1,
        # a hot reload (``run --watch``): versions applied, changes refused
        **(pipeline.reloader.counters() if pipeline.reloader is not None else {}),
    }


def nats_connections(pipeline: Any) -> list[Any]:
    """The NATS connections of a pipeline's source, sink and dead letter (``NatsConnection``)."""
    parts = (pipeline.source, pipeline.sink, pipeline.dead_letter)
    return [c for c in (getattr(part, "conn", None) for part in parts) if c is not None and hasattr(c, "stats")]


def client_drops(conns: list[Any]) -> dict[str, int]:
    """The messages the NATS client dropped past a subscription's pending limits (a slow consumer), by what
    became of them: ``dropped`` (not read again: a core NATS source counts them in ``lost`` too) and ``reread``
    (read again from the stream by a source whose connection says so: ``NatsConnection.drops_read_again``)."""
    figures = {"dropped": 0, "reread": 0}
    for conn in conns:
        figures["reread" if getattr(conn, "drops_read_again", False) else "dropped"] += conn.stats.slow_consumer_drops
    return figures


def sink_bytes(sink: Any) -> int:
    """Bytes a sink has written: its own count (NATS sinks), else the size of its files on disk."""
    if sink is None:
        return 0
    counted = getattr(sink, "bytes", None)
    if isinstance(counted, int):
        return counted
    return sum(_size(p) for p in output_files(sink))


def output_files(sink: Any) -> list[Path]:
    """The files a file sink has written or is writing (``WritesFiles.files``)."""
    return list(dict.fromkeys(Path(p) for p in sink.files)) if isinstance(sink, WritesFiles) else []


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# Counters shown after the rates when they are not zero, in this order; a counter that a connector adds
# to ``snapshot`` later and that is not listed here is shown too, by its name.
STATUS_COUNTERS = (("rejected", "rejected"), ("projected", "projected"), ("sink_errors", "sink errors"),
                   ("lost", "lost"), ("lost_tail", "of them claimed by stamps alone"),
                   ("unsure", "publishers unheard since a disconnect"), ("dropped", "dropped"),
                   ("reread", "dropped by the client and read again"),
                   ("malformed_stamps", "malformed stamps"), ("forgotten_publishers", "publishers forgotten"),
                   ("duplicates", "duplicates"), ("redelivered", "redelivered"),
                   ("deduplicated", "already stored"), ("repeated_msg_ids", "given a repeated Nats-Msg-Id"),
                   ("acked", "acked"), ("reconnects", "reconnects"))
_NOT_COUNTERS = {"records_in", "records_out", "messages_out", "acked_messages", "bytes_out", "lag", "running",
                 "connected", "disconnects", "sink_up", "metrics_up"}  # 0/1 gauges for Prometheus; the line says "sink unavailable" instead


def status_line(name: str, now: dict[str, Any], before: dict[str, Any] | None, seconds: float) -> str:
    """records/s and MB/s over the last interval, totals, lag, then every non-zero counter."""
    prev = before or {"records_out": 0, "bytes_out": 0}
    rate = (now["records_out"] - prev["records_out"]) / seconds if seconds > 0 else 0.0
    mbps = (now["bytes_out"] - prev["bytes_out"]) / seconds / 1e6 if seconds > 0 else 0.0
    parts = [f"{name}: {rate:,.0f} rec/s", f"{mbps:,.2f} MB/s", f"{now['records_out']:,} out"]
    if now.get("lag") is not None:
        parts.append(f"lag {now['lag']:,}")
    shown = dict(STATUS_COUNTERS)
    extra = [k for k, v in now.items() if k not in shown and k not in _NOT_COUNTERS
             and isinstance(v, int) and not isinstance(v, bool)]
    for key in [*shown, *extra]:
        value = now.get(key)
        if value:
            parts.append(f"{value:,} {shown.get(key, key.replace('_', ' '))}")
    if now.get("sink_error"):
        parts.append(f"sink unavailable: {now['sink_error']}")
    if now.get("metrics_error"):
        parts.append(f"metrics wait for room: {now['metrics_error']}")
    if now.get("waiting"):
        parts.append(f"waiting for {now['waiting']}")
    return ", ".join(parts)


def run_summary(run: PipelineRun, stats: Any) -> str:
    """The end of a run in words: counts, rate, rejects by reason, and where the output, rejected records and
    metrics went (of the pipeline it ran last: a hot reload may have changed its dead letter and metrics)."""
    pipeline = run.pipeline
    text = (f"{pipeline.name}: {stats.records_out} records out of {stats.records_in}{read_unit(pipeline)} in "
            f"{stats.elapsed:.2f}s ({stats.records_per_second:,.0f} records/s"
            f"{messages_summary(stats.messages_out, stats.records_out, stats.elapsed)}), {stats.rejected} rejected")
    reloads = pipeline.reloader.summary(stats.batches) if pipeline.reloader is not None else None
    lines = [*ending_lines(stats), *([reloads] if reloads else []), *rejection_lines(stats.rejections.rows()),
             *run_outputs(run)]
    return text + run_figures(pipeline, stats) + "\n  " + "\n  ".join(lines)


def read_unit(pipeline: Any) -> str:
    """What a run's "records in" counted: messages, when an ``unpack`` (before any ``pack``) makes records of
    them later: the source cannot know how many each carries."""
    from ..core.stages import Stage

    framing = {Stage.PACK, Stage.UNPACK}  # what makes several records one message, and one message records again
    first = next((stage for stage in (op.stage for op in pipeline.operators) if stage in framing), None)
    return " messages" if first == Stage.UNPACK else ""


def messages_summary(messages: int, records: int, seconds: float) -> str:
    """The messages a run wrote, when ``pack`` put several records in each (records are counted as records)."""
    if messages == records:
        return ""
    rate = f", {messages / seconds:,.0f} messages/s" if seconds > 0 else ""
    return f"; {messages} messages{rate}"


def run_figures(pipeline: Any, stats: Any) -> str:
    """The summary's figures after the counts: projected, lost by kind, read again after a client drop, redelivered,
    deduplicated, awaiting redelivery, interrupted (``run``, ``capture``)."""
    text = ""
    if stats.projected:
        text += f", {stats.projected} projected (fields the schema does not declare dropped: extra_fields: drop)"
    text += loss_summary(getattr(stats, "losses", None))
    reread = client_drops(nats_connections(pipeline))["reread"]
    if reread:
        text += f", {reread} dropped by the client and read again from the stream (none lost)"
    redelivers = isinstance(pipeline.source, AtLeastOnce)
    text += redelivery_summary(stats.redelivered if redelivers else None, stats.deduplicated,
                               getattr(pipeline.sink, "repeated_msg_ids", 0))
    return text + ending_summary(stats.outstanding, stats.interrupted)


def ending_lines(stats: Any) -> list[str]:
    """The summary's lines on what the run could not finish: a drain cut short, input it could not read."""
    lines = [f"drain cut: {stats.cut}"] if stats.cut else []
    if stats.unreadable:
        from ..connectors.connector import describe_unreadable

        lines.append(f"not read: {describe_unreadable(stats.unreadable)}")
    return lines


def ending_summary(outstanding: int, interrupted: bool) -> str:
    """How the run ended, when it did not simply reach its end: records still awaiting redelivery (JetStream)
    and an interruption (SIGINT before the end of a bounded run)."""
    text = f", {outstanding} records awaiting redelivery" if outstanding else ""
    return text + (", interrupted (SIGINT) before its end" if interrupted else "")


def rejection_lines(rows: list[Any]) -> list[str]:
    """The summary's rejections, one line per stage, operator and reason (``rejections.Rejections.lines``)."""
    from ..core.rejections import Rejections

    return [f"rejected: {line}" for line in Rejections.from_rows(rows).lines()] if rows else []


def run_outputs(run: PipelineRun) -> list[str]:
    """Where a run's output, dead letters (when it rejected any) and metrics went (``output: jsonl out.jsonl (1.20
    MB)``): the run summary's lines, and each pool worker's."""
    pipeline = run.pipeline
    where = [f"output: {describe_sink(pipeline.sink)}"]
    dead_letters = dead_letter_destination(run)
    if dead_letters is not None and run.stats.rejected:  # a dead letter nothing went to is not an output of the run
        where.append(f"dead letters: {dead_letters}")
    spec = pipeline.metrics_spec
    path = spec if isinstance(spec, (str, Path)) else getattr(spec, "path", None)
    if path is not None:
        recorder = run.metrics
        where.append(f"metrics: {path}{metrics_figures(recorder.figures() if recorder is not None else {})}")
    return where


def worker_outputs(outputs: list[list[str]]) -> list[str]:
    """Where each of several workers' output went (``run_outputs`` of each, in worker order) as one list: a line
    every worker has (their shared metrics folder) once, the others with the worker's tag (``w1 output: ...``)."""
    if not outputs:
        return []
    shared = [line for line in outputs[0] if all(line in mine for mine in outputs)]
    tags = [Worker(i, len(outputs)).tag for i in range(len(outputs))]
    return [*(f"{tag} {line}" for tag, mine in zip(tags, outputs, strict=True) for line in mine if line not in shared),
            *shared]


def metrics_figures(figures: dict[str, int]) -> str:
    """What writing the metrics met (``MetricsRecorder.figures``), for the summary's metrics line; empty when
    nothing."""
    said = [f"{figures[key]:,} {words}" for key, words in (
        ("metrics_rows_delayed", "row(s) waited for room on the disk"),
        ("metrics_write_errors", "failed write(s), each tried again"),
        ("metrics_rows_unwritten", "row(s) NOT written: the disk still refused them when the run was stopped"),
        ("metrics_values_fixed", "value(s) a column could not hold, clamped or nulled (rows kept)"),
        ("metrics_waits", "time(s) the pipeline waited for them (max_rows_held rows held)"))
        if figures.get(key)]
    return f" ({'; '.join(said)})" if said else ""


def redelivery_summary(redelivered: int | None, deduplicated: int = 0, repeated_msg_ids: int = 0) -> str:
    """The summary's at-least-once figures: records read again (None: the source never redelivers), records
    the sink's destination already had, and records given the ``Nats-Msg-Id`` of another of their batch."""
    text = f", {redelivered} redelivered" if redelivered is not None else ""
    text += f", {deduplicated} already stored (deduplicated)" if deduplicated else ""
    if repeated_msg_ids:
        text += (f", {repeated_msg_ids} given the Nats-Msg-Id of another record of their batch by the sink's msg_id "
                 "(the stream keeps one record per id)")
    return text


def dead_letter_destination(run: PipelineRun) -> str | None:
    """Where a run's rejected records go: its ``dead_letter``, or once it has some, the default file (how many
    the run appended to it), or None."""
    default: Any = run.default_dead_letter
    dead_letter = run.pipeline.dead_letter
    if dead_letter is not None:
        where = describe_sink(dead_letter)
        if default is not None and default.files:
            where += f"; {default.records} it refused went to {default.path} (JSONL dead-letter envelopes)"
        return where
    if default is None or not default.files:
        return None
    return f"{default.path} ({default.records} appended as JSONL dead-letter envelopes: the pipeline has no dead_letter)"


def loss_summary(losses: dict[str, int] | None) -> str:
    """The run summary's loss figures (core NATS), empty for sources that cannot lose. When a publisher was
    not heard from since a disconnect, what it sent meanwhile is lost and cannot be counted: the figure
    says so instead of a count that reads as complete."""
    if not losses:
        return ""
    losses = {"missing": 0, "dropped": 0, "discarded": 0, "duplicates": 0, **losses}  # a plugin's may say less
    missing = f"{losses['missing']} missing from publisher sequences"
    if losses.get("tail"):  # docs/concepts/loss-accounting.md: a gap is seen, a tail only claimed
        missing += (f" ({losses['gap']} in gaps between messages, {losses['tail']} claimed by stamps past the last "
                    "message received: unconfirmed)")
    parts = f"{missing}, {losses['dropped']} dropped by the client, {losses['discarded']} discarded at stop"
    if losses.get("malformed"):
        parts += f", {losses['malformed']} malformed stamp(s) ignored"
    if losses.get("disconnects"):
        parts += f", {losses['disconnects']} disconnect(s)"
    if losses.get("forgotten"):  # gaps.py: past MAX_PUBLISHERS the least recently heard are forgotten
        running = losses.get("forgotten_running", 0)
        parts += (f", {losses['forgotten']} publishers forgotten, {running} of them before their final stamp: their "
                  "later gaps cannot be counted" if running else
                  f", {losses['forgotten']} publishers forgotten after their final stamp (nothing left to count)")
    unsure = losses.get("unsure", 0)
    if unsure:
        lost = (f"lost: {losses['lost']} counted ({parts}) and an unknown number more: {unsure} publisher(s) not "
                "heard from since a disconnect")
    else:
        lost = f"{losses['lost']} lost ({parts})"
    skipped = (f", {losses['skipped']} on system subjects skipped ($SRV, $JS, _INBOX ...: not records)"
               if losses.get("skipped") else "")
    return f", {lost}, {losses['duplicates']} duplicates{skipped}"


def describe_sink(sink: Any) -> str:
    """``jsonl blocks.jsonl (1.2 MB)``, ``nats subject points``, ``jetstream: each record on the subject it was
    read from``, ``parquet archive/part-w1-*.parquet: nothing written``, ``null (discarded)``: what the run wrote,
    never a template left unfilled."""
    if sink is None or sink.type == "null":
        return "null (discarded)"
    params = sink.params if hasattr(sink, "params") else {}
    files = [p for p in output_files(sink) if p.exists()]
    if files:
        size = sum(_size(p) for p in files)
        shown = ", ".join(map(str, files[:3])) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        return f"{sink.type} {shown} ({size / 1e6:,.2f} MB)"
    if params.get("subject"):
        return f"{sink.type} {describe_subject(str(params['subject']))}"
    for key, word in (("dir", "folder "), ("path", "")):
        if params.get(key):
            where = str(params[key]).replace("{part}", "*")  # the files it would have written
            return f"{sink.type} {word}{where}" + (": nothing written" if isinstance(sink, WritesFiles) else "")
    return str(sink.type)


def describe_subject(template: str) -> str:
    """Where a NATS sink publishes, in words: ``subject points``; a subject template names what each record's
    subject is made of (``{subject}``: the one it was read from)."""
    if "{" not in template:
        return f"subject {template}"
    if template == "{subject}":
        return "on the subject each record was read from"
    from ..wire import template_fields

    try:
        fields = ", ".join(template_fields(template))
    except ValueError:
        fields = "its fields"
    return f"a subject per record from {fields} (template {template})"


class Monitor:
    """Runs the status line task and the Prometheus HTTP endpoint for one pipeline run."""

    def __init__(self, run: PipelineRun, config: MonitorConfig | dict[str, Any]) -> None:
        self.run = run
        self.config = MonitorConfig.model_validate(config) if isinstance(config, dict) else config
        self._task: asyncio.Task[None] | None = None
        self._http: Any = None
        self.port: int | None = None

    async def start(self) -> None:
        if self.config.status_interval > 0:
            self._task = asyncio.ensure_future(self._status_loop())
        if self.config.prometheus is not None:
            self._serve(self.config.prometheus)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    async def _status_loop(self) -> None:
        interval = self.config.status_interval
        before = None
        t0 = time.monotonic()
        try:
            while True:
                await asyncio.sleep(interval)
                now = snapshot(self.run)
                t1 = time.monotonic()
                line = status_line(self.run.pipeline.name, now, before, t1 - t0)
                if self.config.live:  # one line, rewritten in place ("\x1b[K" clears the rest of it)
                    print(f"\r{line}\x1b[K", end="", file=sys.stderr, flush=True)
                else:
                    print(line, file=sys.stderr, flush=True)
                before, t0 = now, t1
        finally:
            if self.config.live and before is not None:
                print(file=sys.stderr, flush=True)  # leave the last status on its own line

    def _serve(self, cfg: PrometheusConfig) -> None:
        from .prometheus import MetricsCollector, serve_prometheus

        run = self.run

        def health() -> bool:
            snap = snapshot(run)
            return bool(snap["running"] and snap["connected"])

        self._http, self.port = serve_prometheus(
            cfg, MetricsCollector(lambda: [({"pipeline": run.pipeline.name}, snapshot(run))]), health)
