"""The exit-code table (``core/exit_codes.py``, docs/reference/exit-codes.md), checked command by command.

Every command runs as a user runs it: its own process, a real nats-server, real files. Each goes through the
outcomes of the table that apply to it: ok (0), records rejected (3), interrupted by Ctrl-C before the end of
a bounded run (130, after a clean drain, the summary saying so), a config or usage error (2), a runtime
failure (1); ``run`` also through records lost (5) and ``bench`` through failed combinations (4). Where a
command cannot meet an outcome, ``EXCEPTIONS`` says why, and its cell shows what the command does instead
(nothing is skipped). Each cell is small (a few hundred records); the cells that need a server, Beam or
seconds of work are ``slow``.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli import ROOT, start_wirepipe, wirepipe
from wirepipe.connectors.nats.server import EmbeddedServer, ServerOptions, free_port
from wirepipe.core.exit_codes import ExitCode

COMMANDS = ("run", "pool", "replay", "replay-beam", "capture", "tap", "test", "bench", "validate", "dict")
OUTCOMES = {"ok": ExitCode.OK, "rejected": ExitCode.REJECTED, "interrupted": ExitCode.INTERRUPTED,
            "config": ExitCode.CONFIG, "runtime": ExitCode.RUNTIME}
# Outcomes of the table only some commands have.
EXTRA = {("run", "lost"): ExitCode.LOST, ("bench", "failures"): ExitCode.BENCH_FAILURES}

# What a command cannot meet, and why; the cell runs what the command does instead where there is something to
# show (its code in SHOWN), else nothing.
EXCEPTIONS = {
    ("capture", "rejected"): "a capture has no stage that refuses a record: it keeps every message's bytes as "
                             "they came (a corrupt payload included: its replay rejects it)",
    ("tap", "rejected"): "an observer dead-letters nothing: a message it cannot decode is counted apart and shown "
                         "with --raw, and the tap exits 0",
    ("test", "rejected"): "a test case states the rejections it expects; one it did not expect fails the case, "
                          "exit 1",
    ("bench", "rejected"): "the bench rejects no record: a combination that fails is exit 4 (the others are "
                           "measured)",
    ("validate", "rejected"): "validate runs no record",
    ("validate", "interrupted"): "validate runs nothing to interrupt (a Ctrl-C while it reads is 130, as for every "
                                 "command)",
    ("validate", "runtime"): "validate connects to nothing and writes nothing: what it can find is a config error",
    ("dict", "rejected"): "records `dict train` cannot read are left out of the training and counted on its "
                          "report, not an exit code",
}
SHOWN = {("capture", "rejected"): ExitCode.OK, ("tap", "rejected"): ExitCode.OK,
         ("test", "rejected"): ExitCode.RUNTIME, ("bench", "rejected"): ExitCode.BENCH_FAILURES}
# Cells that refuse before any work (a process that reads a file and exits 2): the fast lane's.
FAST = {("run", "config"), ("pool", "config"), ("replay", "config"), ("replay-beam", "config"), ("capture", "config"),
        ("tap", "config"), ("test", "config"), ("bench", "config"), ("validate", "ok"), ("validate", "config"),
        ("dict", "config"), *((c, o) for c, o in EXCEPTIONS if (c, o) not in SHOWN)}


def cells() -> Iterator[Any]:
    for cell in [*((c, o) for c in COMMANDS for o in OUTCOMES), *EXTRA]:
        marks = [] if cell in FAST else [pytest.mark.slow]
        yield pytest.param(*cell, marks=marks, id="-".join(cell))


# --- what the cells share ------------------------------------------------------------------------------------


class Lab:
    """A module's worth of parts, each made when a cell first needs it: a server (with its monitoring port),
    a capture of 2,000 point records in row groups of 200."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.http_port = free_port()
        self._server: EmbeddedServer | None = None
        self._capture: Path | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            self._server = EmbeddedServer(store_dir=self.root / "js", options=ServerOptions(http_port=self.http_port))
            self._server.start()
        return self._server.url

    @property
    def capture(self) -> Path:
        if self._capture is None:
            capture = self.root / "cap"
            made = wirepipe("run", write(self.root / "make-capture.yaml", {
                "name": "make-capture", "source": {"type": "generate", "dataset": "point", "count": 2000},
                "operators": [{"serialize": {"format": "msgpack"}}],
                "sink": {"type": "capture", "dir": str(capture), "row_group_rows": 200}}))
            assert made.returncode == 0, made.stderr
            self._capture = capture
        return self._capture

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    def subscribers(self, subject: str) -> int:
        """Connections with a subscription on ``subject`` (the server's /connz): the consumer is listening."""
        body = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/connz?subs=1", timeout=5).read())
        return sum(1 for c in body.get("connections", []) if subject in (c.get("subscriptions_list") or []))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    made = Lab(tmp_path_factory.mktemp("exit-codes"))
    try:
        yield made
    finally:
        made.close()


