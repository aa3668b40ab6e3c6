"""Schema identity on the wire: the canonical form and fingerprint (computed as the wire contract prints them),
what differs between two schemas (``wirepipe schema diff``), and a consumer that never reads a record with
another schema than the one it was written with: read by field name, or dead-lettered with the reason."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from tests.cli import invoke
from wirepipe.core.batch import Batch
from wirepipe.core.errors import ConfigError
from wirepipe.core.rejections import reason_of
from wirepipe.operators.compress import Compress
from wirepipe.operators.decode import DecodeParams
from wirepipe.operators.deserialize import Deserialize
from wirepipe.operators.operator import BuildContext
from wirepipe.operators.serialize import Serialize
from wirepipe.pipelines.pipeline import run_operators
from wirepipe.schema import canonical_form, parse_schema, schema_fingerprint
from wirepipe.schema.evolution import compare_schemas, reader_of

ROOT = Path(__file__).resolve().parent.parent
AB = {"a": "int64", "b": "int64"}
BA = {"b": "int64", "a": "int64"}
POSITIONAL = ["msgpack-array", "avro", "bincode", "bincode-varint", "postcard", "protobuf"]


def records(n: int) -> list[dict[str, int]]:
    return [{"a": i, "b": -i - 1} for i in range(n)]


# --- the canonical form and the fingerprint --------------------------------------------------------------


def test_the_canonical_form_keeps_the_order_and_only_what_the_bytes_depend_on() -> None:
    point = parse_schema({"name": "Point", "fields": {"x": "int32", "y": "int32", "label?": "string"}})
    assert canonical_form(point) == '{"x":int32,"y":int32,"label":string?}'
    # the record's name is not in it (no format writes it); `name?: T` is `T?`, `[T]` is `list<T>`
    assert canonical_form(parse_schema({"x": "int32", "y": "int32", "label": "string?"}, name="Other")) == \
        canonical_form(point)
    assert canonical_form(parse_schema({"xs": ["int32"]})) == canonical_form(parse_schema({"xs": "list<int32>"}))
    # the order is the identity: {a, b} and {b, a} differ, at any depth
    assert schema_fingerprint(parse_schema(AB)) != schema_fingerprint(parse_schema(BA))
    nested = {"at": {"lat": "float64", "lon": "float64"}}
    assert schema_fingerprint(parse_schema(nested)) != \
        schema_fingerprint(parse_schema({"at": {"lon": "float64", "lat": "float64"}}))
    everything = parse_schema({"k": "bytes[16]", "rows?": [{"v": "uint32", "tags": "list<string?>"}], "f": "float32"})
    assert canonical_form(everything) == '{"k":bytes[16],"rows":list<{"v":uint32,"tags":list<string?>}>?,"f":float32}'
    # field names only (msgpack-array's `schema: [a, b]`), and names that are not identifiers, as JSON strings
    assert canonical_form(["b", "a"]) == '{"b":any,"a":any}'
    assert canonical_form(["a b", 'q"', "é"]) == '{"a b":any,"q\\"":any,"é":any}'


def test_the_fingerprint_is_the_first_16_hex_digits_of_the_sha256_of_the_canonical_form() -> None:
    s = parse_schema(AB)
    assert schema_fingerprint(s) == hashlib.sha256(b'{"a":int64,"b":int64}').hexdigest()[:16] == "59fc81b9aa9d0fde"


def test_the_wire_contract_examples_compute_as_printed() -> None:
    """Every row of the wire contract's table (schema, canonical form, fingerprint) computed from its first cell."""
    import yaml

    page = (ROOT / "docs/concepts/wire-contract.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\{.*?\})` \| `(\{.*?\})` \| `([0-9a-f]{16})` \|$", page, re.M)
    assert len(rows) == 4, rows
    for spelled, canonical, fingerprint in rows:
        schema = parse_schema(yaml.safe_load(spelled))
        assert canonical_form(schema) == canonical
        assert hashlib.sha256(canonical.encode()).hexdigest()[:16] == fingerprint == schema_fingerprint(schema)


# --- comparing two schemas --------------------------------------------------------------------------------


