"""Hot reload: ``wirepipe run PIPELINE --watch`` follows the pipeline file while it runs.

What is watched: the pipeline file and every local file an operator option names (a schema, a zstd
dictionary: a string value under ``operators`` that is the path of a file, after any ``#Message``), as the
config in force names them. Not watched: the environment (``${VAR}`` is read again at each reload, from the
process's own environment, which does not change), a ``.proto`` schema's imports, the Python modules a
``map`` or ``filter`` function lives in (Python cannot unload a module safely).

How a change is seen: every ``POLL`` seconds each file's bytes are hashed (portable, no dependency, and an
edit that keeps the size and the modification time is seen too); once the files differ from what was last
read and then stay the same for ``SETTLE`` seconds (an editor's write, rename and chmod; a file briefly
missing between its deletion and the rename of its new copy), the new version is read: the file as
``run`` read it (``${VAR}`` and every ``--set``, ``--count`` and ``--duration`` of the command line), and
validated as ``wirepipe validate`` does. Its digest (``config_digest``: the validated config, secrets
masked, and the named files' bytes) names it in the logs, the run summary and the metrics'
``config_digest`` column; an edit that changes no setting (a comment, the key order) reloads nothing.

What happens then, all or nothing (``classify``):

- **Invalid**: the running config stays; one line says why, as ``validate`` prints it (file, field,
  value, what is allowed).
- **A change that needs a restart** (``RESTART``: the source, the sink, the name, the queue, the monitor,
  tracing, the service, the resources; a field this module does not know): refused, each field with its old and new value and the
  reason; the running config stays and nothing of the change is applied. A restart is never done for you:
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
import contextlib
import hashlib
import json
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import ConfigError, WirepipeError
from ..core.exit_codes import ExitCode
from ..core.workers import Worker

if TYPE_CHECKING:
    from ..connectors.connector import Source
    from .pipeline import Pipeline
    from .pool import Pool
    from .run import PipelineRun
    from .spawn import Channel, WorkerProcess

log = logging.getLogger("wirepipe")

POLL = 0.5  # seconds between two looks at the watched files
SETTLE = 0.3  # seconds the files must stay the same before a new version is read

# The top-level fields of a pipeline that reload in place (``PipelineRun.switch_to`` says how: the operators rebuilt,
# the files they name read again; a new dead letter opened and the old one closed; the metrics rows so far written
# as they ran, a changed section a new recorder; the intervals from the next commit or stop).
IN_PLACE = frozenset({"operators", "dead_letter", "metrics", "flush_interval", "shutdown_timeout", "allow_pickle",
                      "description"})
# The ones that need a restart, and why (the source's reason depends on the source: ``restart_reason``).
RESTART: dict[str, str] = {
    "name": "the pipeline's name is its identity: the durable or queue group its workers share by default, "
            "default Nats-Msg-Ids, the default dead-letter file, the metrics' pipeline",
    "source": "the source is opened once per run",
    "sink": "the sink is opened once per run (its files or its connection): reopened elsewhere, the output "
            "would be split between two destinations",
    "queue_size": "the read-ahead queue is sized when the run starts",
    "monitor": "the status line and the Prometheus endpoint belong to the process",
    "tracing": "the tracer is set up when the run starts",
    "service": "the NATS service is registered once per run, on the connection of the source or sink",
    "resources": "the stores operators read from (a schema registry, dictionaries) are opened once per run, "
                 "before the operators",
}
_UNKNOWN = "a hot reload does not know this field, so it is not changed in a running pipeline"
_UNSET = object()


def restart_reason(key: str, source: Source) -> str:
    """Why a change of ``key`` needs a restart; for the source, what reopening this kind of source would do (its
    declared capabilities, never its type name)."""
    if key != "source":
        return RESTART.get(key, _UNKNOWN)
    if source.drops_when_unread:
        return ("the source is opened once per run and cannot send again what it had read: reopening it would lose "
                "the messages in flight (core NATS is at most once)")
    if source.redelivers:
        return ("the source is opened once per run: another stream, durable or subject is a new position in a "
                "stream, which its deliver policy decides (restarted, a durable delivers again what it had not "
                "acknowledged: nothing is lost)")
    return "the source is opened once per run (its input read from the start)"


# --- what changed ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One changed field of a config: its path (the first leaf that differs under a field that needs a restart),
    its values, and why it needs a restart (None: it reloads in place)."""

    path: str
    before: Any
    after: Any
    restart: str | None = None

    def describe(self) -> str:
        return f"{self.path}: {_show(self.before)} -> {_show(self.after)}"


def _show(value: Any) -> str:
    from ..core.models import short_repr
    from ..core.redact import redact_secrets

    return "(not set)" if value is _UNSET else redact_secrets(short_repr(value))