def write(path: Path, config: dict[str, Any] | str) -> Path:
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def pipeline(folder: Path, source: dict[str, Any], operators: list[Any] | None = None,
             sink: dict[str, Any] | None = None, **more: Any) -> Path:
    return write(folder / "p.yaml", {"name": "p", "source": source, "operators": operators or [],
                                     "sink": sink or {"type": "jsonl", "path": str(folder / "out.jsonl")}, **more})


DECODE = [{"deserialize": {"format": "msgpack"}}]
REJECT_ALL = [{"deserialize": {"format": "json"}}]  # the records are msgpack: every one is rejected
CRAWL = [{"map": {"function": "tests.records:first_then_crawl"}}]  # 20 ms a record, the first one announced
DEAD = f"nats://127.0.0.1:{free_port()}"  # nothing listens there


@dataclass
class Ran:
    code: int
    stderr: str
    stdout: str = ""


def done(proc: subprocess.CompletedProcess[str]) -> Ran:
    return Ran(proc.returncode, proc.stderr, proc.stdout)


def interrupt(args: list[Any], folder: Path, ready: Callable[[], bool], env: dict[str, str] | None = None,
              timeout: float = 120) -> Ran:
    """``wirepipe ARGS`` in the background, Ctrl-C (SIGINT) once ``ready()``; what it ended with."""
    err = folder / "stderr.txt"
    with open(err, "w") as stderr, open(folder / "stdout.txt", "w") as stdout:
        proc = start_wirepipe(*args, stdout=stdout, stderr=stderr, cwd=ROOT,
                              env={"WIREPIPE_TEST_STARTED": str(folder / "started"), **(env or {})})
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None, f"it ended before it could be interrupted: {err.read_text()[-3000:]}"
            assert time.monotonic() < deadline, err.read_text()[-3000:]
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return Ran(proc.returncode, err.read_text(), (folder / "stdout.txt").read_text())


def started(folder: Path) -> Callable[[], bool]:
    return (folder / "started").exists


def says(folder: Path, text: str) -> Callable[[], bool]:
    """The background command's stderr holds ``text``."""
    return lambda: text in (folder / "stderr.txt").read_text()


def publish(url: str, subject: str, payloads: list[bytes], stream: str | None = None) -> None:
    """Core NATS (or, with ``stream``, a new JetStream stream): ``payloads`` as msgpack records."""
    import asyncio

    import nats

    async def go() -> None:
        nc = await nats.connect(url)
        if stream is not None:
            js = nc.jetstream()
            await js.add_stream(name=stream, subjects=[subject])
            for p in payloads:
                await js.publish(subject, p, headers={"Content-Type": "application/msgpack"})
        else:
            for p in payloads:
                await nc.publish(subject, p, headers={"Content-Type": "application/msgpack"})
        await nc.flush()
        await nc.close()

    asyncio.run(go())


def records(n: int) -> list[bytes]:
    import msgpack

    return [msgpack.packb({"i": i}) for i in range(n)]


def when(ready: Callable[[], bool], then: Callable[[], Any], timeout: float = 60) -> threading.Thread:
    """Run ``then()`` in a thread once ``ready()`` (a publisher waiting for its consumer)."""
    def go() -> None:
        deadline = time.monotonic() + timeout
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.05)
        then()

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


# --- the cells ------------------------------------------------------------------------------------------------


def run_cell(outcome: str, lab: Lab, folder: Path) -> Ran:
    generate = {"type": "generate", "dataset": "point", "count": 300}
    if outcome == "ok":
        return done(wirepipe("run", pipeline(folder, generate), cwd=ROOT))
    if outcome == "rejected":  # half the records fail: past --max-rejected 0
        ran = wirepipe("run", pipeline(folder, generate, [{"map": {"function": "tests.records:fail_odd_x"}}]),
                       "--max-rejected", "0", cwd=ROOT)
        assert "more than --max-rejected 0" in ran.stderr
        return done(ran)
    if outcome == "interrupted":
        # batches of 10: the drain finishes the batches read (the one in hand, a queue of 8) in about 2 s
        return interrupt(["run", pipeline(folder, {**generate, "count": 100_000, "batch_size": 10}, CRAWL)], folder,
                         started(folder))
    if outcome == "config":
        return done(wirepipe("run", pipeline(folder, {**generate, "count": -1}), cwd=ROOT))
    if outcome == "runtime":  # nothing listens at the source's server
        return done(wirepipe("run", pipeline(folder, {"type": "nats", "url": DEAD, "subject": "x",
                                                      "connect_timeout": "300ms"}), cwd=ROOT))
    assert outcome == "lost"  # a burst into a 10-message pending limit of a consumer at 20 ms a record
    path = pipeline(folder, {"type": "nats", "url": lab.url, "subject": "lost.x", "pending_msgs_limit": 10,
                             "count": 5}, CRAWL, {"type": "null"})
    when(lambda: lab.subscribers("lost.x") == 1, lambda: publish(lab.url, "lost.x", records(300)))
    ran = wirepipe("run", path, cwd=ROOT)
    assert "records lost" in ran.stderr and "more than --max-lost 0" in ran.stderr, ran.stderr
    return done(ran)


def pool_cell(outcome: str, lab: Lab, folder: Path) -> Ran:
    stream = f"POOL_{outcome.upper()}"
    source = {"type": "jetstream", "url": lab.url, "stream": stream, "stop_at_end": True, "batch_size": 10,
              "connect_timeout": "300ms"}
    args = ["--workers", "2", "--no-status"]
    if outcome in ("ok", "rejected", "interrupted"):
        publish(lab.url, stream.lower(), records(300 if outcome != "interrupted" else 3000), stream=stream)
    if outcome == "ok":
        return done(wirepipe("run", pipeline(folder, source, DECODE), *args, cwd=ROOT))
    if outcome == "rejected":  # every record rejected
        return done(wirepipe("run", pipeline(folder, source, REJECT_ALL), *args, cwd=ROOT))
    if outcome == "interrupted":
        return interrupt(["run", pipeline(folder, source, [*DECODE, *CRAWL]), *args], folder, started(folder))
    if outcome == "config":  # a bounded source every worker would read whole
        return done(wirepipe("run", pipeline(folder, {"type": "generate", "count": 10}), *args, cwd=ROOT))
    # every worker dies at its start (nothing listens): the pool gives up on the second death in a row (the
    # restart policy's own test, tests/test_scale_pool.py, counts its deaths)
    return done(wirepipe("run", pipeline(folder, {**source, "url": DEAD},
                                         restart={"backoff": "50ms", "max_failures": 2}), *args, cwd=ROOT, timeout=110))


def replay_cell(outcome: str, lab: Lab, folder: Path, beam: bool = False) -> Ran:
    runner = ["--runner", "beam", "--output", str(folder / "beam"), "--beam-option", "direct_num_workers=1"] \
        if beam else []
    ignored = {"type": "nats", "subject": "replaced.by.the.capture"}
    if outcome == "ok":
        return done(wirepipe("replay", lab.capture, "-p", pipeline(folder, ignored, DECODE), *runner, cwd=ROOT))
    if outcome == "rejected":  # every record rejected
        ran = wirepipe("replay", lab.capture, "-p", pipeline(folder, ignored, REJECT_ALL), *runner, cwd=ROOT)
        assert "every record was rejected" in ran.stderr, ran.stderr
        return done(ran)
    if outcome == "interrupted":
        return interrupt(["replay", lab.capture, "-p", pipeline(folder, ignored, [*DECODE, *CRAWL]), *runner,
                          "--batch-size", "10"], folder, started(folder))
    if outcome == "config":
        bad = ["--pace", "original"] if beam else ["--pace", "slowly"]  # Beam runs row groups in any order
        return done(wirepipe("replay", lab.capture, "-p", pipeline(folder, ignored, DECODE), *runner, *bad, cwd=ROOT))
    # a file of the capture is not Parquet: the local runner replays the others and lists it; Beam stops
    damaged = folder / "cap"
    damaged.mkdir()
    for f in lab.capture.glob("*.parquet"):
        (damaged / f.name).write_bytes(f.read_bytes())
    (damaged / "zz-damaged.parquet").write_bytes(b"not parquet")
    return done(wirepipe("replay", damaged, "-p", pipeline(folder, ignored, DECODE), *runner, cwd=ROOT))


def capture_cell(outcome: str, lab: Lab, folder: Path) -> Ran:
    subject = f"cap.{outcome}"
    base = ["capture", "--out", folder / "cap", "--url", lab.url]
    if outcome in ("ok", "rejected"):  # ten messages (garbage bytes too: a capture keeps what came)
        payloads = records(10) if outcome == "ok" else [b"\xc1 not msgpack"] * 10
        when(lambda: lab.subscribers(subject) == 1, lambda: publish(lab.url, subject, payloads))
        ran = wirepipe(*base, "--subject", subject, "--count", "10", cwd=ROOT)
        assert "10 records captured into 1 file(s)" in ran.stderr, ran.stderr
        return done(ran)
    if outcome == "interrupted":
        return interrupt([*base, "--subject", subject, "--duration", "10m"], folder, lambda: lab.subscribers(subject) == 1)
    if outcome == "config":
        return done(wirepipe(*base, "--stream", "S", "--follow", "--stop-at-end", cwd=ROOT))
    return done(wirepipe("capture", "--out", folder / "cap", "--url", DEAD, "--subject", subject,
                         "--set", "source.connect_timeout=300ms", cwd=ROOT))


def tap_cell(outcome: str, lab: Lab, folder: Path) -> Ran:
    subject = f"tap.{outcome}"
    if outcome in ("ok", "rejected"):  # three records; or three that do not decode, shown raw
        payloads = records(3) if outcome == "ok" else [b"\xc1 not msgpack"] * 3
        url = lab.url  # the server up before the publisher's thread asks it who listens (a cell may be its first)
        when(lambda: lab.subscribers(subject) == 1, lambda: publish(url, subject, payloads))
        ran = wirepipe("tap", subject, "--url", url, "--limit", "3", *(["--raw"] if outcome == "rejected" else []),
                       cwd=ROOT)
        assert ran.stdout.count("\n") == 3, ran.stdout
        return done(ran)
    if outcome == "interrupted":
        return interrupt(["tap", subject, "--url", lab.url, "--limit", "10"], folder,
                         lambda: lab.subscribers(subject) == 1)
    if outcome == "config":
        return done(wirepipe("tap", "--url", lab.url, cwd=ROOT))  # neither a subject nor a stream
    return done(wirepipe("tap", subject, "--url", DEAD, "--set", "source.connect_timeout=300ms", cwd=ROOT))


def pipetest_cell(outcome: str, lab: Lab, folder: Path) -> Ran:
    pipe = write(folder / "double.yaml", {"name": "double", "source": {"type": "jsonl", "path": "in.jsonl"},
                                          "operators": [{"map": {"function": "tests.records:fail_odd_x"}}],
                                          "sink": {"type": "jsonl", "path": "out.jsonl"}})
    cases = {"ok": {"input": {"records": [{"x": 2, "y": 0}]}, "expect": {"records": [{"x": 2, "y": 0}]}},
             "runtime": {"input": {"records": [{"x": 2, "y": 0}]}, "expect": {"records": [{"x": 4, "y": 0}]}},
             # rejected and not expected: the case fails
             "rejected": {"input": {"records": [{"x": 1, "y": 0}]}, "expect": {"count": 0}},
             "interrupted": {"input": {"records": [{"x": 2 * i, "y": 0} for i in range(3000)], "batch_size": 10},
                             "expect": {"count": 3000}}}
    if outcome == "config":
        write(folder / "double.test.yaml", "pipeline: double.yaml\ntests: [{name: x, input: {records: 3}}]\n")
        return done(wirepipe("test", folder / "double.test.yaml", cwd=ROOT))
    case = cases[outcome]
    if outcome == "interrupted":
        pipe.write_text(pipe.read_text().replace("tests.records:fail_odd_x", "tests.records:first_then_crawl"))
    write(folder / "double.test.yaml", {"pipeline": pipe.name, "tests": [{"name": outcome, **case}]})
    if outcome == "interrupted":
        return interrupt(["test", folder / "double.test.yaml"], folder, started(folder))
    return done(wirepipe("test", folder / "double.test.yaml", cwd=ROOT))


def bench_cell(outcome: str, lab: Lab, folder: Path) -> Ran:
    base = ["bench", "--dataset", "point", "--format", "json", "--level", "fastest", "--out", folder / "bench"]
    if outcome == "ok":
        return done(wirepipe(*base, "-k", "1", "-n", "200", "--codec", "none", "--transport", "none", cwd=ROOT,
                             timeout=300))
    if outcome == "interrupted":  # many iterations: Ctrl-C once the first one is in the journal
        journal = folder / "bench" / "bench.progress.jsonl"
        return interrupt([*base, "-k", "500", "-n", "2000", "--codec", "none", "--transport", "none"], folder,
                         journal.exists)
    if outcome == "config":
        return done(wirepipe(*base, "--codec", "nope", "--transport", "none", cwd=ROOT))
    if outcome == "runtime":  # nothing listens at --url: it fails after connect_timeout, before measuring
        return done(wirepipe(*base, "-k", "1", "-n", "200", "--codec", "none", "--url", DEAD,
                             "--set", "connect_timeout=300ms", cwd=ROOT))
    # a server that refuses messages over 8 KiB: block records (~11 kB) fail uncompressed, pass with zstd
    with EmbeddedServer(max_payload=8192) as small:
        ran = wirepipe("bench", "--dataset", "block", "--format", "msgpack", "--codec", "none,zstd", "--level",
                       "fastest", "-k", "1", "-n", "100", "--url", small.url, "--out", folder / "bench", cwd=ROOT,
                       timeout=300)
    return done(ran)


def validate_cell(outcome: str, lab: Lab, folder: Path) -> Ran:
    generate = {"type": "generate", "dataset": "point", "count": 10}
    if outcome == "ok":
        ran = wirepipe("validate", pipeline(folder, generate), cwd=ROOT)
        assert "Pipeline('p': generate:point | jsonl)" in ran.stdout, ran.stdout  # no empty operator slot
        return done(ran)
    return done(wirepipe("validate", pipeline(folder, {**generate, "count": "many"}), cwd=ROOT))


def dict_cell(outcome: str, lab: Lab, folder: Path) -> Ran:
    samples = folder / "samples.jsonl"
    samples.write_text("".join(json.dumps({"user": f"u{i % 50}", "action": "click", "n": i}) + "\n"
                               for i in range(2000)))
    if outcome == "ok":
        return done(wirepipe("dict", "train", "--from", samples, "--to", "nats://DICTS/events", "--dry-run",
                             cwd=ROOT))
    if outcome == "config":
        return done(wirepipe("dict", "train", "--from", samples, "--to", "DICTS/events", "--dry-run", cwd=ROOT))
    if outcome == "runtime":  # no such bucket on the server
        return done(wirepipe("dict", "show", "nats://NOBUCKET/events", "--url", lab.url, cwd=ROOT))
    # a server that accepts the connection and never answers: `dict list` waits; Ctrl-C ends it
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen()
        accepted: list[socket.socket] = []
        threading.Thread(target=lambda: accepted.append(mute.accept()[0]), daemon=True).start()
        try:
            return interrupt(["dict", "list", "nats://DICTS", "--url", f"nats://127.0.0.1:{mute.getsockname()[1]}"],
                             folder, lambda: bool(accepted))
        finally:
            for conn in accepted:
                conn.close()


CELLS: dict[str, Callable[..., Ran]] = {
    "run": run_cell, "pool": pool_cell, "replay": replay_cell,
    "replay-beam": lambda outcome, lab, folder: replay_cell(outcome, lab, folder, beam=True),
    "capture": capture_cell, "tap": tap_cell, "test": pipetest_cell, "bench": bench_cell, "validate": validate_cell,
    "dict": dict_cell,
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("command", "outcome"), list(cells()))
def test_every_command_exits_by_the_one_table(command: str, outcome: str, lab: Lab, tmp_path: Path) -> None:
    cell = (command, outcome)
    if cell in EXCEPTIONS:
        assert EXCEPTIONS[cell]  # the reason is the table's; where there is something to show, it runs
        if cell not in SHOWN:
            return
    want = SHOWN.get(cell, EXTRA.get(cell, OUTCOMES.get(outcome)))
    ran = CELLS[command](outcome, lab, tmp_path)
    print(f"{command} {outcome}: exit {ran.code}\n{ran.stderr[-1500:]}")
    assert ran.code == want, f"{command} {outcome}: exit {ran.code}, want {want:d}\n{ran.stderr[-3000:]}"
    assert "Traceback" not in ran.stderr, ran.stderr[-3000:]  # every outcome is one clear line or a summary
    if want == ExitCode.INTERRUPTED:
        assert "interrupted" in ran.stderr, ran.stderr[-3000:]
    if want not in (ExitCode.OK, ExitCode.BENCH_FAILURES) and cell not in SHOWN:
        assert "error: " in ran.stderr or "FAILED" in ran.stdout, ran.stderr[-3000:]  # and it says why


def test_the_table_is_the_docs_page_and_the_module() -> None:
    """docs/reference/exit-codes.md and core/exit_codes.py hold the same table, every code of ``ExitCode`` in it."""
    import wirepipe.core.exit_codes as module

    page = (ROOT / "docs" / "reference" / "exit-codes.md").read_text(encoding="utf-8")
    doc = module.__doc__ or ""
    for code in ExitCode:
        assert f"\n| {code.value} |" in page and f"\n| {code.value} |" in doc, code
