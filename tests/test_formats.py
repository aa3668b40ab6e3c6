"""The reference-table formats and the typed schema: round trips, bytes against reference libraries and
hand-computed vectors, misfits rejected with their field path, corrupt input dead-lettered."""

from __future__ import annotations

import base64
import io
import json
import re
import struct
import zlib

import msgpack
import pytest

from tests.cli import wirepipe
from wirepipe.codecs import CODECS, FORMATS, Chain, get_codec
from wirepipe.codecs.deflate import deflate_library
from wirepipe.core.batch import Batch
from wirepipe.core.errors import ConfigError, StageError
from wirepipe.datasets import DATASETS
from wirepipe.operators.deserialize import Deserialize
from wirepipe.operators.schema_options import resolve_schema
from wirepipe.operators.serialize import Serialize
from wirepipe.schema import SchemaError, parse_schema, schema_fingerprint, with_defaults

TYPED = ["protobuf", "avro", "bincode", "postcard", "bincode-varint"]
DOCUMENTS = ["bson", "flexbuffers", "toml"]
# (format, with the dataset's typed schema): msgpack and json with a schema run on msgspec.
NEW = [(f, True) for f in TYPED] + [(f, False) for f in DOCUMENTS] + [("msgpack", True), ("json", True)]
IDS = [f"{f}{'+schema' if t and f in ('msgpack', 'json') else ''}" for f, t in NEW]


def _sample(name: str, seed: int = 1) -> list:
    return DATASETS[name].sample(1 if name == "large_vectors" else 4, seed=seed)


def _expected(fmt: str, name: str, records: list, typed: bool = False) -> list:
    """Positional formats decode every declared field (absent optional fields as None)."""
    if fmt in TYPED or (typed and fmt == "flexbuffers"):
        fill = with_defaults(DATASETS[name].schema)
        return [fill(r) for r in records]
    return records


# --- round trips: every new format x every codec x every dataset -------------------------------------


# flexbuffers x large_vectors takes seconds per decode (pure Python): its own test below, decoded once.
# large_vectors (388 kB records) takes seconds in the slower formats: the fast lane leaves it out (-m "not slow")
ROUND_TRIPS = [pytest.param(f, t, d, id=f"{i}-{d}", marks=pytest.mark.slow if d == "large_vectors" else ())
               for (f, t), i in zip(NEW, IDS, strict=True) for d in DATASETS if (f, d) != ("flexbuffers", "large_vectors")]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("fmt", "typed", "name"), ROUND_TRIPS)
def test_round_trip_every_codec_every_dataset(fmt: str, typed: bool, name: str) -> None:
    ds = DATASETS[name]
    schema = ds.schema if typed else None
    records = _sample(name)
    if fmt == "toml" and name == "feed":  # TOML has no null: those records are refused (tested below)
        records = [r for r in ds.sample(40, seed=1) if r["previous"] is not None][:4]
    encode = FORMATS[fmt].encoder(schema)
    decode = FORMATS[fmt].decoder(schema)
    payloads = [encode(r) for r in records]
    assert [decode(p) for p in payloads] == _expected(fmt, name, records)
    for codec in CODECS:
        chain = Chain.parse(f"{fmt}|{codec}")
        enc, dec = chain.encoder(schema), chain.decoder(schema)
        wire = [enc(r) for r in records]
        # Each codec gives back the very payload bytes, and the whole chain decodes to the records.
        assert [get_codec(codec).decompressor()(w) for w in wire] == payloads
        assert dec(wire[0]) == _expected(fmt, name, records[:1])[0]


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_flexbuffers_large_vectors_round_trip() -> None:
    record = DATASETS["large_vectors"].sample(1)[0]
    fmt = FORMATS["flexbuffers"]
    payload = fmt.encoder()(record)
    assert fmt.decoder()(payload) == record
    for codec in CODECS:  # every codec gives back the very payload, so the chain decodes to the record
        c = get_codec(codec)
        assert c.decompressor()(c.compressor()(payload)) == payload


@pytest.mark.parametrize("fmt", ["protobuf", "avro", "bincode", "postcard", "msgpack", "json", "bson"])
def test_framed_messages_of_many_records(fmt: str) -> None:
    """pack -> serialize -> deserialize(framed) -> unpack gives the records back."""
    from wirepipe.operators.pack import Pack
    from wirepipe.operators.unpack import Unpack

    schema = DATASETS["point"].schema
    records = DATASETS["point"].sample(250)
    b = Pack(100)(Batch(list(records)))
    b = Serialize(fmt, schema=schema)(b)
    assert len(b.values) == 3 and all(isinstance(v, bytes) for v in b.values)
    b = Unpack()(Deserialize(fmt, schema=schema, framed=True)(b))
    assert not b.rejected and b.values == records


def test_framed_bincode_is_read_a_batch_at_a_time_and_a_bad_message_is_refused_alone() -> None:
    """Framed ``Vec<Point>`` messages are decoded in one numpy pass over the batch (the column decoder); a
    message whose length is not its announced records' sends the batch record by record: only it is refused."""
    from wirepipe.operators.pack import Pack
    from wirepipe.operators.unpack import Unpack

    schema = DATASETS["point"].schema
    records = DATASETS["point"].sample(250)
    packed = Serialize("bincode", schema=schema)(Pack(100)(Batch(list(records), meta={"seq": list(range(250))})))
    column = FORMATS["bincode"].column_decoder(schema, framed=True)
    assert column is not None and column(packed.values) == [records[:100], records[100:200], records[200:]]
    packed.values[1] = packed.values[1][:-1]  # one byte short
    out = Unpack()(Deserialize("bincode", schema=schema, framed=True)(packed))
    assert out.values == records[:100] + records[200:] and out.meta["seq"] == [0] * 100 + [200] * 50
    assert [r.meta["seq"] for r in out.rejected] == [100]