def classify(running: Mapping[str, Any], new: Mapping[str, Any], source: Source) -> list[Change]:
    """The changes from ``running`` to ``new`` (validated configs as JSON data: ``Pipeline.config``), one per
    top-level field, in the config's order; ``source`` is the running source (its reason, ``restart_reason``).

    >>> from wirepipe.connectors.generate import GenerateSource
    >>> old = {"name": "p", "operators": [{"compress": {"level": 1}}], "queue_size": 8}
    >>> new = {"name": "p", "operators": [{"compress": {"level": 9}}], "queue_size": 16}
    >>> [(c.path, c.restart is None) for c in classify(old, new, GenerateSource("point"))]
    [('operators', True), ('queue_size', False)]
    """
    changes = []
    for key in dict.fromkeys([*running, *new]):
        before, after = running.get(key, _UNSET), new.get(key, _UNSET)
        if before == after:
            continue
        if key in IN_PLACE:
            changes.append(Change(key, before, after))
            continue
        path, before, after = _first_difference(key, before, after)
        changes.append(Change(path, before, after, restart_reason(key, source)))
    return changes


def _first_difference(path: str, before: Any, after: Any) -> tuple[str, Any, Any]:
    """The first leaf under ``path`` where ``before`` and ``after`` differ (a mapping's keys in order; a list
    whose length changed is the leaf)."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        for key in dict.fromkeys([*before, *after]):
            b, a = before.get(key, _UNSET), after.get(key, _UNSET)
            if b != a:
                return _first_difference(f"{path}.{key}", b, a)
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for i, (b, a) in enumerate(zip(before, after, strict=True)):
            if b != a:
                return _first_difference(f"{path}[{i}]", b, a)
    return path, before, after


# --- one version of a config -------------------------------------------------------------------------


def named_files(config: Mapping[str, Any]) -> list[str]:
    """The local files the operators of ``config`` (validated, as JSON data) name: every string of their options
    that is the path of a file, after any ``#Message`` (a schema, a dictionary; a plugin operator's files too).
    Relative paths are from this process's folder, as the operators read them."""
    def strings(value: Any) -> Iterator[str]:
        if isinstance(value, str):
            yield value
        elif isinstance(value, Mapping):
            for item in value.values():
                yield from strings(item)
        elif isinstance(value, list):
            for item in value:
                yield from strings(item)

    found = []
    for text in strings(config.get("operators") or []):
        path = text.partition("#")[0]
        if path and "://" not in path and "\n" not in path and len(path) < 4096:
            with contextlib.suppress(OSError, ValueError):
                if Path(path).is_file():
                    found.append(path)
    return list(dict.fromkeys(found))


def file_digest(path: str) -> str | None:
    """The SHA-256 of a file's bytes, None when it cannot be read (missing between an editor's delete and
    rename)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def config_digest(config: Mapping[str, Any], files: Mapping[str, str | None]) -> str:
    """12 hex digits of a SHA-256 of ``config`` (validated, as JSON data; the user info of URLs masked, as every
    secret is in a dump) and of the bytes of the ``files`` it names (their digests)."""
    from ..core.redact import redact_secrets

    text = redact_secrets(json.dumps(config, sort_keys=True, default=str))
    digest = hashlib.sha256(text.encode())
    digest.update(json.dumps(sorted(files.items())).encode())
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class Version:
    """A config as it runs: validated (as JSON data), the files its operators name (their digests) and its digest."""

    config: dict[str, Any]
    files: dict[str, str | None]
    digest: str

    @classmethod
    def of(cls, config: dict[str, Any], digest: str | None = None) -> Version:
        """``config`` with the files it names read now; ``digest`` when another process computed it (a pool's)."""
        files = {path: file_digest(path) for path in named_files(config)}
        return cls(config, files, digest or config_digest(config, files))

    def changed_files(self, other: Version) -> list[str]:
        return [p for p in dict.fromkeys([*self.files, *other.files]) if self.files.get(p) != other.files.get(p)]


# --- watching files ------------------------------------------------------------------------------------


class Watch:
    """Files polled for a change (see the module doc): ``changed`` returns once they differ from what was last seen
    and then stayed the same for ``settle`` seconds. Until ``follow`` says what was read, it returns at once: the
    first look is compared with what runs."""

    def __init__(self, paths: Iterable[str], *, poll: float = POLL, settle: float = SETTLE) -> None:
        self.paths = list(dict.fromkeys(paths))
        self.poll = poll
        self.settle = settle
        self.seen: dict[str, str | None] | None = None

    def look(self) -> dict[str, str | None]:
        return {path: file_digest(path) for path in self.paths}

    def follow(self, paths: Iterable[str], seen: dict[str, str | None]) -> None:
        """Watch ``paths`` from now on, ``seen`` being what was read (a file added since is compared with it)."""
        self.paths = list(dict.fromkeys(paths))
        self.seen = {path: seen.get(path, file_digest(path)) for path in self.paths}

    async def changed(self) -> dict[str, str | None]:
        """What the files hold once they changed and settled."""
        if self.seen is None:
            return self.look()
        while True:
            now = self.look()
            if now != self.seen:
                while True:
                    await asyncio.sleep(self.settle)
                    later = self.look()
                    if later == now:
                        return now
                    now = later
            await asyncio.sleep(self.poll)


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
        from .pool import worker_config

        live = self.live = LiveConfig(run, self.file)
        watch = Watch([self.file, *live.running.files], poll=self.poll, settle=self.settle)
        first = True
        while True:
            seen = await watch.changed()
            try:
                data = worker_config(read_config(self.file, self.overrides), Worker(), file=self.file)
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
            build_pipeline(validate_config(pool.worker_config(0, data), file=file), file=file)
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
            await proc.tell({"reload": {"config": self.pool.worker_config(index, data), "digest": digest}})
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
