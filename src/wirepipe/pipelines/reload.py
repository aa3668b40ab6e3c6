"""Hot reload: ``wirepipe run PIPELINE --watch`` follows the pipeline file while it runs.

What is watched: the pipeline file and every local file an operator option names (a schema, a zstd
dictionary: a string value under ``operators`` that is the path of a file, after any ``#Message``), as the
config in force names them. Not watched: the environment (``${VAR}`` is read again at each reload, from the
process's own environment, which does not change), a ``.proto`` schema's imports, the Python modules a
``map`` or ``filter`` function lives in (Python cannot unload a module safely).

How a change is seen (``config_versions.py``: the files' bytes hashed every ``POLL`` seconds, a change counted
once they settle), the new version is read: the file as ``run`` read it (``${VAR}`` and every ``--set``,
``--count`` and ``--duration`` of the command line), and validated as ``wirepipe validate`` does. Its digest
(``config_digest``: the validated config, secrets masked, and the named files' bytes) names it in the logs, the
run summary and the metrics' ``config_digest`` column; an edit that changes no setting (a comment, the key order)
reloads nothing.

What happens then, all or nothing (``config_versions.classify``):

- **Invalid**: the running config stays; one line says why, as ``validate`` prints it (file, field,
  value, what is allowed).
- **A change that needs a restart** (``RESTART``: the source, the sink, the name, the queue, the monitor,
  tracing, the service, the resources; a field a hot reload does not know): refused, each field with its old and
  new value and the reason; the running config stays and nothing of the change is applied. A restart is never done for you:
  a new stream or durable is a new position whose deliver policy decides what is read again or skipped,
  a core NATS resubscribe loses the messages in flight, a sink reopened elsewhere splits the output.
- **A change that reloads in place** (``IN_PLACE``: operators, dead letter, metrics, ``flush_interval``,
  ``shutdown_timeout``): at the next batch boundary the worker commits what the running config wrote
  (flushed, then acknowledged), opens the new parts beside the running source and sink and goes on with
  them (``PipelineRun.switch_to``). The source and the sink stay open, the durable is the same and the
  records already read wait in the queue: nothing is lost or read twice. A part that cannot open (a
  dictionary bucket not there) refuses the change and the running config stays.

A pool (``--workers N --watch``) validates once in the supervisor (``PoolReloads``, with the pool's
sharing rules), then sends each worker its own copy of the new config, one worker at a time: the next
one is told once the previous one answered that it runs the new config. A worker that refuses it (a
part that cannot open there) stops the roll-out, and the workers already switched go back to the
previous config, so the pool never runs two configs for longer than a roll-out. A worker restarted
meanwhile starts with the config in force.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.errors import ConfigError, WirepipeError
from ..core.exit_codes import ExitCode
from ..core.workers import Worker
from .config_versions import POLL, SETTLE, Version, Watch, classify

if TYPE_CHECKING:
    from .pipeline import Pipeline
    from .pool import Pool
    from .run import PipelineRun
    from .spawn import Channel, WorkerProcess

log = logging.getLogger("wirepipe")

# --- applying a version in a running pipeline ---------------------------------------------------------------


@dataclass
class History:
    """The versions a run went through: each digest and the first batch it ran, and the refusals."""

    versions: list[tuple[str, int]]
    refused: int = 0
    last_refusal: str | None = None

    def counters(self) -> dict[str, int]:
        """For the status line and Prometheus (``monitor.snapshot``)."""
        return {"reloads": len(self.versions) - 1, "reloads_refused": self.refused}

    def summary(self, batches: int) -> str:
        """The run summary's line: how many reloads and refusals, and which config each batch ran under."""
        reloads = len(self.versions) - 1
        ranges = []
        for i, (digest, first) in enumerate(self.versions):
            last = (self.versions[i + 1][1] if i + 1 < len(self.versions) else batches) - 1
            ran = (f"batch {first}" if last == first else f"batches {first}-{last}") if last >= first else "no batch"
            ranges.append(f"{digest} ran {ran}")
        refused = f", {self.refused} refused (the running config stayed)" if self.refused else ""
        return f"config: {reloads} reload{'s' * (reloads != 1)}{refused}; {', '.join(ranges)}"

    def refuse(self, why: str) -> str:
        self.refused += 1
        self.last_refusal = why
        return why


