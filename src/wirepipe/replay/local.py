"""The local replay runner: the pipeline over a capture in this process, or split across processes.

One process (the default) runs the pipeline with a ``capture`` source: batches in
capture order through the operators into the sink, with the pipeline's dead letter and
metrics, exactly as ``wirepipe run`` would.

With ``workers=N`` the row groups are split into N *contiguous* shares of about equal
rows, in capture order, and each share runs in a worker process of its own, started as a
pool's are (``pipelines/spawn.py``: its config on stdin, its report on stdout). Outputs stay
well defined: each worker writes its own copy of every file, as the sink declares a worker's
copy (its ``for_worker``, the names: ``core/workers.py``): ``out.jsonl`` ->
``out.w0.jsonl``, ``out.w1.jsonl`` ..., so reading the copies in name order gives the records in
capture order; standard output is refused. The workers share the metrics folder (each run its
own part files, its worker in its metadata). A network sink (NATS) gets the workers' records
concurrently: order holds within a share only. With ``pace: original`` every worker follows the
same schedule from one common start, so the combined stream keeps the recorded timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import time
from typing import TYPE_CHECKING, Any

from ..connectors.capture_format import RowGroup, plan_row_groups
from ..connectors.capture_source import CaptureSource
from ..connectors.connector import Unreadable, describe_unreadable
from ..core.errors import WirepipeError
from ..core.exit_codes import ExitCode
from ..core.workers import Worker
from ..pipelines.monitor import run_outputs, worker_outputs
from ..pipelines.pool import merge_rejections, outputs, refuse_sharing
from ..pipelines.spawn import WorkerProcess, describe_exit, group_id, start
from . import Replay, ReplayResult

if TYPE_CHECKING:
    from ..connectors.pacing import Pacer
    from ..pipelines.pipeline import Pipeline
    from ..pipelines.spawn import Channel

log = logging.getLogger("wirepipe.replay")

STOP_GRACE = 30.0  # seconds the other workers get to drain when one failed or the replay was interrupted


def run(replay: Replay, *, workers: int = 1, pacer: Pacer | None = None) -> ReplayResult:
    """Replay a capture through its pipeline; ``pacer`` replaces the pacing (e.g. on a test clock)."""
    data = replay.config()
    if workers <= 1:
        return _run_single(replay, data, pacer)
    return _run_workers(replay, data, workers)


def build(replay: Replay, data: dict[str, Any] | None = None) -> Pipeline:
    """The replay pipeline, built but not run. Without a ``dead_letter`` its rejects go to a file of the replay's
    own (``out.replay.dead.jsonl``): never the file a live run of the same pipeline appends to."""
    from ..pipelines.config import build_pipeline

    pipe = build_pipeline(replay.validated(data), file=replay.pipeline)
    pipe.dead_letter_role = "replay"
    return pipe


def _capture_source(pipe: Pipeline) -> CaptureSource:
    source = pipe.source
    assert isinstance(source, CaptureSource), "a replay reads its capture"  # Replay.validated makes it so
    return source


def _run_single(replay: Replay, data: dict[str, Any], pacer: Pacer | None) -> ReplayResult:
    pipe = build(replay, data)  # ``{worker}`` in a path is 0, as in `wirepipe run`
    if pacer is not None:
        _capture_source(pipe).pacer = pacer
    from ..pipelines.worker import run_worker

    stats = run_worker(pipe)  # signals as `wirepipe run`: a Ctrl-C drains, then the replay says it was interrupted
    assert pipe.last_run is not None
    return ReplayResult(pipeline=pipe.name, runner="local", records_in=stats.records_in,
                        records_out=stats.records_out, rejected=stats.rejected, elapsed=stats.elapsed,
                        outputs=run_outputs(pipe.last_run), unreadable=stats.unreadable, rejections=stats.rejections.rows(),
                        interrupted=stats.interrupted)


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
    replay.validated(data)  # config errors here, once, before any process starts
    refuse_sharing(outputs(data, replay.pipeline), workers, replay.pipeline)  # and what --workers N cannot share
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
    paced = replay.pace == "original"
    states = _pacing_states(replay, shares) if paced else [(None, 0)] * len(shares)
    messages = [{"replay": dataclasses.asdict(replay), "config": data, "share": [dataclasses.astuple(g) for g in share],
                 "state": list(state), "paced": paced}
                for share, state in zip(shares, states, strict=True)]
    started = time.monotonic()
    stop = _Stop()
    reports = asyncio.run(_run_shares(replay, messages, paced, stop))
    result = ReplayResult(pipeline=str(data.get("name")), runner="local", workers=len(shares),
                          elapsed=time.monotonic() - started, unreadable=unreadable, interrupted=stop.interrupted)
    for stats in reports:
        result.records_in += stats["records_in"]
        result.records_out += stats["records_out"]
        result.rejected += stats["rejected"]
        result.unreadable += [Unreadable(*u) for u in stats["unreadable"]]
        result.rejections += stats["rejections"]
    result.rejections = merge_rejections([result.rejections])
    result.outputs = worker_outputs([stats["outputs"] for stats in reports])
    return result


class _Stop:
    """The signals a multi-process replay got: the first drains every worker (SIGTERM to each; a SIGINT makes it
    an interrupted replay), a second kills them."""

    def __init__(self) -> None:
        self.signals = 0
        self.interrupted = False


async def _run_shares(replay: Replay, messages: list[dict[str, Any]], paced: bool,
                      stop: _Stop | None = None) -> list[dict[str, Any]]:
    """Start a worker per share, give the paced ones their common start once all are ready, and return each
    one's stats in share order; the first failure stops the others and becomes the error. A signal drains the
    workers (each reports what it replayed); a second one kills them (``KeyboardInterrupt``)."""
    n = len(messages)
    group, level = group_id(), logging.getLogger().getEffectiveLevel()
    events: asyncio.Queue[tuple[int, dict[str, Any]]] = asyncio.Queue()
    procs: list[WorkerProcess] = []
    stop = stop or _Stop()
    loop = asyncio.get_running_loop()

    def on_signal(signame: str) -> None:
        stop.signals += 1
        if stop.signals == 1:
            log.info("%s: draining %d replay worker(s)", signame, len(procs))
            stop.interrupted = signame == "SIGINT"
            for proc in procs:
                proc.end_input()  # a paced worker waiting for its start: it gets none
                proc.signal(signal.SIGTERM)
        else:
            for proc in procs:
                proc.signal(signal.SIGKILL)

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal, sig.name)
            installed.append(sig)

    async def follow(k: int, proc: WorkerProcess) -> None:
        async for report in proc.reports():
            await events.put((k, report))
        await events.put((k, {"exit": await proc.wait()}))

    followers = []
    try:
        for k, message in enumerate(messages):
            proc = await start(SHARE_TARGET, message, Worker(k, n), group=group, name=replay.pipeline,
                               log_level=level, keep_input=paced)
            procs.append(proc)
            followers.append(asyncio.ensure_future(follow(k, proc)))
            if stop.signals:  # started while the others drain: it drains too
                proc.end_input()
                proc.signal(signal.SIGTERM)
        stats: dict[int, dict[str, Any]] = {}
        ready: set[int] = set()
        ended: set[int] = set()
        while len(ended) < n:
            k, report = await events.get()
            if stop.signals > 1:
                raise KeyboardInterrupt
            if "error" in report:
                raise WirepipeError(f"replay worker {k}: {report['error']}")
            if "stats" in report:
                stats[k] = report["stats"]
            elif report.get("ready"):
                ready.add(k)
                if len(ready) == n:  # all are ready: one common start, so the shares keep one schedule
                    origin = time.time()
                    for proc in procs:
                        await proc.tell({"origin": origin})
                        proc.end_input()
            elif "exit" in report:
                if k not in stats:
                    raise WirepipeError(f"replay worker {k} died ({describe_exit(report['exit'])})")
                ended.add(k)
        return [stats[k] for k in range(n)]
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        await _stop(procs)
        for follower in followers:
            follower.cancel()


async def _stop(procs: list[WorkerProcess]) -> None:
    """Workers still running (another failed, or the replay was interrupted): drain them (SIGTERM), then kill
    what is left after a while."""
    running = [p for p in procs if p.returncode is None]
    for proc in running:
        proc.end_input()  # a paced worker waiting for its start: it gets none
        proc.signal(signal.SIGTERM)
    try:
        if running:
            await asyncio.wait([asyncio.ensure_future(p.wait()) for p in running], timeout=STOP_GRACE)
    finally:
        for proc in running:
            proc.signal(signal.SIGKILL)  # no-op for those that ended


SHARE_TARGET = f"{__name__}:run_share"  # what the spawner runs in each replay worker


def run_share(message: dict[str, Any], channel: Channel) -> ExitCode:
    """One replay worker (started by ``spawn.start``): its share of row groups through the pipeline, then its
    stats as its report; a paced one reports ready and waits for the common start."""
    from ..connectors.capture_format import RowGroup
    from ..pipelines.worker import run_worker

    replay = Replay(**message["replay"])
    pipe = build(replay, message["config"])
    source = _capture_source(pipe)
    source.row_groups = [RowGroup(*g) for g in message["share"]]
    source.count = None  # the plan is already cut at --count
    if message["paced"]:
        from ..connectors.pacing import Pacer, WallClock

        channel.send({"ready": True})
        go = channel.receive()
        if not isinstance(go, dict) or "origin" not in go:  # stopped before the common start: it replayed nothing
            channel.send({"stats": {"records_in": 0, "records_out": 0, "rejected": 0, "rejections": [],
                                    "unreadable": [], "outputs": []}})
            return ExitCode.OK
        last_ns, virtual_ns = message["state"]
        source.pacer = Pacer(speed=replay.speed, max_gap=replay.max_gap, clock=WallClock(),
                             origin=float(go["origin"]), last_ns=last_ns, virtual_ns=virtual_ns)
    stats = run_worker(pipe)
    assert pipe.last_run is not None
    channel.send({"stats": {"records_in": stats.records_in, "records_out": stats.records_out,
                            "rejected": stats.rejected, "rejections": stats.rejections.rows(),
                            "unreadable": [tuple(u) for u in stats.unreadable],
                            "outputs": run_outputs(pipe.last_run)}})
    return ExitCode.OK
