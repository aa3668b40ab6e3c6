"""``.proto`` sources without protoc: the parser's descriptors equal protoc's (``grpcio-tools``), classes
from both encode the same bytes, errors name file:line:column, and a ``.proto`` drives serialize and
deserialize from YAML end to end."""

from __future__ import annotations

import base64
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

import wirepipe as wp
from wirepipe.codecs import protofile
from wirepipe.core.batch import Batch
from wirepipe.core.errors import ConfigError
from wirepipe.datasets import DATASETS
from wirepipe.operators.serialize import Deserialize, Serialize, resolve_schema
from wirepipe.pipelines.config import load_pipeline
from wirepipe.schema import SchemaError

PROTOS = Path(__file__).parent / "protos"
ROOT = Path(__file__).parent.parent

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
def test_descriptors_equal_protocs(root: str, tmp_path: Path) -> None:
    theirs = protoc(PROTOS / root, tmp_path / "set.desc").file
    ours = protofile.load(PROTOS / root)
    assert [f.name for f in ours] == [f.name for f in theirs]  # the same files, dependencies first
    by_name = {f.name: f for f in theirs}
    compared = 0
    for f in ours:
        if f.name.startswith("google/protobuf/"):  # the runtime's own copy (protoc's has json_names)
            continue
        assert text_format.MessageToString(f) == text_format.MessageToString(by_name[f.name]), f.name
        assert f == by_name[f.name]
        compared += 1
    assert compared >= 1


def test_a_package_folder_layout_names_files_and_finds_imports_as_protoc_does(tmp_path: Path) -> None:
    """proto/shop/v1/order.proto (package shop.v1) imports "shop/v1/money.proto" relative to proto/, as
    in buf-style repositories; the schema path is the file itself, no include folder given."""
    v1 = tmp_path / "proto" / "shop" / "v1"
    v1.mkdir(parents=True)
    (v1 / "money.proto").write_text('syntax = "proto3";\npackage shop.v1;\nmessage Money { int64 units = 1; }\n')
    (v1 / "order.proto").write_text('syntax = "proto3";\npackage shop.v1;\nimport "shop/v1/money.proto";\n'
                                    'message Order { string id = 1; Money total = 2; }\n')
    ours = protofile.load(v1 / "order.proto")
    assert [f.name for f in ours] == ["shop/v1/money.proto", "shop/v1/order.proto"]
    done = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-Iproto", "--include_imports",
                           f"--descriptor_set_out={tmp_path / 'o.desc'}", "shop/v1/order.proto"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert ours == list(descriptor_pb2.FileDescriptorSet.FromString((tmp_path / "o.desc").read_bytes()).file)
    assert resolve_schema(f"{v1 / 'order.proto'}#Order").names == ("id", "total")


def test_descriptors_equal_protocs_for_the_protobuf_projects_own_files(tmp_path: Path) -> None:
    """Real-world sources: descriptor.proto (proto2, options with aggregate values, extension range
    declarations), plugin.proto, the well-known types and the feature files that extend FeatureSet."""
    import grpc_tools

    include = Path(grpc_tools.__file__).parent / "_proto"
    names = sorted(p.relative_to(include).as_posix() for p in include.rglob("*.proto"))
    assert "google/protobuf/descriptor.proto" in names and len(names) >= 10
    for name in names:
        done = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{include}", "--include_imports",
                               f"--descriptor_set_out={tmp_path / 'x.desc'}", name], cwd=include,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        theirs = descriptor_pb2.FileDescriptorSet.FromString((tmp_path / "x.desc").read_bytes()).file
        ours = protofile.load(include / name, include=[include])
        assert [f.name for f in ours] == [f.name for f in theirs]
        assert ours[-1] == theirs[-1], name


@pytest.mark.parametrize("root", list(SAMPLES))
def test_classes_from_either_encode_identical_bytes(root: str, tmp_path: Path) -> None:
    name, sample = SAMPLES[root]
    theirs = message_factory.GetMessageClass(pool_of(list(protoc(PROTOS / root, tmp_path / "s.desc").file))
                                             .FindMessageTypeByName(name))
    ours = message_factory.GetMessageClass(pool_of(protofile.load(PROTOS / root)).FindMessageTypeByName(name))
    a = text_format.Parse(sample, theirs()).SerializeToString(deterministic=True)
    b = text_format.Parse(sample, ours()).SerializeToString(deterministic=True)
    assert len(a) > 20 and a == b
    assert ours.FromString(a).SerializeToString(deterministic=True) == a
    assert theirs.FromString(b).SerializeToString(deterministic=True) == b