def test_compare_names_every_change_and_whether_it_reads_by_name() -> None:
    writer = parse_schema({"id": "int64", "ts": "int32", "tags": ["string"], "at": {"lat": "float64", "lon": "float64"},
                           "n": "uint32", "key": "bytes[4]"})
    reader = parse_schema({"ts": "int64", "id": "int64", "at": {"lon": "float64", "lat": "float64"},
                           "n": "float64", "key": "bytes", "note?": "string"})
    diff = compare_schemas(writer, reader)
    assert [(c.path, c.kind, c.writer, c.reader) for c in diff.changes] == [
        ("id", "moved", "1st", "2nd"), ("ts", "retyped", "int32", "int64"), ("at.lat", "moved", "1st", "2nd"),
        ("n", "retyped", "uint32", "float64"), ("key", "retyped", "bytes[4]", "bytes"),
        ("note", "added", None, "string?"), ("tags", "removed", "list<string>", None)]
    assert diff.readable and not diff.identical
    back = compare_schemas(reader, writer)
    assert back.problems == (
        "ts: int64 in the writer schema, int32 here (no int64 reads as int32)",
        "tags: required here, absent from the writer schema",
        "n: float64 in the writer schema, uint32 here (no float64 reads as uint32)",
        "key: bytes in the writer schema, bytes[4] here (no bytes reads as bytes[4])")
    assert compare_schemas(parse_schema({"x": "int32?"}), parse_schema({"x": "int32"})).problems == (
        "x: int32? in the writer schema, int32 here (a null has nowhere to go)",)
    assert compare_schemas(writer, parse_schema(writer.to_spec(), name="Renamed")).identical
    names = compare_schemas(["a", "b"], parse_schema(AB))  # field names only: types not compared, not the same
    assert names.readable and not names.identical and names.summary() == "a any -> int64; b any -> int64"
    # A move names a field whose place changed: c (3rd, then 1st), not b, 2nd in both (before: "b moved 2nd 2nd").
    moved = compare_schemas(parse_schema({"a": "int64", "b": "int64", "c": "string"}),
                            parse_schema({"c": "string", "b": "int64"}))
    assert moved.summary() == "c moved (3rd in the writer schema, 1st here); a removed (int64)"


def test_reader_of_reads_fields_by_name_widens_and_fills_what_the_writer_lacks() -> None:
    writer = parse_schema({"a": "int32", "rows": [{"k": "string", "v": "int32"}], "gone": "bool"})
    reader = parse_schema({"rows": [{"v": "float64", "k": "string"}], "a": "int64", "new?": "string"})
    read = reader_of(writer, reader)
    assert read({"a": 1, "rows": [{"k": "x", "v": 2}], "gone": True}) == \
        {"rows": [{"v": 2.0, "k": "x"}], "a": 1, "new": None}
    assert type(read({"a": 1, "rows": [{"k": "x", "v": 2}], "gone": True})["rows"][0]["v"]) is float
    assert read([{"a": 1, "rows": [], "gone": False}]) == [{"rows": [], "a": 1, "new": None}]  # a framed message


# --- serialize stamps, deserialize compares ---------------------------------------------------------------


def test_serialize_stamps_the_fingerprint_and_drops_what_described_the_old_bytes() -> None:
    old = {"Content-Encoding": "zstd", "Wirepipe-Dictionary": "ab", "Wirepipe-Schema": "0" * 16, "traceparent": "t"}
    typed = Serialize("avro", schema=AB)(Batch(records(2), headers=[dict(old), None]))
    fp = schema_fingerprint(parse_schema(AB))
    assert typed.headers == [{"traceparent": "t", "Content-Type": "application/avro", "Wirepipe-Schema": fp},
                             {"Content-Type": "application/avro", "Wirepipe-Schema": fp}]
    plain = Serialize("json")(Batch(records(1), headers=dict(old)))
    assert plain.headers == {"traceparent": "t", "Content-Type": "application/json"}
    # the schema a source attaches (generate's dataset) is stamped as the one given
    names = Serialize("msgpack-array")(Batch(records(1), schema=("a", "b")))
    assert names.headers == {"Content-Type": "application/vnd.wirepipe.msgpack-array",
                             "Wirepipe-Schema": schema_fingerprint(["a", "b"])}