def test_framed_bincode_decoded_at_once_is_unpacked_as_it_is_with_every_column_repeated() -> None:
    """The column decoder's messages, unpacked: the subjects repeated (one subject for all: the batch's shared
    one), headers, meta and acks as for any batch; a message changed in place since (lengthened, or a record
    replaced) is unpacked as it is now, as any list of lists."""
    from wirepipe.core.batch import Repeated
    from wirepipe.operators.pack import Pack
    from wirepipe.operators.unpack import Unpack

    schema = DATASETS["point"].schema
    records = DATASETS["point"].sample(250)

    def decoded(subjects: list[str]) -> Batch:
        packed = Serialize("bincode", schema=schema)(Pack(100)(Batch(list(records), meta={"seq": list(range(250))})))
        packed.subjects, packed.headers = subjects, [{"n": str(i)} for i in range(3)]
        packed.meta["ack"] = ["a0", "a1", "a2"]
        out = Deserialize("bincode", schema=schema, framed=True)(packed)
        assert out.values == [records[:100], records[100:200], records[200:]]
        return out

    out = Unpack()(decoded(["points"] * 3))
    assert out.values == records and out.subjects == "points" and not out.rejected
    assert out.headers == [{"n": "0"}] * 100 + [{"n": "1"}] * 100 + [{"n": "2"}] * 50
    assert type(out.meta["seq"]) is Repeated and out.meta["seq"] == [0] * 100 + [100] * 100 + [200] * 50
    assert [(i, a) for i, a in enumerate(out.meta["ack"]) if a is not None] == [(0, "a0"), (100, "a1"), (200, "a2")]
    assert out.headers_at(150) == {"n": "1"} and out.subject_at(249) == "points"

    batch = decoded(["p.a", "p.b", "p.a"])
    batch.values[0].append({"x": 1, "y": 2})  # a message lengthened in place: the one list is not taken
    out = Unpack()(batch)
    assert out.values == [*records[:100], {"x": 1, "y": 2}, *records[100:]]
    assert out.subjects == ["p.a"] * 101 + ["p.b"] * 100 + ["p.a"] * 50 and out.meta["seq"][101] == 100

    batch = decoded(["points"] * 3)
    batch.values[1][0] = {"x": 9, "y": 9}  # a record replaced in place, the message as long as it was
    assert Unpack()(batch).values == [*records[:100], {"x": 9, "y": 9}, *records[101:]]


def test_repeat_each_gives_the_same_column_for_long_and_short_runs() -> None:
    from itertools import chain, repeat

    from wirepipe.core.batch import Repeated, repeat_each

    for column, counts in ((["a", "b", "c"], [100, 0, 40]), (range(5), [1, 0, 2, 1, 1]), ([], [])):
        expected = list(chain.from_iterable(map(repeat, column, counts)))
        assert repeat_each(column, counts) == expected and Repeated(column, counts) == expected


@pytest.mark.parametrize("fmt", ["bincode", "postcard", "bincode-varint", "msgpack", "json"])
def test_framed_messages_are_encoded_a_batch_at_a_time_and_a_misfit_is_refused_alone(fmt: str) -> None:
    """``serialize`` hands a batch of framed messages (``pack``'s lists) to the format's column encoder: the
    same bytes as message by message; a message with a record that does not fit (a field the schema does not
    declare; for the layouts a string for an int too: msgpack and json check types on decode) is refused
    alone, with the field, and the others are written."""
    from wirepipe.operators.pack import Pack

    schema = DATASETS["point"].schema
    records = DATASETS["point"].sample(300)
    packed = Pack(100)(Batch(list(records)))
    column = FORMATS[fmt].column_encoder(schema)
    one = FORMATS[fmt].encoder(schema)
    assert column is not None and column(packed.values) == [one(m) for m in packed.values]
    misfits = [({"x": 1, "y": 2, "z": 3}, "z")] + ([({"x": "5", "y": 2}, "x")] if fmt not in ("msgpack", "json") else [])
    for misfit, reason in misfits:
        bad = [dict(r) for r in records]
        bad[150] = misfit
        out = Serialize(fmt, schema=schema)(Pack(100)(Batch(bad, meta={"seq": list(range(300))})))
        assert out.values == [one(records[:100]), one(records[200:])]
        assert [r.meta["seq"] for r in out.rejected] == [100] and reason in out.rejected[0].error


# --- bytes: hand-computed vectors from the specs, and reference libraries ---------------------------


def test_point_bytes_match_rust_bincode_and_postcard() -> None:
    s = DATASETS["point"].schema
    bincode, postcard = FORMATS["bincode"].encoder(s), FORMATS["postcard"].encoder(s)
    # bincode 1 / legacy(): i32 little-endian fixint
    assert bincode({"x": 1, "y": -2}) == bytes.fromhex("01000000feffffff")
    assert bincode({"x": -100, "y": 300}) == struct.pack("<ii", -100, 300)
    # postcard: zigzag varints; -100 -> 199 -> c7 01, 300 -> 600 -> d8 04
    assert postcard({"x": 1, "y": -2}) == b"\x02\x03"
    assert postcard({"x": -100, "y": 300}) == bytes.fromhex("c701d804")
    assert postcard({"x": 2**31 - 1, "y": -(2**31)}) == bytes.fromhex("feffffff0f") + bytes.fromhex("ffffffff0f")
    # Vec<Point>: a u64 / varint count, then the points
    assert bincode([{"x": 1, "y": 2}]) == struct.pack("<Qii", 1, 1, 2)
    assert postcard([{"x": 1, "y": 2}] * 3) == b"\x03" + b"\x02\x04" * 3


