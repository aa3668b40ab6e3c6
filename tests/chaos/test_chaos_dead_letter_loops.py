"""Dead letters that would come back to the pipeline that wrote them: refused, or never dead-lettered twice.

A dead letter published on a subject the pipeline's own source reads fails again, is dead-lettered
again, and so on forever (on JetStream, with ``in7.dead.{subject}``, the subject grows every round until
no publish can carry it). ``validate`` and ``run`` refuse such a config
(exit 2, the file, ``dead_letter.subject``, both subjects); a JetStream source's stream subjects are
known only once it runs, and ``run`` refuses at start with the same message; and a loop no config
shows (through another process) is cut: a record carrying this pipeline's dead-letter headers is
not dead-lettered again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli import invoke, wirepipe
from wirepipe.connectors.nats.core_sink import NatsSink
from wirepipe.connectors.nats.core_source import NatsSource
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.core.errors import ConfigError
from wirepipe.operators.deserialize import Deserialize
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.testing import TestingSink
from wirepipe.wire import Header

pytestmark = pytest.mark.timeout(120)


def config(folder: Path, source: dict[str, Any], dead_letter: dict[str, Any]) -> Path:
    cfg = {"name": "loop", "source": {"url": "${NATS_URL}", **source},
           "operators": [{"deserialize": {"format": "json"}}], "sink": {"type": "null"},
           "dead_letter": {"url": "${NATS_URL}", **dead_letter}}
    path = folder / "loop.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


@pytest.mark.parametrize(("source", "dead_letter", "named"), [
    ({"type": "nats", "subject": "in.>"}, {"type": "nats", "subject": "in.dead"}, "nats subject 'in.>'"),
    ({"type": "jetstream", "subject": "in7.>", "durable": "d"}, {"type": "jetstream", "subject": "in7.dead.{subject}"},
     "jetstream subject 'in7.>'"),
    ({"type": "nats", "subject": "orders.*"}, {"type": "nats", "subject": "orders.{region}-dead"},
     "nats subject 'orders.*'"),
])
def test_validate_and_run_refuse_a_dead_letter_the_source_reads(tmp_path: Path, source: dict[str, Any],
                                                                 dead_letter: dict[str, Any], named: str) -> None:
    path = config(tmp_path, source, dead_letter)
    env = {"NATS_URL": "nats://127.0.0.1:1"}  # nothing connects: refused before
    for command in (["validate", str(path)], ["run", str(path)]):
        res = wirepipe(*command, env=env)
        assert res.returncode == 2, res.stderr
        assert f"{path}: dead_letter.subject: {dead_letter['subject']!r} is read by the source ({named})" in res.stderr
        assert "forever" in res.stderr and "Traceback" not in res.stderr


def test_a_dead_letter_subject_the_source_does_not_read_is_accepted(tmp_path: Path) -> None:
    path = config(tmp_path, {"type": "nats", "subject": "in.>"}, {"type": "nats", "subject": "dlq.in.{subject}"})
    res = invoke("validate", str(path), env={"NATS_URL": "nats://127.0.0.1:1"})
    assert res.returncode == 0, res.stderr


def test_run_refuses_at_start_when_the_streams_subjects_make_the_loop(nats_server: EmbeddedServer,
                                                                       tmp_path: Path) -> None:
    """Only the stream is named: its subjects (``in7.>``) are known once the source is open."""
    async def make_stream() -> None:
        import nats

        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        await js.add_stream(name="IN7", subjects=["in7.>"])
        await js.publish("in7.x", b"not json")
        await nc.close()

    asyncio.run(make_stream())
    path = config(tmp_path, {"type": "jetstream", "stream": "IN7", "durable": "d"},
                  {"type": "jetstream", "subject": "in7.dead.{subject}"})
    env = {"NATS_URL": nats_server.url}
    assert invoke("validate", str(path), env=env).returncode == 0  # nothing to see before it runs
    res = wirepipe("run", str(path), "--count", "1", env=env)
    assert res.returncode == 2, res.stderr
    assert (f"{path}: dead_letter.subject: 'in7.dead.{{subject}}' is read by the source (jetstream subject "
            "'in7.>')") in res.stderr
    assert "Traceback" not in res.stderr

    async def stream_messages() -> int:
        import nats

        nc = await nats.connect(nats_server.url)
        n = int((await nc.jetstream().stream_info("IN7")).state.messages)
        await nc.close()
        return n

    assert asyncio.run(stream_messages()) == 1  # nothing was dead-lettered into it


def test_a_pipeline_built_in_python_is_refused_alike() -> None:
    with pytest.raises(ConfigError, match=r"dead_letter.subject: 'in.dead' is read by the source"):
        Pipeline(NatsSource("in.>", url="nats://127.0.0.1:1"), [], TestingSink(),
                 dead_letter=NatsSink("in.dead", url="nats://127.0.0.1:1"))


async def test_a_loop_through_another_process_dead_letters_a_record_once(nats_url: str) -> None:
    """The dead letters go to ``dlq.in`` (the source reads ``in.>``: accepted), but a relay elsewhere copies
    ``dlq.>`` back into ``in.back``. The poison record comes back once, carrying this pipeline's dead-letter
    headers, and is not dead-lettered again: one dead letter, not one per round for ever."""
    import nats

    relay = await nats.connect(nats_url)
    dead_letters: list[Any] = []

    async def copy_back(msg: Any) -> None:
        dead_letters.append(msg)
        await relay.publish("in.back", msg.data, headers=msg.headers)

    await relay.subscribe("dlq.>", cb=copy_back)
    await relay.flush()
    source = NatsSource("in.>", url=nats_url, duration=60)
    pipe = Pipeline(source, [Deserialize("json")], TestingSink(), name="looped",
                    dead_letter=NatsSink("dlq.in", url=nats_url))
    run = asyncio.ensure_future(pipe.run_async())
    while not source.ready.is_set():
        await asyncio.sleep(0.01)
    await relay.publish("in.x", b"not json", headers={Header.CONTENT_TYPE: "application/json"})
    await relay.publish("in.x", b'{"ok": 1}', headers={Header.CONTENT_TYPE: "application/json"})
    for _ in range(400):  # the dead letter comes back once (a loaded machine takes its time)...
        if dead_letters and pipe.stats.records_in >= 3:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(2.0)  # ...and a loop would have sent it again meanwhile
    source.stopping.set()
    stats = await asyncio.wait_for(run, 20)
    await relay.close()
    assert len(dead_letters) == 1
    assert dead_letters[0].headers[Header.PIPELINE] == "looped"
    assert dead_letters[0].headers[Header.STAGE] == "deserialize"
    assert (stats.records_in, stats.records_out, stats.rejected) == (3, 1, 2)  # the poison record arrived twice