@pytest.mark.parametrize("fmt", POSITIONAL)
def test_a_positional_format_never_reads_a_record_with_another_schema(fmt: str) -> None:
    sent = Serialize(fmt, schema=AB)(Batch(records(5)))
    refused = Deserialize(fmt, schema=BA)(Batch(list(sent.values), headers=sent.headers))
    assert refused.values == [] and len(refused.rejected) == 5
    reason = refused.rejected[0].error
    assert reason.startswith("written with schema 59fc81b9aa9d0fde, which this deserialize does not know: it reads "
                             "Record {b: int64, a: int64} (21a89305cde87adc)"), reason
    assert "writer_schemas" in reason
    assert reason_of(reason) == reason  # a run's summary groups rejections by it: nothing in it reads as a value
    read = Deserialize(fmt, schema=BA, writer_schemas=[AB])(Batch(list(sent.values), headers=sent.headers))
    assert read.values == [{"b": -i - 1, "a": i} for i in range(5)] and not read.rejected
    assert [list(r) for r in read.values] == [["b", "a"]] * 5  # the reader's order


FORMATS = [*POSITIONAL, "msgpack", "json", "cbor"]


@pytest.mark.parametrize("writer", FORMATS)
def test_a_record_of_another_format_is_never_decoded_as_this_one(writer: str) -> None:
    """The schema's fingerprint is the same in every format: the format is ``Content-Type``'s to say. Read as
    another format, msgpack-array's bytes gave avro and postcard 3 of 3 records of other values, without a word."""
    sent = Serialize(writer, schema=AB)(Batch(records(3)))
    for reader in FORMATS:
        if reader == writer:
            continue
        got = Deserialize(reader, schema=AB)(Batch(list(sent.values), headers=sent.headers))
        assert got.values == [] and len(got.rejected) == 3, (writer, reader, got.values)
        assert got.rejected[0].error.startswith(f"written as {writer} (Content-Type {sent.headers['Content-Type']}), "
                                                f"and this deserialize reads {reader}"), got.rejected[0].error
        assert reason_of(got.rejected[0].error) == got.rejected[0].error  # the summary shows it whole
    mixed = Batch([*sent.values, b"\x93\x01\x02"], headers=[*[sent.headers] * 3, {"Content-Type": "text/plain"}])
    got = Deserialize("avro", schema=AB)(mixed)  # a foreign Content-Type decodes as before: the last is avro's
    assert (len(got.values), len(got.rejected)) == (1 if writer != "avro" else 4, 3 if writer != "avro" else 0)


def test_a_pipeline_never_decodes_records_still_compressed() -> None:
    """A publisher that adds ``compress`` while its consumer has no ``decompress``: avro and postcard read 24 of 50
    deflate payloads as records of other values (26 rejected), protobuf all 50 zstd ones (it skips the frame's
    bytes as unknown fields), and the run went on."""
    from wirepipe.operators.decompress import Decompress
    from wirepipe.testing import TestingSink, TestingSource, run

    for fmt, codec in (("avro", "deflate"), ("postcard", "deflate"), ("protobuf", "zstd"), ("bincode", "zlib")):
        sent = run_operators([Serialize(fmt, schema=AB), Compress(codec)], Batch(records(50)))[0]
        sink = TestingSink()
        stats = run(TestingSource(sent.values, headers=sent.headers), [Deserialize(fmt, schema=AB)], sink)
        assert (sink.records, stats.rejected) == ([], 50), (fmt, codec, sink.records[:2])
        assert sink.rejects[0].error == (f"compressed with {codec} (Content-Encoding {codec}) and not decompressed: "
                                         "no decompress runs before this deserialize; put `decompress: {codec: auto}` "
                                         "before it (or decode: {chain: ...} with the codec)")
        sink = TestingSink()  # with a decompress before it, as always
        run(TestingSource(sent.values, headers=sent.headers), [Decompress("auto"), Deserialize(fmt, schema=AB)], sink)
        assert sink.records == records(50)
    plain = Serialize("bincode", schema=AB)(Batch(records(3)))  # identity, or a foreign encoding: as before
    for encoding in ("identity", "x-custom"):
        sink = TestingSink()
        run(TestingSource(plain.values, headers={**plain.headers, "Content-Encoding": encoding}),
            [Deserialize("bincode", schema=AB)], sink)
        assert sink.records == records(3), encoding


