"""The Beam replay runner: the pipeline's operators over a capture as an Apache Beam pipeline.

Shape of the Beam pipeline::

    Create(capture files) | ReadAllFromParquetBatched(with_filename=True)   # one Arrow table per row group
        | ParDo(ReplayRowGroupFn)       # the operator chain over the row group, in batches; writes its results
        | WriteToParquetBatched(metrics) # the stage rows of every batch, the metrics folder's schema

``ReplayRowGroupFn`` (``beam_fn.py``) carries only the validated config (plain data), with the bytes of the
files its operators read (``beam_files.py``: schema files, zstd dictionaries), and builds the
operators in ``setup()``, on the worker: codec contexts are never pickled. Each row
group's results go to ``OUTPUT/results/part-<position>.parquet``, named by the position
of the row group's first record in the capture, so the parts in name order are the
results in capture order, whatever order the runner ran them in, and a retried bundle
rewrites the same file (written under a temporary name, then renamed). Rejected records
go to ``OUTPUT/dead_letter/`` the same way (as dead-letter envelopes, whether or not the pipeline
names a dead letter: none is thrown away), metrics rows to ``OUTPUT/metrics/``. A pipeline whose sink is ``null`` writes no results.

The runner is ``FnApiRunner`` unless ``--beam-option runner=...`` says otherwise (never
``DirectRunner``: it first tries to download a Prism binary). ``--beam-option key=value``
becomes ``--key=value`` for Beam's ``PipelineOptions``, so the same command targets Flink,
Spark or Dataflow; with a ``job_endpoint`` (a portable runner's job service) the replay waits
for the service to answer, then for the job however long it runs (``reach_job_service``), and
writes a local ``--output`` by its absolute path (the workers run elsewhere). ``apache_beam`` is
imported only here, with its import-time logging contained (``beam_import.quiet_import``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError, WirepipeError
from . import Replay, ReplayResult
from .beam_import import import_beam

log = logging.getLogger("wirepipe.replay.beam")

DEFAULT_RUNNER = "FnApiRunner"
JOB_SERVICE_WAIT = 60  # seconds a job service has to answer, unless job_server_timeout says otherwise
JOB_DEADLINE = 7 * 24 * 3600  # what Beam is given as job_server_timeout once the service answered


HARNESS_NOISE = ("INFO:", "WARNING:root:apitools not found", "WARNING:__main__:No semi_persistent_directory")


@contextlib.contextmanager
def quiet_worker_processes() -> Iterator[None]:
    """Keep the start-up chatter of Beam's worker processes out of wirepipe's output.

    FnApiRunner's ``multi_processing`` mode starts SDK harness processes that inherit
    stderr and log their start-up at INFO (and the apitools warning) before any option
    can reach them. While the pipeline runs, stderr goes through a filter that passes
    everything except those lines (kept at DEBUG on ``wirepipe.replay.beam``).
    """
    import os
    import sys
    import threading

    sys.stderr.flush()
    saved = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def forward() -> None:
        with os.fdopen(read_end, "rb") as lines, os.fdopen(os.dup(saved), "wb", buffering=0) as out:
            for line in lines:
                text = line.decode("utf-8", "replace")
                if text.startswith(HARNESS_NOISE):
                    log.debug("beam worker: %s", text.rstrip())
                else:
                    out.write(line)

    thread = threading.Thread(target=forward, name="wirepipe-beam-stderr", daemon=True)
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # closes the pipe's last write end: the forwarder drains and stops
        os.close(saved)
        thread.join(5)


def pipeline_options(options: list[str]) -> Any:
    """Beam ``PipelineOptions`` from ``key=value`` strings; the runner defaults to FnApiRunner."""
    import_beam()
    from apache_beam.options.pipeline_options import PipelineOptions

    flags = []
    keys = set()
    for option in options:
        key, sep, value = option.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not key:
            raise ConfigError(f"--beam-option {option!r}: expected key=value, e.g. runner=FlinkRunner")
        keys.add(key.replace("-", "_"))
        flags.append(f"--{key}={value}")
    if "runner" not in keys:
        flags.append(f"--runner={DEFAULT_RUNNER}")
    if "job_server_timeout" not in keys:  # how long a job service has to answer (reach_job_service)
        flags.append(f"--job_server_timeout={JOB_SERVICE_WAIT}")
    return PipelineOptions(flags)


def job_endpoint(opts: Any) -> str | None:
    """The job service a portable runner submits to (``job_endpoint``), or None (an in-process runner,
    ``embed``, or a runner that starts its own job server)."""
    from apache_beam.options.pipeline_options import PortableOptions

    endpoint = opts.view_as(PortableOptions).job_endpoint
    return None if endpoint in (None, "", "embed") else str(endpoint)


def reach_job_service(opts: Any) -> None:
    """Wait for the job service to answer, then let the job run as long as it takes.

    Beam's ``job_server_timeout`` (default 300 s) bounds the wait for the service and is also
    given as the deadline of the stream the job's state comes on, although its help says it does
    not bound the run: a replay longer than that would be reported failed while it went on. So
    wirepipe waits ``job_server_timeout`` for the service itself (60 s unless given, see
    ``pipeline_options``), then gives Beam a deadline of a week.
    """
    endpoint = job_endpoint(opts)
    if endpoint is None:
        return
    import grpc
    from apache_beam.options.pipeline_options import PortableOptions

    wait = int(opts.view_as(PortableOptions).job_server_timeout)
    channel = grpc.insecure_channel(endpoint)
    ready = grpc.channel_ready_future(channel)
    try:
        try:
            ready.result(timeout=min(1, wait))
        except grpc.FutureTimeoutError:
            log.info("waiting for the Beam job service at %s, up to %ss (job_server_timeout)", endpoint, wait)
            ready.result(timeout=max(wait - 1, 0))
    except grpc.FutureTimeoutError:
        raise WirepipeError(f"no Beam job service answered at {endpoint} (--beam-option job_endpoint) within "
                            f"{wait}s: start it first, or wait longer with --beam-option job_server_timeout=SECONDS"
                            ) from None
    finally:
        channel.close()
    opts.view_as(PortableOptions).job_server_timeout = max(wait, JOB_DEADLINE)


class _JobMessages(logging.Filter):
    """On the root logger: what Beam relays from a job service through it (``logging.log``), below WARNING,
    goes to ``wirepipe.replay.beam`` at DEBUG (the service's start-up of its servers, "Completed job")."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "root" and record.levelno < logging.WARNING and "apache_beam" in record.pathname:
            log.debug("job service: %s", record.getMessage())
            return False
        return True


@contextlib.contextmanager
def relayed_job_messages() -> Iterator[None]:
    """While a job runs: the job service's chatter at DEBUG (``_JobMessages``), and no handler installed
    on a root logger that has none (``logging.log`` would install one for the whole process); a Beam
    thread that dies when the service goes away is logged at DEBUG, its error reaching this thread."""
    import threading

    root = logging.getLogger()
    messages = _JobMessages()
    root.addFilter(messages)
    added = None if root.handlers else logging.lastResort or logging.NullHandler()  # warnings, errors still show
    if added is not None:
        root.addHandler(added)
    hook = threading.excepthook

    def beam_threads(args: Any) -> None:
        if args.thread is not None and args.thread.name.startswith("wait_until_finish"):
            log.debug("beam thread %s: %s", args.thread.name, args.exc_value)
        else:
            hook(args)

    threading.excepthook = beam_threads
    try:
        yield
    finally:
        threading.excepthook = hook
        root.removeFilter(messages)
        if added is not None:
            root.removeHandler(added)


def _capture_files(captures: list[str]) -> list[str]:
    """Capture files: local ones as ``capture_files`` orders them, remote ones (``scheme://``) by Beam's match."""
    from ..connectors.capture_format import capture_files
    from ..storage.files import is_hidden, is_pattern

    out: list[str] = []
    for item in captures:
        if "://" not in item:
            out += [str(p.resolve()) for p in capture_files(item)]
            continue
        from apache_beam.io.filesystems import FileSystems

        pattern = item if is_pattern(item) or item.endswith(".parquet") else item.rstrip("/") + "/**.parquet"
        segments = pattern.split("/")
        literal = next((i for i, part in enumerate(segments) if is_pattern(part)), len(segments) - 1)
        found = sorted(m.path for r in FileSystems.match([pattern]) for m in r.metadata_list)
        # the rule local listings keep (storage.pattern_files): no hidden name past the pattern's literal folders
        found = [f for f in found if not any(is_hidden(part) for part in f.split("/")[literal:])]
        if not found:
            raise WirepipeError(f"{item}: no capture files match")
        out += found
    return out


def file_positions(files: list[str], count: int | None) -> tuple[dict[str, tuple[int, int]], int]:
    """``{file: (position of its first record in the capture, its first seq)}`` and the records to replay.

    Read from the footers alone; ``seq`` is consecutive within a capture file, so a row's
    position is ``position + seq - first seq``.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    from apache_beam.io.filesystems import FileSystems

    positions: dict[str, tuple[int, int]] = {}
    total = 0
    for path in files:
        try:
            with FileSystems.open(path) as f:
                meta = pq.ParquetFile(f).metadata
        except (pa.ArrowInvalid, OSError) as exc:
            raise WirepipeError(f"{path}: not a readable Parquet file ({exc}); the Beam runner stops at a damaged "
                                "capture file: the local runner replays the others and lists it") from None
        names = meta.schema.to_arrow_schema().names
        if "payload" not in names or "seq" not in names:
            raise WirepipeError(f"{path}: not a wirepipe capture file (it needs the payload and seq columns)")
        if meta.num_rows == 0:
            continue
        stats = meta.row_group(0).column(names.index("seq")).statistics
        if stats is None or not stats.has_min_max:
            raise WirepipeError(f"{path}: the seq column has no statistics; rewrite it with the capture sink")
        positions[path] = (total, int(stats.min))
        total += meta.num_rows
    return positions, total if count is None else min(count, total)


def _check_output(output: str) -> None:
    from apache_beam.io.filesystems import FileSystems

    for sub in ("results", "metrics", "dead_letter"):
        pattern = FileSystems.join(output, sub, "*")
        found = [m.path for r in FileSystems.match([pattern]) for m in r.metadata_list]
        if found:
            raise WirepipeError(f"{output} already holds a replay's output ({found[0]}): "
                                "remove it or give another --output")


def result_sinks() -> list[str]:
    """The sink types whose runtime class says Beam replay may stand in for it (``Sink.batch_results``), in
    registry order (the class is what the config model's ``build()`` is annotated to return)."""
    import typing

    from ..connectors import SINKS

    names = []
    for name in SINKS:
        try:
            cls = typing.get_type_hints(SINKS[name].build).get("return")
        except (AttributeError, NameError, TypeError):  # a plugin's model without a resolvable annotation
            continue
        if getattr(cls, "batch_results", None) is not None:
            names.append(name)
    return names


@dataclass
class Job:
    """A Beam replay built where it was started (the capture planned, the files and stores its operators read
    fetched into the DoFn), not run yet: ``run()`` runs it, needing no server."""

    name: str
    pipeline: Any  # the Beam pipeline
    opts: Any
    output: str
    files: bool  # the sink's results are Parquet parts under output/results (else discarded: a null sink)

    def run(self) -> ReplayResult:
        from apache_beam.options.pipeline_options import DirectOptions

        from .beam_fn import join

        separate = self.opts.view_as(DirectOptions).direct_running_mode == "multi_processing"
        started = time.monotonic()
        runner_log = logging.getLogger("apache_beam.runners.common")
        runner_log.addFilter(_no_interrupt_traceback)
        try:
            with quiet_worker_processes() if separate else contextlib.nullcontext(), relayed_job_messages():
                state = self.pipeline.run()
                state.wait_until_finish()
        except WirepipeError:
            raise
        except Exception as exc:
            if _interrupted(exc):  # a Ctrl-C that reached a DoFn, wrapped by the runner: an interruption (130)
                raise KeyboardInterrupt from None
            raise WirepipeError(f"the Beam pipeline failed: {_short_error(exc)}") from None
        finally:
            runner_log.removeFilter(_no_interrupt_traceback)
        result = ReplayResult(pipeline=self.name, runner=f"beam {_runner_name(self.opts)}",
                              elapsed=time.monotonic() - started)
        _fill_counts(result, state)
        result.outputs = [f"output: {join(self.output, 'results')}/ (Parquet parts)" if self.files
                          else "output: null (discarded)"]
        if result.rejected:
            result.outputs.append(f"dead letters: {self.output}/dead_letter/ (dead-letter envelopes)")
        result.outputs.append(f"metrics: {join(self.output, 'metrics')}/")
        return result


def run(replay: Replay, *, output: str | None = None, options: list[str] | None = None) -> ReplayResult:
    """Replay a capture on a Beam runner; results and metrics under ``output`` (default: a new folder in results/)."""
    return build_job(replay, output=output, options=options).run()


def build_job(replay: Replay, *, output: str | None = None, options: list[str] | None = None) -> Job:
    """The Beam job of a replay: checked, its capture planned, what its operators read (files, and the stores they
    name, fetched now: a NATS bucket of dictionaries, a schema registry) carried inside it."""
    from ..pipelines.config import build_connector, build_pipeline

    data = replay.config()
    cfg = replay.validated(data)
    sink = build_connector(cfg.sink, "sink", replay.pipeline)  # what it declares: Sink.batch_results
    if sink.batch_results is None:
        raise ConfigError(f"sink type {sink.type!r}: the Beam runner writes results to Parquet files "
                          f"(sinks {', '.join(result_sinks())}); replay to {sink.type} with the local runner",
                          file=replay.pipeline, path="sink.type")
    if replay.pace != "max":
        raise ConfigError("--pace original needs the local runner: Beam processes row groups in any order")
    local = build_pipeline(cfg, file=replay.pipeline)  # its stores, as a local replay reaches them
    beam = import_beam()
    from apache_beam.io.parquetio import ReadAllFromParquetBatched, WriteToParquetBatched

    from ..core.allocator import keep_freed_memory
    from ..metrics.run_metadata import new_run_id
    from .beam_files import read_job_files, read_job_stores
    from .beam_fn import ReplayRowGroupFn, join, metrics_schema

    keep_freed_memory()  # before the metadata records it: the DoFns build their pipelines later (in process, too)
    opts = pipeline_options(list(options or []))
    files = _capture_files(replay.captures)
    positions, limit = file_positions(files, replay.count)
    run_id = new_run_id()
    output = output or str(Path("results") / f"replay-{cfg.name}-{run_id}")
    if "://" not in output:  # the workers write it, from folders of their own
        output = os.path.abspath(output)
    _check_output(output)
    config = cfg.model_dump(mode="json", by_alias=True)
    job_config, stores = read_job_stores(config, local)
    dofn = ReplayRowGroupFn(job_config, replay.pipeline, positions, limit, output, replay.batch_size, run_id,
                            sink.batch_results == "files", {**read_job_files(config), **stores}, recorded=config)
    reach_job_service(opts)  # before the Pipeline copies the options
    p = beam.Pipeline(options=opts)
    rows = (p
            | "Captures" >> beam.Create([f for f in files if f in positions])
            | "Read" >> ReadAllFromParquetBatched(with_filename=True)
            | "Replay" >> beam.ParDo(dofn))
    _ = rows | "Metrics" >> WriteToParquetBatched(join(output, "metrics", "metrics"),
                                                  schema=metrics_schema(cfg.name, config, run_id), codec="zstd",
                                                  file_name_suffix=".parquet")
    return Job(cfg.name, p, opts, output, files=sink.batch_results == "files")


def _runner_name(opts: Any) -> str:
    from apache_beam.options.pipeline_options import StandardOptions

    return str(opts.view_as(StandardOptions).runner)


def _no_interrupt_traceback(record: logging.LogRecord) -> bool:
    """Beam logs a Ctrl-C that reached a DoFn as an error with its traceback; the command says "interrupted"."""
    return not record.getMessage().startswith("KeyboardInterrupt")


def _interrupted(exc: BaseException) -> bool:
    """Whether a runner's error is a ``KeyboardInterrupt`` it wrapped (in its chain, or named in its message)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt) or str(seen).startswith("KeyboardInterrupt"):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _short_error(exc: BaseException) -> str:
    """The last line of a Beam error (they wrap worker tracebacks into the message); a gRPC error's status
    and details (a job service gone away)."""
    code, details = getattr(exc, "code", None), getattr(exc, "details", None)
    if callable(code) and callable(details):
        return f"{getattr(code(), 'name', code())}: {details()}"
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def _fill_counts(result: ReplayResult, state: Any) -> None:
    """Records in/out/rejected and per-stage records from the runner's counters (when it reports them)."""
    from apache_beam.metrics.metric import MetricsFilter

    try:
        counters = state.metrics().query(MetricsFilter().with_namespace("wirepipe"))["counters"]
    except Exception:  # some runners do not report metrics
        return
    from .beam_fn import REASON

    for c in counters:
        name, n = c.key.metric.name, int(c.committed if c.committed is not None else c.attempted)
        if name.startswith(f"{REASON}|"):  # rejected records by reason: stage, operator, reason
            _, stage, operator, reason = name.split("|", 3)
            result.rejections.append([stage, operator, reason, n, reason, None])
        else:
            result.stage_records[name] = n
    stages = result.stage_records
    result.records_in = sum(v for k, v in stages.items() if k.startswith("read|"))
    result.records_out = sum(v for k, v in stages.items() if k.startswith("write|"))
    result.rejected = sum(v for k, v in stages.items() if k.startswith("rejected|"))