def test_layout_of_strings_lists_options_and_fixed_bytes() -> None:
    s = parse_schema({"name": "string", "xs": "list<uint32>", "key": "bytes[2]", "opt": "int64?", "flag": "bool"})
    rec = {"name": "hé", "xs": [1, 300], "key": b"\xaa\xbb", "opt": None, "flag": True}
    assert FORMATS["bincode"].encoder(s)(rec) == (
        struct.pack("<Q", 3) + "hé".encode() + struct.pack("<QII", 2, 1, 300) + b"\xaa\xbb" + b"\x00" + b"\x01")
    assert FORMATS["postcard"].encoder(s)(rec) == (
        b"\x03" + "hé".encode() + b"\x02\x01\xac\x02" + b"\xaa\xbb" + b"\x00" + b"\x01")
    rec["opt"] = -1
    assert FORMATS["postcard"].encoder(s)(rec).endswith(b"\x01\x01\x01")  # Some, zigzag(-1) = 1, true
    assert FORMATS["bincode"].encoder(s)(rec).endswith(b"\x01" + struct.pack("<q", -1) + b"\x01")


def test_large_vectors_bincode_size_is_the_raw_data_plus_four_lengths() -> None:
    ds = DATASETS["large_vectors"]
    r = ds.sample(1)[0]
    payload = FORMATS["bincode"].encoder(ds.schema)(r)
    assert len(payload) == 4 * 8 + 2000 * 4 + 10000 * 4 + 25000 * 4 + 30000 * 8
    assert payload[:8] == struct.pack("<Q", 2000) and payload[8:12] == struct.pack("<i", r["ints"][0])


def _reference_protobuf_class():
    """Point and a richer message built by hand with descriptor_pb2, independently of wirepipe."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(name="ref.proto", package="ref", syntax="proto3")
    m = f.message_type.add(name="Tx")
    inner = m.nested_type.add(name="In")
    inner.field.add(name="id", number=1, type=F.TYPE_BYTES, label=F.LABEL_OPTIONAL)
    inner.field.add(name="index", number=2, type=F.TYPE_UINT32, label=F.LABEL_OPTIONAL)
    m.field.add(name="version", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    m.field.add(name="inputs", number=2, type=F.TYPE_MESSAGE, type_name="In", label=F.LABEL_REPEATED)
    m.field.add(name="values", number=3, type=F.TYPE_DOUBLE, label=F.LABEL_REPEATED)
    m.field.add(name="note", number=4, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, proto3_optional=True,
                oneof_index=0)
    m.oneof_decl.add(name="_note")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("ref.Tx")), f


def test_protobuf_bytes_equal_the_official_runtime() -> None:
    point = FORMATS["protobuf"].encoder(DATASETS["point"].schema)
    # field 1 varint 1; field 2 varint -2 (int32 negatives take 10 bytes, as the Point table's 13-byte Point)
    assert point({"x": 1, "y": -2}) == bytes.fromhex("0801") + bytes.fromhex("10feffffffffffffffff01")
    ref, _ = _reference_protobuf_class()
    schema = parse_schema({"name": "Tx", "fields": {"version": "int32", "inputs": [{"id": "bytes", "index": "uint32"}],
                                                    "values": "list<float64>", "note": "string?"}})
    rec = {"version": 3, "inputs": [{"id": b"\x01\x02", "index": 7}, {"id": b"", "index": 0}],
           "values": [1.5, -2.0], "note": None}
    ours = FORMATS["protobuf"].encoder(schema)(rec)
    theirs = ref(version=3, inputs=[ref.In(id=b"\x01\x02", index=7), ref.In()], values=[1.5, -2.0])
    assert ours == theirs.SerializeToString()
    rec["note"] = ""
    assert FORMATS["protobuf"].encoder(schema)(rec) == ref(version=3, inputs=[ref.In(id=b"\x01\x02", index=7),
                                                                              ref.In()], values=[1.5, -2.0],
                                                           note="").SerializeToString()
    assert FORMATS["protobuf"].decoder(schema)(ours)["note"] is None


def test_protobuf_refuses_fields_whose_json_names_collide() -> None:
    """protoc and the runtime refuse two fields whose lowerCamelCase names are one (d and d_, a_b and aB):
    the ConfigError YAML gives, naming the schema field, when the format is built (found by the generated
    schemas), not the runtime's TypeError; the other formats take the schema."""
    for spec, where in (({"d": "int32", "d_": "int32"}, "d_"), ({"r": {"a_b": "int32", "aB": "bool"}}, "r.aB"),
                        ({"x": [{"_x": "string", "X": "string"}]}, "x.X")):
        with pytest.raises(ConfigError, match="has no protobuf form") as info:
            Serialize("protobuf", schema=parse_schema(spec))
        assert info.value.path == f"serialize.schema.{where}"
        Serialize("avro", schema=parse_schema(spec))
    Serialize("protobuf", schema=parse_schema({"ab": "int32", "a_b": "int32", "a": "int32", "A": "int32"}))