@dataclass
class Outcome:
    """What became of one version in one worker: ``ok`` (it runs now), ``unchanged`` (the same digest), or the
    refusal."""

    digest: str | None
    ok: bool = False
    unchanged: bool = False
    error: str | None = None


class LiveConfig:
    """The config a pipeline's run runs, and the one way to switch it to another (``apply``): validate, build,
    classify, keep the parts that did not change, ``PipelineRun.switch_to``. A single run's ``FileReloads`` and a
    pool worker's ``WorkerReloads`` both apply through it."""

    def __init__(self, run: PipelineRun, file: str) -> None:
        pipeline = run.pipeline
        assert pipeline.config is not None, "a hot reload follows a pipeline built from a config"
        self.run = run
        self.file = file
        self.running = Version.of(pipeline.config, pipeline.config_digest)
        self.history = History([(self.running.digest, 0)])

    async def apply(self, data: dict[str, Any], digest: str | None = None) -> Outcome:
        """Switch to ``data`` (this worker's config, as read: unvalidated); ``digest`` when the pool computed it."""
        from .config import build_pipeline, validate_config

        pipeline = self.run.pipeline  # the one it runs now (the previous reload's)
        try:
            new = build_pipeline(validate_config(data, file=self.file), file=self.file)
        except (ConfigError, WirepipeError) as exc:
            return self.refuse(digest, str(exc))
        assert new.config is not None  # a pipeline built from a config keeps it
        version = Version.of(new.config, digest)
        if version.digest == self.running.digest:
            return Outcome(version.digest, unchanged=True)
        changes = classify(self.running.config, version.config, pipeline.source)
        files = self.running.changed_files(version)
        restart = [c for c in changes if c.restart is not None]
        if restart:
            why = "; ".join(f"{c.describe()} needs a restart: {c.restart}" for c in restart)
            return self.refuse(version.digest, f"{self.file}: {why}")
        changed = {c.path for c in changes}
        # What did not change keeps running as it is: an append-less JSONL dead letter reopened would start empty.
        if "dead_letter" not in changed:
            new.dead_letter = pipeline.dead_letter
        if not changed & {"operators", "allow_pickle"} and not files:
            new.operators = pipeline.operators
        if "metrics" not in changed:
            new.metrics_spec = pipeline.metrics_spec
        new.config_digest = version.digest
        try:
            first = await self.run.switch_to(new)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            message = str(exc) if isinstance(exc, WirepipeError) else f"{type(exc).__name__}: {exc}"
            return self.refuse(version.digest, f"{self.file}: the new config could not start: {message}")
        previous, self.running = self.running, version
        self.history.versions.append((version.digest, first))
        what = [*(c.path for c in changes), *files]
        log.info("%s: reloaded %s in place (%s): config %s -> %s from batch %d", pipeline.name, self.file,
                 ", ".join(what), previous.digest, version.digest, first)
        return Outcome(version.digest, ok=True)

    def refuse(self, digest: str | None, why: str) -> Outcome:
        """Log and count a refusal: the running config stays."""
        log.error("reload refused: %s (the running config %s stays)", self.history.refuse(why), self.running.digest)
        return Outcome(digest, error=why)


class FileReloads:
    """``wirepipe run PIPELINE --watch`` in one process: the files watched beside the run loop, each settled change
    applied (``Pipeline.reloader``: the run runs ``watch`` while it lasts)."""

    def __init__(self, file: str, overrides: Sequence[str], *, poll: float = POLL, settle: float = SETTLE) -> None:
        self.file = file
        self.overrides = list(overrides)
        self.poll, self.settle = poll, settle
        self.live: LiveConfig | None = None

    async def watch(self, run: PipelineRun) -> None:
        from .config import read_config

        live = self.live = LiveConfig(run, self.file)
        watch = Watch([self.file, *live.running.files], poll=self.poll, settle=self.settle)
        first = True
        while True:
            seen = await watch.changed()
            try:
                data = read_config(self.file, self.overrides)
            except ConfigError as exc:
                outcome = live.refuse(None, str(exc))
            else:
                outcome = await live.apply(data)
            if outcome.unchanged and not first:
                _unchanged(self.file)
            first = False
            watch.follow([self.file, *live.running.files], seen)

    def counters(self) -> dict[str, int]:
        return self.live.history.counters() if self.live is not None else {"reloads": 0, "reloads_refused": 0}

    def summary(self, batches: int) -> str | None:
        return self.live.history.summary(batches) if self.live is not None else None