@pytest.mark.parametrize("name", list(DATASETS))
def test_the_proto_text_wirepipe_prints_reads_back_to_the_same_bytes(name: str, tmp_path: Path) -> None:
    """``to_proto_text`` (what a peer compiles) parsed again gives a class that writes wirepipe's bytes."""
    from wirepipe.codecs.protobuf import to_proto_text

    ds = DATASETS[name]
    (tmp_path / "peer.proto").write_text(to_proto_text(ds.schema))
    cls = protofile.load_message(tmp_path / "peer.proto", ds.schema.name)
    records = ds.sample(3)
    ours = Serialize("protobuf", schema=str(tmp_path / "peer.proto") + "#" + ds.schema.name)(Batch(list(records)))
    assert ours.values == Serialize("protobuf", schema=name)(Batch(list(records))).values
    assert [cls.FromString(p).SerializeToString() for p in ours.values] == ours.values


def _defaults(cls: type) -> dict[str, str]:
    msg = cls()
    return {f.name: repr(getattr(msg, f.name)) for f in msg.DESCRIPTOR.fields
            if f.message_type is None and not protofile.is_repeated(f)}


def test_proto2_defaults_read_back_as_protocs(tmp_path: Path) -> None:
    theirs = pool_of(list(protoc(PROTOS / "legacy/sensor.proto", tmp_path / "s.desc").file))
    ours = pool_of(protofile.load(PROTOS / "legacy/sensor.proto"))
    for name in ("legacy.sensors.Reading", "legacy.sensors.Reading.Calibration", "legacy.sensors.Batch"):
        t = _defaults(message_factory.GetMessageClass(theirs.FindMessageTypeByName(name)))
        o = _defaults(message_factory.GetMessageClass(ours.FindMessageTypeByName(name)))
        assert o == t
    reading = message_factory.GetMessageClass(ours.FindMessageTypeByName("legacy.sensors.Reading"))()
    assert reading.label == 'unlabelled "raw"\tvalue é' and reading.raw == b"\x00\x01ab\xff\n"
    assert reading.retries == -16 and reading.flags == 15 and reading.big == 2**64 - 1 and math.isnan(reading.missing)


def test_a_custom_option_is_read_and_ignored_and_comments_go_anywhere(tmp_path: Path) -> None:
    (tmp_path / "opts.proto").write_text("""
        /* a file comment */ syntax = /* here too */ "proto3"; // and here
        import "google/protobuf/descriptor.proto";
        package p;
        extend google.protobuf.FieldOptions { string unit = 50001; }
        option (p.file_opt).nested = { a: 1 b: "x" };
        message M {
          option (p.msg_opt) = true;
          double temp = 1 [(unit) = "C", deprecated = true];  // a custom and a standard option
          string s = 2 [json_name = "S"];
        }
    """)
    files = protofile.load(tmp_path / "opts.proto")
    m = files[-1].message_type[0]
    assert m.field[0].options.deprecated and m.field[1].json_name == "S"
    assert files[-1].extension[0].extendee == ".google.protobuf.FieldOptions"
    cls = protofile.load_message(tmp_path / "opts.proto", "M")
    assert cls(temp=1.5, s="a").SerializeToString() == bytes.fromhex("09000000000000f83f") + b"\x12\x01a"


# --- errors: file, line, column and what was found; protoc refuses the same files -----------------------

