"""Every running pipeline a NATS service: the protocol's answers as ``nats micro`` reads them, ``wirepipe ps`` and
``top`` over a pool of two and a second pipeline, a killed worker gone from the next ``ps``, an account that may
not use ``$SRV.>``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import jsonschema
import nats
import pytest
from nats.micro.service import NAME_REGEX, SEMVER_REGEX, ServiceInfo, ServicePing, ServiceStats

from tests.cli import invoke, start_wirepipe, wirepipe
from tests.nats_fixtures import publish_numbered
from wirepipe.connectors.nats.server import EmbeddedServer, ServerOptions
from wirepipe.core.errors import ConfigError
from wirepipe.pipelines.config import build_pipeline, validate_config
from wirepipe.pipelines.service import Process, service_connection, with_service

# --- the protocol's answers as ADR-32 (the NATS services API) defines them -----------------------------------

_NAME = {"type": "string", "pattern": NAME_REGEX.pattern, "minLength": 1}
_META = {"type": ["object", "null"], "additionalProperties": {"type": "string"}}
_COMMON = {"type": {"type": "string"}, "name": _NAME, "id": {"type": "string", "minLength": 1},
           "version": {"type": "string", "pattern": SEMVER_REGEX.pattern}, "metadata": _META}
_NANOS = {"type": "integer"}
SCHEMAS = {
    "io.nats.micro.v1.ping_response": {"type": "object", "required": ["type", "name", "id", "version"],
                                       "properties": _COMMON},
    "io.nats.micro.v1.info_response": {
        "type": "object", "required": ["type", "name", "id", "version", "description", "endpoints"],
        "properties": {**_COMMON, "description": {"type": "string"}, "endpoints": {"type": "array", "items": {
            "type": "object", "required": ["name", "subject", "queue_group", "metadata"],
            "properties": {"name": _NAME, "subject": {"type": "string", "minLength": 1},
                           "queue_group": {"type": "string"}, "metadata": _META}}}}},
    "io.nats.micro.v1.stats_response": {
        "type": "object", "required": ["type", "name", "id", "version", "started", "endpoints"],
        "properties": {**_COMMON, "started": {"type": "string", "format": "date-time"}, "endpoints": {
            "type": "array", "items": {
                "type": "object",
                "required": ["name", "subject", "num_requests", "num_errors", "last_error", "processing_time",
                             "average_processing_time"],
                "properties": {"name": _NAME, "subject": {"type": "string", "minLength": 1},
                               "num_requests": {"type": "integer"}, "num_errors": {"type": "integer"},
                               "last_error": {"type": "string"}, "processing_time": _NANOS,
                               "average_processing_time": _NANOS, "data": {"type": "object"}}}}}},
}
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def check_answer(answer: dict[str, Any], kind: str) -> None:
    """``answer`` is the protocol's ``kind`` response: its JSON schema, and nats-py's own reader takes it."""
    schema_type = f"io.nats.micro.v1.{kind}_response"
    assert answer["type"] == schema_type
    jsonschema.Draft7Validator(SCHEMAS[schema_type]).validate(answer)
    reader = {"ping": ServicePing, "info": ServiceInfo, "stats": ServiceStats}[kind]
    assert reader.from_dict(answer).id == answer["id"]
    if kind == "stats":
        assert RFC3339.match(answer["started"]), answer["started"]


async def ask(nc: Any, subject: str, window: float = 0.5, expect: int | None = None) -> list[Any]:
    """Every answer to a request on ``subject`` within ``window`` seconds, or the first ``expect`` of them; none
    at once when nothing listens (the server says so)."""
    got: list[Any] = []
    enough = asyncio.Event()

    async def collect(msg: Any) -> None:
        if msg.headers and msg.headers.get("Status") == "503":
            enough.set()
            return
        got.append(msg)
        if expect is not None and len(got) >= expect:
            enough.set()

    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=collect)
    await nc.publish(subject, b"", reply=inbox)
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(enough.wait(), window)
    await sub.unsubscribe()
    return got


def answers(msgs: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(m.data) for m in msgs]


def consumer(url: str, name: str = "orders.eu", subject: str = "svc.in", **extra: Any) -> dict[str, Any]:
    return {"name": name, "description": "the EU orders", "source": {"type": "nats", "url": url, "subject": subject},
            "sink": {"type": "null"}, "flush_interval": 0.2, **extra}


@contextlib.asynccontextmanager
async def running(data: dict[str, Any]) -> AsyncIterator[Any]:
    """The pipeline of ``data`` running as a worker runs it (with its service beside it), until the block ends."""
    pipe = build_pipeline(validate_config(data))
    stop = asyncio.Event()
    run = pipe.new_run()
    task = asyncio.ensure_future(with_service(run, run.execute(stop)))
    for _ in range(500):
        if pipe.running or task.done():
            break
        await asyncio.sleep(0.01)
    try:
        yield pipe
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def until(condition: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = await condition()
        if got:
            return got
        await asyncio.sleep(0.05)
    raise AssertionError("timed out")


# --- one pipeline, in process --------------------------------------------------------------------------


async def test_a_running_pipeline_answers_ping_info_and_stats_as_the_protocol_defines_them(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        async with running(consumer(nats_url)) as pipe:
            for i in range(250):
                await nc.publish("svc.in", json.dumps({"i": i}).encode())
            await nc.flush()

            async def committed() -> bool:
                return pipe.stats.acked == 250

            async def registered() -> list[Any]:
                return await ask(nc, "$SRV.PING.orders_eu", expect=1)

            await until(committed)
            await until(registered)
            [stats] = answers(await ask(nc, "$SRV.STATS", expect=1))
            check_answer(stats, "stats")
            sid = stats["id"]
            assert stats["name"] == "orders_eu"  # the pipeline's name with its dot replaced
            meta = stats["metadata"]
            assert (meta["pipeline"], meta["worker"], meta["workers"], meta["pid"]) == \
                   ("orders.eu", "0", "1", str(os.getpid()))
            assert (meta["source"], meta["sink"]) == ("nats svc.in", "null")
            data = {ep["name"]: ep["data"] for ep in stats["endpoints"]}
            counts = data["stats"]
            assert {k: counts[k] for k in ("records_in", "records_out", "rejected", "lost", "redelivered",
                                           "acked")} == {"records_in": 250, "records_out": 250, "rejected": 0,
                                                         "lost": 0, "redelivered": 0, "acked": 0}  # core NATS takes no acks
            assert data["health"] == {"healthy": True, "running": True, "connected": True, "draining": False,
                                      "waiting": None, "sink_error": None}

            # every form of each verb: all services, those of a name, one instance; another name: no answer
            for verb in ("PING", "INFO", "STATS"):
                for subject in (f"$SRV.{verb}", f"$SRV.{verb}.orders_eu", f"$SRV.{verb}.orders_eu.{sid}"):
                    [answer] = answers(await ask(nc, subject, expect=1))
                    check_answer(answer, verb.lower())
                    assert answer["id"] == sid
                assert await ask(nc, f"$SRV.{verb}.other", 0.1) == []
            [info] = answers(await ask(nc, f"$SRV.INFO.orders_eu.{sid}", expect=1))
            assert info["description"] == "the EU orders"
            assert [(ep["name"], ep["subject"]) for ep in info["endpoints"]] == [
                ("stats", f"_WIREPIPE.service.orders_eu.{sid}.stats"),
                ("health", f"_WIREPIPE.service.orders_eu.{sid}.health")]

            # the endpoints themselves: the same counts, the same health
            reply = await nc.request(f"_WIREPIPE.service.orders_eu.{sid}.stats", b"", timeout=2)
            assert json.loads(reply.data)["records_in"] == 250
            reply = await nc.request(f"_WIREPIPE.service.orders_eu.{sid}.health", b"", timeout=2)
            assert json.loads(reply.data)["healthy"] is True and not reply.headers

            # what ps reads from the same answer
            process = Process.from_answer(stats)
            assert process is not None
            assert (process.pipeline, process.worker, process.workers, process.state()) == \
                   ("orders.eu", 0, 1, "running")
            assert service_connection(pipe) is pipe.source.conn  # the pipeline's own connection
        assert await ask(nc, "$SRV.PING", 0.2) == []  # gone with the run
    finally:
        await nc.close()


async def test_a_worker_waiting_for_its_stream_is_listed_waiting(nats_url: str) -> None:
    """Registered once its connection is up, before its parts are all open: a worker started before its stream
    exists says in ps what it waits for, and is unhealthy until then."""
    nc = await nats.connect(nats_url)
    data = {"name": "late", "source": {"type": "jetstream", "url": nats_url, "stream": "LATER"},
            "sink": {"type": "null"}}
    pipe = build_pipeline(validate_config(data))
    stop = asyncio.Event()
    run = pipe.new_run()
    task = asyncio.ensure_future(with_service(run, run.execute(stop)))
    try:
        async def listed() -> list[dict[str, Any]]:
            return answers(await ask(nc, "$SRV.STATS.late", expect=1))

        [answer] = await until(listed)
        process = Process.from_answer(answer)
        assert process is not None and process.state() == "waiting for stream LATER"
        assert not pipe.running
        reply = await nc.request(f"_WIREPIPE.service.late.{answer['id']}.health", b"", timeout=2)
        assert reply.headers == {"Nats-Service-Error": "waiting for stream LATER", "Nats-Service-Error-Code": "503"}
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await nc.close()


async def test_service_enabled_false_registers_nothing(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        async with running(consumer(nats_url, service={"enabled": False})) as pipe:
            assert pipe.running
            await asyncio.sleep(0.3)
            assert await ask(nc, "$SRV.PING", 0.2) == []
    finally:
        await nc.close()


async def test_a_pipeline_with_no_nats_part_registers_no_service_and_connects_nowhere() -> None:
    data = {"name": "files", "source": {"type": "generate", "dataset": "point", "count": 500},
            "sink": {"type": "null"}}
    pipe = build_pipeline(validate_config(data))
    run = pipe.new_run()
    stats = await with_service(run, run.execute())
    assert stats.records_out == 500
    assert service_connection(pipe) is None


async def test_an_account_that_may_not_use_srv_says_so_once_and_the_pipeline_runs_on(
        make_server: Callable[..., EmbeddedServer], caplog: pytest.LogCaptureFixture) -> None:
    users = [{"user": "worker", "password": "pw-1", "permissions": {"subscribe": {"deny": ["$SRV.>"]}}},
             {"user": "ops", "password": "pw-2"}]
    server = make_server(options=ServerOptions(extra={"authorization": {"users": users}}))
    nc = await nats.connect(server.url, user="ops", password="pw-2")
    try:
        with caplog.at_level(logging.INFO, logger="wirepipe"):
            data = consumer(server.url)
            data["source"]["auth"] = {"user": "worker", "password": "pw-1"}
            async with running(data) as pipe:
                await asyncio.sleep(0.5)  # the refusals arrive
                for i in range(100):
                    await nc.publish("svc.in", json.dumps({"i": i}).encode())
                await nc.flush()
                for _ in range(200):
                    if pipe.stats.records_out == 100:
                        break
                    await asyncio.sleep(0.02)
                assert await ask(nc, "$SRV.PING", 0.2) == []
        assert pipe.stats.records_out == 100
        said = [r for r in caplog.records if "permissions violation" in r.getMessage().lower()]
        assert len(said) == 1, [r.getMessage() for r in said]
        assert said[0].levelno == logging.WARNING and said[0].name == "wirepipe.service"
        assert "not registered as a NATS service, running on" in said[0].getMessage()
        assert "service: {enabled: false}" in said[0].getMessage()
    finally:
        await nc.close()


def test_a_tap_registers_no_service() -> None:
    """A tap watches pipelines; it is not one: `wirepipe ps` does not list it."""
    from wirepipe.pipelines.service import service_config
    from wirepipe.tap import TapSink, build, tap_config

    pipe = build(tap_config(subject="points.>", stream=None, url="nats://127.0.0.1:4222"), TapSink())
    assert service_config(pipe).enabled is False
    assert service_config(build_pipeline(validate_config(consumer("nats://127.0.0.1:4222")))).enabled is True


@pytest.mark.parametrize(("service", "path", "words"), [
    ({"name": "orders eu"}, "service.name", "is not a NATS service name: use A-Z, a-z, 0-9, - and _ only"),
    ({"metadata": {"team": "payments", "pid": "1"}}, "service.metadata", "'pid': wirepipe writes these keys"),
    ({"enable": False}, "service", "unknown field 'enable': allowed enabled, metadata, name"),
    ({"enabled": "sometimes"}, "service.enabled", "valid boolean"),
    (False, "service", "give a mapping: {enabled: false} turns the NATS service off, {name, metadata} describe it "
                       "(got False)"),
])
def test_the_service_setting_is_validated_like_every_field(service: Any, path: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_config(consumer("nats://127.0.0.1:4222", service=service), file="p.yaml")
    assert info.value.path == path and info.value.file == "p.yaml"
    assert words in info.value.detail


def test_ps_refuses_no_url_and_the_embedded_server() -> None:
    result = invoke("ps")
    assert result.returncode == 2
    assert "give --url (or set NATS_URL)" in result.stderr
    result = invoke("top", "--url", "embedded")
    assert result.returncode == 2
    assert "--url embedded starts a server of the command's own, gone when it ends" in result.stderr
    result = invoke("ps", "--url", "nats://127.0.0.1:1", "--timeout", "0s")
    assert result.returncode == 2 and "--timeout '0s': give a duration > 0" in result.stderr


def test_ps_says_clearly_that_no_server_answers() -> None:
    result = invoke("ps", "--url", "nats://127.0.0.1:1", "--set", "connect_timeout=0.3s")
    assert result.returncode == 1
    assert "error: cannot connect to NATS at nats://127.0.0.1:1 within 0.3s" in result.stderr
    assert "Traceback" not in result.output


def test_ps_on_a_server_without_pipelines_says_none_answered(nats_url: str) -> None:
    result = invoke("ps", "--url", nats_url, columns=120)
    assert result.returncode == 0, result.output
    assert "(none)" in result.stdout
    assert f"No wirepipe pipeline answered $SRV.STATS on {nats_url} within 1s." in result.stdout


# --- a pool of two and a second pipeline, in their own processes --------------------------------------------

POOL = """
name: archive
source: {type: jetstream, url: "${NATS_URL}", stream: NUM, batch_size: 50, ack_wait: 5s}
operators:
  - deserialize: {format: auto}