def test_protobuf_from_a_descriptor_set_and_a_generated_class(tmp_path, monkeypatch) -> None:
    import sys
    import types

    from google.protobuf import descriptor_pb2

    ref, file_proto = _reference_protobuf_class()
    fds = descriptor_pb2.FileDescriptorSet(file=[file_proto])
    path = tmp_path / "ref.desc"
    path.write_bytes(fds.SerializeToString())
    rec = {"version": 1, "inputs": [{"id": b"a", "index": 2}], "values": [0.5], "note": "hi"}
    module = types.ModuleType("ref_pb2")
    module.Tx = ref
    monkeypatch.setitem(sys.modules, "ref_pb2", module)
    for spec in (str(path), f"{path}#ref.Tx", "ref_pb2:Tx"):
        ser = Serialize("protobuf", schema=spec)
        payload = ser(Batch([rec])).values[0]
        assert payload == ref(**{**rec, "inputs": [ref.In(id=b"a", index=2)]}).SerializeToString()
        assert Deserialize("protobuf", schema=spec)(Batch([payload])).values == [rec]
    # the same descriptor drives the other formats too
    assert Deserialize("msgpack", schema=str(path))(Batch([msgpack.packb(rec)])).values == [rec]
    with pytest.raises(SchemaError, match="cannot read"):
        resolve_schema(str(tmp_path / "ref.proto"))  # no such file


def test_protobuf_framing_and_postcard_share_one_leb128() -> None:
    """A framed protobuf message's lengths and postcard's varints are the same LEB128 (``codecs/varints.py``):
    a record of 300 bytes is framed as ``0a ac 02``; a message cut inside that length is refused as protobuf's."""
    schema = parse_schema({"blob": "bytes"})
    framed = FORMATS["protobuf"].encoder(schema, framed=True)([{"blob": b"x" * 297}])
    assert framed[:3] == b"\x0a\xac\x02" and len(framed) == 303
    assert FORMATS["postcard"].encoder(parse_schema({"n": "uint32"}))({"n": 300}) == b"\xac\x02"
    decode = FORMATS["protobuf"].decoder(schema, framed=True)
    assert decode(framed) == [{"blob": b"x" * 297}]
    with pytest.raises(StageError, match="truncated: the message ends inside a varint") as info:
        decode(framed[:2])
    assert info.value.operator == "protobuf"


def test_avro_bytes_equal_fastavro_and_confluent_framing() -> None:
    import fastavro

    ds = DATASETS["transaction"]
    avsc = {"type": "record", "name": "Tx", "fields": [
        {"name": "version", "type": "int"},
        {"name": "inputs", "type": {"type": "array", "items": {"type": "record", "name": "In", "fields": [
            {"name": "previous_outpoint", "type": {"type": "record", "name": "Out", "fields": [
                {"name": "transaction_id", "type": {"type": "fixed", "name": "Id", "size": 32}},
                {"name": "index", "type": "long"}]}},
            {"name": "signature_script", "type": "bytes"}, {"name": "sequence", "type": "long"},
            {"name": "sig_op_count", "type": "int"}]}}},
        {"name": "outputs", "type": {"type": "array", "items": {"type": "record", "name": "O", "fields": [
            {"name": "value", "type": "long"},
            {"name": "script_public_key", "type": {"type": "record", "name": "S", "fields": [
                {"name": "version", "type": "int"}, {"name": "script", "type": "bytes"}]}}]}}},
        {"name": "lock_time", "type": "long"}, {"name": "subnetwork_id", "type": {"type": "fixed", "name": "N",
                                                                                   "size": 20}},
        {"name": "gas", "type": "long"}, {"name": "payload", "type": "bytes"}]}
    parsed = fastavro.parse_schema(avsc)
    for r in ds.sample(5):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, r)
        assert FORMATS["avro"].encoder(ds.schema)(r) == buf.getvalue()
    point = DATASETS["point"].schema
    framed = FORMATS["avro"].encoder(point, schema_id=42)({"x": 1, "y": -2})
    assert framed == b"\x00" + (42).to_bytes(4, "big") + b"\x02\x03"
    assert FORMATS["avro"].decoder(point, schema_id=42)(framed) == {"x": 1, "y": -2}
    with pytest.raises(StageError, match="schema id 42, expected 7"):
        FORMATS["avro"].decoder(point, schema_id=7)(framed)


def test_avsc_file_is_a_schema_for_every_format(tmp_path) -> None:
    avsc = {"type": "record", "name": "P", "fields": [{"name": "x", "type": "int"},
                                                      {"name": "tag", "type": ["null", "string"]}]}
    (tmp_path / "p.avsc").write_text(json.dumps(avsc))
    s = resolve_schema(str(tmp_path / "p.avsc"))
    assert [str(f.type) for f in s.fields] == ["int32", "string?"]
    for fmt in ("avro", "bincode", "protobuf", "msgpack"):
        b = Serialize(fmt, schema=str(tmp_path / "p.avsc"))(Batch([{"x": 5, "tag": None}]))
        assert Deserialize(fmt, schema=str(tmp_path / "p.avsc"))(b).values == [{"x": 5, "tag": None}]
    # an .avsc gives protobuf the class wirepipe builds: its records are checked as a typed schema's are
    # (the runtime alone would write True as 1 and None as unset)
    out = Serialize("protobuf", schema=str(tmp_path / "p.avsc"))(Batch([{"x": True, "tag": None}, {"x": None}]))
    assert out.values == [] and [r.error for r in out.rejected] == ["x: expected int32, got bool True",
                                                                    "x: null but int32 is not optional"]


