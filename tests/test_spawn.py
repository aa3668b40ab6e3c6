"""The one way wirepipe starts a worker process (``pipelines/spawn.py``): config on stdin, identity in the
environment, reports on stdout, errors as exit codes and a last report."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

from wirepipe.core.errors import ConfigError, WirepipeError
from wirepipe.core.exit_codes import ExitCode
from wirepipe.core.workers import Worker
from wirepipe.pipelines.spawn import Channel, WorkerProcess, describe_exit, start

SECRET = "s3cr3t-pa55word"


def echo(message: dict[str, Any], channel: Channel) -> ExitCode:
    """A target: reports what it was given and who it is, then what the parent tells it next."""
    from wirepipe.core.allocator import policy

    channel.send({"message": message, "worker": [Worker.current().index, Worker.current().workers],
                  "group": os.environ.get("WIREPIPE_POOL"), "argv": sys.argv, "session": os.getsid(0) == os.getpid(),
                  "allocator": policy()})
    print("a stray print goes to the log, not into the reports")
    channel.send({"next": channel.receive()})
    return ExitCode.OK


def fail(message: dict[str, Any], channel: Channel) -> ExitCode:
    if message["how"] == "config":
        raise ConfigError("bad field", file="p.yaml", path="sink.path")
    raise WirepipeError(f"cannot reach nats://user:{SECRET}@host:4222")


async def _run(target: str, message: Any, *, tell: Any = None) -> tuple[list[dict[str, Any]], int]:
    proc: WorkerProcess = await start(f"tests.test_spawn:{target}", message, Worker(1, 3), group="g-1",
                                      name="p.yaml", keep_input=tell is not None)
    if tell is not None:
        await proc.tell(tell)
        proc.end_input()
    reports = [r async for r in proc.reports()]
    return reports, await asyncio.wait_for(proc.wait(), 60)


async def test_a_worker_gets_its_config_on_stdin_and_its_identity_in_its_environment() -> None:
    reports, code = await _run("echo", {"password": SECRET}, tell={"origin": 1.5})
    assert code == ExitCode.OK
    first, second = reports
    assert first["message"] == {"password": SECRET} and SECRET not in " ".join(first["argv"])
    assert (first["worker"], first["group"], first["session"]) == ([1, 3], "g-1", True)
    assert "not applied" not in first["allocator"]  # the allocator policy of wirepipe's own processes
    assert second == {"next": {"origin": 1.5}}


async def test_errors_end_a_worker_with_the_exit_code_and_a_last_report() -> None:
    reports, code = await _run("fail", {"how": "config"})
    assert code == ExitCode.CONFIG and reports == [{"error": "p.yaml: sink.path: bad field"}]
    reports, code = await _run("fail", {"how": "runtime"})
    assert code == ExitCode.RUNTIME and reports == [{"error": "cannot reach nats://***@host:4222"}]


def test_exits_are_described_for_messages() -> None:
    assert describe_exit(2) == "exit code 2" and describe_exit(-signal.SIGKILL) == "killed by SIGKILL"
    assert describe_exit(None) == "still running"
