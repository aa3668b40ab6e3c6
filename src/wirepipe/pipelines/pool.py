"""A pool of worker processes running one pipeline: ``wirepipe run PIPELINE --workers N``.

Python's GIL holds one worker near one core, so the way past it is more processes sharing
the work the way N deployed replicas would, through NATS itself:

- a JetStream source's durable pull consumer is shared by every worker (the server hands
  each pull request different messages; unset ``durable`` becomes the pipeline's name);
- a core NATS source joins a queue group (``queue:``, default the pipeline's name), so each
  message goes to one member.

The supervisor (this process) starts the workers with the spawner (``spawn.py``: their config,
secrets and all, through a pipe on their stdin; each in its own session, so a Ctrl-C reaches the
supervisor only and every worker gets exactly one SIGTERM: the drain of ``wirepipe run``). A worker
(``worker.run_pool_worker``: what a worker process runs) reports its monitor snapshot (``monitor.snapshot``:
whatever counters it has) once per ``worker.REPORT_INTERVAL`` and after every commit on its report channel;
the supervisor sums them into one status line and serves them on one Prometheus endpoint with a ``worker``
label. A worker that dies is restarted with exponential backoff; one that dies ``max_failures`` times in a
row, each time before ``stable_after`` seconds of life, makes the pool give up: the others drain and the pool
exits 1 with a message naming it (the pipeline's ``restart:`` section, ``restarts.py``).

What can be shared, the connectors declare (``connectors/connector.py``; a plugin's too), and the
pool asks them, never a type name: a ``Bounded`` source (generate, jsonl, parquet, csv, capture)
with N > 1 is a config error, since each worker would read all of it; the field a
``SharedByWorkers`` source names (a queue group, a durable) defaults to the pipeline's name; the
``for_worker`` of the source, the sink and the dead letter refuses what else cannot be shared (an
ordered consumer, the embedded server, standard output). Every worker is sent the same config and
builds its own copy of each part from it (``config.build_pipeline``: ``for_worker`` with its index,
so each writes files of its own; the names: ``core/workers.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..connectors.connector import AtLeastOnce, Bounded, SharedByWorkers, Source
from ..core.backoff import ExponentialBackoff
from ..core.errors import ConfigError
from ..core.exit_codes import ExitCode
from ..core.units import covered
from ..core.workers import Worker
from .restarts import RestartPolicy
from .spawn import WorkerProcess, describe_exit, group_id, start
from .worker import WORKER_TARGET

if TYPE_CHECKING:
    from ..core.exit_codes import Outcome

log = logging.getLogger("wirepipe.pool")

GAUGES = ("lag",)  # a shared durable's pending count is the same for every worker: the pool shows the max
# Figures a worker reports as it ends that describe the shared durable, not the worker: a JetStream worker's
# ``outstanding`` is what the durable still counted unacknowledged when its bounded read ended (num_ack_pending:
# records held by the other workers too), so summing them counts a record once per worker. The pool keeps the max,
# over its workers and over a worker's processes: the figure of the worker that saw the most still outstanding
# (each waits for the others' records until their number stops changing, so they end seeing the same ones).
SHARED_AT_END = ("outstanding",)
LOSS_WORDS = ("drop", "lost", "loss", "gap")  # counters of records lost upstream (slow consumers, sequence gaps)


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask, e.g. a container's cpuset)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return os.cpu_count() or 1


def resolve_workers(value: str | int) -> int:
    """``--workers``: a positive integer or ``auto`` (the number of CPUs this process may use)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return usable_cores()
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise ValueError(f"--workers {value!r}: give a positive integer or auto")
    return n


# --- configs of the workers --------------------------------------------------------------------


def pool_config(data: dict[str, Any], workers: int, *, file: str | None = None) -> dict[str, Any]:
    """The config every worker of an N-worker pool runs: validated, with the sharing rules applied.

    Raises ``ConfigError`` (file, field, value, fix) for what cannot be shared, as the parts declare it
    (see the module doc).
    """
    parts = _parts(data, file)
    out = copy.deepcopy(data)
    if workers == 1:
        return out
    name = out["name"]
    source: Source = parts["source"]
    if isinstance(source, Bounded):
        raise ConfigError(
            f"{source.type!r} is a bounded source that every worker would read whole: --workers {workers} would "
            f"process its records {workers} times; run it with --workers 1, or publish the records to a JetStream "
            f"stream and consume that with --workers {workers} (one durable shared by all)",
            file=file, path="source.type")
    refuse_sharing(parts, workers, file)
    if isinstance(source, SharedByWorkers) and not out["source"].get(source.shared_by):
        out["source"][source.shared_by] = name
        log.info("source.%s: the %d workers share %r", source.shared_by, workers, name)
    return out


