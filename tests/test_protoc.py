"""``.proto`` sources through protoc (the ``proto`` extra): message selection, a buf-style package layout,
imports, wirepipe's printed ``.proto`` read back to the same bytes, errors as one config line naming
file:line:column, the extra named when protoc is missing, and YAML pipelines end to end."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

import wirepipe as wp
from tests.cli import wirepipe
from wirepipe.codecs import protoc as protoc_module
from wirepipe.codecs.protoc import load_message
from wirepipe.core.batch import Batch
from wirepipe.core.errors import ConfigError
from wirepipe.datasets import DATASETS
from wirepipe.operators.deserialize import Deserialize
from wirepipe.operators.schema_options import resolve_schema
from wirepipe.operators.serialize import Serialize
from wirepipe.pipelines.config import load_pipeline
from wirepipe.schema import SchemaError

PROTOS = Path(__file__).parent / "protos"

# Each root file of the corpus, and a message of it filled in text format (every kind of field set).
SAMPLES = {
    "geo/points.proto": ("geo.Line", 'points { x: 1 y: -2 } points { x: 2147483647 y: -2147483648 } name: "ab"'),
    "shop/order.proto": ("shop.v1.Order", """
        id: "o-1" status: STATUS_PAID
        lines { sku: "A1" quantity: 3 unit_price { currency: "EUR" units: 12 nanos: -5 } tags: "x" tags: "y"
                kind: KIND_PRODUCT }
        lines { sku: "B2" kind: KIND_REFUND }
        labels { key: "channel" value: "web" } labels { key: "region" value: "eu" }
        lines_by_position { key: 7 value { sku: "C3" quantity: 1 } }
        totals_by_currency { key: "EUR" value { currency: "EUR" units: 36 } }
        coupon: "" priority: 0
        created_at { seconds: 1700000000 nanos: 5 }
        pickup_point: "locker 12"
        weights: [1.5, -0.25] counts: [1, -1, 300] signature: "\\x00\\xff" gift: true discount: 0.5
        checksum32: 4294967295 checksum64: 18446744073709551615 delta32: -7 delta64: -9 balance: -123456789
        big: 18446744073709551615 parent { id: "o-0" }
    """),
    "legacy/sensor.proto": ("legacy.sensors.Batch", """
        readings { sensor_id: "s1" at_ns: 1 value: 21.5 unit: CENTIGRADE samples: [1, 2, 3] stamps: [9]
                   calibration { offset: 0.25 } channel: 4 [legacy.sensors.note]: "checked" }
        readings { sensor_id: "s2" at_ns: -1 raw: "\\001" valid: false device: "d" }
        level: LOW
        latest { key: "s1" value { sensor_id: "s1" at_ns: 1 } }
    """),
    "scoping.proto": ("a.b.Outer", """
        deep { s: "d" } middle { nearest { inner: 1 } top { outer: 2 } by_package { outer: 3 } inner { s: "i" }
                                 explicit { inner: 4 } partial { outer: 5 } }
        Thing2: 6 absolute { s: "a" } by_name { key: "k" value { s: "v" } } level: LEVEL_UP
    """),
}


# The folder protoc gets as -I for each root: the one that holds the package's folders (geo/ spells
# package geo), else the file's own; wirepipe names the files the same way.
PROTOC_ROOT = {"geo/points.proto": PROTOS}


def protoc(proto: Path, out: Path) -> descriptor_pb2.FileDescriptorSet:
    """``proto`` compiled by real protoc (grpcio-tools) with its imports, as a FileDescriptorSet."""
    import grpc_tools

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    root = PROTOC_ROOT.get(proto.relative_to(PROTOS).as_posix(), proto.parent) if proto.is_relative_to(PROTOS) \
        else proto.parent
    done = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{root}", f"-I{well_known}",
                           "--include_imports", f"--descriptor_set_out={out}", proto.relative_to(root).as_posix()],
                          cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def pool_of(files: list[descriptor_pb2.FileDescriptorProto]) -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for f in files:
        pool.Add(f)
    return pool




@pytest.mark.parametrize("root", list(SAMPLES))
def test_every_corpus_file_loads_and_encodes_protocs_bytes(root: str, tmp_path: Path) -> None:
    """Each root file (imports beside it, well-known types, maps, oneofs, proto2 defaults, scoping) gives
    the class protoc's own descriptor set gives: the same bytes for a message with every kind of field."""
    name, sample = SAMPLES[root]
    theirs = message_factory.GetMessageClass(pool_of(list(protoc(PROTOS / root, tmp_path / "s.desc").file))
                                             .FindMessageTypeByName(name))
    ours = load_message(PROTOS / root, name)
    a = text_format.Parse(sample, theirs()).SerializeToString(deterministic=True)
    b = text_format.Parse(sample, ours()).SerializeToString(deterministic=True)
    assert len(a) > 20 and a == b
    assert ours.FromString(a).SerializeToString(deterministic=True) == a


