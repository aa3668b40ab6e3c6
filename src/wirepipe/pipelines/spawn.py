"""Starting worker processes: the one way wirepipe starts a process of its own to run a pipeline.

A pool's workers (``pool.py``) and a replay's (``replay/local.py``) are started alike, by ``start``,
as ``python -m wirepipe.pipelines.spawn TARGET LEVEL NAME``, where ``TARGET`` (``module:function``)
is what the worker runs:

- **Its config on stdin**, one JSON line (``${NATS_PASSWORD}`` expanded): a pipe, so no file on disk
  holds a secret, not even after a SIGKILL of the parent, and neither does the command line
  (``ps`` shows it). The parent may send more lines later (``tell``: a replay's common start).
- **Its identity in its environment** (``core/workers.py``: index, number of workers, group id), so a
  run's metadata and the default dead-letter file know which worker wrote them.
- **Its own session**: Ctrl-C at the terminal reaches the parent only, which decides (one SIGTERM each:
  the drain). A SIGTERM that comes before the target installs its own handlers (still importing)
  ends the worker at once with 0: nothing was read, so nothing is left to drain.
- **Its report channel** is its stdout: JSON lines to the parent (``Channel.send``; anything else the
  worker prints goes to stderr instead, so it cannot corrupt a report). Its stderr is the parent's,
  every log line tagged ``[w<index>]`` and stripped of credentials (``core/redact.py``).
- **The allocator policy** of wirepipe's own processes (``core/allocator.py``).
- **Errors as ``wirepipe run`` ends on them**: one line on stderr, no traceback, the exit code of
  ``core/exit_codes.py``; the message is also the worker's last report (``{"error": ...}``), so the
  parent can say why.

A target is ``def target(message, channel: Channel) -> ExitCode``.

The bench publisher is the one child started otherwise, by ``fork``: it publishes records the bench
generated in memory (``bench/data.py``: up to hundreds of megabytes of Python objects, numpy arrays
among them) for every iteration of every combination. A spawned interpreter would take ~1 s to start
and would need those records sent through a pipe (encoded by a format the bench is measuring) or
generated again; a fork has them at once, copy-on-write. It is no worker of a group and runs no
config: it publishes, sends its stage rows back on a pipe and ends, and inherits the parent's
allocator policy and signals.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TextIO

from ..core.exit_codes import ExitCode
from ..core.workers import Worker

_REPORT_LIMIT = 1 << 20  # bytes a report line may have (a pool worker's rejections and outputs)


def group_id() -> str:
    """An id for the workers one parent starts (in each one's run metadata): its start time and pid."""
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}"


def describe_exit(code: int | None) -> str:
    """How a worker process ended, for a message: ``exit code 2``, ``killed by SIGKILL``."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


# --- the parent's side -----------------------------------------------------------------------------


class WorkerProcess:
    """A worker started by ``start``: its reports, what the parent tells it, its signals and its end."""

    def __init__(self, worker: Worker, proc: asyncio.subprocess.Process) -> None:
        self.worker = worker
        self.proc = proc

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    async def reports(self) -> AsyncIterator[dict[str, Any]]:
        """Its reports, in order, until it closes its stdout (it ended); a line that is no JSON object is
        skipped."""
        assert self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                return
            with contextlib.suppress(ValueError):
                report = json.loads(line)
                if isinstance(report, dict):
                    yield report

    async def tell(self, message: Any) -> None:
        """One more JSON line on its stdin (``Channel.receive`` reads it); nothing if it is gone."""
        stdin = self.proc.stdin
        if stdin is None or stdin.is_closing():
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.write(json.dumps(message, default=str).encode() + b"\n")
            await stdin.drain()

    def end_input(self) -> None:
        """Nothing more to tell it (its ``receive`` returns None)."""
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()

    def signal(self, sig: int) -> None:
        """Send ``sig`` unless it has ended."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    async def wait(self) -> int:
        return await self.proc.wait()


async def start(target: str, message: Any, worker: Worker, *, group: str, name: str, log_level: int = logging.INFO,
                keep_input: bool = False) -> WorkerProcess:
    """Start ``target`` as ``worker`` of ``group`` (see the module doc) with ``message`` on its stdin; ``name``
    (the pipeline file) is what its error lines name for an error that names no file. ``keep_input`` leaves
    its stdin open for ``tell``."""
    env = {**os.environ, **worker.environment(group)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", __name__, target, str(log_level), name,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env, start_new_session=True,
        limit=_REPORT_LIMIT)
    child = WorkerProcess(worker, proc)
    await child.tell(message)  # it died at once: its reports end and its exit code says why
    if not keep_input:
        child.end_input()
    return child


def fork(target: Callable[..., None], *args: Any) -> tuple[Any, Any, Any]:
    """The bench publisher (see the module doc): ``target(go, send, *args)`` in a forked child, where ``go`` is
    an event the parent sets when the child may begin and ``send`` the child's end of a one-way pipe.
    Returns the child process (daemonic: it never outlives the parent), the parent's end of the pipe and
    ``go``."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=target, args=(go, send, *args), daemon=True)
    child.start()
    send.close()  # the child's end: the parent's copy would keep the pipe open after the child ended
    return child, receive, go


# --- the worker's side ---------------------------------------------------------------------------


class Channel:
    """A worker's pipes to its parent: reports out (its stdout), messages in (its stdin, after the config)."""

    def __init__(self, out: TextIO, inp: TextIO) -> None:
        self._out = out
        self._in = inp

    def send(self, report: dict[str, Any]) -> bool:
        """Report to the parent; False when it is gone (its end of the pipe is closed)."""
        try:
            self._out.write(json.dumps(report, default=str) + "\n")
            self._out.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def receive(self) -> Any:
        """The parent's next message (a JSON line on stdin), or None once it will send no more."""
        line = self._in.readline()
        return json.loads(line) if line.strip() else None


def main(argv: list[str]) -> int:
    """A worker process: ``TARGET LEVEL NAME``, its config the first line on stdin (see the module doc)."""
    # Told to stop while still starting (imports, connect): nothing was read, so there is nothing to drain.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(ExitCode.OK))
    target, level, name = argv[0], int(argv[1]), argv[2] if len(argv) > 2 else ""
    worker = Worker.current()
    channel = Channel(os.fdopen(os.dup(1), "w", encoding="utf-8"), sys.stdin)
    os.dup2(2, 1)  # anything else printed goes to stderr: stdout is the report channel

    from ..core.allocator import keep_freed_memory
    from ..core.errors import WirepipeError
    from ..core.exit_codes import exit_code
    from ..core.redact import log_redacted, redact_secrets
    from ..core.registry import load_ref

    log_redacted(level, f"%(asctime)s %(levelname)s %(name)s [w{worker.index}]: %(message)s")
    keep_freed_memory()  # a worker process of wirepipe's own (see wirepipe.core.allocator)
    try:
        run = load_ref(target)
        return int(run(channel.receive(), channel))
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except (WirepipeError, OSError) as exc:
        if isinstance(exc, WirepipeError):
            message = str(exc)
        else:  # an I/O or network error nothing described: one line, as `wirepipe run` prints it
            message = f"{exc.filename or name or f'worker {worker.index}'}: {exc.strerror or exc}"
        message = redact_secrets(message)
        print(f"error: [w{worker.index}] {message}", file=sys.stderr)
        channel.send({"error": message})
        return exit_code(exc)
    except Exception as exc:  # a bug: its traceback goes to the log, the parent gets its one line
        channel.send({"error": redact_secrets(f"{type(exc).__name__}: {exc}")})
        raise


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