def test_avsc_field_with_a_default_may_be_left_out(tmp_path) -> None:
    """fastavro writes an .avsc field's default for a record that leaves the field out: the check
    before it takes that (a nested record's too); a field without a default is still required."""
    avsc = {"type": "record", "name": "P", "fields": [
        {"name": "x", "type": "int"}, {"name": "n", "type": "long", "default": 7},
        {"name": "in", "type": {"type": "record", "name": "In", "fields": [
            {"name": "flag", "type": "boolean", "default": False}, {"name": "k", "type": "int"}]}}]}
    (tmp_path / "p.avsc").write_text(json.dumps(avsc))
    spec = str(tmp_path / "p.avsc")
    b = Serialize("avro", schema=spec)(Batch([{"x": 1, "in": {"k": 2}}, {"n": 1, "in": {"k": 2}},
                                              {"x": 1, "in": {"flag": True}}]))
    assert Deserialize("avro", schema=spec)(b).values == [{"x": 1, "n": 7, "in": {"flag": False, "k": 2}}]
    # the reason is schema.check's, which knows no .avsc defaults: the third names n, not in.k
    assert [r.error for r in b.rejected] == ["x: missing (expected int32)", "n: missing (expected int64)"]


def test_bson_bytes_equal_pymongo_and_the_spec() -> None:
    import bson

    assert FORMATS["bson"].encoder()({"x": 1, "y": 2}) == bytes.fromhex("13000000107800010000001079000200000000")
    for name in ("transaction", "block", "feed"):
        for r in DATASETS[name].sample(3):
            assert FORMATS["bson"].encoder()(r) == bson.encode(r)


def test_typed_bson_refuses_what_does_not_fit_with_the_path() -> None:
    """BSON writes any value as it is (a str where the schema has bytes, 2**40 in an int32): with a
    schema each record is checked before it is written, as avro and protobuf check theirs."""
    schema = parse_schema({"x": "int32", "blobs": "list<bytes>"}, name="T")
    out = Serialize("bson", schema=schema)(Batch([{"x": 1, "blobs": [b"a"]}, {"x": 2**40, "blobs": []},
                                                 {"x": 1, "blobs": [b"a", "text"]}, {"x": True, "blobs": []}]))
    assert len(out.values) == 1
    assert [r.error for r in out.rejected] == ["x: 1099511627776 is out of range for int32 (-2147483648..2147483647)",
                                               "blobs[1]: expected bytes, got str 'text'",
                                               "x: expected int32, got bool True"]


@pytest.mark.parametrize("name", list(DATASETS))
@pytest.mark.parametrize("fmt", ["msgpack", "json"])
def test_msgspec_engine_writes_the_untyped_bytes(fmt: str, name: str) -> None:
    ds = DATASETS[name]
    records = _sample(name, seed=3)
    typed, plain = FORMATS[fmt].encoder(ds.schema), FORMATS[fmt].encoder()
    assert [typed(r) for r in records] == [plain(r) for r in records]
    # and each engine reads the other's payloads
    assert [FORMATS[fmt].decoder(ds.schema)(plain(r)) for r in records] == records


@pytest.mark.parametrize("name", list(DATASETS))
@pytest.mark.parametrize("fmt", ["msgpack", "json"])
def test_typed_serialize_batches_write_the_untyped_bytes(fmt: str, name: str) -> None:
    """The operator's batch encoder (one reused buffer for large records) writes what the untyped one does."""
    from wirepipe.codecs.msgspec_engine import LARGE_PAYLOAD

    records = DATASETS[name].sample(1 if name == "large_vectors" else 20, seed=5)
    typed = Serialize(fmt, schema=name)(Batch(list(records)))
    plain = Serialize(fmt)(Batch(list(records)))
    assert typed.values == plain.values and not typed.rejected
    assert typed.headers == plain.headers | {"Wirepipe-Schema": schema_fingerprint(DATASETS[name].schema)}
    if name == "block":  # the buffered way ran: a block record is past the first buffer
        assert len(plain.values[0]) >= LARGE_PAYLOAD


@pytest.mark.parametrize("fmt", ["msgpack", "json"])
def test_typed_batch_of_mixed_sizes_writes_the_untyped_bytes(fmt: str) -> None:
    """The first record picks the way (buffered or not); either way every record's bytes are the untyped ones."""
    s = parse_schema({"s": "string", "b": "bytes?", "n": "int64"})
    small = [{"s": "a", "b": None, "n": 1}, {"s": "é", "b": b"\x00", "n": -2}]
    large = [{"s": "x" * 3000, "b": bytes(range(256)) * 8, "n": 2**40}, {"s": "y" * 700, "n": 0}]
    for records in (small + large, large + small, [large[0], small[0], large[1], small[1]]):
        typed = Serialize(fmt, schema=s)(Batch(list(records)))
        assert typed.values == Serialize(fmt)(Batch(list(records))).values
        assert Deserialize(fmt, schema=s)(typed).values == records


@pytest.mark.parametrize("fmt", ["msgpack", "json"])
def test_typed_batch_encoder_rejects_only_the_record_it_cannot_write(fmt: str) -> None:
    records = DATASETS["block"].sample(3, seed=6)
    bad = {**records[1], "receipts": [object()]}
    b = Serialize(fmt, schema="block")(Batch([records[0], bad, records[2]]))
    assert b.values == Serialize(fmt)(Batch([records[0], records[2]])).values
    assert len(b.rejected) == 1 and b.rejected[0].value is bad and "object" in b.rejected[0].error


