"""The schema registry in a NATS KV bucket, on a real nats-server: the keys any client reads, pushers racing on
separate connections, and a publisher and a consumer that share nothing but the server (separate ``wirepipe run``
processes) across two versions each way, a push the rule refuses, a schema the registry does not hold, and a
registry that stops answering while a consumer runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli import wirepipe
from tests.nats_fixtures import expected
from wirepipe.connectors.nats.schema_registry import nats_registry
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.schema import canonical_form, parse_schema, schema_fingerprint

V1 = {"x": "int32", "y": "int32"}  # the point dataset's own schema
V2 = {"y": "int32", "x": "int32", "label?": "string"}  # fields in another order and one more: full compatible
S1, S2 = parse_schema(V1, "Point"), parse_schema(V2, "Point")
FP1, FP2 = schema_fingerprint(S1), schema_fingerprint(S2)
N = 500


async def read_keys(url: str, bucket: str = "WIREPIPE_SCHEMAS") -> dict[str, Any]:
    """Every key of the bucket and its JSON value, as any NATS client reads them."""
    import nats

    nc = await nats.connect(url)
    try:
        kv = await nc.jetstream().key_value(bucket)
        return {key: json.loads((await kv.get(key)).value) for key in await kv.keys()}
    finally:
        await nc.close()


def test_the_bucket_keeps_each_schema_under_its_fingerprint_and_each_name_once(nats_server: EmbeddedServer) -> None:
    registry = nats_registry(nats_server.url)

    async def scenario() -> list[Any]:
        await registry.open(create=True)
        try:
            return [await registry.push("points", S1), await registry.push("points", S2),
                    await registry.push("points", S1)]
        finally:
            await registry.close()

    first, second, again = asyncio.run(scenario())
    assert [(p.registered.version, p.new) for p in (first, second, again)] == [(1, True), (2, True), (1, False)]
    keys = asyncio.run(read_keys(nats_server.url))
    assert sorted(keys) == sorted([f"fingerprints.{FP1}", f"fingerprints.{FP2}", "names.points"])
    assert keys[f"fingerprints.{FP2}"] == {"fingerprint": FP2, "canonical": canonical_form(S2),
                                            "schema": S2.to_document()}
    entry = keys["names.points"]
    assert entry["name"] == "points" and entry["compatibility"] == "backward"
    assert [(v["version"], v["fingerprint"]) for v in entry["versions"]] == [(1, FP1), (2, FP2)]


def test_pushers_on_separate_connections_never_take_one_version(nats_server: EmbeddedServer) -> None:
    """Eight pushers, each with a connection of its own, push eight schemas under one name at once: every one
    gets a version of its own, 1 to 8 (the KV's revision check makes the losers read again)."""
    schemas = [parse_schema({f"f{i}?": "int32"}) for i in range(8)]

    async def push(schema: Any) -> int:
        registry = nats_registry(nats_server.url)
        await registry.open(create=True)
        try:
            return (await registry.push("racy", schema, "none")).registered.version
        finally:
            await registry.close()

    async def scenario() -> list[int]:
        await push(parse_schema({"first": "bool"}))  # the bucket exists before the race
        return list(await asyncio.gather(*(push(s) for s in schemas)))

    versions = asyncio.run(scenario())
    assert sorted(versions) == list(range(2, 10))
    entry = asyncio.run(read_keys(nats_server.url))["names.racy"]
    by_version = {v["version"]: v["fingerprint"] for v in entry["versions"]}
    assert sorted(by_version) == list(range(1, 10))
    assert {by_version[v] for v in versions} == {schema_fingerprint(s) for s in schemas}


# --- a publisher and a consumer that share nothing but the server ---------------------------------------------


def pipeline(folder: Path, name: str, body: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, **body}, sort_keys=False))
    return path


def publisher(folder: Path, schema: str, subject: str, count: int = N) -> Path:
    return pipeline(folder, f"publish-{subject.replace('.', '-')}", {
        "source": {"type": "generate", "dataset": "point", "count": count, "batch_size": 100},
        "operators": [{"serialize": {"format": "bincode", "schema": schema}}],
        "sink": {"type": "jetstream", "url": "${NATS_URL}", "subject": subject,
                 "stream": {"name": "PTS", "subjects": ["pts.>"]}}})


def consumer(folder: Path, schema: str, subject: str) -> Path:
    name = f"read-{subject.replace('.', '-')}"
    return pipeline(folder, name, {
        "source": {"type": "jetstream", "url": "${NATS_URL}", "stream": "PTS", "durable": name,
                   "subject": subject, "batch_size": 200},
        "operators": [{"deserialize": {"format": "bincode", "schema": schema}}],
        "sink": {"type": "jsonl", "path": f"{name}.jsonl"},
        "dead_letter": {"type": "jsonl", "path": f"{name}-dead.jsonl"}})


def run(path: Path, url: str, *args: str) -> Any:
    done = wirepipe("run", str(path), "--no-status", *args, env={"NATS_URL": url}, cwd=path.parent)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def lines(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_a_publisher_and_a_consumer_share_only_the_server_across_versions(nats_server: EmbeddedServer,
                                                                          tmp_path: Path) -> None:
    url = nats_server.url
    env = {"NATS_URL": url}
    for version, fields in ((1, V1), (2, V2)):
        path = tmp_path / f"v{version}.yaml"
        path.write_text(yaml.safe_dump({"name": "Point", "fields": fields}, sort_keys=False))
        pushed = wirepipe("schema", "push", str(path), "--name", "points", env=env)
        assert pushed.returncode == 0, pushed.stderr
        assert pushed.stdout.startswith(f"points@{version}: registered in nats://WIREPIPE_SCHEMAS ")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "Point", "fields": {**V2, "x": "int64", "z": "float64"}}, sort_keys=False))
    refused = wirepipe("schema", "push", str(bad), "--name", "points", env=env)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == (
        f"error: {bad}: refused by nats://WIREPIPE_SCHEMAS: points keeps the rule backward (a consumer with the new "
        "version reads what the latest one wrote: upgrade consumers first), which the new schema breaks: a consumer "
        "with the new schema cannot read what version 2 wrote: z: required in the new schema, absent from version 2\n")
    listed = wirepipe("schema", "list", env=env)
    assert listed.stdout.splitlines()[3].split()[:3] == ["points", "2", FP2]  # the refused one registered nothing

    points = expected("point", N)
    # v1 publisher, v2 consumer (the latest): label read as None
    assert run(publisher(tmp_path / "p1", "registry/points@1", "pts.v1"), url).returncode == 0
    read = consumer(tmp_path / "c2", "registry/points", "pts.v1")
    done = run(read, url, "--count", str(N))
    assert done.returncode == 0, done.stderr
    assert lines(read.parent / "read-pts-v1.jsonl") == [{"y": p["y"], "x": p["x"], "label": None} for p in points]
    assert lines(read.parent / "read-pts-v1-dead.jsonl") == []
    assert f"reading records as points version 2 ({FP2})" in done.stderr and f"schema {FP1} from" in done.stderr

    # v2 publisher, v1 consumer (pinned): label left out, x and y under their own names
    assert run(publisher(tmp_path / "p2", "nats://WIREPIPE_SCHEMAS/points@2", "pts.v2"), url).returncode == 0
    read = consumer(tmp_path / "c1", "registry/points@1", "pts.v2")
    assert run(read, url, "--count", str(N)).returncode == 0
    assert lines(read.parent / "read-pts-v2.jsonl") == points
    assert lines(read.parent / "read-pts-v2-dead.jsonl") == []

    # a publisher with a schema nobody registered: each record dead-lettered with the reason
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(yaml.safe_dump({"x": "int32", "y": "int32", "z?": "bool"}, sort_keys=False))
    assert run(publisher(tmp_path / "p3", str(unknown), "pts.v3", 50), url).returncode == 0
    read = consumer(tmp_path / "c3", "registry/points", "pts.v3")
    done = run(read, url, "--count", "50")
    assert done.returncode == 3  # every record rejected
    dead = lines(read.parent / "read-pts-v3-dead.jsonl")
    assert len(dead) == 50 and lines(read.parent / "read-pts-v3.jsonl") == []
    assert {d["error"] for d in dead} == {
        f"written with schema {schema_fingerprint(parse_schema({'x': 'int32', 'y': 'int32', 'z?': 'bool'}))}, which "
        "this deserialize cannot read: the schema registry nats://WIREPIPE_SCHEMAS does not hold it (wirepipe schema "
        "push registers a schema)"}

    # a publisher naming a version the registry does not hold does not start
    stopped = run(publisher(tmp_path / "p4", "registry/points@3", "pts.v4"), url)
    assert stopped.returncode == 2
    assert "serialize.schema: registry/points version 3: points has versions 1 to 2 in nats://WIREPIPE_SCHEMAS: no " \
           "version 3" in stopped.stderr


@pytest.mark.slow
def test_a_registry_that_does_not_answer_holds_the_batch_until_it_does(tmp_path: Path) -> None:
    """The registry lives on a second server, killed while the consumer runs and started again: the batch that
    needs a schema it has not fetched waits (nothing dead-lettered, nothing lost), then every record is written."""
    from wirepipe.connectors.nats.jetstream_source import JetStreamSource
    from wirepipe.operators.deserialize import Deserialize
    from wirepipe.operators.serialize import Serialize
    from wirepipe.pipelines.pipeline import Pipeline
    from wirepipe.testing import TestingSink, TestingSource
    from wirepipe.testing import run as run_in_process

    points = expected("point", 200)
    with EmbeddedServer(store_dir=tmp_path / "a") as records_server, \
            EmbeddedServer(store_dir=tmp_path / "b") as schema_server:
        resources = {"schemas": {"registry": {"type": "nats", "nats": {"url": schema_server.url}, "timeout": 1}}}
        registry = nats_registry(schema_server.url)

        async def push() -> None:
            await registry.open(create=True)
            await registry.push("points", S1)
            await registry.push("points", S2)
            await registry.close()

        asyncio.run(push())
        sent = TestingSink()
        run_in_process(TestingSource(points), [Serialize("bincode", schema=V1)], sent)

        async def scenario() -> tuple[Any, TestingSink, list[str]]:
            import nats

            sink = TestingSink()
            pipe = Pipeline(JetStreamSource(stream="PTS", durable="w", url=records_server.url, count=200,
                                            batch_size=100),
                            [Deserialize("bincode", schema="registry/points")], sink, dead_letter=sink, name="held",
                            resources=resources)
            nc = await nats.connect(records_server.url)
            js = nc.jetstream()
            await js.add_stream(name="PTS", subjects=["pts"])
            run = pipe.new_run()
            task = asyncio.create_task(run.execute())
            while not run.running:
                await asyncio.sleep(0.02)
            await asyncio.to_thread(schema_server.kill)
            for payload, headers in zip(sent.records, sent.headers, strict=True):
                await js.publish("pts", payload, headers=headers)
            await nc.close()
            seen: list[str] = []
            for _ in range(100):  # the loop says what it waits for, and holds the batch
                await asyncio.sleep(0.05)
                if run.sink_error:
                    seen.append(run.sink_error)
            assert sink.records == [] and sink.rejects == []
            await asyncio.to_thread(schema_server.restart)
            stats = await asyncio.wait_for(task, 60)
            return stats, sink, seen

        stats, sink, seen = asyncio.run(scenario())
    assert sink.records == [{"y": p["y"], "x": p["x"], "label": None} for p in points] and sink.rejects == []
    assert stats.records_out == 200 and stats.rejected == 0 and stats.sink_errors >= 1
    assert seen and seen[-1].startswith("deserialize (bincode): NotConnected: schema registry nats://WIREPIPE_SCHEMAS: "
                                        "the server did not answer")


def test_tap_reads_each_message_with_the_registered_schema_its_header_names(nats_server: EmbeddedServer) -> None:
    """``wirepipe tap --schema registry``: avro messages of two registered versions each read as written, and one
    of a schema the registry does not hold named as not decoded (never read positionally with another)."""
    from tests.test_tap import finish, start_tap
    from wirepipe import Pipeline, nats_sink
    from wirepipe.operators.serialize import Serialize
    from wirepipe.testing import TestingSource

    url = nats_server.url
    registry = nats_registry(url)

    async def push() -> None:
        await registry.open(create=True)
        try:
            await registry.push("points", S1)
            await registry.push("points", S2)
        finally:
            await registry.close()

    asyncio.run(push())
    stranger = parse_schema({"x": "int64", "y": "int64"}, "Point")  # the same names, not registered
    tap = start_tap(url, "reg.>", "--schema", "registry", "--envelope", "--limit", "4")
    for subject, schema, records in [("reg.v1", S1, [{"x": 1, "y": 2}]),
                                     ("reg.v2", S2, [{"y": 4, "x": 3, "label": "b"}, {"y": 6, "x": 5, "label": None}]),
                                     ("reg.stranger", stranger, [{"x": 7, "y": 8}]),
                                     ("reg.v1", S1, [{"x": 9, "y": 10}])]:
        Pipeline(TestingSource(records), [Serialize("avro", schema=schema)], nats_sink(subject, url=url)).run()
    out, err = finish(tap)
    got = [(line["subject"], line["value"]) for line in map(json.loads, out.splitlines())]
    assert got == [("reg.v1", {"x": 1, "y": 2}), ("reg.v2", {"y": 4, "x": 3, "label": "b"}),
                   ("reg.v2", {"y": 6, "x": 5, "label": None}), ("reg.v1", {"x": 9, "y": 10})], err
    fp = schema_fingerprint(stranger)
    assert f"tap: not decoded (deserialize: written with schema {fp}, which this deserialize cannot read: the schema " \
           "registry nats://WIREPIPE_SCHEMAS does not hold it" in err, err
    assert "tap: 5 messages, 4 shown, 1 not decoded" in err, err


@pytest.mark.slow  # 0.9 s: six commands and a connect that times out
def test_validate_fetches_registered_schemas_as_run_does_and_says_when_it_cannot(nats_server: EmbeddedServer,
                                                                                  tmp_path: Path) -> None:
    """``validate`` refuses an unregistered NAME@VERSION with run's message (before: ok, and run refused it,
    leaving an empty output file), and says what it could not check when the registry's server does not answer."""
    from tests.cli import invoke

    env = {"NATS_URL": nats_server.url}
    (tmp_path / "points.yaml").write_text("name: Point\nfields: {x: int32, y: int32}\n")
    (tmp_path / "points.csv").write_text("x,y\n1,2\n")
    assert invoke("schema", "push", tmp_path / "points.yaml", "--name", "points", env=env).returncode == 0
    registry = {"schemas": {"registry": {"type": "nats", "nats": {"url": "${NATS_URL}", "connect_timeout": 0.3}}}}
    csv = {"name": "csv", "source": {"type": "csv", "path": str(tmp_path / "points.csv"), "schema": "registry/points@2"},
           "sink": {"type": "jsonl", "path": str(tmp_path / "csv.jsonl")}, "resources": registry}
    published = {"name": "pub", "source": {"type": "generate", "dataset": "point", "count": 3},
                 "operators": [{"serialize": {"format": "bincode", "schema": "registry/points@3"}}],
                 "sink": {"type": "jsonl", "path": str(tmp_path / "pub.jsonl")}, "resources": registry}
    paths = [tmp_path / "csv.yaml", tmp_path / "pub.yaml"]
    for path, pipeline in zip(paths, (csv, published), strict=True):
        path.write_text(yaml.safe_dump(pipeline))
    checked = invoke("validate", *paths, env=env)
    ran = [invoke("run", path, "--no-status", env=env) for path in paths]
    assert (checked.returncode, [r.returncode for r in ran]) == (2, [2, 2]), checked.output
    assert checked.stderr.splitlines() == [r.stderr.splitlines()[-1] for r in ran] == [
        f"error: {paths[0]}: source.schema: registry/points version 2: points has version 1 in "
        "nats://WIREPIPE_SCHEMAS: no version 2",
        f"error: {paths[1]}: serialize.schema: registry/points version 3: points has version 1 in "
        "nats://WIREPIPE_SCHEMAS: no version 3"]
    assert sorted(p.name for p in tmp_path.glob("*.jsonl")) == []
    compressed = {**published, "name": "cmp", "operators": [{"serialize": {"format": "json"}}, {"compress": {
        "codec": "zstd", "dictionary": "nats://DICTS/tx"}}], "resources": {"dictionaries": {"DICTS": {
            "type": "nats", "nats": {"url": "${NATS_URL}"}}}}}
    (tmp_path / "cmp.yaml").write_text(yaml.safe_dump(compressed))
    missing = invoke("validate", tmp_path / "cmp.yaml", env=env)
    missing_run = invoke("run", tmp_path / "cmp.yaml", "--no-status", env=env)  # the same line, the same exit
    assert (missing.returncode, missing.stderr) == (2, f"error: {tmp_path / 'cmp.yaml'}: compress: dictionary "
                                                       "nats://DICTS/tx: no dictionary bucket DICTS on the server "
                                                       "(publish one: wirepipe dict train --to nats://DICTS/NAME)\n")
    assert (missing_run.returncode, missing_run.stderr.splitlines()[-1]) == (2, missing.stderr.strip())
    for path in paths:
        path.write_text(path.read_text().replace("points@2", "points@1").replace("points@3", "points@1"))
    assert invoke("validate", *paths, env=env).stdout.count("ok: ") == 2
    down = invoke("validate", paths[1], env={"NATS_URL": f"nats://127.0.0.1:{free_port()}"})
    assert down.returncode == 0 and down.stdout.startswith(f"ok: {paths[1]}: ")
    assert down.stderr.splitlines()[-1].startswith(
        f"warning: {paths[1]}: not checked: the names it reads from nats://WIREPIPE_SCHEMAS "
        "(resources.schemas.registry): cannot connect to NATS at nats://127.0.0.1:"), down.stderr


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