def test_a_decompress_given_a_codec_never_passes_on_another_codecs_bytes() -> None:
    """``decompress: {codec: identity}`` (or another codec) in front of a deserialize: a record another codec
    compressed went on still compressed, and avro read deflate payloads as records of other values."""
    from wirepipe.operators.decompress import Decompress
    from wirepipe.testing import TestingSink, TestingSource, run

    sent = run_operators([Serialize("avro", schema=AB), Compress("deflate")], Batch(records(50)))[0]
    for codec in ("identity", "zstd"):
        sink = TestingSink()
        stats = run(TestingSource(sent.values, headers=sent.headers), [Decompress(codec), Deserialize("avro", schema=AB)],
                    sink)
        name = Decompress(codec).name
        assert (sink.records, stats.rejected) == ([], 50), (codec, sink.records[:2])
        assert sink.rejects[0].error == (f"compressed with deflate (Content-Encoding deflate), and this decompress reads "
                                         f"{name}: codec: auto decompresses each message by its Content-Encoding")
    plain = Serialize("avro", schema=AB)(Batch(records(3)))  # its own encoding, none, or a foreign one: as before
    for headers in (plain.headers, {**plain.headers, "Content-Encoding": "identity"},
                    {**plain.headers, "Content-Encoding": "x-custom"}):
        sink = TestingSink()
        run(TestingSource(plain.values, headers=headers), [Decompress("identity"), Deserialize("avro", schema=AB)], sink)
        assert sink.records == records(3), headers


def test_a_relay_that_decompresses_sends_bytes_that_say_they_are_plain() -> None:
    """``source -> decompress -> sink``: the decompressed bytes kept ``Content-Encoding: deflate``, so every
    consumer downstream refused them (still compressed) or failed to decompress them again."""
    from wirepipe.operators.decompress import Decompress
    from wirepipe.testing import TestingSink, TestingSource, run

    sent = run_operators([Serialize("avro", schema=AB), Compress("deflate")], Batch(records(5)))[0]
    per_record = [{**sent.headers, "traceparent": f"00-{i}"} for i in range(5)]
    for headers in (sent.headers, per_record):
        relayed = TestingSink()
        run(TestingSource(sent.values, headers=headers), [Decompress("auto")], relayed)
        assert [h.get("Content-Encoding") for h in relayed.headers] == [None] * 5
        assert all(h["Content-Type"] == sent.headers["Content-Type"] for h in relayed.headers)
        if headers is per_record:
            assert [h["traceparent"] for h in relayed.headers] == [f"00-{i}" for i in range(5)]
        consumed = TestingSink()
        run(TestingSource(relayed.records, headers=relayed.headers), [Deserialize("avro", schema=AB)], consumed)
        assert consumed.records == records(5) and consumed.rejects == []
    assert sent.headers["Content-Encoding"] == "deflate"  # the input's headers are not changed in place
    kept = TestingSink()  # a deserialize after it replaces the bytes: their headers are left as they came
    run(TestingSource(sent.values, headers=per_record), [Decompress("auto"), Deserialize("avro", schema=AB)], kept)
    assert [h["Content-Encoding"] for h in kept.headers] == ["deflate"] * 5


@dataclass
class Swapped:
    b: int
    a: int


def test_framed_messages_and_typed_records_are_read_by_name_too() -> None:
    from wirepipe.operators.pack import Pack

    for fmt in ("bincode", "avro", "protobuf"):
        sent = Serialize(fmt, schema=AB)(Pack(2)(Batch(records(4))))
        got = Deserialize(fmt, schema=BA, framed=True, writer_schemas=[AB])(sent)
        assert got.values == [[{"b": -1, "a": 0}, {"b": -2, "a": 1}], [{"b": -3, "a": 2}, {"b": -4, "a": 3}]], fmt
    sent = Serialize("msgpack-array", schema=AB)(Batch(records(2)))  # a class's field order: a schema of names
    got = Deserialize("msgpack-array", schema=Swapped, writer_schemas=[AB])(sent)
    assert got.values == [Swapped(b=-1, a=0), Swapped(b=-2, a=1)]


def test_a_writer_schema_the_reader_cannot_read_by_name_is_refused_naming_the_fields() -> None:
    writer = {"a": "int64", "b": "string"}
    sent = Serialize("bincode", schema=writer)(Batch([{"a": 1, "b": "x"}]))
    got = Deserialize("bincode", schema={"a": "int32", "c": "bool"}, writer_schemas=[writer])(sent)
    assert got.values == [] and got.rejected[0].error == (
        "written with schema {} (Record {{a: int64, b: string}}), read here as {} (Record {{a: int32, c: bool}}), "
        "and its records cannot be read by field name: a: int64 in the writer schema, int32 here (no int64 reads "
        "as int32); c: required here, absent from the writer schema").format(
        schema_fingerprint(parse_schema(writer)), schema_fingerprint(parse_schema({"a": "int32", "c": "bool"})))