@pytest.mark.parametrize("fmt", ["msgpack", "json"])
def test_typed_decode_rejects_a_nested_misfit_with_its_path(fmt: str) -> None:
    """Validation holds on large records: a short asset id or an int among the ids is refused, the rest kept."""
    records = DATASETS["block"].sample(3, seed=7)
    short_asset = {**records[1], "assets": [records[1]["assets"][0], b"x" * 31]}
    int_id = {**records[2], "ids": ["0x1", "0x2", 3]}
    b = Deserialize(fmt, schema="block")(Serialize(fmt)(Batch([records[0], short_asset, int_id])))
    assert b.values == [records[0]]
    assert "32" in b.rejected[0].error and "$.assets[1]" in b.rejected[0].error
    assert "`str`, got `int`" in b.rejected[1].error and "$.ids[2]" in b.rejected[1].error


def test_msgspec_json_floats_differ_only_in_exponent_spelling() -> None:
    """Known difference: Python writes 1e+16, msgspec 1e16 (same number, valid JSON both)."""
    s = parse_schema({"v": "float64"})
    typed, plain = FORMATS["json"].encoder(s), FORMATS["json"].encoder()
    assert typed({"v": 0.25}) == plain({"v": 0.25})
    assert typed({"v": 1e16}) != plain({"v": 1e16})
    assert FORMATS["json"].decoder(s)(plain({"v": 1e16})) == {"v": 1e16}


# --- misfits rejected per record with the field path -------------------------------------------------


@pytest.mark.parametrize("fmt", TYPED)
def test_value_that_does_not_fit_is_rejected_with_its_field_path(fmt: str) -> None:
    s = DATASETS["transaction"].schema
    good = DATASETS["transaction"].sample(3)
    bad = {**good[1], "inputs": [{**good[1]["inputs"][0], "sig_op_count": "one"}]}
    b = Serialize(fmt, schema=s)(Batch([good[0], bad, good[2]]))
    assert len(b.values) == 2 and len(b.rejected) == 1
    assert "inputs[0].sig_op_count: expected int32, got str" in b.rejected[0].error
    b = Serialize(fmt, schema=DATASETS["point"].schema)(Batch([{"x": 1, "y": 2}, {"x": 1, "y": 2**40}]))
    assert len(b.values) == 1 and "y: 1099511627776 is out of range for int32" in b.rejected[0].error


@pytest.mark.parametrize("fmt", TYPED)
def test_misfits_a_library_would_write_as_another_value_are_rejected(fmt: str) -> None:
    """fastavro writes 1.5 for an int as 1 and None or 1 for a bool as false/true; protobuf writes None
    (and an absent field) as its default and takes True for an int32, 1 for a bool, bytes for a string.
    Each is refused with its path, the good records kept."""
    s = parse_schema({"x": "int32", "n": "int64", "ok": "bool", "s": "string", "tags": "list<string>",
                      "r": {"v": "float64"}})
    good = {"x": 1, "n": 2, "ok": True, "s": "a", "tags": ["t"], "r": {"v": 0.5}}
    misfits = [({"x": 1.5}, "x: expected int32, got float"), ({"n": 2.5}, "n: expected int64, got float"),
               ({"x": True}, "x: expected int32, got bool"), ({"x": None}, "x: null but int32 is not optional"),
               ({"ok": 1}, "ok: expected bool, got int"), ({"ok": None}, "ok: null but bool is not optional"),
               ({"s": b"a"}, "s: expected string, got bytes"), ({"tags": {"t": 1}}, "tags: expected list<string>"),
               ({"r": {"v": None}}, "r.v: null but float64"), ({"r": None}, "r: null but {v: float64}")]
    bad = [{**good, **change} for change, _ in misfits] + [{k: v for k, v in good.items() if k != "s"}]
    b = Serialize(fmt, schema=s)(Batch([good, *bad, good]))
    assert Deserialize(fmt, schema=s)(b).values == [good, good]
    assert [r.value for r in b.rejected] == bad
    for r, why in zip(b.rejected, [w for _, w in misfits] + ["s: missing"], strict=True):
        assert why in r.error, (r.error, why)


@pytest.mark.parametrize("fmt", TYPED)
def test_nested_fixed_bytes_of_another_length_are_rejected_with_their_path(fmt: str) -> None:
    """bytes[N] at any depth: inside a list of records (transaction) and as list items (block)."""
    import copy

    good = DATASETS["transaction"].sample(3)
    short = copy.deepcopy(good[1])
    short["inputs"][-1]["previous_outpoint"]["transaction_id"] = b"x" * 31
    last = len(short["inputs"]) - 1
    b = Serialize(fmt, schema="transaction")(Batch([good[0], short, good[2]]))
    assert len(b.values) == 2 and [r.value for r in b.rejected] == [short]
    assert f"inputs[{last}].previous_outpoint.transaction_id: expected exactly 32 bytes, got 31" in b.rejected[0].error
    block = DATASETS["block"].sample(1)[0]
    b = Serialize(fmt, schema="block")(Batch([block, {**block, "assets": [*block["assets"], b"y" * 33]}]))
    assert len(b.values) == 1 and f"assets[{len(block['assets'])}]: expected exactly 32 bytes, got 33" in \
        b.rejected[0].error


