"""The Beam replay runner: the pipeline's operators over a capture as an Apache Beam pipeline.

Shape of the Beam pipeline::

    Create(capture files) | ReadAllFromParquetBatched(with_filename=True)   # one Arrow table per row group
        | ParDo(ReplayRowGroupFn)       # the operator chain over the row group, in batches; writes its results
        | WriteToParquetBatched(metrics) # the stage rows of every batch, the metrics folder's schema

``ReplayRowGroupFn`` (``beam_fn.py``) carries only the validated config (plain data) and builds the
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
Spark or Dataflow. ``apache_beam`` is imported only here, with its import-time logging
contained (``beam_import.quiet_import``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError, WirepipeError
from . import Replay, ReplayResult
from .beam_import import import_beam

log = logging.getLogger("wirepipe.replay.beam")

DEFAULT_RUNNER = "FnApiRunner"


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
    has_runner = False
    for option in options:
        key, sep, value = option.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not key:
            raise ConfigError(f"--beam-option {option!r}: expected key=value, e.g. runner=FlinkRunner")
        has_runner = has_runner or key == "runner"
        flags.append(f"--{key}={value}")
    if not has_runner:
        flags.append(f"--runner={DEFAULT_RUNNER}")
    return PipelineOptions(flags)


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


def _refuse_io(cfg: Any, file: str) -> None:
    """The DoFn runs the operators' passes alone: an operator that does I/O around them (a zstd dictionary
    fetched from NATS) needs the local runner's loop."""
    from ..operators.operator import BuildContext
    from ..pipelines.config import build_operators

    for i, entry in enumerate(cfg.operators):
        where = f"operators[{i}].{entry.kind}"
        ctx = BuildContext(allow_pickle=cfg.allow_pickle)
        if any(op.io for op in build_operators(getattr(entry, entry.kind), ctx, where, file)):
            raise ConfigError("fetches from NATS around its passes (a zstd dictionary): the Beam runner runs the "
                              "passes alone; replay it with the local runner", file=file, path=where)


def run(replay: Replay, *, output: str | None = None, options: list[str] | None = None) -> ReplayResult:
    """Replay a capture on a Beam runner; results and metrics under ``output`` (default: a new folder in results/)."""
    from ..pipelines.config import build_connector

    data = replay.config()
    cfg = replay.validated(data)
    sink = build_connector(cfg.sink, "sink", replay.pipeline)  # what it declares: Sink.batch_results
    if sink.batch_results is None:
        raise ConfigError(f"sink type {sink.type!r}: the Beam runner writes results to Parquet files "
                          f"(sinks {', '.join(result_sinks())}); replay to {sink.type} with the local runner",
                          file=replay.pipeline, path="sink.type")
    if replay.pace != "max":
        raise ConfigError("--pace original needs the local runner: Beam processes row groups in any order")
    _refuse_io(cfg, replay.pipeline)
    beam = import_beam()
    from apache_beam.io.parquetio import ReadAllFromParquetBatched, WriteToParquetBatched

    from ..core.allocator import keep_freed_memory
    from ..metrics.recorder import new_run_id
    from .beam_fn import ReplayRowGroupFn, join, metrics_schema

    keep_freed_memory()  # before the metadata records it: the DoFns build their pipelines later (in process, too)
    opts = pipeline_options(list(options or []))
    files = _capture_files(replay.captures)
    positions, limit = file_positions(files, replay.count)
    run_id = new_run_id()
    output = output or str(Path("results") / f"replay-{cfg.name}-{run_id}")
    _check_output(output)
    config = cfg.model_dump(mode="json", by_alias=True)
    dofn = ReplayRowGroupFn(config, replay.pipeline, positions, limit, output, replay.batch_size, run_id,
                            sink.batch_results == "files")
    started = time.monotonic()
    p = beam.Pipeline(options=opts)
    rows = (p
            | "Captures" >> beam.Create([f for f in files if f in positions])
            | "Read" >> ReadAllFromParquetBatched(with_filename=True)
            | "Replay" >> beam.ParDo(dofn))
    _ = rows | "Metrics" >> WriteToParquetBatched(join(output, "metrics", "metrics"),
                                                  schema=metrics_schema(cfg.name, config, run_id), codec="zstd",
                                                  file_name_suffix=".parquet")
    from apache_beam.options.pipeline_options import DirectOptions

    separate = opts.view_as(DirectOptions).direct_running_mode == "multi_processing"
    runner_log = logging.getLogger("apache_beam.runners.common")
    runner_log.addFilter(_no_interrupt_traceback)
    try:
        with quiet_worker_processes() if separate else contextlib.nullcontext():
            state = p.run()
            state.wait_until_finish()
    except WirepipeError:
        raise
    except Exception as exc:
        if _interrupted(exc):  # a Ctrl-C that reached a DoFn, wrapped by the runner: an interruption (130)
            raise KeyboardInterrupt from None
        raise WirepipeError(f"the Beam pipeline failed: {_short_error(exc)}") from None
    finally:
        runner_log.removeFilter(_no_interrupt_traceback)
    result = ReplayResult(pipeline=cfg.name, runner=f"beam {_runner_name(opts)}", elapsed=time.monotonic() - started)
    _fill_counts(result, state)
    result.outputs = [f"output: {join(output, 'results')}/ (Parquet parts)" if sink.batch_results == "files"
                      else "output: null (discarded)"]
    if result.rejected:
        result.outputs.append(f"dead letters: {output}/dead_letter/ (dead-letter envelopes)")
    result.outputs.append(f"metrics: {join(output, 'metrics')}/")
    return result


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
    """The last line of a Beam error (they wrap worker tracebacks into the message)."""
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