def test_records_without_the_header_decode_as_before_unless_it_is_required() -> None:
    sent = Serialize("bincode", schema=AB)(Batch(records(3)))
    bare = Batch(list(sent.values))  # a publisher that does not stamp: read positionally, as it always was
    assert Deserialize("bincode", schema=AB)(bare).values == records(3)
    strict = Deserialize("bincode", schema=AB, schema_header="required")
    refused = strict(Batch(list(sent.values)))
    assert refused.values == [] and refused.rejected[0].error == (
        "no Wirepipe-Schema header (a publisher that does not stamp its schema), and schema_header: required "
        "refuses it (this deserialize reads Record {a: int64, b: int64}, 59fc81b9aa9d0fde)")
    assert strict(Batch(list(sent.values), headers=sent.headers)).values == records(3)


def test_a_format_that_names_its_fields_reads_any_schema_by_name() -> None:
    for fmt in ("msgpack", "json"):
        sent = Serialize(fmt, schema=AB)(Batch(records(2)))
        assert Deserialize(fmt, schema=BA)(sent).values == records(2)


def test_a_mixed_batch_picks_once_per_schema_and_counts_exactly() -> None:
    """Per-record headers as a NATS source gives them: 6 of the reader's own schema, 5 of a known writer, 4 of
    an unknown one, 3 without a header; the batch of only its own goes the whole-column way, picking nothing."""
    own = Serialize("bincode", schema=BA)(Batch([{"b": i, "a": i} for i in range(6)]))
    known = Serialize("bincode", schema=AB)(Batch(records(5)))
    unknown = Serialize("bincode", schema={"a": "int64", "c": "int64"})(Batch([{"a": 1, "c": 2}] * 4))
    bare = Serialize("bincode", schema=AB)(Batch(records(3)))
    values = [*own.values, *known.values, *unknown.values, *bare.values]
    headers = [dict(own.headers)] * 6 + [dict(known.headers)] * 5 + [dict(unknown.headers)] * 4 + [None] * 3
    decode = Deserialize("bincode", schema=BA, writer_schemas=[AB])
    alone = decode(Batch(list(values[:6]), headers=headers[:6]))
    assert len(alone.values) == 6 and decode._by_schema == {}
    got = decode(Batch(values, headers=headers))
    assert got.values[:6] == [{"b": i, "a": i} for i in range(6)]
    assert got.values[6:11] == [{"b": -i - 1, "a": i} for i in range(5)]
    assert len(got.values) == 6 + 5 + 3 and len(got.rejected) == 4  # the 3 bare ones read as BA: today's behaviour
    assert len(decode._by_schema) == 4  # one pick per distinct value: own, known, unknown, none


def test_auto_compares_by_content_type_and_schema() -> None:
    sent = [Serialize(fmt, schema=AB)(Batch(records(2))) for fmt in ("avro", "json", "bincode")]
    values = [v for b in sent for v in b.values]
    headers = [dict(b.headers) for b in sent for _ in b.values]
    got = Deserialize("auto", schema=BA)(Batch(values, headers=headers))
    assert got.values == records(2)  # json names its fields: read by name
    assert [r.value for r in got.rejected] == [*sent[0].values, *sent[2].values]
    got = Deserialize("auto", schema=BA, writer_schemas=[AB])(Batch(list(values), headers=headers))
    assert got.values == [{"b": -1, "a": 0}, {"b": -2, "a": 1}, *records(2), {"b": -1, "a": 0}, {"b": -2, "a": 1}]


def test_decode_and_a_compressed_chain_compare_too() -> None:
    ops = DecodeParams(chain="bincode|zstd", schema=BA, writer_schemas=[AB]).build(BuildContext())
    sent = run_operators([Serialize("bincode", schema=AB), Compress("zstd")], Batch(records(3)))[0]
    assert run_operators(ops, sent)[0].values == [{"b": -i - 1, "a": i} for i in range(3)]
    sent = run_operators([Serialize("bincode", schema=AB), Compress("zstd")], Batch(records(3)))[0]
    refused = run_operators(DecodeParams(chain="bincode|zstd", schema=BA).build(BuildContext()), sent)[0]
    assert len(refused.rejected) == 3 and refused.rejected[0].stage == "deserialize"