def refuse_sharing(parts: dict[str, Any], workers: int, file: str | None = None) -> None:
    """``ConfigError`` at the field of the first of ``parts`` (by where it is in the config: ``sink``...) that
    ``workers`` processes cannot share as configured (what its ``for_worker`` refuses)."""
    from .config import own_part

    for where, part in parts.items():
        own_part(part, where, Worker(0, workers), file)


def outputs(data: dict[str, Any], file: str | None = None) -> dict[str, Any]:
    """The sink and the dead letter a validated config builds, by where they are in it (a multi-process replay
    asks them whether its workers can share them: it splits its capture itself)."""
    return {where: part for where, part in _parts(data, file).items() if where != "source"}


def _parts(data: dict[str, Any], file: str | None = None) -> dict[str, Any]:
    """The source, sink and dead letter (when configured) a validated config builds, to ask what they declare
    (building connects nothing and opens no file)."""
    from .config import build_connector, validate_config

    cfg = validate_config(data, file=file)
    parts = {"source": build_connector(cfg.source, "source", file)}
    for where in ("sink", "dead_letter"):
        if isinstance(data.get(where), dict):
            parts[where] = build_connector(getattr(cfg, where), where, file)
    return parts


# --- the supervisor ------------------------------------------------------------------------------


@dataclass
class Slot:
    """One worker position: its current process, its last snapshot and what earlier processes counted."""

    index: int
    restart: ExponentialBackoff  # its waits before a restart; ``failures``: its deaths in a row
    redelivers: bool = True  # its source redelivers what a worker did not commit (``committed``)
    proc: WorkerProcess | None = None
    snapshot: dict[str, Any] = field(default_factory=dict)
    carried: dict[str, Any] = field(default_factory=dict)  # counters, and counts by kind (dicts of counters)
    restarts: int = 0
    started: float = 0.0
    done: bool = False
    last_exit: int | None = None
    rejections: list[Any] = field(default_factory=list)  # the rejection rows of earlier processes
    # Seconds of work (every part open) of the current process at its last report, and when that report came
    # (the supervisor's clock); the spans of work of earlier processes. Waits and restarts are not work.
    working: float = 0.0
    reported: float = 0.0
    cpu: float = 0.0  # CPU seconds of the current process at its last report (its records in the same snapshot)
    # (when, records written, CPU seconds) at the current process's last report after a commit: between two of
    # these its CPU is that of whole commit cycles (``plan.calibrate.measure_pool``)
    at_commit: tuple[float, int, float] | None = None
    spans: list[tuple[float, float]] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)  # where its current process's output goes (``run_outputs``)
    outputs_before: list[str] = field(default_factory=list)  # and its earlier processes'

    def totals(self) -> dict[str, Any]:
        """The snapshot with the counters of this slot's earlier processes added (monotonic across restarts)."""
        out = committed(self.snapshot, self.redelivers)
        for key, value in self.carried.items():
            mine = out.get(key)
            if isinstance(value, dict):  # counts by kind (the losses): summed kind by kind
                out[key] = combine([mine if isinstance(mine, dict) else {}, value])
            elif key in SHARED_AT_END:
                out[key] = max(mine or 0, value)
            else:
                out[key] = (mine or 0) + value if isinstance(mine, (int, float, type(None))) else value
        if self.rejections:
            out["rejections"] = merge_rejections([self.rejections, out.get("rejections") or []])
        out["restarts"] = self.restarts
        out.setdefault("running", False)
        if self.proc is None or self.proc.returncode is not None:
            out["running"] = False
        return out

    def retire(self) -> None:
        """The current process ended: keep its counters (records out: what it committed) and its span of work,
        forget its gauges."""
        for key, value in committed(self.snapshot, self.redelivers).items():
            if key in GAUGES or isinstance(value, bool):
                continue
            if key in SHARED_AT_END:
                self.carried[key] = max(self.carried.get(key, 0), value)
            elif isinstance(value, (int, float)):
                self.carried[key] = self.carried.get(key, 0) + value
            elif isinstance(value, dict):
                self.carried[key] = combine([self.carried.get(key) or {}, value])
        self.rejections = merge_rejections([self.rejections, self.snapshot.get("rejections") or []])
        self.snapshot = {}
        self.spans += self.current_span()
        self.working = self.cpu = 0.0
        self.at_commit = None
        self.outputs_before = list(dict.fromkeys([*self.outputs_before, *self.outputs]))
        self.outputs = []

    def all_outputs(self) -> list[str]:
        return list(dict.fromkeys([*self.outputs_before, *self.outputs]))

    def current_span(self) -> list[tuple[float, float]]:
        return [(self.reported - self.working, self.reported)] if self.working > 0 else []


def committed(snap: dict[str, Any], redelivers: bool = True) -> dict[str, Any]:
    """A worker's snapshot as the pool counts it: with a source that redelivers, its records out are the records
    it committed (the sink flushed them, the source was acknowledged: ``acked``). What a worker had written but
    not committed when it was killed is not in its output for good: a durable redelivers it to another worker
    (``redelivered``), which writes and counts it. A core NATS worker's records out are what it wrote: nothing
    comes back, and closing the sink (a drain, even a cut one) flushes them. Its messages out are likewise the
    messages those records were written in (``acked_messages``: fewer after ``pack``)."""
    if redelivers and isinstance(snap.get("acked"), int) and not isinstance(snap.get("acked"), bool):
        return {**snap, "records_out": snap["acked"], "messages_out": snap.get("acked_messages", snap["acked"])}
    return dict(snap)


def merge_rejections(parts: list[list[Any]]) -> list[Any]:
    """Rejection rows (``rejections.Rejections.rows``) of several processes as one set of groups."""
    from ..core.rejections import Rejections

    return Rejections.from_rows(row for rows in parts for row in rows).rows()


def combine(snapshots: list[dict[str, Any]]) -> dict[str, Any]:
    """The pool's snapshot: counters summed, gauges (lag) and what describes the shared durable at the end
    (``SHARED_AT_END``) the max, flags counted, texts (what a worker waits for) the first one set, rejections
    merged by reason, counts by kind (the losses) summed kind by kind."""
    total: dict[str, Any] = {}
    rows = [snap["rejections"] for snap in snapshots if snap.get("rejections")]
    if rows:
        total["rejections"] = merge_rejections(rows)
    for snap in snapshots:
        for key, value in snap.items():
            if isinstance(value, str):
                total[key] = total.get(key) or value
            elif isinstance(value, bool):
                total[key] = total.get(key, 0) + int(value)
            elif isinstance(value, (int, float)):
                total[key] = (max(total.get(key) or 0, value) if key in GAUGES or key in SHARED_AT_END
                              else total.get(key, 0) + value)
            elif isinstance(value, dict):
                total[key] = combine([total.get(key) or {}, value])
            elif value is None:
                total.setdefault(key, None)
    return total


def _with_defaults(snap: dict[str, Any]) -> dict[str, Any]:
    """A pool total has only the keys its workers reported so far; the status line needs the usual ones."""
    out: dict[str, Any] = {key: 0 for key in ("records_out", "bytes_out", "rejected", "sink_errors", "dropped",
                                              "lost", "duplicates", "redelivered", "acked", "reconnects",
                                              "disconnects")}
    out["lag"] = None
    out.update(snap)
    return out


def losses(snap: dict[str, Any]) -> int:
    if isinstance(snap.get("lost"), (int, float)):  # a core NATS source's total already includes its drops
        return int(snap["lost"])
    return int(sum(v for k, v in snap.items() if any(w in k for w in LOSS_WORDS)
                   and isinstance(v, (int, float)) and not isinstance(v, bool)))


