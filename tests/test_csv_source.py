"""The ``csv`` source on real CSV files: pyarrow's streaming reader, typed by a schema or by inference, bad rows
dead-lettered with their row and reason; ``schema infer`` and ``bench --input`` on CSV; one answer everywhere to
which file types are read."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli import invoke
from wirepipe import ConfigError, WirepipeError, csv_source
from wirepipe.connectors.csv import CsvSource
from wirepipe.testing import TestingSink, run

WEATHER = ('station,temp,when,note,wet\n'
           'EWR,21.5,2013-01-01 05:00:00,"calm, clear",false\n'
           'JFK,,2013-01-01T06:00:00Z,"fog\nthen rain",True\n'
           'LGA,NA,2013-01-02,NA,1\n')


def write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.write_bytes(text.encode(encoding))
    return path


def read(source: CsvSource) -> tuple[list[Any], list[tuple[str, Any]], TestingSink]:
    sink = TestingSink()
    run(source, [], sink)
    return sink.records, [(r.error, r.value) for r in sink.rejects], sink


def test_quoted_commas_and_line_breaks_empty_values_and_inferred_types(tmp_path: Path) -> None:
    """Records in the file's column order; int64/float64/bool inferred, timestamps and dates as written, an empty
    or NA value null in a number column and text in a string column."""
    records, rejects, _ = read(csv_source(write(tmp_path / "weather.csv", WEATHER)))
    assert rejects == []
    assert records == [
        {"station": "EWR", "temp": 21.5, "when": "2013-01-01 05:00:00", "note": "calm, clear", "wet": False},
        {"station": "JFK", "temp": None, "when": "2013-01-01T06:00:00Z", "note": "fog\nthen rain", "wet": True},
        {"station": "LGA", "temp": None, "when": "2013-01-02", "note": "NA", "wet": True}]
    assert [list(r) for r in records] == [["station", "temp", "when", "note", "wet"]] * 3
    nulls, _, _ = read(csv_source(tmp_path / "weather.csv", strings_can_be_null=True))
    assert nulls[2]["note"] is None


def test_a_typed_schema_types_each_column_and_refuses_what_does_not_fit(tmp_path: Path) -> None:
    data = write(tmp_path / "obs.csv", "id,temp,code,ok\n"
                                       "1,1.5,abcd,true\n"
                                       "2,hot,abcd,false\n"      # row 3: not a float32
                                       "3,2.25,abc,yes\n"        # row 4: 3 bytes, and not a bool
                                       ",3,abcd,0\n"             # row 5: id required
                                       "5,,abcd,1\n")
    schema = {"id": "int32", "temp": "float32?", "code": "bytes[4]", "ok": "bool"}
    records, rejects, _ = read(csv_source(data, schema=schema))
    assert records == [{"id": 1, "temp": 1.5, "code": b"abcd", "ok": True},
                       {"id": 5, "temp": None, "code": b"abcd", "ok": True}]
    assert rejects == [
        (f"{data} row 3: column 'temp': 'hot' is not a float32",
         {"id": "2", "temp": "hot", "code": "abcd", "ok": "false"}),
        (f"{data} row 4: column 'code': 'abc' is not a bytes[4]",
         {"id": "3", "temp": "2.25", "code": "abc", "ok": "yes"}),
        (f"{data} row 5: column 'id' is empty ('') where the schema requires a value (`id?: int32` makes it optional)",
         {"id": "", "temp": "3", "code": "abcd", "ok": "0"})]
    assert str(csv_source(data, schema=schema).schema) == "Record {id: int32, temp: float32?, code: bytes[4], ok: bool}"


def test_a_row_with_too_many_fields_is_dead_lettered_with_its_row_and_the_rest_is_read(tmp_path: Path) -> None:
    data = write(tmp_path / "w.csv", 'a,b\n1,"x\ny"\n2,x,extra\n3,y\n\n4,"z",q\n5,w\n6\n')
    records, rejects, sink = read(csv_source(data, batch_size=2))
    assert records == [{"a": 1, "b": "x\ny"}, {"a": 3, "b": "y"}, {"a": 5, "b": "w"}]
    why = "fields where the header has 2 columns (a delimiter or a quote out of place?)"
    assert rejects == [(f"{data} row 3: 3 {why}", "2,x,extra"), (f"{data} row 5: 3 {why}", '4,"z",q'),
                       (f"{data} row 7: 1 {why}", "6")]
    assert [r.meta["seq"] for r in sink.rejects] == [1, 3, 5]  # the file's order: seq counts every row read


def test_headerless_tsv_gzip_latin1_and_skipped_rows(tmp_path: Path) -> None:
    """A .tsv.gz is decompressed and split on tabs by its name; names come from `columns` or the schema."""
    data = tmp_path / "w.tsv.gz"
    data.write_bytes(gzip.compress("# exported 2024\n1\tcafé\n2\tthé\n".encode("latin-1")))
    given = csv_source(data, header=False, columns=["id", "drink"], skip_rows=1, encoding="latin-1")
    assert read(given)[:2] == ([{"id": 1, "drink": "café"}, {"id": 2, "drink": "thé"}], [])
    typed = csv_source(data, header=False, skip_rows=1, encoding="latin-1", schema={"n": "int64", "what": "string"})
    assert read(typed)[0] == [{"n": 1, "what": "café"}, {"n": 2, "what": "thé"}]
    renamed = csv_source(write(tmp_path / "h.csv", "x;y\n1;2\n"), columns=["a", "b"], delimiter=";")
    assert read(renamed)[0] == [{"a": 1, "b": 2}]  # with a header: the names given replace it
    with pytest.raises(WirepipeError, match=r"w.tsv.gz: the header is not UTF-8 text: give the source its `encoding:`"):
        read(csv_source(data, skip_rows=1))  # utf-8: latin-1 bytes in the header
    mixed = tmp_path / "m.csv"
    mixed.write_bytes(b"id,drink\n1,tea\n2," + "thé".encode("latin-1") + b"\n")
    assert read(csv_source(mixed))[:2] == ([{"id": 1, "drink": "tea"}], [
        (f"{mixed} row 3: column 'drink' is not UTF-8 text (give the source its `encoding:`)", {"id": "2", "drink": "th\ufffd"})])


def test_a_big_file_is_streamed_block_by_block_in_exact_batches(tmp_path: Path) -> None:
    """30,000 rows in 64 KiB blocks (~50): batches of exactly batch_size, `count` exact, a bad row far in the
    file named by its row."""
    lines = [f"{i},{i % 97 * 0.5},s{i % 13}" for i in range(30_000)]
    lines[20_000] = "20000,1.0,s1,extra"
    data = write(tmp_path / "big.csv", "id,x,s\n" + "\n".join(lines) + "\n")
    sink = TestingSink()
    stats = run(csv_source(data, batch_size=1000, block_size="64KiB"), [], sink)
    assert (stats.records_out, stats.rejected, sink.batches) == (29_999, 1, 30)
    assert [r["id"] for r in sink.records] == [i for i in range(30_000) if i != 20_000]
    assert sink.rejects[0].error.startswith(f"{data} row 20002: 4 fields") and sink.rejects[0].meta["seq"] == 20_000
    counted = TestingSink()
    stats = run(csv_source(data, batch_size=1000, block_size="64KiB", count=12_345), [], counted)
    assert (len(counted.records), counted.batches, counted.records[-1]["id"]) == (12_345, 13, 12_344)


def test_config_errors_name_the_field_and_what_is_allowed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^source.schema: .*a CSV column holds one value .*not tags: list<string>"):
        csv_source("a.csv", schema={"id": "int64", "tags": "list<string>"})
    with pytest.raises(ConfigError, match=r"^source.encoding: unknown encoding 'klingon'"):
        csv_source("a.csv", encoding="klingon")
    with pytest.raises(ConfigError, match=r"^source.delimiter: String should have at most 1 character"):
        csv_source("a.csv", delimiter="||")
    data = write(tmp_path / "obs.csv", "id,temp,extra\n1,2,3\n")
    with pytest.raises(ConfigError, match=r"obs.csv: column\(s\) 'extra' not in the schema \(add them, e.g. `extra: "
                                          r"string\?`\); no column for its required field\(s\) 'station' \(the header "
                                          r"has id, temp, extra\)"):
        csv_source(data, schema={"id": "int64", "temp": "float64", "station": "string"}).check_input()
    fine = csv_source(write(tmp_path / "ok.csv", "id\n1\n"), schema={"id": "int64", "station": "string?"})
    fine.check_input()  # an optional field without a column: null
    assert read(fine)[0] == [{"id": 1, "station": None}]


def test_a_file_that_is_not_readable_stops_the_run_with_its_name(tmp_path: Path) -> None:
    bad = tmp_path / "damaged.csv.gz"
    bad.write_bytes(b"not gzip at all")
    with pytest.raises(WirepipeError, match=r"damaged.csv.gz: not a readable CSV file"):
        read(csv_source(bad))
    empty = write(tmp_path / "empty.csv", "")
    assert read(csv_source(empty))[:2] == ([], [])


def test_a_yaml_pipeline_reads_csv_and_writes_bad_rows_to_its_dead_letter_file(tmp_path: Path) -> None:
    write(tmp_path / "weather.csv", WEATHER + "BOS,3,2013-01-03,x,false,extra\n")
    config = write(tmp_path / "p.yaml", yaml.safe_dump({
        "name": "weather", "source": {"type": "csv", "path": str(tmp_path / "weather.csv"),
                                      "schema": {"station": "string", "temp": "float64?", "when": "string",
                                                 "note": "string", "wet": "bool"}},
        "operators": [{"serialize": {"format": "avro"}}, {"deserialize": {"format": "avro"}}],
        "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}))
    out = invoke("run", config, "--max-rejected", "1")
    assert out.returncode == 0, out.output
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["station"] for r in rows] == ["EWR", "JFK", "LGA"] and rows[1]["note"] == "fog\nthen rain"
    [dead] = [json.loads(line) for line in (tmp_path / "out.dead.jsonl").read_text().splitlines()]
    assert dead["error"] == (f"{tmp_path / 'weather.csv'} row 5: 6 fields where the header has 5 columns (a "
                             "delimiter or a quote out of place?)")
    assert json.loads(dead["value_json"]) == "BOS,3,2013-01-03,x,false,extra"


# --- the commands that take a file of records ------------------------------------------------------------


def test_schema_infer_on_csv_prints_the_types_the_source_reads(tmp_path: Path) -> None:
    data = write(tmp_path / "weather-obs.csv", WEATHER)
    out = invoke("schema", "infer", data)
    assert out.returncode == 0, out.output
    assert out.stdout.startswith(f"# inferred by `wirepipe schema infer` from 3 records of {data}\n")
    assert yaml.safe_load(out.stdout) == {"name": "WeatherObs", "fields": {
        "station": "string", "temp": "float64?", "when": "string", "note": "string", "wet": "bool"}}
    schema = tmp_path / "obs.yaml"
    schema.write_text(out.stdout)
    assert read(csv_source(data, schema=str(schema)))[0] == read(csv_source(data))[0]


def test_a_compressed_file_names_its_records_and_dataset_without_its_suffixes(tmp_path: Path) -> None:
    """``weather-obs.csv.gz`` holds ``WeatherObs`` records, and the study calls its dataset ``weather-obs``."""
    from wirepipe.study.bench.data import from_file

    data = tmp_path / "weather-obs.csv.gz"
    data.write_bytes(gzip.compress(WEATHER.encode()))
    out = invoke("schema", "infer", data)
    assert out.returncode == 0, out.output
    assert yaml.safe_load(out.stdout)["name"] == "WeatherObs"
    bench = from_file(data)
    assert (bench.name, bench.fields.name) == ("weather-obs", "WeatherObs")


@pytest.mark.parametrize("command", [("schema", "infer"), ("bench", "--transport", "none", "--input")])
def test_a_file_of_an_unknown_type_is_a_usage_error_naming_the_types_read(command: tuple[str, ...],
                                                                          tmp_path: Path) -> None:
    notes = write(tmp_path / "notes.txt", "a,b\n1,2\n")
    out = invoke(*command, notes)
    assert out.returncode == 2, out.output
    assert "notes.txt: not a file of records wirepipe reads (by its name): jsonl (.jsonl, .ndjson), csv (.csv, " \
           ".tsv, and either compressed: .gz, .bz2, .zst, .lz4), parquet (.parquet)" in out.stderr


@pytest.mark.slow  # as every bench measurement (tests/test_bench.py): a report is written
def test_bench_input_measures_a_csv_file(tmp_path: Path) -> None:
    data = write(tmp_path / "weather.csv", "station,temp,wet\n" + "".join(
        f"S{i % 7},{i * 0.25},{'true' if i % 3 else 'false'}\n" for i in range(40)))
    out = invoke("bench", "--input", data, "--quick", "--transport", "none", "--format", "msgpack", "--codec",
                 "none", "--repetitions", "40", "--iterations", "1", "--yes", "--out", tmp_path / "res")
    assert out.returncode == 0, out.output
    assert "weather: all 40 records of weather.csv, each once per iteration (N = 40)" in (
        tmp_path / "res" / "report.md").read_text()
    bad = write(tmp_path / "bad.csv", "a,b\n1,2\n3\n")
    refused = invoke("bench", "--input", bad, "--quick", "--transport", "none", "--format", "msgpack", "--codec",
                     "none", "--iterations", "1", "--yes", "--out", tmp_path / "res2")
    assert refused.returncode == 1 and f"--input {bad} row 3: 1 fields where the header has 2 columns" in refused.stderr


def test_a_test_file_and_dict_train_read_a_csv_file_by_its_name(tmp_path: Path) -> None:
    from wirepipe.dictionaries import source_for

    write(tmp_path / "weather.csv", WEATHER + "BOS,3,2013-01-03,x,false,extra\n")
    write(tmp_path / "select.yaml", "name: select\nsource: {type: generate, dataset: point, count: 1}\n"
                                    "operators: [{select: [station, temp]}]\n")
    write(tmp_path / "select.test.yaml", yaml.safe_dump({"tests": [{
        "name": "csv: a row with a field too many rejected where the source reads it",
        "input": {"file": "weather.csv"},
        "expect": {"records": [{"station": "EWR", "temp": 21.5}, {"station": "JFK", "temp": None},
                               {"station": "LGA", "temp": None}],
                   "rejections": [{"stage": "read", "error": "row 5: 6 fields where the header has 5",
                                   "seq": 3}]}}]}))
    result = invoke("test", tmp_path)
    assert result.returncode == 0, result.output
    source, capture = source_for(str(tmp_path / "weather.csv"), count=2)
    assert (type(source), source.count, capture) == (CsvSource, 2, False)
    with pytest.raises(ConfigError, match=r"^--from: .*notes.txt: not a file of records wirepipe reads"):
        source_for(str(write(tmp_path / "notes.txt", "x")), count=None)


def test_run_and_validate_refuse_a_header_the_schema_does_not_match_before_anything_opens(tmp_path: Path) -> None:
    write(tmp_path / "weather.csv", WEATHER)
    config = write(tmp_path / "p.yaml", yaml.safe_dump({
        "name": "weather", "source": {"type": "csv", "path": str(tmp_path / "weather.csv"),
                                      "schema": {"station": "string", "temp": "float64?"}},
        "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}))
    for command in ("validate", "run"):
        out = invoke(command, config)
        assert out.returncode == 2, out.output
        assert out.stderr.startswith(f"error: {config}: source.schema: {tmp_path / 'weather.csv'}: column(s) 'when', "
                                     "'note', 'wet' not in the schema (add them, e.g. `when: string?`)"), out.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_a_registered_schema_types_the_columns_as_a_file_or_a_mapping_does(tmp_path: Path) -> None:
    """``schema: registry/NAME@VERSION`` (or the latest, or ``nats://BUCKET/NAME``) reads the registered version
    from the store the pipeline hands the source, before the first file; a bincode serialize given no schema takes
    it from the batches (before: refused as not a schema file)."""
    from wirepipe import deserialize, serialize
    from wirepipe.testing import memory_schema_registry

    data = write(tmp_path / "obs.csv", "id,temp\n1,1.5\n2,hot\n")
    v1, v2 = {"id": "int32", "temp": "float32?"}, {"id": "int64", "temp": "float64?"}
    resources = {"schemas": {"registry": memory_schema_registry({"obs": [v1, v2]})}}
    for ref, typed in (("registry/obs@1", "Record {id: int32, temp: float32?}"),
                       ("registry/obs", "Record {id: int64, temp: float64?}")):
        source, sink = csv_source(data, schema=ref), TestingSink()
        stats = run(source, [serialize("bincode"), deserialize("bincode", schema=ref)], sink, resources=resources)
        assert str(source.schema) == typed and stats.records_out == 1 and stats.rejected == 1
        assert sink.records == [{"id": 1, "temp": 1.5}]
        assert [r.error for r in sink.rejects] == [f"{data} row 3: column 'temp': 'hot' is not a "
                                                   f"{typed.split()[-1].rstrip('?}')}"]


def test_a_registered_schema_the_registry_does_not_hold_stops_the_run_at_source_schema(tmp_path: Path) -> None:
    """Refused by ``validate`` as by ``run``, and before the sink opens: no empty output file is left behind (the
    schema was fetched with the first batch, after the sink had created out.jsonl)."""
    write(tmp_path / "obs.csv", "id,temp\n1,1.5\n")
    write(tmp_path / "other.csv", "id,wet\n1,yes\n")
    invoke("schema", "push", str(write(tmp_path / "obs.yaml", "name: Obs\nfields: {id: int32, temp: 'float32?'}\n")),
           "--name", "obs", "--registry", str(tmp_path / "schemas"))
    pipeline = {"name": "obs", "source": {"type": "csv", "path": str(tmp_path / "obs.csv")},
                "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")},
                "resources": {"schemas": {"registry": {"type": "folder", "path": str(tmp_path / "schemas")}}}}
    for ref, data, message in (
            ("registry/obs@2", "obs.csv", f"registry/obs version 2: obs has version 1 in folder {tmp_path}/schemas: "
                                          "no version 2"),
            ("registry", "obs.csv", "registry: the columns are read with one schema: name it, registry/NAME (its "
                                    "latest version when the pipeline starts) or with @VERSION after the name"),
            ("registry/obs@1", "other.csv", f"{tmp_path / 'other.csv'}: column(s) 'wet' not in the schema (add them, "
                                            "e.g. `wet: string?`)")):
        pipeline["source"].update(schema=ref, path=str(tmp_path / data))  # type: ignore[attr-defined]
        for command in ("validate", "run"):
            out = invoke(command, write(tmp_path / "p.yaml", yaml.safe_dump(pipeline)))
            assert out.returncode == 2, out.output
            assert out.stderr.splitlines()[-1].startswith(f"error: {tmp_path / 'p.yaml'}: source.schema: {message}"), \
                out.output
            assert not (tmp_path / "out.jsonl").exists(), command