# (case, files, where, words); protoc refuses each file too, except the constructs only wirepipe refuses
WIREPIPE_ONLY = {"group"}
ERRORS = [
    ("syntax error", {"m.proto": 'syntax = "proto3";\nmessage P {\n  int32 x = 1\n}\n'},
     "m.proto:4:1", "expected ';', found '}'"),
    ("unknown type", {"m.proto": 'syntax = "proto3";\nmessage P {\n  Missing m = 1;\n}\n'},
     "m.proto:3:3", "unknown type 'Missing'"),
    ("duplicate number", {"m.proto": 'syntax = "proto3";\nmessage P {\n  int32 x = 1;\n  string y = 1;\n}\n'},
     "m.proto:4:14", "number 1 is already used by x (line 3)"),
    ("missing import", {"m.proto": 'syntax = "proto3";\nimport "nope/other.proto";\n'},
     "m.proto:2:8", "import 'nope/other.proto' not found"),
    ("group", {"m.proto": 'syntax = "proto2";\nmessage P {\n  optional group G = 1 { optional int32 a = 2; }\n}\n'},
     "m.proto:3:12", "groups are not supported"),
    ("required in proto3", {"m.proto": 'syntax = "proto3";\nmessage P { required int32 a = 1; }\n'},
     "m.proto:2:13", "required fields are not allowed in proto3"),
    ("proto3 default", {"m.proto": 'syntax = "proto3";\nmessage P { int32 a = 1 [default = 2]; }\n'},
     "m.proto:2:26", "default values are not allowed in proto3"),
    ("first enum value", {"m.proto": 'syntax = "proto3";\nenum E { A = 1; }\n'},
     "m.proto:2:6", "first value of enum E must be 0"),
    ("proto2 label", {"m.proto": 'syntax = "proto2";\nmessage P { int32 a = 1; }\n'},
     "m.proto:2:13", 'expected "required", "optional", or "repeated"'),
    ("reserved number", {"m.proto": 'syntax = "proto3";\nmessage P {\n  int32 a = 5;\n  reserved 4 to 6;\n}\n'},
     "m.proto:3:13", "field a = 5: 5 is reserved in P (4 to 6)"),
    ("reserved name", {"m.proto": 'syntax = "proto3";\nmessage P {\n  reserved "a";\n  int32 a = 5;\n}\n'},
     "m.proto:4:13", "field a: the name is reserved in P"),
    ("enum alias", {"m.proto": 'syntax = "proto3";\nenum E {\n  A = 0;\n  B = 0;\n}\n'},
     "m.proto:4:7", "B = 0: 0 is already used by A in enum E (set option allow_alias = true;"),
    ("number range", {"m.proto": 'syntax = "proto3";\nmessage P { int32 a = 19001; }\n'},
     "m.proto:2:23", "reserved for protobuf itself"),
    ("unknown option", {"m.proto": 'syntax = "proto3";\noption javva_package = "x";\n'},
     "m.proto:2:8", "option 'javva_package' unknown: allowed java_package"),
    ("string not closed", {"m.proto": 'syntax = "proto3;\n'}, "m.proto:1:10", "string literal not closed"),
    ("not imported", {"m.proto": 'syntax = "proto3";\nimport "mid.proto";\nmessage P { leaf.L l = 1; }\n',
                      "mid.proto": 'syntax = "proto3";\nimport "leaf.proto";\n',
                      "leaf.proto": 'syntax = "proto3";\npackage leaf;\nmessage L {}\n'},
     "m.proto:3:13", "'leaf.L' is declared in leaf.proto, which m.proto does not import"),
    ("import cycle", {"m.proto": 'syntax = "proto3";\nimport "n.proto";\n',
                      "n.proto": 'syntax = "proto3";\nimport "m.proto";\n'},
     "n.proto:2:8", "import cycle: m.proto -> n.proto -> m.proto"),
]


@pytest.mark.parametrize(("case", "files", "where", "words"), ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_name_file_line_column_and_what_was_found(case: str, files: dict[str, str], where: str, words: str,
                                                        tmp_path: Path) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(SchemaError) as info:
        protofile.load_message(tmp_path / "m.proto")
    message = str(info.value)
    assert f"{tmp_path / where.split(':')[0]}:{where.split(':', 1)[1]}: " in message, message
    assert words in message, message
    done = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp_path}", "--descriptor_set_out=/dev/null",
                           "m.proto"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (done.returncode != 0) is (case not in WIREPIPE_ONLY), done.stderr  # protoc refuses the same files


def test_mangled_sources_give_a_schema_error_never_a_crash(tmp_path: Path) -> None:
    """1,000 damaged copies of the corpus (cut, a span deleted or doubled, a token inserted): each one
    loads or is a SchemaError (the config error users see), never another exception."""
    import random
    import shutil

    shutil.copytree(PROTOS, tmp_path / "p")
    originals = {p: p.read_text() for p in (tmp_path / "p").rglob("*.proto")}
    first = {p: protofile.load(p)[-1].message_type[0].name for p in originals}
    inserts = [*'{}[]()<>;,=.-+:/"\'\\ \n', "message", "optional", "map<", "0x", "1e5", "max", "to", "group",
               "oneof", "enum", "reserved", "extend", "import", "stream", "99999999999999999999", "-"]
    rnd = random.Random(12)
    outcomes = {"loaded": 0, "refused": 0}
    for _ in range(1000):
        path = rnd.choice(sorted(originals))
        text = originals[path]
        a = rnd.randrange(len(text))
        b = min(len(text), a + rnd.randrange(1, 12))
        how = rnd.randrange(4)
        text = (text[:a], text[:a] + text[b:], text[:a] + rnd.choice(inserts) + text[a:],
                text[:b] + text[a:])[how]
        path.write_text(text)
        try:
            protofile.load_message(path, first[path])
            outcomes["loaded"] += 1
        except SchemaError:
            outcomes["refused"] += 1
        finally:
            path.write_text(originals[path])
    assert outcomes["refused"] > 300 and outcomes["loaded"] > 100, outcomes


def test_editions_are_refused_clearly(tmp_path: Path) -> None:
    (tmp_path / "e.proto").write_text('edition = "2023";\nmessage P { int32 a = 1; }\n')
    with pytest.raises(SchemaError, match=r"e\.proto:1:1: editions .* are not supported"):
        protofile.load_message(tmp_path / "e.proto")


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
    done = subprocess.run([sys.executable, "-m", "wirepipe.cli", "run", str(config)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 2
    assert str(config) in done.stderr and "operators[0].serialize.schema" in done.stderr
    assert f"{tmp_path / 'bad.proto'}:4:13: field y = 1: number 1 is already used by x" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout

