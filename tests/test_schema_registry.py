"""The schema registry without a server: the compatibility rules, names and versions (in memory and in a folder),
``wirepipe schema push / list / show / diff / compatibility`` on a folder, serialize and deserialize reading their
schemas from a store the pipeline hands them, and the ``resources:`` section. The NATS KV bucket and separate
processes are tests/test_schema_registry_nats.py's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli import invoke
from wirepipe.connectors.schema_registry import MemoryBackend, SchemaRegistry
from wirepipe.core.errors import ConfigError, WirepipeError
from wirepipe.core.stores import NotRegistered
from wirepipe.operators.deserialize import Deserialize
from wirepipe.operators.serialize import Serialize
from wirepipe.schema import parse_schema, schema_fingerprint
from wirepipe.schema.evolution import RULES, incompatibilities
from wirepipe.testing import TestingSink, TestingSource, memory_schema_registry, run

# Two versions of one record, each readable as the other by field name (full): a positional format written with
# one and read with the other would swap x and y.
V1 = {"x": "int32", "y": "int32"}
V2 = {"y": "int32", "x": "int32", "label?": "string"}
FP1, FP2 = schema_fingerprint(parse_schema(V1)), schema_fingerprint(parse_schema(V2))
POINTS = [{"x": i, "y": -i} for i in range(7)]


def points_registry(**options: Any) -> SchemaRegistry:
    return memory_schema_registry({"points": [V1, V2]}, **options)


def published(registry: SchemaRegistry, version: int, fmt: str = "bincode", records: list[Any] = POINTS) -> TestingSink:
    """What a publisher writing with ``points@version`` sends: payloads and their headers."""
    sink = TestingSink()
    stats = run(TestingSource(records, batch_size=3), [Serialize(fmt, schema=f"registry/points@{version}")], sink,
                resources={"schemas": {"registry": registry}})
    assert stats.records_out == len(records) and sink.rejects == []
    return sink


def consumed(registry: SchemaRegistry, sent: TestingSink, schema: str = "registry/points", fmt: str = "bincode",
             **options: Any) -> TestingSink:
    sink = TestingSink()
    run(TestingSource(sent.records, batch_size=3, headers=sent.headers),
        [Deserialize(fmt, schema=schema, **options)], sink, resources={"schemas": {"registry": registry}})
    return sink


# --- the rules ---------------------------------------------------------------------------------------------

OLD = parse_schema({"id": "int64", "name": "string", "email?": "string"})


@pytest.mark.parametrize(("rule", "new", "refused"), [
    ("backward", {"id": "int64", "name": "string", "email?": "string", "age?": "int32"}, []),
    ("backward", {"id": "int64"}, []),  # a field removed: the new reader leaves it out
    ("backward", {"id": "int64", "name": "string", "age": "int32"},
     ["a consumer with the new schema cannot read what version 1 wrote: age: required in the new schema, absent from "
      "version 1"]),
    ("forward", {"id": "int64", "name": "string", "age": "int32"}, []),  # the old reader leaves age out
    ("forward", {"id": "int64", "email?": "string"},
     ["a consumer with version 1 cannot read what the new schema writes: name: required in version 1, absent from "
      "the new schema"]),
    ("full", {"id": "int64", "name": "string"}, []),  # an optional field removed
    ("full", {"name": "string", "id": "int32", "email?": "string"},
     ["a consumer with the new schema cannot read what version 1 wrote: id: int64 in version 1, int32 in the new "
      "schema (no int64 reads as int32)"]),
    ("full", {"id": "int64", "name": "string?"},
     ["a consumer with version 1 cannot read what the new schema writes: name: string? in the new schema, string in "
      "version 1 (a null has nowhere to go)"]),
    ("none", {"other": "bool"}, []),
])
def test_each_rule_refuses_a_new_version_naming_the_fields(rule: str, new: dict[str, str], refused: list[str]) -> None:
    assert [str(i) for i in incompatibilities(rule, parse_schema(new), [(1, OLD)])] == refused


def test_the_transitive_rules_check_every_earlier_version() -> None:
    v1 = parse_schema({"id": "int64", "x": "string"})
    v2 = parse_schema({"id": "int64"})  # x removed: fine backward
    v3 = parse_schema({"id": "int64", "x?": "int32"})  # x back, as another type: fine against v2, not against v1
    versions = [(1, v1), (2, v2)]
    assert incompatibilities("backward", v3, versions) == []
    assert [str(i) for i in incompatibilities("backward_transitive", v3, versions)] == [
        "a consumer with the new schema cannot read what version 1 wrote: x: string in version 1, int32? in the new "
        "schema (no string reads as int32)"]
    assert [i.version for i in incompatibilities("full_transitive", v3, versions)] == [1, 1]  # both ways
    assert set(RULES) == {"backward", "backward_transitive", "forward", "forward_transitive", "full",
                          "full_transitive", "none"}


# --- names and versions --------------------------------------------------------------------------------------


def test_a_push_is_the_next_version_unless_the_name_has_the_schema_already() -> None:
    registry = SchemaRegistry(MemoryBackend())

    async def scenario() -> list[Any]:
        first = await registry.push("points", parse_schema(V1))
        again = await registry.push("points", parse_schema(V1, name="OtherRecordName"))  # the same fingerprint
        second = await registry.push("points", parse_schema(V2))
        return [first, again, second, await registry.version("points"), await registry.version("points", 1)]

    first, again, second, latest, one = asyncio.run(scenario())
    assert (first.registered.version, first.new, again.registered.version, again.new) == (1, True, 1, False)
    assert (second.registered.version, second.registered.fingerprint, second.new) == (2, FP2, True)
    assert (latest.version, latest.fingerprint, one.fingerprint) == (2, FP2, FP1)
    assert str(latest) == "points version 2"


def test_two_pushers_at_once_never_take_one_version_number() -> None:
    """The backend yields between reading the entry and writing it, as two processes interleave: the second
    writer finds the revision moved, reads again and takes the next number (or finds its schema there)."""
    registry = SchemaRegistry(MemoryBackend(pause=True))
    a, b = parse_schema({"a?": "int32"}), parse_schema({"b?": "int32"})

    async def scenario() -> tuple[Any, ...]:
        racing = await asyncio.gather(registry.push("n", a, "none"), registry.push("n", b, "none"))
        same = await asyncio.gather(registry.push("m", a), registry.push("m", a))
        return racing, same, await registry.entry("n"), await registry.entry("m")

    racing, same, n, m = asyncio.run(scenario())
    assert sorted(p.registered.version for p in racing) == [1, 2] and all(p.new for p in racing)
    assert [v.fingerprint for v in n.versions] == [p.registered.fingerprint for p in racing]
    assert [p.new for p in same] == [True, False] and len(m.versions) == 1


def test_what_a_registry_does_not_hold_is_said() -> None:
    registry = points_registry()

    async def refusal(call: Any) -> str:
        with pytest.raises(WirepipeError) as caught:
            await call
        return str(caught.value)

    async def scenario() -> list[str]:
        return [await refusal(registry.version("points", 3)), await refusal(registry.version("lines")),
                await refusal(registry.push("points", parse_schema(V1), "full")),
                await refusal(registry.push("points", parse_schema({"x": "int64", "y": "int32", "z": "bool"})))]

    version, name, rule, broken = asyncio.run(scenario())
    assert version == "points has versions 1 to 2 in memory: no version 3"
    assert name == "no schema is registered as 'lines' in memory (it has points)"
    assert rule == "the rule of points is backward, not full: change it first (wirepipe schema compatibility points full)"
    assert broken == ("points keeps the rule backward (a consumer with the new version reads what the latest one "
                      "wrote: upgrade consumers first), which the new schema breaks: a consumer with the new schema "
                      "cannot read what version 2 wrote: z: required in the new schema, absent from version 2")


def test_a_missing_fingerprint_is_asked_for_again_after_retry_after() -> None:
    later = parse_schema({"z": "bool"})
    waits, asks = SchemaRegistry(MemoryBackend(), retry_after=3600), SchemaRegistry(MemoryBackend(), retry_after=0)

    async def scenario(registry: SchemaRegistry) -> tuple[Any, Any]:
        before = await registry.by_fingerprint(schema_fingerprint(later))
        await SchemaRegistry(registry.backend).push("z", later)  # another process pushes it
        return before, await registry.by_fingerprint(schema_fingerprint(later))

    assert asyncio.run(scenario(waits)) == (None, None)
    assert asyncio.run(scenario(asks)) == (None, later)


def test_a_damaged_entry_is_never_taken_for_its_fingerprint() -> None:
    backend = MemoryBackend()
    registry = SchemaRegistry(backend)
    asyncio.run(backend.write_schema(FP1, b'{"fingerprint":"x","schema":{"x":"int64"}}'))
    with pytest.raises(NotRegistered, match=f"the schema kept as {FP1} is damaged \\(its fingerprint is "):
        asyncio.run(registry.by_fingerprint(FP1))


# --- the folder and the command line -------------------------------------------------------------------------


def write(folder: Path, name: str, fields: dict[str, str]) -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump({"name": "Point", "fields": fields}, sort_keys=False))
    return path


def test_schema_push_list_show_diff_on_a_folder(tmp_path: Path) -> None:
    reg = tmp_path / "reg"
    v1, v2 = write(tmp_path, "v1.yaml", V1), write(tmp_path, "v2.yaml", V2)
    pushed = [invoke("schema", "push", str(f), "--name", "points", "--registry", str(reg)) for f in (v1, v1, v2)]
    assert [p.returncode for p in pushed] == [0, 0, 0]
    assert [p.stdout for p in pushed] == [
        f"points@1: registered in folder {reg} (fingerprint {FP1}, rule backward)\n",
        f"points@1: already this schema (fingerprint {FP1}) in folder {reg}: nothing registered\n",
        f"points@2: registered in folder {reg} (fingerprint {FP2}, rule backward)\n"]
    assert sorted(p.name for p in (reg / "points").iterdir()) == ["1.yaml", "2.yaml"]
    assert parse_schema(yaml.safe_load((reg / "points" / "2.yaml").read_text())) == parse_schema(V2, "Point")

    listed = invoke("schema", "list", "--registry", str(reg), columns=120)  # a header that wraps moves the rows
    rows = [line.split()[:3] for line in listed.stdout.splitlines() if line.startswith("points")]
    assert listed.returncode == 0 and rows == [["points", "2", FP2]], listed.stdout
    shown = invoke("schema", "show", "points@1", "--registry", str(reg))
    assert shown.returncode == 0 and parse_schema(yaml.safe_load(shown.stdout)) == parse_schema(V1, "Point")
    assert shown.stdout.startswith(f"# points version 1 in {reg}: fingerprint {FP1}, registered ")
    diff = invoke("schema", "diff", "points@1", "points@latest", "--registry", str(reg))
    assert diff.returncode == 1 and diff.stdout.splitlines()[:2] == [
        f"A: points version 1 in {reg}: Point {{x: int32, y: int32}}  (fingerprint {FP1})",
        f"B: points version 2 in {reg}: Point {{y: int32, x: int32, label: string?}}  (fingerprint {FP2})"]
    assert "B reads records written with A by field name: yes" in diff.stdout
    same = invoke("schema", "diff", "points@2", str(v2), "--registry", str(reg))
    assert same.returncode == 0 and same.stdout.endswith("identical: the same fields in the same order, of the same types\n")
    consumer = tmp_path / "consumer.yaml"
    consumer.write_text(yaml.safe_dump({"name": "c", "source": {"type": "jsonl", "path": "in.jsonl"},
                                        "operators": [{"deserialize": {"format": "bincode",
                                                                       "schema": "registry/points"}}]}))
    theirs = invoke("schema", "diff", str(v2), f"{consumer}#deserialize", "--registry", str(reg))
    assert theirs.returncode == 0, theirs.output  # the pipeline reads as the latest version: v2
    missing = invoke("schema", "show", "points@3", "--registry", str(reg))
    assert missing.returncode == 2 and missing.stderr == f"error: points has versions 1 to 2 in folder {reg}: no version 3\n"


def test_a_push_the_rule_refuses_exits_2_naming_the_field_and_registers_nothing(tmp_path: Path) -> None:
    reg = tmp_path / "reg"
    invoke("schema", "push", str(write(tmp_path, "v1.yaml", V1)), "--name", "points", "--registry", str(reg))
    bad = write(tmp_path, "bad.yaml", {"x": "int32", "y": "int32", "z": "float64"})
    refused = invoke("schema", "push", str(bad), "--name", "points", "--registry", str(reg))
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == (
        f"error: {bad}: refused by folder {reg}: points keeps the rule backward (a consumer with the new version reads "
        "what the latest one wrote: upgrade consumers first), which the new schema breaks: a consumer with the new "
        "schema cannot read what version 1 wrote: z: required in the new schema, absent from version 1\n")
    assert sorted(p.name for p in (reg / "points").iterdir()) == ["1.yaml"]
    # the rule changed, the same schema goes in
    changed = invoke("schema", "compatibility", "points", "none", "--registry", str(reg))
    assert changed.stdout == "points: none (no check: any schema may be the next version)\n"
    assert invoke("schema", "push", str(bad), "--name", "points", "--registry", str(reg)).returncode == 0
    assert (reg / "points" / "compatibility").read_text() == "none\n"


def test_schema_push_takes_the_name_from_a_pipeline(tmp_path: Path) -> None:
    v1 = write(tmp_path, "v1.yaml", V1)
    by_ref = tmp_path / "by-ref.yaml"
    by_ref.write_text(yaml.safe_dump({
        "name": "p", "source": {"type": "generate", "dataset": "point", "count": 1},
        "operators": [{"select": ["x", "y"]}, {"serialize": {"format": "bincode", "schema": "local/orders.eu"}}],
        "resources": {"schemas": {"local": {"type": "folder", "path": str(tmp_path / "local")}}}}))
    done = invoke("schema", "push", str(v1), "--subject-of", str(by_ref))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"orders.eu@1: registered in folder {tmp_path / 'local'} ")
    by_subject = tmp_path / "by-subject.yaml"
    by_subject.write_text(yaml.safe_dump({
        "name": "p", "source": {"type": "generate", "dataset": "point", "count": 1},
        "operators": [{"serialize": {"format": "msgpack"}}],
        "sink": {"type": "nats", "url": "nats://127.0.0.1:1", "subject": "points.{subject}"}}))
    template = invoke("schema", "push", str(v1), "--subject-of", str(by_subject))
    assert template.returncode == 2 and "its subject 'points.{subject}' is a pattern or a template" in template.stderr
    assert invoke("schema", "push", str(v1)).stderr == "error: name the schema: --name NAME, or --subject-of PIPELINE\n"


# --- serialize and deserialize with a store ------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["bincode", "avro", "msgpack-array"])
def test_a_v1_publisher_and_a_v2_consumer_and_the_other_way_read_by_field_name(fmt: str) -> None:
    registry = points_registry()
    v1_sent, v2_sent = published(registry, 1, fmt), published(registry, 2, fmt, [{"y": -i, "x": i, "label": f"p{i}"}
                                                                               for i in range(7)])
    assert {h["Wirepipe-Schema"] for h in v1_sent.headers} == {FP1}
    latest = consumed(registry, v1_sent, fmt=fmt)  # v2, the latest: label None
    assert latest.records == [{"y": -i, "x": i, "label": None} for i in range(7)] and latest.rejects == []
    pinned = consumed(registry, v2_sent, "registry/points@1", fmt)  # v1 pinned: label left out
    assert pinned.records == [{"x": i, "y": -i} for i in range(7)] and pinned.rejects == []


def test_unknown_and_unreadable_writers_are_dead_lettered_with_the_reason() -> None:
    registry = points_registry(retry_after=0)
    narrow = parse_schema({"x": "int64", "y": "int32"})  # registered under another name: x does not read as int32
    asyncio.run(registry.push("wide", narrow))
    other = TestingSink()
    run(TestingSource(POINTS[:2]), [Serialize("bincode", schema={"x": "int64", "y": "int32", "z?": "bool"})], other)
    wide = TestingSink()
    run(TestingSource(POINTS[:3]), [Serialize("bincode", schema=narrow)], wide)
    got = consumed(registry, _joined(other, wide), "registry/points@1")
    unknown_fp = schema_fingerprint(parse_schema({"x": "int64", "y": "int32", "z?": "bool"}))
    assert got.records == [] and len(got.rejects) == 5
    assert {r.error for r in got.rejects} == {
        f"written with schema {unknown_fp}, which this deserialize cannot read: the schema "
        "registry memory does not hold it (wirepipe schema push registers a schema)",
        f"written with schema {schema_fingerprint(narrow)} (Record {{x: int64, y: int32}}), read "
        f"here as points version 1 {FP1} (Record {{x: int32, y: int32}}), and its records cannot be read by field "
        "name: x: int64 in the writer schema, int32 here (no int64 reads as int32)"}
    asyncio.run(registry.push("late", parse_schema({"x": "int64", "y": "int32", "z?": "bool"})))
    assert len(consumed(registry, other, "registry/points@1").rejects) == 2  # found now, still not readable as v1
    assert consumed(registry, other, "registry").records == [{"x": 0, "y": 0, "z": None}, {"x": 1, "y": -1, "z": None}]


def _joined(*sinks: TestingSink) -> TestingSink:
    out = TestingSink()
    for s in sinks:
        out.records += s.records
        out.headers += s.headers
    return out


def test_schema_registry_alone_reads_each_record_as_it_was_written_and_refuses_unstamped_ones() -> None:
    registry = points_registry()
    mixed = _joined(published(registry, 1, records=POINTS[:2]),
                    published(registry, 2, records=[{"y": 5, "x": 6, "label": "a"}]))
    got = consumed(registry, mixed, "registry")
    assert got.records == [{"x": 0, "y": 0}, {"x": 1, "y": -1}, {"y": 5, "x": 6, "label": "a"}]
    bare = TestingSink()
    bare.records, bare.headers = list(mixed.records), [None] * 3
    refused = consumed(registry, bare, "registry/points")
    assert refused.records == [] and len(refused.rejects) == 3
    assert refused.rejects[0].error.startswith("no Wirepipe-Schema header (a publisher that does "
                                               "not stamp its schema), and schema_header: required refuses it")
    bare.records, bare.headers = bare.records[:2], bare.headers[:2]  # a v1 publisher that does not stamp
    trusted = consumed(registry, bare, "registry/points@1", schema_header="optional")
    assert trusted.records == [{"x": 0, "y": 0}, {"x": 1, "y": -1}] and trusted.rejects == []


def test_serialize_refuses_at_start_a_version_the_registry_does_not_hold() -> None:
    with pytest.raises(ConfigError) as caught:
        run(TestingSource(POINTS), [Serialize("bincode", schema="registry/points@3")], TestingSink(),
            resources={"schemas": {"registry": points_registry()}})
    assert str(caught.value) == ("serialize.schema: registry/points version 3: points has versions 1 to 2 in memory: "
                                 "no version 3")
    with pytest.raises(ConfigError) as caught:
        run(TestingSource(POINTS), [Serialize("bincode", schema="registry/lines")], TestingSink(),
            resources={"schemas": {"registry": points_registry()}})
    assert str(caught.value) == ("serialize.schema: registry/lines (its latest version): no schema is registered as "
                                 "'lines' in memory (it has points)")


# --- the resources section -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("changes", "where", "message"), [
    ({"operators": [{"deserialize": {"format": "bincode", "schema": "team/points"}}]},
     "operators[0].deserialize.schema", "no schemas resource 'team' (declared: local): declare it under "
     "resources.schemas, or name the registry `registry`"),
    ({"operators": [{"deserialize": {"format": "bincode", "schema": "registry/points"}}]},
     "operators[0].deserialize.schema", "the pipeline has no NATS source or sink to reach the schema registry "
     "nats://WIREPIPE_SCHEMAS through: give the resource `nats: {url: ...}`"),
    ({"resources": {"schemas": {"local": {"path": "x"}}}}, "resources.schemas.local",
     "`type` is required: allowed nats, folder"),
    ({"resources": {"schemas": {"local": {"type": "redis"}}}}, "resources.schemas.local",
     "unknown type 'redis': allowed nats, folder"),
    ({"resources": {"schemas": {"local": {"type": "nats", "bucket": "a.b"}}}}, "resources.schemas.local.bucket",
     "'a.b'"),
    ({"operators": [{"serialize": {"format": "bincode", "schema": "registry"}}]}, "operators[0].serialize",
     "schema: registry: a publisher writes with one registered version: name it"),
    ({"operators": [{"deserialize": {"format": "bincode", "schema": "local/points@0"}}]}, "operators[0].deserialize",
     "'local/points': the version is 1, 2, 3 ... or latest, got '0'"),
    ({"operators": [{"deserialize": {"format": "msgpack", "schema": "registry"}}]}, "operators[0].deserialize",
     "schema: registry reads each record with the schema it was written with, and msgpack names its fields on the "
     "wire, needing none"),
])
def test_a_bad_store_reference_is_a_config_error_naming_file_and_field(
        tmp_path: Path, changes: dict[str, Any], where: str, message: str) -> None:
    config = {"name": "bad", "source": {"type": "jsonl", "path": "in.jsonl"},
              "operators": [{"deserialize": {"format": "bincode", "schema": "local/points"}}],
              "sink": {"type": "null"}, "resources": {"schemas": {"local": {"type": "folder", "path": "schemas"}}}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**config, **changes}))
    done = invoke("validate", str(path))
    assert done.returncode == 2 and f"{path}: {where}: " in done.stderr and message in done.stderr, done.stderr


def test_a_nats_pipeline_names_the_registry_without_declaring_it(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump({
        "name": "ok", "source": {"type": "nats", "url": "nats://127.0.0.1:1", "subject": "points"},
        "operators": [{"decode": {"chain": "avro|zstd", "schema": "registry/points"}},
                      {"serialize": {"format": "bincode", "schema": "nats://OTHER/points@2"}}]}))
    done = invoke("validate", str(path))
    assert done.returncode == 0, done.stderr


def test_wirepipe_test_swaps_the_registry_for_a_folder(tmp_path: Path) -> None:
    """The consumer as deployed (a NATS source, the registry in NATS), tested against a folder of schema files."""
    reg = tmp_path / "schemas"
    for version, fields in ((1, V1), (2, V2)):
        invoke("schema", "push", str(write(tmp_path, f"v{version}.yaml", fields)), "--name", "points",
               "--registry", str(reg))
    (tmp_path / "consumer.yaml").write_text(yaml.safe_dump({
        "name": "consumer", "source": {"type": "jetstream", "url": "${NATS_URL}", "stream": "POINTS",
                                       "durable": "c"},
        "operators": [{"deserialize": {"format": "bincode", "schema": "registry/points"}}],
        "sink": {"type": "jsonl", "path": "out.jsonl"}}))
    (tmp_path / "consumer.test.yaml").write_text(yaml.safe_dump({
        "env": {"NATS_URL": "nats://127.0.0.1:1"},
        "set": [f"resources.schemas.registry={{type: folder, path: {reg}}}"],
        "tests": [{"name": "a v1 publisher's records read as v2",
                   "input": {"records": POINTS[:2], "encode": {"chain": "bincode", "schema": str(tmp_path / "v1.yaml")}},
                   "expect": {"records": [{"y": 0, "x": 0, "label": None}, {"y": -1, "x": 1, "label": None}]}}]}))
    done = invoke("test", str(tmp_path / "consumer.test.yaml"))
    assert done.returncode == 0, done.output


def _relay_suite(tmp_path: Path) -> Path:
    """A relay (bincode points v2 in, v1 out) registered in the folder ``suite/schemas`` beside its test file."""
    suite = tmp_path / "suite"
    suite.mkdir()
    for version, fields in ((1, V1), (2, V2)):
        invoke("schema", "push", str(write(suite, f"v{version}.yaml", fields)), "--name", "points",
               "--registry", str(suite / "schemas"))
    (suite / "relay.yaml").write_text(yaml.safe_dump({
        "name": "relay", "source": {"type": "jetstream", "url": "${NATS_URL}", "stream": "POINTS", "durable": "c"},
        "operators": [{"deserialize": {"format": "bincode", "schema": "registry/points@2"}},
                      {"serialize": {"format": "bincode", "schema": "registry/points@1", "extra_fields": "drop"}}],
        "sink": {"type": "jetstream", "url": "${NATS_URL}", "subject": "points.v1"}}))
    return suite


RELAY_TESTS = {"env": {"NATS_URL": "nats://127.0.0.1:1"},
               "resources": {"schemas": {"registry": {"type": "folder", "path": "schemas"}}}}
SENT_V2 = {"records": POINTS[:2], "encode": {"chain": "bincode", "schema": "registry/points@2"}}


def test_a_test_files_encode_and_decode_take_a_registered_schema_as_the_operators_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``input.encode.schema`` and ``expect.decode.schema`` read the test file's registry as a serialize and a
    deserialize would (``registry``, ``registry/NAME@VERSION``, the latest, ``nats://STORE/NAME@VERSION``); a schema
    file is relative to the test file, as its other paths."""
    suite = _relay_suite(tmp_path)
    as_v1, as_v2 = POINTS[:2], [{"y": p["y"], "x": p["x"], "label": None} for p in POINTS[:2]]
    cases = [("registry", as_v1), ("registry/points@1", as_v1), ("registry/points", as_v2),
             ("nats://registry/points@2", as_v2), ("v1.yaml", as_v1)]
    (suite / "relay.test.yaml").write_text(yaml.safe_dump({**RELAY_TESTS, "tests": [
        {"name": schema, "input": SENT_V2, "expect": {"decode": {"schema": schema}, "records": records}}
        for schema, records in cases]}))
    monkeypatch.chdir(tmp_path)  # not the test file's folder
    done = invoke("test", "suite/relay.test.yaml")
    assert done.returncode == 0, done.output
    assert [line.rpartition("::")[2] for line in done.stdout.splitlines()[:5]] == [
        "registry PASSED", "registry/points@1 PASSED", "registry/points PASSED", "nats://registry/points@2 PASSED",
        "v1.yaml PASSED"], done.stdout