sink: {type: "null"}
flush_interval: 200ms
"""
SECOND = """
name: audit.eu
source: {type: nats, url: "${NATS_URL}", subject: audit.in}
sink: {type: "null"}
flush_interval: 200ms
"""


def ps_json(url: str) -> list[Process]:
    """``wirepipe ps --json`` in this process (polled while processes start: no interpreter to start each time;
    the table of ``ps`` and ``top`` run in processes of their own)."""
    result = invoke("ps", "--url", url, "--json")
    assert result.returncode == 0, result.stderr
    return [p for p in map(Process.from_answer, json.loads(result.stdout)) if p is not None]


def wait_ps(url: str, condition: Callable[[list[Process]], bool], what: str, logs: list[Path],
            timeout: float = 120) -> list[Process]:
    deadline = time.monotonic() + timeout
    seen: list[Process] = []
    while time.monotonic() < deadline:
        seen = ps_json(url)
        if condition(seen):
            return seen
        time.sleep(0.3)
    tails = "\n".join(log.read_text()[-2000:] for log in logs)
    raise AssertionError(f"timed out waiting for {what}: {[(p.pipeline, p.worker, p.stats) for p in seen]}\n{tails}")


def summaries(log: Path, name: str) -> dict[str, tuple[int, int]]:
    """Each worker's own summary line (``[w0]``, or ``-`` for a single process): records out of records in."""
    found = re.findall(rf"(?:\[(w\d)\]: )?{re.escape(name)}: (\d+) records out of (\d+)", log.read_text())
    return {worker or "-": (int(out), int(read)) for worker, out, read in found}


@pytest.mark.slow
def test_ps_and_top_list_a_pool_of_two_and_a_second_pipeline_and_not_a_killed_worker(
        nats_server: EmbeddedServer, tmp_path: Path) -> None:
    url = nats_server.url
    n, m = 600, 250
    asyncio.run(publish_numbered(url, n))
    (tmp_path / "archive.yaml").write_text(POOL)
    (tmp_path / "audit.yaml").write_text(SECOND)
    env = {"NATS_URL": url}
    logs = [tmp_path / "pool.log", tmp_path / "second.log"]
    with open(logs[0], "w") as err:
        pool = start_wirepipe("run", tmp_path / "archive.yaml", "--workers", "2", "--no-status", stderr=err, env=env)
    with open(logs[1], "w") as err:
        second = start_wirepipe("run", tmp_path / "audit.yaml", stderr=err, env=env)
    try:
        wait_ps(url, lambda ps: len(ps) == 3, "three processes", logs)

        async def publish() -> None:
            nc = await nats.connect(url)
            for i in range(m):
                await nc.publish("audit.in", json.dumps({"i": i}).encode())
            await nc.flush()
            await nc.close()

        asyncio.run(publish())

        def settled(ps: list[Process]) -> bool:
            pool_out = sum(p.stats.get("acked", -1) for p in ps if p.pipeline == "archive")
            audit = [p for p in ps if p.pipeline == "audit.eu"]
            return len(ps) == 3 and pool_out == n and len(audit) == 1 and audit[0].stats["records_out"] == m

        found = wait_ps(url, settled, f"{n} archived and {m} audited", logs)
        workers = {p.worker: p for p in found if p.pipeline == "archive"}
        assert sorted(workers) == [0, 1]
        assert {p.metadata["workers"] for p in workers.values()} == {"2"}
        assert len({p.metadata["pool"] for p in workers.values()}) == 1  # one pool
        assert sum(p.stats["records_in"] for p in workers.values()) == n
        assert sum(p.stats["records_out"] for p in workers.values()) == n
        [audit] = [p for p in found if p.pipeline == "audit.eu"]
        assert (audit.name, audit.stats["records_in"], audit.stats["lost"]) == ("audit_eu", m, 0)

        # the table: the three processes and the pool's total, with these counts
        table = wirepipe("ps", "--url", url, columns=200, timeout=60)
        assert table.returncode == 0, table.stderr
        rows = {tuple(line.split()[:2]): line.split() for line in table.stdout.splitlines()
                if line.startswith(("archive ", "audit.eu "))}
        assert set(rows) == {("archive", "w0"), ("archive", "w1"), ("archive", "all"), ("audit.eu", "-")}
        for w, p in workers.items():
            assert rows[("archive", f"w{w}")][2:5] == ["running", f"{p.stats['records_in']:,}",
                                                       f"{p.stats['records_out']:,}"]
        assert rows[("archive", "all")][2:4] == [f"{n:,}", f"{n:,}"]
        assert rows[("audit.eu", "-")][2:5] == ["running", f"{m:,}", f"{m:,}"]
        assert "3 processes of 2 pipelines answered $SRV.STATS" in table.stdout

        # top: the same table, twice, with records out per second
        shown = wirepipe("top", "--url", url, "--count", "2", "--interval", "0.5s", columns=200, timeout=60)
        assert shown.returncode == 0, shown.stderr
        frames = [f for f in shown.stdout.split("wirepipe top")[1:]]
        assert len(frames) == 2
        assert all(re.search(r"^audit\.eu\s+-\s+running\s+250\s+250\s+", f, re.M) for f in frames)
        assert re.search(r"^audit\.eu\s+-\s+running\s+250\s+250\s+0\s+", frames[1], re.M)  # 0 records/s now

        # a SIGKILLed worker is gone from the next ps (the protocol asks; nothing waits for a heartbeat)
        killed = workers[1]
        os.kill(killed.pid, signal.SIGKILL)
        after = ps_json(url)
        assert killed.id not in {p.id for p in after}
        assert {workers[0].id, audit.id} <= {p.id for p in after}
        restarted = wait_ps(url, lambda ps: any(p.pipeline == "archive" and p.worker == 1 for p in ps),
                            "worker 1 restarted", logs)
        [w1] = [p for p in restarted if p.pipeline == "archive" and p.worker == 1]
        assert w1.id != killed.id and w1.pid != killed.pid
        assert (w1.stats["records_in"], w1.stats["records_out"]) == (0, 0)  # every record was acked before

        # once stopped, each worker's own summary says what ps said
        for proc in (second, pool):
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0, "\n".join(log.read_text()[-3000:] for log in logs)
        pool_summaries = summaries(logs[0], "archive")
        assert pool_summaries["w0"] == (workers[0].stats["records_out"], workers[0].stats["records_in"])
        assert pool_summaries["w1"] == (0, 0)  # the restarted worker's; the killed one wrote none
        assert summaries(logs[1], "audit.eu") == {"-": (m, m)}
        assert ps_json(url) == []
    finally:
        for proc in (pool, second):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.slow
