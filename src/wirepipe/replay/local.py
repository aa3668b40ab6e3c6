"""The local replay runner: the pipeline over a capture in this process, or split across processes.

One process (the default) runs the pipeline with a ``capture`` source: batches in
capture order through the operators into the sink, with the pipeline's dead letter and
metrics, exactly as ``wirepipe run`` would.

With ``workers=N`` the row groups are split into N *contiguous* shares of about equal
rows, in capture order, and each share runs in its own process (spawned, so nothing
is shared but the files). Outputs stay well defined: every file a worker writes (sink
``path``/``dir``, dead-letter ``path``/``dir``, metrics ``path``) gets the worker's part
number, ``out.jsonl`` -> ``out.part000.jsonl`` ... , folders -> ``dir/part000/`` (see ``part_path``), so
reading the parts in name order gives the records in capture order. A network sink
(NATS) gets the workers' records concurrently: order holds within a share only. With
``pace: original`` every worker follows the same schedule from one shared start, so the
combined stream keeps the recorded timing.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..connectors.base import Unreadable, describe_unreadable
from ..connectors.capture_format import RowGroup, plan_row_groups
from ..connectors.capture_source import CaptureSource
from ..core.errors import ConfigError, WirepipeError
from ..pipelines.monitor import dead_letter_destination
from ..pipelines.pool import merge_rejections
from . import Replay, ReplayResult

if TYPE_CHECKING:
    from ..connectors.pacing import Pacer
    from ..pipelines.pipeline import Pipeline

log = logging.getLogger("wirepipe.replay")

OUTPUT_SECTIONS = ("sink", "dead_letter")


def run(replay: Replay, *, workers: int = 1, pacer: Pacer | None = None) -> ReplayResult:
    """Replay a capture through its pipeline; ``pacer`` replaces the pacing (e.g. on a test clock)."""
    data = replay.config()
    if workers <= 1:
        return _run_single(replay, data, pacer)
    return _run_workers(replay, data, workers)


def build(replay: Replay, data: dict[str, Any] | None = None) -> Pipeline:
    """The replay pipeline, built but not run."""
    from ..pipelines.config import build_pipeline

    return build_pipeline(replay.validated(data), file=replay.pipeline)


def _capture_source(pipe: Pipeline) -> CaptureSource:
    source = pipe.source
    assert isinstance(source, CaptureSource), "a replay reads its capture"  # Replay.validated makes it so
    return source


def _run_single(replay: Replay, data: dict[str, Any], pacer: Pacer | None) -> ReplayResult:
    pipe = build(replay, data)
    if pacer is not None:
        _capture_source(pipe).pacer = pacer
    stats = pipe.run()
    return ReplayResult(pipeline=pipe.name, runner="local", records_in=stats.records_in,
                        records_out=stats.records_out, rejected=stats.rejected, elapsed=stats.elapsed,
                        outputs=[p for p in _outputs(data) if Path(p).exists()], unreadable=stats.unreadable,
                        rejections=stats.rejections.rows(),
                        dead_letters=[d for d in [dead_letter_destination(pipe)] if d and stats.rejected])


def _outputs(data: dict[str, Any]) -> list[str]:
    """The files and folders a pipeline config writes to."""
    out = []
    for section in OUTPUT_SECTIONS:
        part = data.get(section) or {}
        for key in ("path", "dir"):
            if isinstance(part.get(key), str) and part[key] != "-":
                out.append(part[key])
    metrics = data.get("metrics") or {}
    if isinstance(metrics.get("path"), str):
        out.append(metrics["path"])
    return out


# --- several processes -------------------------------------------------------------------------


def split(plan: list[RowGroup], workers: int) -> list[list[RowGroup]]:
    """Contiguous shares of row groups, in capture order, of about equal rows (no empty share)."""
    workers = max(1, min(workers, len(plan)))
    total = sum(g.rows for g in plan)
    shares: list[list[RowGroup]] = [[] for _ in range(workers)]
    k = 0
    done = 0
    for i, group in enumerate(plan):
        left_groups = len(plan) - i
        left_shares = workers - k
        # Move on when this share has its part of the rows, or when the remaining shares need every group left.
        if shares[k] and k + 1 < workers and (done >= total * (k + 1) / workers or left_groups < left_shares):
            k += 1
        shares[k].append(group)
        done += group.rows
    return shares


def limit(plan: list[RowGroup], count: int | None) -> list[RowGroup]:
    """The plan cut after ``count`` records (the last row group read in part)."""
    if count is None:
        return plan
    out = []
    for group in plan:
        if group.position >= count:
            break
        rows = min(group.rows, count - group.position)
        out.append(group if rows == group.rows else RowGroup(group.path, group.index, rows, group.position))
    return out


def part_path(path: str, part: int, *, folder: bool) -> str:
    """``out.jsonl`` -> ``out.part003.jsonl``; a folder -> ``folder/part003``; a parquet part-file
    template ``out/x-{part}.parquet`` -> ``out/x-part003-{part}.parquet`` (name order stays capture order)."""
    if folder:
        return str(Path(path) / f"part{part:03d}")
    if "{part}" in path:
        return path.replace("{part}", f"part{part:03d}-{{part}}")
    p = Path(path)
    return str(p.with_name(f"{p.stem}.part{part:03d}{p.suffix}"))


def worker_config(data: dict[str, Any], part: int) -> dict[str, Any]:
    """The config of one worker: every output file or folder renamed with the worker's part number."""
    data = copy.deepcopy(data)
    for section in OUTPUT_SECTIONS:
        entry = data.get(section)
        if not isinstance(entry, dict):
            continue
        if entry.get("path") == "-":
            raise ConfigError(f"{section}.path '-' (stdout) cannot be shared by several workers: "
                              "give a file, or replay with --workers 1")
        if isinstance(entry.get("path"), str):
            entry["path"] = part_path(entry["path"], part, folder=False)
        if isinstance(entry.get("dir"), str):
            entry["dir"] = part_path(entry["dir"], part, folder=True)
    metrics = data.get("metrics")
    if isinstance(metrics, dict) and isinstance(metrics.get("path"), str):
        metrics["path"] = part_path(metrics["path"], part, folder=False)
    return data