def test_protobuf_decode_refuses_nested_fixed_bytes_of_another_length() -> None:
    """A peer's message whose bytes[N] field has another length (protobuf's bytes carry any) is refused
    with the field path, framed or not; the rest of the batch is decoded."""
    from wirepipe.operators.pack import Pack

    tight = DATASETS["transaction"].schema
    loose = parse_schema(json.loads(json.dumps(tight.to_spec()).replace("bytes[32]", "bytes")
                                    .replace("bytes[20]", "bytes")), name=tight.name)
    good = DATASETS["transaction"].sample(3)
    short = {**good[1], "inputs": [*good[1]["inputs"], {**good[1]["inputs"][0], "previous_outpoint": {
        "transaction_id": b"x" * 31, "index": 0}}]}
    records = [good[0], short, {**good[2], "subnetwork_id": b""}]
    sent = Serialize("protobuf", schema=loose)(Batch(list(records)))
    b = Deserialize("protobuf", schema=tight)(Batch(sent.values))  # a peer's messages: no Wirepipe-Schema header
    assert b.values == [good[0]]
    where = f"inputs[{len(short['inputs']) - 1}].previous_outpoint.transaction_id"
    assert [r.error for r in b.rejected] == [f"{where}: expected exactly 32 bytes, got 31",
                                             "subnetwork_id: expected exactly 20 bytes, got 0"]
    b = Serialize("protobuf", schema=loose)(Pack(2)(Batch(list(records))))
    b = Deserialize("protobuf", schema=tight, framed=True)(Batch(b.values))
    assert b.values == [] and [r.error for r in b.rejected] == [
        f"record 1: {where}: expected exactly 32 bytes, got 31", "record 0: subnetwork_id: expected exactly 20 bytes, got 0"]


def test_avro_range_check_takes_nulls_among_list_items() -> None:
    s = parse_schema({"b": "list<int32?>", "c": "list<list<uint32?>>?"})
    good = [{"b": [None, 1], "c": [[None, 2], []]}, {"b": [], "c": None}, {"b": [2**31 - 1, None], "c": [[0]]}]
    bad = [{"b": [None, 2**31], "c": None}, {"b": [1], "c": [[1], [None, -1]]}, {"b": [None, "1"], "c": None}]
    b = Serialize("avro", schema=s)(Batch(good + bad))
    assert Deserialize("avro", schema=s)(b).values == good
    assert [r.value for r in b.rejected] == bad
    assert [r.error.split(":")[0] for r in b.rejected] == ["b[1]", "c[1][1]", "b[1]"]


@pytest.mark.parametrize("fmt", [*TYPED, "msgpack", "json"])
def test_numpy_arrays_where_the_schema_has_lists(fmt: str) -> None:
    """An array where the schema says list<T> is that list: the same bytes as the list, as the untyped
    formats write it; an array value out of range for int32 is still refused by the formats that
    check on encode (msgpack/json check on decode)."""
    import numpy as np

    lists = DATASETS["large_vectors"].sample(1)[0]
    dtypes = {"ints": np.int32, "floats": np.float32, "uints": np.uint32, "doubles": np.float64}
    arrays = {k: np.array(v, dtype=dtypes[k]) for k, v in lists.items()}
    wide = {**arrays, "ints": np.array([1, 2**31], dtype=np.int64)}
    b = Serialize(fmt, schema="large_vectors")(Batch([arrays, wide]))
    if fmt in TYPED:
        assert [r.value for r in b.rejected] == [wide] and "ints" in b.rejected[0].error
    assert b.values[0] == Serialize(fmt, schema="large_vectors")(Batch([lists])).values[0]
    if fmt in ("avro", "msgpack", "json"):  # arrays in lists of optionals, of lists, in optional lists
        s = parse_schema({"xs": "list<float64?>", "m": "list<list<int64>>", "opt": "list<float32>?"})
        rec = {"xs": [0.5, 1.0], "m": [[1, 2], [3]], "opt": [0.25]}
        with_arrays = {"xs": np.array([0.5, 1.0]), "m": [np.array([1, 2]), np.array([3])],
                       "opt": np.array([0.25], dtype=np.float32)}
        b = Serialize(fmt, schema=s)(Batch([with_arrays, {**with_arrays, "m": np.array([[1, 2], [3, 4]])}]))
        assert not b.rejected
        assert b.values == Serialize(fmt, schema=s)(Batch([rec, {**rec, "m": [[1, 2], [3, 4]]}])).values


@pytest.mark.parametrize("fmt", ["msgpack", "json"])
def test_msgspec_engine_rejects_misfits_on_decode_with_the_path(fmt: str) -> None:
    s = DATASETS["point"].schema
    plain = FORMATS[fmt].encoder()
    b = Deserialize(fmt, schema=s)(Batch([plain({"x": 1, "y": 2}), plain({"x": 1, "y": "2"}),
                                          plain({"x": 2**40, "y": 0})]))
    assert b.values == [{"x": 1, "y": 2}]
    assert "$.y" in b.rejected[0].error and "$.x" in b.rejected[1].error


def test_toml_refuses_null_with_its_path() -> None:
    rec = DATASETS["feed"].sample(1)[0]
    assert rec["previous"] is None
    b = Serialize("toml")(Batch([rec]))
    assert b.values == [] and "previous: null has no TOML form" in b.rejected[0].error


# --- corrupt and truncated input: dead-lettered, never a crash -----------------------------------------