def test_top_redraws_one_table_on_a_terminal_and_stops_on_sigint_with_exit_0(
        nats_server: EmbeddedServer, tmp_path: Path) -> None:
    """On a terminal top redraws one table in place; Ctrl-C stops an observer, which did its job: exit 0."""
    import pty
    import select

    (tmp_path / "audit.yaml").write_text(SECOND)
    log = tmp_path / "second.log"
    with open(log, "w") as err:
        second = start_wirepipe("run", tmp_path / "audit.yaml", stderr=err, env={"NATS_URL": nats_server.url})
    master, slave = pty.openpty()
    top = None
    try:
        wait_ps(nats_server.url, lambda ps: len(ps) == 1, "the pipeline", [log])
        top = start_wirepipe("top", "--url", nats_server.url, "--interval", "0.3s", columns=160, stdout=slave)
        seen = ""
        deadline = time.monotonic() + 60
        while seen.count("wirepipe top") < 3 and time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                seen += os.read(master, 65536).decode(errors="replace")
        assert seen.count("wirepipe top") >= 3, seen
        assert re.search(r"audit\.eu\s+-\s+running\s+0\s+0\s+", seen), seen
        assert "\x1b[" in seen  # redrawn in place (cursor moves), not printed one after another
        top.send_signal(signal.SIGINT)
        assert top.wait(30) == 0
        assert "Traceback" not in (top.stderr.read() if top.stderr else "")
    finally:
        os.close(slave)
        os.close(master)
        for proc in (top, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