def _pacing_states(replay: Replay, shares: list[list[RowGroup]]) -> list[tuple[int | None, int]]:
    """The pacer's (last timestamp, virtual time) where each share starts: the schedule of one replay."""
    import pyarrow.parquet as pq

    from ..connectors.capture_source import pace_column
    from ..connectors.pacing import Pacer

    pacer = Pacer(speed=replay.speed, max_gap=replay.max_gap)
    states = []
    for share in shares:
        states.append((pacer.last_ns, pacer.virtual_ns))
        for group in share:
            table = pq.ParquetFile(group.path).read_row_group(group.index, columns=["sent_ns", "received_ns"])
            pacer.advance(pace_column(table.slice(0, group.rows), replay.pace_by))
    return states


def _run_workers(replay: Replay, data: dict[str, Any], workers: int) -> ReplayResult:
    import multiprocessing as mp

    replay.validated(data)  # config errors here, once, before any process starts
    unreadable: list[Unreadable] = []  # files whose footer cannot be read: left out of the plan (or an error)
    plan = limit(plan_row_groups(replay.captures, None if replay.stop_on_error else unreadable), replay.count)
    if not plan:
        if unreadable:
            raise WirepipeError(describe_unreadable(unreadable, "capture"))
        raise WirepipeError("the capture has no records to replay")
    shares = split(plan, workers)
    if len(shares) < workers:
        log.info("the capture has %d row group(s): replaying on %d worker(s), not %d",
                 len(plan), len(shares), workers)
    configs = [worker_config(data, k) for k in range(len(shares))]
    paced = replay.pace == "original"
    states = _pacing_states(replay, shares) if paced else [(None, 0)] * len(shares)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    ready = ctx.Barrier(len(shares) + 1) if paced else None
    go = ctx.Barrier(len(shares) + 1) if paced else None
    origin = ctx.Value("d", 0.0)
    level = logging.getLogger().getEffectiveLevel()
    procs = [ctx.Process(target=_worker, name=f"wirepipe-replay-{k}", daemon=True,
                         args=(k, replay, cfg, share, states[k], ready, go, origin, results, level, len(shares)))
             for k, (cfg, share) in enumerate(zip(configs, shares, strict=True))]
    started = time.monotonic()
    try:
        for proc in procs:
            proc.start()
        if paced:
            assert ready is not None and go is not None
            try:  # a worker that fails before it is ready breaks the barrier; its error follows
                ready.wait()
                origin.value = time.time()
                go.wait()
            except threading.BrokenBarrierError:
                pass
        reports = _collect(procs, results)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
            proc.join(5)
    result = ReplayResult(pipeline=str(data.get("name")), runner="local", workers=len(shares),
                          elapsed=time.monotonic() - started, unreadable=unreadable)
    for stats in reports:
        result.records_in += stats["records_in"]
        result.records_out += stats["records_out"]
        result.rejected += stats["rejected"]
        result.unreadable += [Unreadable(*u) for u in stats["unreadable"]]
        result.rejections += stats["rejections"]
        if stats["rejected"] and stats["dead_letter"]:
            result.dead_letters.append(stats["dead_letter"])
    result.rejections = merge_rejections([result.rejections])
    result.outputs = [p for cfg in configs for p in _outputs(cfg) if Path(p).exists()]
    return result


def _collect(procs: list[Any], results: Any) -> list[dict[str, Any]]:
    """Each worker's stats; the first failure stops the others and becomes the error."""
    import queue

    reports: dict[int, dict[str, Any]] = {}
    while len(reports) < len(procs):
        try:
            k, ok, payload = results.get(timeout=0.5)
        except queue.Empty:
            dead = [p for i, p in enumerate(procs) if i not in reports and not p.is_alive() and p.exitcode]
            if dead:
                raise WirepipeError(f"replay worker {dead[0].name} died (exit code {dead[0].exitcode})") from None
            continue
        if not ok:
            raise WirepipeError(f"replay worker {k}: {payload}")
        reports[k] = payload
    return [reports[k] for k in sorted(reports)]


def _worker(k: int, replay: Replay, data: dict[str, Any], share: list[RowGroup], state: tuple[int | None, int],
            ready: Any, go: Any, origin: Any, results: Any, level: int, workers: int) -> None:
    """One replay process: its share of row groups through the pipeline."""
    import os
    import signal

    from ..core.allocator import keep_freed_memory
    from ..core.redact import log_redacted
    from ..metrics.recorder import WORKER_ENV, WORKERS_ENV

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    keep_freed_memory()  # a worker process of wirepipe's own (see wirepipe.core.allocator)
    os.environ.update({WORKER_ENV: str(k), WORKERS_ENV: str(workers)})  # files of its own (default dead letters)
    log_redacted(level, f"%(asctime)s %(levelname)s %(name)s[{k}]: %(message)s")
    try:
        pipe = build(replay, data)
        source = _capture_source(pipe)
        source.row_groups = share
        source.count = None  # the plan is already cut at --count
        if ready is not None:
            from ..connectors.pacing import Pacer, WallClock

            ready.wait()
            go.wait()
            source.pacer = Pacer(speed=replay.speed, max_gap=replay.max_gap, clock=WallClock(),
                                 origin=origin.value, last_ns=state[0], virtual_ns=state[1])
        stats = pipe.run()
        results.put((k, True, {"records_in": stats.records_in, "records_out": stats.records_out,
                               "rejected": stats.rejected, "rejections": stats.rejections.rows(),
                               "unreadable": [tuple(u) for u in stats.unreadable],
                               "dead_letter": dead_letter_destination(pipe)}))
    except Exception as exc:
        if ready is not None:
            ready.abort()
            go.abort()
        results.put((k, False, str(exc) if isinstance(exc, WirepipeError) else f"{type(exc).__name__}: {exc}"))