def test_the_options_are_checked_as_yaml_is() -> None:
    with pytest.raises(ConfigError, match="set `schema:` too"):
        Deserialize("json", writer_schemas=[AB])
    with pytest.raises(ConfigError, match="schema_header"):
        Deserialize("avro", schema=AB, schema_header="always")
    with pytest.raises(ConfigError, match=r"deserialize.writer_schemas\[1\].a: unknown type 'int99'"):
        Deserialize("avro", schema=AB, writer_schemas=[BA, {"a": "int99"}])
    assert Deserialize("avro", schema=AB, writer_schemas=[BA], schema_header="required").params == {
        "format": "avro", "schema": AB, "writer_schemas": [BA], "schema_header": "required"}


# --- one field order everywhere ---------------------------------------------------------------------------


def test_metrics_and_capture_metadata_keep_a_schemas_field_order(tmp_path: Path) -> None:
    """A stage's params, the run's config and a capture's metadata are stored as written: a schema pasted back
    from them lists its fields in the records' order, not alphabetically."""
    import asyncio
    import json

    import pyarrow.parquet as pq

    from wirepipe.connectors.capture_format import capture_files
    from wirepipe.connectors.capture_sink import CaptureSink
    from wirepipe.connectors.null import NullSink
    from wirepipe.pipelines.pipeline import Pipeline
    from wirepipe.testing import TestingSource

    schema = {"ts": "int64", "id": "int64", "a": "string"}
    config = {"name": "order", "operators": [{"serialize": {"format": "avro", "schema": schema}}]}
    Pipeline(TestingSource([[{"ts": 1, "id": 2, "a": "x"}]]), [Serialize("avro", schema=schema)], NullSink(),
             name="order", metrics=tmp_path / "m.parquet", config=config).run()
    table = pq.read_table(tmp_path / "m.parquet")
    params = [json.loads(p) for p, stage in zip(table.column("params").to_pylist(), table.column("stage").to_pylist(),
                                                 strict=True) if stage == "serialize"]
    assert list(params[0]["schema"]) == ["ts", "id", "a"]
    stored = json.loads(table.schema.metadata[b"wirepipe.config"])
    assert list(stored["operators"][0]["serialize"]["schema"]) == ["ts", "id", "a"]

    sink = CaptureSink(tmp_path / "capture", metadata={"subject": "z", "schema": json.dumps(schema)})

    async def write() -> None:
        await sink.open()
        await sink.write(Batch([b"x"], headers={"Content-Type": "application/avro"}, meta={"seq": [0]}))
        await sink.close()

    asyncio.run(write())
    info = json.loads(pq.read_schema(capture_files(tmp_path / "capture")[0]).metadata[b"wirepipe.capture"])
    assert list(info["metadata"]) == ["subject", "schema"] and list(json.loads(info["metadata"]["schema"])) == \
        ["ts", "id", "a"]
    assert list(info) == ["format", "writer", "columns", "metadata"]


@pytest.mark.slow
def test_the_studys_snippet_lists_the_fields_in_the_records_order(tmp_path: Path) -> None:
    """``bench --input``'s snippet (the YAML a user pastes into a consumer) and ``schema infer`` agree on the order."""
    lines = "".join(f'{{"id": {i}, "ts": {1000 + i}, "user": "u{i % 7}", "action": "buy", "amount": 1.5}}\n'
                    for i in range(200))
    data = write(tmp_path / "events.jsonl", lines)
    out = invoke("bench", "--input", data, "--quick", "--transport", "none", "--format", "avro", "--codec", "none",
                 "--repetitions", "5", "--iterations", "1", "--yes", "--out", tmp_path / "res")
    assert out.returncode == 0, out.output
    snippet = out.stdout[out.stdout.index("# publisher"):out.stdout.index("# consumer")]
    assert re.findall(r"^ +(\w+): (?:int64|string|float64)$", snippet, re.M) == ["id", "ts", "user", "action", "amount"]
    inferred = invoke("schema", "infer", data)
    assert re.findall(r"^  (\w+): ", inferred.stdout, re.M) == ["id", "ts", "user", "action", "amount"]


# --- wirepipe schema diff ---------------------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_schema_diff_says_what_differs_and_exits_1(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", "name: Event\nfields: {id: int64, ts: int32, tags: [string]}\n")
    b = write(tmp_path / "b.yaml", 'name: Event\nfields: {ts: int64, id: int64, "note?": string}\n')
    out = invoke("schema", "diff", a, b, columns=200)
    assert out.returncode == 1, out.output
    lines = out.stdout.splitlines()
    assert lines[0] == f"A: {a}: Event {{id: int64, ts: int32, tags: list<string>}}  (fingerprint " \
                       f"{schema_fingerprint(parse_schema({'id': 'int64', 'ts': 'int32', 'tags': ['string']}))})"
    assert [line.split() for line in lines[5:9]] == [["id", "moved", "1st", "2nd"], ["ts", "retyped", "int32", "int64"],
                                                      ["note", "added", "string?"], ["tags", "removed", "list<string>"]]
    assert lines[-2:] == ["B reads records written with A by field name: yes",
                          "A reads records written with B by field name: no: ts: int64 in the writer schema, int32 "
                          "here (no int64 reads as int32); tags: required here, absent from the writer schema"]


def test_schema_diff_of_identical_schemas_exits_0_and_takes_datasets_and_pipelines(tmp_path: Path) -> None:
    write(tmp_path / "point.yaml", "name: Point\nfields: {x: int32, y: int32}\n")
    pipeline = write(tmp_path / "relay.yaml", f"""name: relay
source: {{type: nats, url: "${{NATS_URL}}", subject: in}}
operators:
  - decode: {{chain: "bincode|zstd", schema: {tmp_path / 'point.yaml'}}}
  - encode: {{chain: avro, schema: {{y: int32, x: int32}}}}
sink: {{type: nats, url: "${{NATS_URL}}", subject: out}}
""")
    same = invoke("schema", "diff", "point", f"{pipeline}#deserialize")
    assert same.returncode == 0, same.output
    assert same.stdout.splitlines()[1].startswith(f"B: {pipeline} (operators[0].decode): Point {{x: int32, y: int32}}")
    assert same.stdout.splitlines()[-1] == "identical: the same fields in the same order, of the same types"
    assert invoke("schema", "diff", "point", f"{pipeline}#serialize").returncode == 1
    both = invoke("schema", "diff", "point", pipeline)
    assert both.returncode == 2 and "given 2 different schemas" in both.stderr and "#serialize" in both.stderr
    missing = invoke("schema", "diff", "point", tmp_path / "nope.yaml")
    assert missing.returncode == 2 and "nope.yaml" in missing.stderr and "Traceback" not in missing.output


# --- the property: a consumer's fields in any order, renamed: never a value under another field's name ---------

TYPED = [*POSITIONAL, "msgpack", "json", "bson", "flexbuffers"]
SCALARS = ["int64", "int64", "int32", "string", "float64", "bool"]


def _value(kind: str, field: int, record: int) -> Any:
    """A value of ``kind`` that no other field of the record holds (so a value under another name shows)."""
    number = field * 1000 + record
    return {"int64": -number - 1, "int32": number, "string": f"v{number}", "float64": number + 0.5,
            "bool": field % 2 == 0}[kind]


@st.composite
def writer_and_reader(draw: Any) -> tuple[dict[str, str], dict[str, str], bool]:
    """A writer's schema, and a reader's: the writer's fields (some of them) in any order, some renamed, some made
    optional; and whether the reader is told the writer's schema (``writer_schemas``)."""
    names = draw(st.lists(st.sampled_from("abcdefgh"), min_size=2, max_size=6, unique=True))
    writer = {name: draw(st.sampled_from(SCALARS)) for name in names}
    kept = draw(st.permutations(names).map(lambda p: p[:max(1, len(p) - draw(st.integers(0, 1)))]))
    reader: dict[str, str] = {}
    for i, name in enumerate(kept):
        renamed = draw(st.booleans()) and draw(st.booleans())  # a quarter of the fields
        optional = draw(st.booleans())
        reader[f"r{i}" if renamed else name] = writer[name] + ("?" if optional else "")
    return writer, reader, draw(st.booleans())


@pytest.mark.parametrize("fmt", TYPED)
@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(case=writer_and_reader())
def test_no_value_ever_lands_under_another_fields_name(fmt: str, case: tuple[dict[str, str], dict[str, str], bool]
                                                       ) -> None:
    writer, reader, told = case
    note(f"writer {writer}, reader {reader}, writer_schemas: {told}")
    kinds = list(writer.values())
    sent_records = [{name: _value(kind, f, r) for f, (name, kind) in enumerate(writer.items())} for r in range(3)]
    sent = Serialize(fmt, schema=writer)(Batch([dict(r) for r in sent_records]))
    assert not sent.rejected and len(kinds) == len(writer)
    got = Deserialize(fmt, schema=reader, writer_schemas=[writer] if told else [])(
        Batch(list(sent.values), headers=sent.headers))
    assert len(got.values) + len(got.rejected) == 3
    by_name = compare_schemas(parse_schema(writer), parse_schema(reader))
    refused = {id(r.value) for r in got.rejected}
    kept = [record for record, payload in zip(sent_records, sent.values, strict=True) if id(payload) not in refused]
    for value, written in zip(got.values, kept, strict=True):  # by name: what was written under it, or None
        for name in {*value, *reader}:  # (bson and flexbuffers, which do not check on decode, keep every field sent)
            assert value.get(name) == written.get(name), (name, value, written)
    for rejected in got.rejected:
        assert rejected.error, rejected
    if fmt in POSITIONAL:  # never decoded with the reader's schema: read by name when it can be, else refused
        readable = by_name.identical or (told and by_name.readable)
        assert (len(got.values), len(got.rejected)) == ((3, 0) if readable else (0, 3)), got.rejected[:1]
        if not readable:
            assert "written with schema" in got.rejected[0].error