def test_a_schema_the_test_files_registry_does_not_hold_is_its_config_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A case that encodes or decodes with a schema the registry does not hold: the test file refused before any
    case runs, at the case's own field, with the value and what the registry holds (exit 2; before: the case an
    error, exit 1, at ``deserialize.schema``, and ``validate`` said ok)."""
    suite = _relay_suite(tmp_path)
    monkeypatch.chdir(tmp_path)
    unregistered = [("test", "expect.decode.schema", SENT_V2, {"decode": {"schema": "registry/lines"}},
                     "registry/lines (its latest version): no schema is registered as 'lines' in folder suite/schemas "
                     "(it has points)"),
                    ("validate", "input.encode.schema",
                     {"records": POINTS[:1], "encode": {"chain": "bincode", "schema": "registry/points@9"}}, {},
                     "registry/points version 9: points has versions 1 to 2 in folder suite/schemas: no version 9")]
    for command, field, given, expect, message in unregistered:
        (suite / "relay.test.yaml").write_text(yaml.safe_dump({**RELAY_TESTS, "tests": [
            {"name": "as v1", "input": SENT_V2, "expect": {"decode": {"schema": "v1.yaml"}, "records": POINTS[:2]}},
            {"name": "unregistered", "input": given, "expect": {**expect, "records": POINTS[:1]}}]}))
        done = invoke(command, "suite/relay.test.yaml")
        assert done.returncode == 2 and done.stdout == "", done.output
        assert done.stderr.splitlines() == [f"error: suite/relay.test.yaml: tests[1].{field}: {message}"]


def test_a_schema_the_pipelines_operators_name_and_the_test_files_registry_lacks_is_refused_when_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pipeline's own deserialize pinned to a version the test file's registry does not hold: refused before
    any case runs, at the pipeline's field, by ``test`` and ``validate`` alike (exit 2; before: ``validate`` said
    ok, and ``test`` made every case an error, exit 1)."""
    suite = _relay_suite(tmp_path)
    relay = yaml.safe_load((suite / "relay.yaml").read_text())
    relay["operators"][0]["deserialize"]["schema"] = "registry/points@9"
    (suite / "relay.yaml").write_text(yaml.safe_dump(relay))
    (suite / "relay.test.yaml").write_text(yaml.safe_dump({**RELAY_TESTS, "tests": [
        {"name": "as v1", "input": SENT_V2, "expect": {"decode": {"schema": "v1.yaml"}, "records": POINTS[:2]}}]}))
    monkeypatch.chdir(tmp_path)
    for command in ("test", "validate"):
        done = invoke(command, "suite/relay.test.yaml")
        assert (done.returncode, done.stdout) == (2, ""), done.output
        assert done.stderr.splitlines() == ["error: suite/relay.yaml: deserialize.schema: registry/points "
                                            "version 9: points has versions 1 to 2 in folder suite/schemas: no "
                                            "version 9"], done.output