def _unchanged(file: str) -> None:
    log.info("%s changed, but no setting a reload compares did (a comment, the layout; or a secret: those are "
             "masked, and a new credential needs a restart): nothing to reload", file)


def follow(target: Pipeline | Pool, file: str, overrides: Sequence[str], watch: bool) -> None:
    """What ``wirepipe run`` adds to a pipeline or a pool it prepared: the digest of its config (the metrics'
    ``config_digest`` column) and, with ``--watch``, its hot reload."""
    from .pool import Pool

    if isinstance(target, Pool):
        from .config import validate_config

        target.digest = Version.of(validate_config(target.data, file=file).model_dump(mode="json", by_alias=True)).digest
        if watch:
            target.reloader = PoolReloads(target, file, overrides)
            target.worker_target = WATCHED_WORKER_TARGET
        return
    assert target.config is not None
    target.config_digest = Version.of(target.config).digest
    if watch:
        target.reloader = FileReloads(file, overrides)


# --- a pool ------------------------------------------------------------------------------------------------------


class PoolReloads:
    """The supervisor's side of a pool's hot reload (see the module doc): ``Pool.reloader``; the pool runs
    ``watch`` while it supervises and hands it each worker's answer (``answered``)."""

    def __init__(self, pool: Pool, file: str, overrides: Sequence[str], *, poll: float = POLL,
                 settle: float = SETTLE) -> None:
        self.pool = pool
        self.file = file
        self.overrides = list(overrides)
        self.poll, self.settle = poll, settle
        self.rollouts = 0
        self.refused = 0
        self._answers: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._running: Version | None = None

    async def watch(self) -> None:
        from .config import validate_config

        pool = self.pool
        self._running = Version.of(validate_config(pool.data, file=self.file).model_dump(mode="json", by_alias=True),
                                   pool.digest)
        watch = Watch([self.file, *self._running.files], poll=self.poll, settle=self.settle)
        first = True
        while not pool.stopping:
            seen = await watch.changed()
            await self.evaluate(quiet=first)
            first = False
            watch.follow([self.file, *self._running.files], seen)

    async def evaluate(self, quiet: bool = False) -> None:
        """Read, validate and classify the file once; roll a new version out to the workers one by one (``quiet``:
        an unchanged config is not worth a line, as at the start)."""
        from .config import build_connector, build_pipeline, read_config, validate_config
        from .pool import pool_config

        pool, file, running = self.pool, self.file, self._running
        assert running is not None
        try:
            data = pool_config(read_config(file, self.overrides), pool.workers, file=file)
            cfg = validate_config(data, file=file)
            build_pipeline(validate_config(pool.worker_config(data), file=file), file=file,
                           worker=Worker(0, pool.workers))
            source = build_connector(cfg.source, "source", file)
        except (ConfigError, WirepipeError) as exc:
            return self._refuse(str(exc))
        version = Version.of(cfg.model_dump(mode="json", by_alias=True))
        if version.digest == running.digest:
            return None if quiet else _unchanged(file)
        restart = [c for c in classify(running.config, version.config, source) if c.restart is not None]
        if restart:
            return self._refuse(f"{file}: " + "; ".join(f"{c.describe()} needs a restart: {c.restart}"
                                                        for c in restart))
        await self._roll_out(data, version)

    async def _roll_out(self, data: dict[str, Any], version: Version) -> None:
        pool = self.pool
        assert self._running is not None
        before = (pool.data, pool.digest, self._running)
        pool.data, pool.digest = data, version.digest  # a worker (re)started from now on runs it
        for slot in pool.slots:
            if pool.stopping:
                return
            answer = await self._ask(slot.index, slot.proc, data, version.digest)
            if answer is None:  # not running (it starts with the new config)
                continue
            if not answer.get("ok") and not answer.get("unchanged"):
                pool.data, pool.digest, self._running = before
                for other in pool.slots:  # every other one goes back (one never switched answers: unchanged)
                    if other is not slot and not pool.stopping:
                        back = await self._ask(other.index, other.proc, before[0], before[1])
                        if back is not None and not (back.get("ok") or back.get("unchanged")):
                            log.error("%s: worker %d could not go back to config %s: %s", pool.name, other.index,
                                      before[1], back.get("error"))
                self._refuse(f"worker {slot.index} refused config {version.digest}: {answer.get('error')}; the "
                             f"workers run config {before[1]}")
                return
            log.info("%s: worker %d runs config %s (%d of %d)", pool.name, slot.index, version.digest,
                     slot.index + 1, pool.workers)
        self._running = version
        self.rollouts += 1
        log.info("%s: reloaded %s: every worker runs config %s (was %s)", pool.name, self.file, version.digest,
                 before[1])

    async def _ask(self, index: int, proc: WorkerProcess | None, data: dict[str, Any], digest: str | None
                   ) -> dict[str, Any] | None:
        """Tell worker ``index`` to switch to ``data`` (its own copy); its answer, or None when it is not running
        or ended before answering (it starts again with what ``pool.data`` holds)."""
        if proc is None or proc.returncode is not None:
            return None
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._answers[index] = answer
        try:
            await proc.tell({"reload": {"config": self.pool.worker_config(data), "digest": digest}})
            ended: asyncio.Future[Any] = asyncio.ensure_future(proc.wait())
            try:
                await asyncio.wait({answer, ended}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                ended.cancel()
            return answer.result() if answer.done() else None
        finally:
            self._answers.pop(index, None)

    def answered(self, index: int, answer: Any) -> None:
        """A worker's answer (its report ``{"reload": ...}``), for the roll-out waiting on it."""
        waiting = self._answers.get(index)
        if waiting is not None and not waiting.done() and isinstance(answer, dict):
            waiting.set_result(answer)

    def _refuse(self, why: str) -> None:
        self.refused += 1
        running = self._running.digest if self._running is not None else "?"
        log.error("reload refused: %s (the running config %s stays)", why, running)

    def counters(self) -> dict[str, int]:
        """What the supervisor decided, for Prometheus (``wirepipe_pool_reloads_total``...): roll-outs that
        reached every worker, and changes it did not roll out (invalid, needing a restart, or refused by a worker:
        the workers went back), which no worker's own counters show."""
        return {"pool_reloads": self.rollouts, "pool_reloads_refused": self.refused}

    def summary(self) -> str:
        """The pool summary's line."""
        s = "s" * (self.rollouts != 1)
        refused = f", {self.refused} refused (the running config stayed)" if self.refused else ""
        running = self._running.digest if self._running is not None else self.pool.digest
        return f"config: {self.rollouts} reload{s} rolled out to every worker{refused}; the workers run {running}"


class WorkerReloads:
    """A pool worker's side: the configs its supervisor sends on its stdin, applied (``LiveConfig``) and answered
    on its report channel. A thread reads the pipe (a blocking read; daemonic, so a worker never waits for it to
    end)."""

    def __init__(self, channel: Channel, file: str) -> None:
        self.channel = channel
        self.file = file
        self.live: LiveConfig | None = None

    async def watch(self, run: PipelineRun) -> None:
        live = self.live = LiveConfig(run, self.file)
        loop = asyncio.get_running_loop()
        messages: asyncio.Queue[Any] = asyncio.Queue()

        def read() -> None:
            while True:
                try:
                    message = self.channel.receive()
                except (OSError, ValueError):
                    message = None
                try:
                    loop.call_soon_threadsafe(messages.put_nowait, message)
                except RuntimeError:  # the loop is closed: the run is over
                    return
                if message is None:
                    return

        threading.Thread(target=read, name="wirepipe-reloads", daemon=True).start()
        while True:
            message = await messages.get()
            if message is None:
                return
            told = message.get("reload") if isinstance(message, dict) else None
            if not isinstance(told, dict):
                continue
            outcome = await live.apply(told["config"], told.get("digest"))
            self.channel.send({"reload": {"digest": outcome.digest, "ok": outcome.ok, "unchanged": outcome.unchanged,
                                          "error": outcome.error}})

    def counters(self) -> dict[str, int]:
        return self.live.history.counters() if self.live is not None else {"reloads": 0, "reloads_refused": 0}

    def summary(self, batches: int) -> str | None:
        return self.live.history.summary(batches) if self.live is not None else None


WATCHED_WORKER_TARGET = f"{__name__}:run_watched_worker"


def run_watched_worker(message: dict[str, Any], channel: Channel) -> ExitCode:
    """A pool worker that takes the configs its supervisor sends (``worker.run_pool_worker`` with ``WorkerReloads``)."""
    from .worker import run_pool_worker

    file = message.get("file") or f"worker {Worker.current().index}"
    return run_pool_worker(message, channel, reloads=WorkerReloads(channel, file))
