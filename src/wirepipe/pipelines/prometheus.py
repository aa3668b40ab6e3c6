"""A running pipeline's counters on Prometheus: ``/metrics`` (the text format, via ``prometheus-client``) and
``/healthz`` on a port, read from the run's snapshots (``monitor.snapshot``) when scraped, so the hot path pays
nothing for them; what each counter and gauge means."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .monitor import PrometheusConfig

log = logging.getLogger("wirepipe")


# What each counter of a snapshot means. A numeric key of a snapshot that is not listed here is exported
# as a counter too (documented by its name), so counters added to ``snapshot`` reach Prometheus and the
# worker pool's endpoint without touching the collector.
COUNTER_DOCS = {
    "records_in": "records read from the source",
    "records_out": "records written to the sink (a message `pack` made counts its records)",
    "messages_out": "messages (values) written to the sink: as many as records_out unless `pack` put several "
                    "records in each",
    "bytes_out": "payload bytes written to the sink",
    "rejected": "records sent to the dead-letter destination",
    "projected": "records whose fields the schema does not declare serialize dropped (extra_fields: drop)",
    "acked": "records acknowledged to the source after a durable flush",
    "acked_messages": "the messages (values) those records were written in: as many as acked unless `pack` put "
                      "several records in each",
    "sink_errors": "failed sink writes or flushes (each retried: a sink failure never drops a record)",
    "dropped": "messages the NATS client dropped: its subscription's pending limits were reached (core NATS: "
               "counted in wirepipe_lost_total too)",
    "reread": "messages the NATS client dropped (its subscription's pending limits were reached) that the source "
              "read again from the stream (the JetStream ordered consumer): none lost, not in wirepipe_dropped_total",
    "lost": "messages known lost (core NATS): Wirepipe-Seq gaps, client drops no gap shows, "
            "received but unprocessed at stop, a tail publishers' stamps claim (wirepipe_lost_tail)",
    "malformed_stamps": "Wirepipe-Seq / Wirepipe-Last-Seq stamps that are not a positive int64 or name no "
                        "publisher (core NATS): ignored, never counted as lost",
    "forgotten_publishers": "publishers a core NATS source stopped keeping count of (past its 10,000 most recently "
                            "heard): what they lose afterwards cannot be counted",
    "duplicates": "messages received twice (same Wirepipe-Publisher and Wirepipe-Seq)",
    "redelivered": "records read that had been delivered before (JetStream: a lost ack, a dead worker); every "
                   "duplicate the sink writes is among them",
    "deduplicated": "records the sink's destination already had and kept once (a JetStream stream that knew the "
                    "Nats-Msg-Id)",
    "repeated_msg_ids": "records the JetStream sink's msg_id template gave the Nats-Msg-Id of another record of "
                        "their batch (the stream keeps one record per id)",
    "reconnects": "NATS reconnects",
    "disconnects": "NATS disconnects",
    "reloads": "hot reloads applied (`run --watch`): the config changed and the run went on with it",
    "reloads_refused": "config changes not applied (invalid, or needing a restart): the running config stayed",
    "pool_reloads": "hot reloads a pool's supervisor rolled out to every worker (`run --workers N --watch`)",
    "pool_reloads_refused": "config changes a pool's supervisor did not roll out (invalid, needing a restart, or "
                            "refused by a worker: the workers went back): the running config stayed",
    "metrics_write_errors": "failed writes of a metrics part (each tried again: a full disk delays metrics, never "
                            "drops them)",
    "metrics_rows_delayed": "metrics rows held in memory while the disk refused them",
    "metrics_waits": "times the pipeline stopped taking batches because max_rows_held metrics rows waited for room "
                     "on the disk (backpressure: memory stays bounded, no row is dropped)",
    "metrics_rows_unwritten": "metrics rows given up: the disk still refused them when the run was stopped past "
                              "its shutdown_timeout",
    "metrics_values_fixed": "values a metrics column could not hold (a forged header's 10^29, NaN), clamped to "
                            "its range or nulled; their rows are written",
}
GAUGE_DOCS = {"lag": "records waiting upstream of the source",
              "outstanding": "records still awaiting acknowledgement or redelivery when a bounded run ended "
                             "(JetStream; 0 while it runs)",
              "lost_tail": "of wirepipe_lost_total: numbers only publishers' stamps claim, past the last message "
                           "received (unconfirmed; a later message turns them into gaps)",
              "unsure": "publishers not heard from since a disconnect of a core NATS source: what they published "
                        "meanwhile is lost and not counted yet",
              "sink_up": "0 while the sink (or dead letter) fails and its records are held, else 1",
              "metrics_up": "0 while the disk refuses the metrics parts (they wait in memory), else 1"}


def serve_prometheus(cfg: PrometheusConfig, collector: Any, health: Any) -> tuple[Any, int]:
    """``/metrics`` from ``collector`` and ``/healthz`` from ``health()`` on a thread; (server, port)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=True)
    registry.register(collector)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/metrics"):
                body, ctype, code = generate_latest(registry), CONTENT_TYPE_LATEST, 200
            elif self.path.startswith("/healthz"):
                ok = health()
                body = b"ok\n" if ok else b"not ready\n"
                ctype, code = "text/plain", 200 if ok else 503
            else:
                body, ctype, code = b"see /metrics and /healthz\n", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return

    http = ThreadingHTTPServer((cfg.host, cfg.port), Handler)
    port = int(http.server_address[1])
    threading.Thread(target=http.serve_forever, name="wirepipe-prometheus", daemon=True).start()
    log.info("metrics on http://%s:%d/metrics, health on /healthz", cfg.host, port)
    return http, port


class MetricsCollector:
    """Reads snapshots at scrape time: ``source()`` returns ``[(labels, snapshot), ...]``.

    One run gives one snapshot labelled ``pipeline``; a worker pool gives one per worker,
    labelled ``pipeline`` and ``worker``. Every numeric key becomes ``wirepipe_<key>``. ``supervisor()``, a pool's,
    returns ``(labels, counters)`` of what belongs to no one worker (``pool_reloads``...): counters with its own
    labels (``pipeline``), no ``wirepipe_up``.
    """

    def __init__(self, source: Any, supervisor: Any = None) -> None:
        self.source = source
        self.supervisor = supervisor

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        families: dict[str, Any] = {}
        for labels, snap in self.source():
            names, values = list(labels), list(labels.values())
            rows = snap.get("rejections")
            if rows:
                reasons = families.get("rejections") or CounterMetricFamily(
                    "wirepipe_rejections", "records sent to the dead-letter destination, by stage, operator and "
                    "reason (the error without its values)", labels=[*names, "stage", "operator", "reason"])
                families["rejections"] = reasons
                for stage, operator, reason, count, *_ in rows:
                    reasons.add_metric([*values, stage, operator, reason], float(count))
            for key, value in snap.items():
                if isinstance(value, bool) or not isinstance(value, (int, float, type(None))):
                    continue
                if key in GAUGE_DOCS:
                    fam = families.get(key) or GaugeMetricFamily(f"wirepipe_{key}", GAUGE_DOCS[key], labels=names)
                elif value is None:
                    continue
                else:
                    doc = COUNTER_DOCS.get(key, key.replace("_", " "))
                    fam = families.get(key) or CounterMetricFamily(f"wirepipe_{key}", doc, labels=names)
                families[key] = fam
                fam.add_metric(values, float(value or 0))
            up = families.get("up") or GaugeMetricFamily(
                "wirepipe_up", "1 while the pipeline runs and its connections are up", labels=names)
            families["up"] = up
            up.add_metric(values, 1.0 if snap.get("running") and snap.get("connected") else 0.0)
        if self.supervisor is not None:
            labels, counters = self.supervisor()
            for key, value in counters.items():
                fam = CounterMetricFamily(f"wirepipe_{key}", COUNTER_DOCS.get(key, key.replace("_", " ")),
                                          labels=list(labels))
                fam.add_metric(list(labels.values()), float(value))
                families[key] = fam
        yield from families.values()
