"""The typed schema language: spellings, errors with field paths, files, Arrow, dataset schemas."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from tests.cli import invoke
from wirepipe.datasets import DATASETS
from wirepipe.schema import SchemaError, from_arrow, load_schema_file, parse_schema, with_defaults


def test_point_is_two_int32_as_in_the_point_table() -> None:
    s = DATASETS["point"].schema
    assert list(s) == ["x", "y"]
    assert [str(f.type) for f in s.fields] == ["int32", "int32"]
    assert s.fixed_width == 8


def test_every_spelling_parses_and_prints_back() -> None:
    spec = {
        "i": "int32", "l": "int64", "u": "uint32", "f": "float32", "d": "float64", "b": "bool", "s": "string",
        "raw": "bytes", "key": "bytes[32]", "xs": "list<float64>", "maybe": "string?", "ids": "list<bytes[8]>",
        "inner": {"a": "int32", "tags": "list<string>"},
        "rows": [{"k": "string", "v": "int64?"}],
        "opt?": {"z": "bool"},
    }
    s = parse_schema({"name": "Everything", "fields": spec})
    assert s.name == "Everything"
    assert str(s.fields[9].type) == "list<float64>"
    assert s.fields[10].type.optional and s.fields[14].type.optional
    assert s.fields[13].type.item.record.names == ("k", "v")
    # The spelling is stable: printing and parsing again gives the same schema.
    assert parse_schema(s.to_spec(), name="Everything") == s
    assert parse_schema(json.loads(json.dumps(s.to_document()))) == s


@pytest.mark.parametrize(("spec", "path", "words"), [
    ({"x": "int33"}, "x", "unknown type 'int33'"),
    ({"x": {"y": {"z": "float16"}}}, "x.y.z", "unknown type 'float16'"),
    ({"rows": [{"a": "bytes[0]"}]}, "rows[].a", "N >= 1"),
    ({"xs": ["int32", "int64"]}, "xs", "one item type"),
    ({"x": 5}, "x", "is not a type"),
    ({"bad-name": "int32"}, "bad-name", "is not a field name"),
    ({"inner": {}}, "inner", "at least one field"),
])
def test_bad_schema_names_the_field_path(spec: dict, path: str, words: str) -> None:
    with pytest.raises(SchemaError) as info:
        parse_schema(spec)
    assert info.value.path == path
    assert words in str(info.value)
    assert "allowed" in str(info.value) or words in ("N >= 1", "one item type", "is not a field name",
                                                      "at least one field")


def test_schema_files_yaml_and_json(tmp_path) -> None:
    doc = {"name": "Point", "fields": {"x": "int32", "y": "int32"}}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / "p.json").write_text(json.dumps(doc["fields"]))
    assert load_schema_file(tmp_path / "p.yaml") == DATASETS["point"].schema
    assert load_schema_file(tmp_path / "p.json").names == ("x", "y")
    (tmp_path / "bad.yaml").write_text("fields: {x: int32, y: [int32, int64]}\nname: B\n")
    with pytest.raises(SchemaError) as info:
        load_schema_file(tmp_path / "bad.yaml")
    assert info.value.path == "y" and "bad.yaml" in str(info.value)
    with pytest.raises(SchemaError, match="cannot read"):
        load_schema_file(tmp_path / "missing.yaml")


@pytest.mark.parametrize("name", list(DATASETS))
def test_dataset_schemas_convert_to_arrow_and_back(name: str) -> None:
    s = DATASETS[name].schema
    arrow = s.to_arrow()
    assert arrow.names == list(s)
    back = from_arrow(arrow, name=s.name)
    assert back == s  # nested records named as parse_schema names them (transaction's PreviousOutpoint)
    # Arrow itself accepts the dataset's records under that schema (types agree with the values).
    records = [with_defaults(s)(r) for r in DATASETS[name].sample(3 if name != "large_vectors" else 1)]
    assert pa.Table.from_pylist(records, schema=arrow).num_rows == len(records)


@pytest.mark.parametrize("name", list(DATASETS))
def test_dataset_records_fit_their_schema(name: str) -> None:
    ds = DATASETS[name]
    for r in ds.sample(20 if name != "large_vectors" else 1):
        assert ds.schema.check(r) is None


@pytest.mark.parametrize(("value", "where"), [
    ({"x": 1, "y": "2"}, "y: expected int32, got str"),
    ({"x": 1, "y": 2**31}, "y: 2147483648 is out of range for int32"),
    ({"x": 1}, "y: missing"),
    ({"x": 1, "y": 2, "z": 3}, "unknown field(s) z"),
    ({"x": None, "y": 2}, "x: null but int32 is not optional"),
])
def test_check_names_the_field(value: dict, where: str) -> None:
    assert where in DATASETS["point"].schema.check(value)


def test_check_reaches_into_lists_and_records() -> None:
    s = DATASETS["transaction"].schema
    tx = DATASETS["transaction"].sample(1)[0]
    tx["inputs"][0]["previous_outpoint"]["transaction_id"] = b"short"
    assert s.check(tx) == "inputs[0].previous_outpoint.transaction_id: expected exactly 32 bytes, got 5"


def test_arrow_types_without_equivalent_are_refused() -> None:
    with pytest.raises(SchemaError) as info:
        from_arrow(pa.schema([pa.field("m", pa.map_(pa.string(), pa.int32()))]))
    assert info.value.path == "m"


LOG_RECORDS = [
    {"ts": 1, "level": "info", "msg": "started", "ctx": {"host": "a", "pid": 7}, "tags": ["boot"]},
    {"ts": 2, "level": "error", "msg": "failed", "error": "disk full", "ctx": {"host": "a", "pid": None},
     "tags": []},
    {"ts": 3, "level": "info", "msg": None, "ctx": {"host": "b", "pid": 9}, "tags": ["x", "y"]},
]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_schema_infer_prints_a_schema_serialize_and_deserialize_take_as_it_is(suffix: str, tmp_path: Path) -> None:
    """`wirepipe schema infer` types every field of every record (one only in the second record too), marks
    `?` where a field is absent or null somewhere, and typed formats round-trip the file with it."""
    import pyarrow.parquet as pq

    from wirepipe import deserialize, serialize
    from wirepipe.testing import TestingSink, TestingSource, run

    data = tmp_path / f"app-log{suffix}"
    if suffix == ".jsonl":
        data.write_text("".join(json.dumps(r) + "\n" for r in LOG_RECORDS))
    else:
        pq.write_table(pa.Table.from_struct_array(pa.array(LOG_RECORDS)), data)
    out = invoke("schema", "infer", data)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"# inferred by `wirepipe schema infer` from 3 records of {data}\n")
    assert yaml.safe_load(out.stdout) == {"name": "AppLog", "fields": {
        "ts": "int64", "level": "string", "msg": "string?", "ctx": {"host": "string", "pid": "int64?"},
        "tags": "list<string>", "error": "string?"}}
    schema_file = tmp_path / "app-log.schema.yaml"
    schema_file.write_text(out.stdout)
    # msgpack-array is not here: its encoder takes every field by key, so a record without an optional field
    # is rejected (KeyError), with any schema; the typed-schema checks of that format are another change's.
    for fmt in ("bincode", "postcard", "avro", "protobuf", "msgpack", "json", "bson"):
        sink = TestingSink()
        stats = run(TestingSource(LOG_RECORDS),
                    [serialize(fmt, schema=str(schema_file)), deserialize(fmt, schema=str(schema_file))],
                    sink)
        assert stats.rejected == 0, (fmt, sink.rejects)
        full = [{k: r.get(k) for k in ("ts", "level", "msg", "ctx", "tags", "error")} for r in LOG_RECORDS]
        assert [{k: r.get(k) for k in full[0]} for r in sink.records] == full, fmt


def test_schema_infer_names_what_it_cannot_type(tmp_path: Path) -> None:
    data = tmp_path / "odd.jsonl"
    data.write_text('{"a": 1, "b": null}\n{"a": 2, "b": null}\n')
    out = invoke("schema", "infer", data)
    assert out.returncode == 2 and isinstance(out.exception, SystemExit)
    assert out.stderr.strip() == f"error: {data}: schema field b: null in every record: no type to infer; write it by hand"
    missing = invoke("schema", "infer", tmp_path / "no.jsonl")
    assert missing.returncode == 2 and "no such file" in missing.stderr
    endless = tmp_path / "zero.jsonl"
    endless.symlink_to("/dev/zero")  # one line without end: read up to the bound, not until killed for memory
    out = invoke("schema", "infer", endless)
    assert isinstance(out.exception, SystemExit) and out.returncode == 1, out.output
    assert out.stderr.strip() == f"error: {endless}: line 1 is longer than 64 MiB, the most a JSON line may be"