# --- real processes over a real nats-server ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["msgpack-array", "avro", "bincode"])
def test_a_consumer_with_the_fields_in_another_order_reads_by_name_or_refuses_every_record(
        tmp_path: Path, nats_url: str, fmt: str) -> None:
    """The issue's case: a publisher with {a: int64, b: int64}, consumers with {b: int64, a: int64}, 3,000 records
    through JetStream, each end its own ``wirepipe run``. Told the publisher's schema, the consumer reads all
    3,000 by name; not told, it reads none and dead-letters all 3,000 with the reason (exit 3: every record
    rejected). Before the header, all 3,000 arrived with a and b swapped, and exit 0."""
    import orjson

    from tests.cli import wirepipe

    n = 3000
    write(tmp_path / "in.jsonl", "".join(f'{{"a": {i}, "b": {-i - 1}}}\n' for i in range(n)))
    stream = f"AB{POSITIONAL.index(fmt)}"
    publisher = {"name": "ab-publish", "source": {"type": "jsonl", "path": str(tmp_path / "in.jsonl"),
                                                  "batch_size": 500},
                 "operators": [{"serialize": {"format": fmt, "schema": AB}}, {"compress": {"codec": "zstd"}}],
                 "sink": {"type": "jetstream", "url": nats_url, "subject": "ab.one",
                          "stream": {"name": stream, "subjects": ["ab.>"]}}}
    write(tmp_path / "publish.yaml", orjson.dumps(publisher).decode())
    done = wirepipe("run", tmp_path / "publish.yaml", "--no-status")
    assert done.returncode == 0, done.stderr

    def consume(name: str, **deserialize: Any) -> tuple[Any, list[Any], list[Any]]:
        config = {"name": name, "source": {"type": "jetstream", "url": nats_url, "stream": stream, "durable": name,
                                           "count": n, "batch_size": 1000},
                  "operators": [{"decompress": {"codec": "auto"}},
                                {"deserialize": {"format": "auto", "schema": BA, **deserialize}}],
                  "sink": {"type": "jsonl", "path": str(tmp_path / f"{name}.jsonl")},
                  "dead_letter": {"type": "jsonl", "path": str(tmp_path / f"{name}.dead.jsonl")}}
        write(tmp_path / f"{name}.yaml", orjson.dumps(config).decode())
        proc = wirepipe("run", tmp_path / f"{name}.yaml", "--no-status")
        out, dead = (tmp_path / f"{name}.jsonl", tmp_path / f"{name}.dead.jsonl")
        return (proc, [orjson.loads(x) for x in out.read_bytes().splitlines()] if out.exists() else [],
                [orjson.loads(x) for x in dead.read_bytes().splitlines()] if dead.exists() else [])

    proc, got, dead = consume("told", writer_schemas=[AB])
    assert proc.returncode == 0, proc.stderr
    assert (len(got), len(dead)) == (n, 0)
    assert sorted(got, key=lambda r: r["a"]) == [{"b": -i - 1, "a": i} for i in range(n)]

    proc, got, dead = consume("not-told")
    assert proc.returncode == 3, proc.stderr  # every record rejected
    assert (len(got), len(dead)) == (0, n)
    reasons = {d["error"] for d in dead}
    assert reasons == {"written with schema 59fc81b9aa9d0fde, which this deserialize does not know: it reads Record "
                       "{b: int64, a: int64} (21a89305cde87adc), and " + fmt + " read with another schema than the one it "
                       "was written with puts values under other field names; list the publisher schema in "
                       "writer_schemas: to read its records by field name (wirepipe schema diff says what differs)"}