def _bad_payloads(good: bytes) -> list[bytes]:
    """Truncated, empty, foreign, scrambled, extended, and with one bit flipped (first byte, a third
    in, the middle, the last byte)."""
    flips = []
    for i in sorted({0, len(good) // 3, len(good) // 2, len(good) - 1}):
        flipped = bytearray(good)
        flipped[i] ^= 1 << (i % 8)
        flips.append(bytes(flipped))
    return [good[: len(good) // 2], good[:-1], b"", b"\x00", b"\xff" * 7, bytes(b ^ 0x5A for b in good),
            good + b"\x01\x02\x03", *flips]


# Every decoder: NEW's, and bson and flexbuffers given the schema. plain: one record a
# message; framed: pack -> a message of several records -> deserialize(framed: true); confluent: avro with
# schema_id (the magic byte and id before the record). flexbuffers x large_vectors is left out: the
# pure-Python reader takes seconds per payload (its round trip has its own test).
_DECODERS = [*zip(NEW, IDS, strict=True), (("bson", True), "bson+schema"), (("flexbuffers", True), "flexbuffers+schema")]
CORRUPT = [pytest.param(f, t, name, framing, id=f"{i}-{name}-{framing}",
                        marks=pytest.mark.slow if name == "large_vectors" else ())
           for (f, t), i in _DECODERS for name in DATASETS for framing in ("plain", "framed", "confluent")
           if (framing != "confluent" or f == "avro") and (f, name) != ("flexbuffers", "large_vectors")]


@pytest.mark.timeout(60)  # never hangs: a corrupt length or count is refused, not waited on or allocated
@pytest.mark.parametrize(("fmt", "typed", "name", "framing"), CORRUPT)
def test_corrupt_input_is_dead_lettered(fmt: str, typed: bool, name: str, framing: str) -> None:
    from wirepipe.operators.pack import Pack

    ds = DATASETS[name]
    schema = ds.schema if typed else None
    many = 3 if framing == "framed" and name != "large_vectors" else 1
    sample = ds.sample(30, seed=2) if name == "feed" else _sample(name, seed=2)
    records = [r for r in sample if fmt != "toml" or r.get("previous", 1) is not None][:many]
    options: dict[str, int] = {"schema_id": 7} if framing == "confluent" else {}
    batch = Batch(list(records))
    if framing == "framed":
        batch = Pack(len(records))(batch)
    good = Serialize(fmt, schema=schema, **options)(batch).values[0]
    payloads = [good, *_bad_payloads(good)]
    b = Deserialize(fmt, schema=schema, framed=framing == "framed", **options)(Batch(list(payloads)))
    expected = _expected(fmt, name, records, typed)
    assert b.values[0] == (expected if framing == "framed" else expected[0])
    # Formats without checksums may read a corrupted payload as some value; a truncated one
    # and an empty one are always refused, and every refusal names the stage and a reason.
    assert len(b.values) + len(b.rejected) == len(payloads)
    assert all(r.stage == "deserialize" and r.error for r in b.rejected)
    refused = {bytes(r.value) for r in b.rejected}
    if fmt == "protobuf":
        # protobuf has no end marker: a cut between fields is a valid (shorter) message, and b"" is
        # the message with every field at its default (none framed); a cut inside a field is refused.
        assert good[:-1] in refused
    elif fmt == "toml":
        # text cut at a line end is still a TOML document (b"" is the empty one): refused when not text
        assert b"\xff" * 7 in refused
    else:
        assert good[: len(good) // 2] in refused and b"" in refused


# --- codecs: snappy and the faster deflate libraries stay standard --------------------------------------


def test_deflate_family_bytes_are_standard() -> None:
    comp, decomp = deflate_library("compress"), deflate_library("decompress")
    assert (comp, decomp) == ("zlib_ng", "isal")  # both are in the [all] extra
    data = b"".join(msgpack.packb(r) for r in DATASETS["block"].sample(5))
    for codec, wbits in (("zlib", 15), ("gzip", 31), ("deflate", -15)):
        c = get_codec(codec)
        for level in ("fastest", "default", "best"):
            ours = c.compressor(level)(data)
            assert zlib.decompress(ours, wbits) == data  # stdlib zlib reads zlib-ng's output
        theirs = zlib.compressobj(6, zlib.DEFLATED, wbits)
        assert c.decompressor()(theirs.compress(data) + theirs.flush()) == data  # isal reads zlib's


def test_snappy_is_the_framing_format() -> None:
    import cramjam

    data = b"wirepipe " * 1000
    packed = get_codec("snappy").compressor()(data)
    assert packed.startswith(b"\xff\x06\x00\x00sNaPpY")
    assert bytes(cramjam.snappy.decompress(packed)) == data
    assert get_codec("snappy").decompressor()(bytes(cramjam.snappy.compress(data))) == data


def test_codecs_command_lists_every_format_with_its_library() -> None:
    out = wirepipe("codecs", env={"PATH": ""}, columns=200).stdout
    for name in [*FORMATS, *CODECS]:
        assert re.search(rf"^{re.escape(name)} ", out, re.M), name
    assert "application/x-protobuf" in out and "application/avro" in out and "snappy" in out
    from wirepipe.codecs.deflate import deflate_choice

    assert f"zlib, gzip, deflate run on: {deflate_choice()}" in " ".join(out.split())


def test_json_typed_bytes_tag_is_base64() -> None:
    s = parse_schema({"k": "bytes[3]"})
    payload = FORMATS["json"].encoder(s)({"k": b"abc"})
    assert payload == b'{"k":{"$base64":"' + base64.b64encode(b"abc") + b'"}}'
    b = Deserialize("json", schema=s)(Batch([payload, b'{"k":{"$base64":"YWJjZA=="}}']))
    assert b.values == [{"k": b"abc"}] and "exactly 3 bytes" in b.rejected[0].error