def test_a_package_folder_layout_names_files_and_finds_imports_as_protoc_does(tmp_path: Path) -> None:
    """proto/shop/v1/order.proto (package shop.v1) imports "shop/v1/money.proto" relative to proto/, as
    in buf-style repositories; the schema path is the file itself, no include folder given."""
    v1 = tmp_path / "proto" / "shop" / "v1"
    v1.mkdir(parents=True)
    (v1 / "money.proto").write_text('syntax = "proto3";\npackage shop.v1;\nmessage Money { int64 units = 1; }\n')
    (v1 / "order.proto").write_text('syntax = "proto3";\n// package not.this;\npackage shop.v1;\n'
                                    'import "shop/v1/money.proto";\nmessage Order { string id = 1; Money total = 2; }\n')
    names = [f.name for f in descriptor_pb2.FileDescriptorSet.FromString(
        protoc_module.descriptor_set(v1 / "order.proto")).file]
    assert names == ["shop/v1/money.proto", "shop/v1/order.proto"]
    assert resolve_schema(f"{v1 / 'order.proto'}#Order").names == ("id", "total")


@pytest.mark.parametrize("name", list(DATASETS))
def test_the_proto_text_wirepipe_prints_reads_back_to_the_same_bytes(name: str, tmp_path: Path) -> None:
    """``to_proto_text`` (what a peer compiles) through protoc gives a class that writes wirepipe's bytes."""
    from wirepipe.codecs.protobuf import to_proto_text

    ds = DATASETS[name]
    (tmp_path / "peer.proto").write_text(to_proto_text(ds.schema))
    cls = load_message(tmp_path / "peer.proto", ds.schema.name)
    records = ds.sample(3)
    ours = Serialize("protobuf", schema=str(tmp_path / "peer.proto") + "#" + ds.schema.name)(Batch(list(records)))
    assert ours.values == Serialize("protobuf", schema=name)(Batch(list(records))).values
    assert [cls.FromString(p).SerializeToString() for p in ours.values] == ours.values


def test_protoc_errors_are_one_schema_error_naming_the_file_the_user_wrote(tmp_path: Path) -> None:
    (tmp_path / "m.proto").write_text('syntax = "proto3";\nmessage P {\n  int32 x = 1;\n  string y = 1;\n}\n')
    with pytest.raises(SchemaError) as info:
        load_message(tmp_path / "m.proto")
    assert f"{tmp_path / 'm.proto'}:4:14: " in str(info.value)
    assert "Field number 1 has already been used" in str(info.value)
    (tmp_path / "i.proto").write_text('syntax = "proto3";\nimport "nope/other.proto";\nmessage P { int32 a = 1; }\n')
    with pytest.raises(SchemaError, match=r"nope/other\.proto"):
        load_message(tmp_path / "i.proto")


def test_an_edited_file_is_compiled_again(tmp_path: Path) -> None:
    path = tmp_path / "m.proto"
    path.write_text('syntax = "proto3";\nmessage P { int32 a = 1; }\n')
    assert resolve_schema(str(path)).names == ("a",)
    path.write_text('syntax = "proto3";\nmessage P { int32 a = 1; string b = 2; }\n')
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert resolve_schema(str(path)).names == ("a", "b")