class Pool:
    """Runs N worker processes of one pipeline config and supervises them (see the module doc)."""

    def __init__(self, data: dict[str, Any], workers: int, *, file: str | None = None,
                 restart: RestartPolicy | None = None, echo: Callable[[str], None] | None = None,
                 log_level: int = logging.INFO) -> None:
        from .config import validate_config
        from .monitor import MonitorConfig

        self.data = pool_config(data, workers, file=file)
        cfg = validate_config(self.data, file=file)  # what the workers will run
        source = _parts(self.data, file)["source"]
        self.redelivers = isinstance(source, AtLeastOnce)
        self.ends = bool(source.ends)  # each worker's run has an end of its own: a SIGINT before it interrupts
        self.file = file
        self.workers = workers
        self.name = cfg.name
        self.restart = restart or cfg.restart
        self.echo = echo or (lambda line: print(line, file=sys.stderr, flush=True))
        self.log_level = log_level  # what the workers log
        self.monitor = cfg.monitor or MonitorConfig()  # the pool's status line is on even without `monitor:`
        self.shutdown_timeout = float(cfg.shutdown_timeout)
        self.metrics_path = None if cfg.metrics is None else str(cfg.metrics.path)  # the workers' one folder
        self.slots = [Slot(i, self.restart.delays(), self.redelivers) for i in range(workers)]
        self.stopping = False
        self.interrupted = False  # a SIGINT stopped the workers before the end of their bounded runs
        self.gave_up: str | None = None
        self.port: int | None = None  # the Prometheus port, once serving
        self.started = time.monotonic()
        self.id = group_id()  # in each worker's run metadata
        self._stopped = asyncio.Event()  # set once by stop(): wakes every slot's waits
        # The config's digest (each worker's metrics name it) and, with ``run --watch``, the hot reload (``reload.py``:
        # it watches the file while the pool runs, and starts the workers with a target that takes reloads).
        self.digest: str | None = None
        self.reloader: Any = None
        self.worker_target = WORKER_TARGET

    # --- snapshots ---------------------------------------------------------------------------

    def snapshots(self) -> list[tuple[dict[str, str], dict[str, Any]]]:
        return [({"pipeline": self.name, "worker": str(s.index)}, s.totals()) for s in self.slots]

    def supervisor_snapshot(self) -> tuple[dict[str, str], dict[str, Any]]:
        """What belongs to the pool, not to one worker (a hot reload's roll-outs and refusals), for Prometheus."""
        return {"pipeline": self.name}, (self.reloader.counters() if self.reloader is not None else {})

    def total(self) -> dict[str, Any]:
        return combine([s.totals() for s in self.slots])

    def healthy(self) -> bool:
        return all(snap.get("running") and snap.get("connected") for _, snap in self.snapshots())

    # --- running -----------------------------------------------------------------------------

    async def run(self) -> ExitCode:
        """Run until every worker has ended; the exit code of the pool (OK, or RUNTIME when it gave up or a
        worker failed)."""
        from .prometheus import MetricsCollector, serve_prometheus

        loop = asyncio.get_running_loop()
        http = None
        if self.monitor.prometheus is not None:
            http, self.port = serve_prometheus(self.monitor.prometheus, MetricsCollector(self.snapshots, self.supervisor_snapshot),
                                               self.healthy)
        installed = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self._on_signal, sig.name)
                installed.append(sig)
        status = asyncio.ensure_future(self._status_loop()) if self.monitor.status_interval > 0 else None
        watching = asyncio.ensure_future(self.reloader.watch()) if self.reloader is not None else None
        log.info("%s: starting %d workers", self.name, self.workers)
        try:
            await asyncio.gather(*(self._supervise(slot) for slot in self.slots))
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            if watching is not None:
                watching.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watching
            if status is not None:
                status.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await status
            if http is not None:
                http.shutdown()
                http.server_close()
        return ExitCode.RUNTIME if self.failures() else ExitCode.OK

    def failures(self) -> list[str]:
        """Why the pool failed (exit 1): it gave up on a worker, or a worker ended on an error."""
        if self.gave_up:
            return [f"{self.name}: {self.gave_up}"]
        # -SIGTERM: a worker stopped before its drain handler was installed (still importing): it had read nothing.
        clean = (ExitCode.OK, None, -signal.SIGTERM) if self.stopping else (ExitCode.OK, None)
        return [f"{self.name}: worker {s.index} ended on {describe_exit(s.last_exit)} (see its log above)"
                for s in self.slots if s.last_exit not in clean]

    def outcome(self) -> Outcome:
        """What the pool's exit code follows (``exit_codes.verdict``): its workers' counts summed, its failures,
        and whether a SIGINT interrupted it."""
        from ..core.exit_codes import Outcome

        t = self.total()
        return Outcome(records=int(t.get("records_in", 0)), rejected=int(t.get("rejected", 0)),
                       lost=int(t.get("lost", 0)), unsure=int(t.get("unsure", 0)),
                       forgotten=int((t.get("losses") or {}).get("forgotten_running", 0)),
                       outstanding=int(t.get("outstanding", 0)), interrupted=self.interrupted,
                       failures=self.failures())

    def _on_signal(self, signame: str) -> None:
        if not self.stopping:
            log.info("%s: draining %d workers (SIGTERM to each; up to %.0fs)", signame, self.workers,
                     self.shutdown_timeout)
            # The workers drain as on SIGTERM; the pool says whether that interrupted their bounded runs.
            self.interrupted = signame == "SIGINT" and self.ends and not all(s.done for s in self.slots)
            self.stop()
        else:
            log.warning("%s again: killing the workers without finishing the drain", signame)
            self._signal_all(signal.SIGKILL)

    def stop(self) -> None:
        """Drain every worker: one SIGTERM each (and no more restarts)."""
        self.stopping = True
        self._stopped.set()
        self._signal_all(signal.SIGTERM)

    def _signal_all(self, sig: int) -> None:
        for slot in self.slots:
            if slot.proc is not None:
                slot.proc.signal(sig)

    def worker_config(self, data: dict[str, Any] | None = None) -> dict[str, Any]:
        """What each worker is sent (``data``, a pool config; the pool's by default) without a monitor (the pool
        reports); it builds its own parts from it (``config.build_pipeline``)."""
        return {**(self.data if data is None else data), "monitor": None}

    async def _start(self, slot: Slot) -> WorkerProcess:
        message = {"file": self.file, "config": self.worker_config(), "digest": self.digest}
        slot.proc = proc = await start(self.worker_target, message, Worker(slot.index, self.workers), group=self.id,
                                       name=self.file or "", log_level=self.log_level,
                                       keep_input=self.reloader is not None)
        slot.started = time.monotonic()
        log.info("%s: worker %d started (pid %d)", self.name, slot.index, proc.pid)
        return proc

    async def _supervise(self, slot: Slot) -> None:
        while not self.stopping and self.gave_up is None:
            proc = await self._start(slot)
            await self._follow(slot, proc)
            code = slot.last_exit = proc.returncode
            slot.retire()
            if code == ExitCode.OK or self.stopping or self.gave_up is not None:
                slot.done = True
                return
            lived = time.monotonic() - slot.started
            if lived >= self.restart.stable_after:
                slot.restart.reset()
            wait = slot.restart.next()
            failures = slot.restart.failures
            if code == ExitCode.CONFIG:
                self._give_up(slot, f"worker {slot.index} stopped on a config error ({describe_exit(code)}, see "
                                    "above)")
                return
            if failures >= self.restart.max_failures:
                self._give_up(slot, f"worker {slot.index} died {failures} times in a row, each within "
                                    f"{self.restart.stable_after:g}s of starting (last: {describe_exit(code)}); "
                                    "giving up (see its log above)")
                return
            log.error("%s: worker %d died (%s) after %.1fs; restarting in %.1fs (failure %d of %d)", self.name,
                      slot.index, describe_exit(code), lived, wait, failures, self.restart.max_failures)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), wait)
            if self.stopping or self.gave_up is not None:
                slot.done = True
                return
            slot.restarts += 1

    def _give_up(self, slot: Slot, why: str) -> None:
        slot.done = True
        self.gave_up = why
        log.error("%s: %s; draining the other workers", self.name, why)
        self.stop()

    async def _follow(self, slot: Slot, proc: WorkerProcess) -> None:
        """Read the worker's reports until it exits; SIGKILL it if a drain overruns ``shutdown_timeout``."""
        reader = asyncio.ensure_future(self._read_reports(slot, proc))
        waiter = asyncio.ensure_future(proc.wait())
        try:
            while not waiter.done():
                if self.stopping:
                    # Startup of a worker that was told to stop counts too: allow a little more than the drain.
                    try:
                        await asyncio.wait_for(asyncio.shield(waiter), self.shutdown_timeout + 15.0)
                    except asyncio.TimeoutError:
                        log.error("%s: worker %d did not drain within shutdown_timeout (%.0fs): killing it; "
                                  "records it did not acknowledge will be redelivered", self.name, slot.index,
                                  self.shutdown_timeout)
                        proc.signal(signal.SIGKILL)
                        await waiter
                    break
                stopped = asyncio.ensure_future(self._stopped.wait())
                await asyncio.wait({waiter, stopped}, return_when=asyncio.FIRST_COMPLETED)
                stopped.cancel()
        finally:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(reader, 5.0)

    async def _read_reports(self, slot: Slot, proc: WorkerProcess) -> None:
        async for report in proc.reports():
            if isinstance(report.get("snapshot"), dict):
                slot.snapshot = report["snapshot"]
                slot.working, slot.reported = float(report.get("working") or 0.0), time.monotonic()
                slot.cpu = float(report.get("cpu") or 0.0)
                if report.get("commit"):
                    slot.at_commit = (slot.reported, int(slot.snapshot.get("records_out", 0)), slot.cpu)
                slot.outputs = list(report.get("outputs") or slot.outputs)  # the latest says it all
            if "reload" in report and self.reloader is not None:
                self.reloader.answered(slot.index, report["reload"])

    async def _status_loop(self) -> None:
        interval = self.monitor.status_interval
        before: dict[str, Any] | None = None
        per_before: list[dict[str, Any]] = [{} for _ in self.slots]
        t0 = time.monotonic()
        while True:
            await asyncio.sleep(interval)
            t1 = time.monotonic()
            self.echo(self.status(before, per_before, t1 - t0))
            before, per_before, t0 = self.total(), [s.totals() for s in self.slots], t1

    def status(self, before: dict[str, Any] | None, per_before: list[dict[str, Any]], seconds: float) -> str:
        """One line for the pool: the totals as a single run shows them (``monitor.status_line``: whatever it
        reports, losses included), then each worker's rate, errors, losses (counters named drop/lost/gap)."""
        from .monitor import status_line

        now = _with_defaults(self.total())
        line = status_line(f"{self.name} [{self.workers} workers]", now,
                           _with_defaults(before) if before is not None else None, seconds)
        parts = []
        for slot, prev in zip(self.slots, per_before, strict=True):
            snap = slot.totals()
            rate = (snap.get("records_out", 0) - prev.get("records_out", 0)) / seconds if seconds > 0 else 0.0
            state = ("" if snap.get("running") else " done" if slot.done
                     else " waiting" if snap.get("waiting") else " down")
            errors = snap.get("rejected", 0) + snap.get("sink_errors", 0)
            extra = f" {losses(snap):,} lost" if losses(snap) else ""
            restarts = f" {slot.restarts} restarts" if slot.restarts else ""
            parts.append(f"w{slot.index}{state} {rate:,.0f}/s {errors} err{extra}{restarts}")
        return f"{line} | {'; '.join(parts)}"

    def _outputs(self, total: dict[str, Any]) -> list[str]:
        """``worker_outputs``, the metrics line the workers share with what writing them met summed (each worker's
        line says only its own)."""
        from .monitor import metrics_figures, worker_outputs

        outputs = [s.all_outputs() for s in self.slots]
        if self.metrics_path is None:
            return worker_outputs(outputs)
        shared = f"metrics: {self.metrics_path}"
        outputs = [[shared if line == shared or line.startswith(f"{shared} (") else line for line in mine]
                   for mine in outputs]
        return [f"{shared}{metrics_figures(total)}" if line == shared else line for line in worker_outputs(outputs)]

    def work_seconds(self) -> float:
        """Seconds during which at least one worker worked (its parts open): the waits for a server or a
        stream and the time between a worker's death and its restart are left out."""
        return float(covered(span for s in self.slots for span in [*s.spans, *s.current_span()]))

    def summary(self) -> str:
        """The pool's final line, as a single run's: every count its workers report summed (records out: what
        they committed, see ``committed``; the rejections by reason, the losses by kind, redelivered,
        deduplicated, awaiting redelivery), records per second of work, and where each worker's output, dead
        letters and metrics went (a line the workers share is shown once)."""
        from .monitor import (
            ending_summary,
            loss_summary,
            messages_summary,
            redelivery_summary,
            rejection_lines,
        )

        t = self.total()
        work = self.work_seconds()
        out, rate = t.get("records_out", 0), t.get("records_out", 0) / work if work > 0 else 0.0
        restarts = sum(s.restarts for s in self.slots)
        redelivered = int(t.get("redelivered", 0)) if self.redelivers else None
        messages = messages_summary(int(t.get("messages_out", out)), int(out), work)
        text = (f"{self.name}: {self.workers} workers, {out} records out of {t.get('records_in', 0)} in {work:.2f}s "
                f"of work ({rate:,.0f} records/s{messages}), {t.get('rejected', 0)} rejected"
                f"{loss_summary(t.get('losses'))}"
                f"{redelivery_summary(redelivered, int(t.get('deduplicated', 0)), int(t.get('repeated_msg_ids', 0)))}"
                f"{ending_summary(int(t.get('outstanding', 0)), self.interrupted)}, {restarts} restarts")
        where = self._outputs(t)
        reloads = [self.reloader.summary()] if self.reloader is not None else []
        return "\n  ".join([text, *reloads, *rejection_lines(t.get("rejections") or []), *where])