def test_a_test_file_that_would_decode_from_the_nats_registry_is_told_to_declare_a_folder(tmp_path: Path) -> None:
    """A pipeline without a NATS part, a case decoding with ``registry/points@1``: refused when the file is read,
    naming the resource to declare (not the pipeline's missing NATS connection)."""
    (tmp_path / "plain.yaml").write_text(yaml.safe_dump({
        "name": "plain", "source": {"type": "generate", "dataset": "point", "count": 1},
        "operators": [{"serialize": {"format": "bincode", "schema": str(write(tmp_path, "v1.yaml", V1))}}],
        "sink": {"type": "jsonl", "path": "x.jsonl"}}))
    (tmp_path / "plain.test.yaml").write_text(yaml.safe_dump({"tests": [{
        "name": "c", "input": {"records": POINTS[:1]},
        "expect": {"decode": {"schema": "registry/points@1"}, "records": POINTS[:1]}}]}))
    for command in ("validate", "test"):
        done = invoke(command, str(tmp_path / "plain.test.yaml"))
        assert done.returncode == 2 and "a test runs without a server: declare `resources: {schemas: {registry: " \
            "{type: folder, path: FOLDER}}}` in the test file" in done.stderr, done.stderr


def test_an_operator_that_reads_a_store_runs_in_a_pipeline_that_hands_it_one() -> None:
    from wirepipe.core.batch import Batch
    from wirepipe.pipelines.pipeline import Pipeline

    with pytest.raises(WirepipeError) as outside:
        Serialize("bincode", schema="registry/points")(Batch(POINTS))
    assert str(outside.value).startswith("serialize: schema registry/points (its latest version) comes from a schema "
                                         "registry when the pipeline starts")
    with pytest.raises(ConfigError) as caught:
        Pipeline(TestingSource(POINTS), [Deserialize("bincode", schema="team/points")], TestingSink())
    assert str(caught.value) == ("operators[0].deserialize.schema: no schemas resource 'team' (declared: none): declare "
                                 "it under resources.schemas, or name the registry `registry` (a schema file needs its "
                                 "suffix: .yaml, .json, .avsc, .proto ...)")