def test_without_protoc_a_proto_schema_names_the_extra_and_a_desc_still_works(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    points = PROTOS / "geo" / "points.proto"
    protoc(points, tmp_path / "p.desc")
    monkeypatch.setitem(sys.modules, "grpc_tools", None)  # as if grpcio-tools were not installed
    protoc_module._compile.cache_clear()
    with pytest.raises(SchemaError, match=r"pip install '\.\[proto\]' in wirepipe's clone"):
        load_message(points, "Point")
    assert resolve_schema(f"{tmp_path / 'p.desc'}#Point").names == ("x", "y")
    with pytest.raises(ConfigError, match=r"schema: .*pip install '\.\[proto\]' in wirepipe's clone"):
        wp.serialize("protobuf", schema=str(points), message="Point")
    protoc_module._compile.cache_clear()


# --- schema: x.proto in the operators, the Python API and YAML ------------------------------------------


def test_message_is_chosen_by_name_or_alone(tmp_path: Path) -> None:
    points = str(PROTOS / "geo" / "points.proto")
    assert resolve_schema(f"{points}#Point").names == ("x", "y")
    assert resolve_schema(f"{points}#geo.Line").names == ("points", "name")
    with pytest.raises(SchemaError, match=r"declares geo\.Point, geo\.Line: name one with message:"):
        resolve_schema(points)
    with pytest.raises(SchemaError, match="has no message 'Circle'"):
        resolve_schema(f"{points}#Circle")
    (tmp_path / "one.proto").write_text('syntax = "proto3"; message Only { string s = 1; }')
    assert resolve_schema(str(tmp_path / "one.proto")).names == ("s",)
    with pytest.raises(ConfigError, match="message: 'Point' names a message of a protobuf schema file"):
        wp.serialize("protobuf", schema="point", message="Point")


def test_python_api_encodes_protocs_bytes(tmp_path: Path) -> None:
    points = PROTOS / "geo" / "points.proto"
    ref = message_factory.GetMessageClass(pool_of(list(protoc(points, tmp_path / "p.desc").file))
                                          .FindMessageTypeByName("geo.Point"))
    records = DATASETS["point"].sample(50)
    ser = wp.serialize("protobuf", schema=str(points), message="Point")
    payloads = ser(Batch(list(records))).values
    assert payloads == [ref(**r).SerializeToString() for r in records]
    assert wp.deserialize("protobuf", schema=str(points), message="Point")(Batch(payloads)).values == records
    # message: names a message of protoc's own descriptor set the same way
    assert wp.serialize("protobuf", schema=str(tmp_path / "p.desc"), message="Point")(
        Batch(list(records))).values == payloads
    # the .proto is a schema for the other formats too
    assert Deserialize("avro", schema=f"{points}#Point")(Serialize("avro", schema=f"{points}#Point")(
        Batch(list(records)))).values == records


def _jsonl_payloads(path: Path) -> list[bytes]:
    return [base64.b64decode(json.loads(line)["$base64"]) for line in path.read_text().splitlines()]


def test_yaml_pipelines_round_trip_points_through_a_proto_and_dead_letter_corrupt_input(tmp_path: Path) -> None:
    points = PROTOS / "geo" / "points.proto"
    proto = f"{{format: protobuf, schema: '{points}', message: Point}}"
    publish = tmp_path / "publish.yaml"
    publish.write_text(f"""name: proto-publish
source: {{type: generate, dataset: point, count: 300, batch_size: 100}}
operators:
  - serialize: {proto}
sink: {{type: jsonl, path: "{tmp_path / 'wire.jsonl'}"}}
""")
    load_pipeline(publish).run()
    payloads = _jsonl_payloads(tmp_path / "wire.jsonl")
    expected = DATASETS["point"].sample(300)
    ref = message_factory.GetMessageClass(pool_of(list(protoc(points, tmp_path / "p.desc").file))
                                          .FindMessageTypeByName("geo.Point"))
    assert payloads == [ref(**r).SerializeToString() for r in expected]
    corrupt = [b"\x08", b"\x0f\x01", b"\x12\x05ab", b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"]
    with open(tmp_path / "wire.jsonl", "a") as f:
        for p in corrupt:
            f.write(json.dumps({"$base64": base64.b64encode(p).decode()}) + "\n")
    consume = tmp_path / "consume.yaml"
    consume.write_text(f"""name: proto-consume
source: {{type: jsonl, path: "{tmp_path / 'wire.jsonl'}", batch_size: 64}}
operators:
  - deserialize: {proto}
sink: {{type: jsonl, path: "{tmp_path / 'back.jsonl'}"}}
dead_letter: {{type: jsonl, path: "{tmp_path / 'dead.jsonl'}"}}
""")
    stats = load_pipeline(consume).run()
    assert [json.loads(line) for line in (tmp_path / "back.jsonl").read_text().splitlines()] == expected
    letters = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert [d["stage"] for d in letters] == ["deserialize"] * len(corrupt)
    assert all("not a Point message" in d["error"] for d in letters)
    assert stats.rejected == len(corrupt)


def test_a_broken_proto_in_yaml_is_a_config_error_naming_both_files(tmp_path: Path) -> None:
    (tmp_path / "bad.proto").write_text('syntax = "proto3";\nmessage Point {\n  int32 x = 1;\n  int32 y = 1;\n}\n')
    config = tmp_path / "p.yaml"
    config.write_text(f"""name: bad-proto
source: {{type: generate, dataset: point, count: 10}}
operators:
  - serialize: {{format: protobuf, schema: "{tmp_path / 'bad.proto'}"}}
sink: {{type: "null"}}
""")
    done = wirepipe("run", config, columns=200)
    assert done.returncode == 2
    assert str(config) in done.stderr and "operators[0].serialize.schema" in done.stderr
    assert f"{tmp_path / 'bad.proto'}:4:13: Field number 1 has already been used" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout

