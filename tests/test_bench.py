"""``wirepipe bench``: tables and files, exact sizes, round trips verified, failures reported."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tests.cli import invoke, wirepipe
from wirepipe.core.errors import ConfigError
from wirepipe.study.bench.combos import BenchPlan, default_repetitions
from wirepipe.study.bench.command import make_plan
from wirepipe.study.bench.data import from_dataset
from wirepipe.study.bench.measure import run_bench


@pytest.mark.slow
def test_quick_in_process_produces_tables_and_files(tmp_path: Path) -> None:
    result = wirepipe("bench", "--quick", "--transport", "none", "--repetitions", "300", "--iterations", "2",
                      "--out", str(tmp_path), columns=240, timeout=300)
    assert result.returncode == 0, result.stderr
    for name in ("bench.parquet", "bench.md", "report.md", "report.html"):
        assert (tmp_path / name).stat().st_size > 0, name
    md = (tmp_path / "bench.md").read_text()
    assert md.count("### Formats with compression") == 2  # point and block
    assert "| Format | Size (b) [±% vs raw] | Ser. (ms) | Deser. (ms) | Ser+Deser. (ms) |" in md
    assert "Publish-side sum (ms)" in md and "### Recommendation" in md
    assert "fastest end to end" in result.stdout
    table = pq.read_table(tmp_path / "bench.parquet")
    # 2 datasets x 4 formats x (none + zstd x 2 levels + lz4 once: its fastest and default
    # are both level 0, measured once), 2 iterations each
    combos = set(zip(table.column("dataset").to_pylist(), table.column("chain").to_pylist(), strict=True))
    assert len(combos) == 2 * 4 * 4
    assert set(table.column("iteration").to_pylist()) == {0, 1}
    meta = pq.read_schema(tmp_path / "bench.parquet").metadata
    assert json.loads(meta[b"wirepipe.bench.repetitions"]) == {"point": 300, "block": 300}


def test_point_sizes_are_msgpacks_exact_encoding(tmp_path: Path) -> None:
    plan = BenchPlan(datasets=["point"], formats=["json", "msgpack", "msgpack-array"], codecs=["none"],
                     transport="none", iterations=1, repetitions=500, out=tmp_path)
    run = run_bench(plan)
    size = {m.combo.format: m.size for m in run.measured["point"]}
    assert size["msgpack"] == 7  # fixmap(2), fixstr "x", positive fixint, fixstr "y", positive fixint
    assert size["msgpack-array"] == 3 < size["msgpack"]  # fixarray(2) and two fixints
    assert size["json"] > size["msgpack"]
    assert all(m.raw_bytes == 8 for m in run.measured["point"])


@pytest.mark.slow
def test_sizes_are_deterministic_for_a_seed(tmp_path: Path) -> None:
    plan = BenchPlan(datasets=["feed"], formats=["cbor"], codecs=["zstd"], levels=["fastest"], transport="none",
                     iterations=1, repetitions=200, out=tmp_path)
    first = [(m.combo.label, m.size, m.compressed) for m in run_bench(plan).measured["feed"]]
    again = [(m.combo.label, m.size, m.compressed) for m in run_bench(plan).measured["feed"]]
    assert first == again


def _timestamps(path: Path) -> Path:
    """A user's Parquet file with a timestamp: orjson writes it as text, pickle keeps it."""
    import datetime as dt

    import pyarrow as pa

    at = [dt.datetime(2026, 1, 2, 3, 4, i, tzinfo=dt.timezone.utc) for i in range(20)]
    pq.write_table(pa.table({"id": list(range(20)), "at": pa.array(at, pa.timestamp("us", tz="UTC"))}), path)
    return path


@pytest.mark.slow
def test_a_failing_combination_is_reported_not_dropped(tmp_path: Path) -> None:
    src = _timestamps(tmp_path / "events.parquet")
    result = wirepipe("bench", "--input", str(src), "--format", "orjson,pickle", "--codec", "none,lz4", "--level",
                      "fastest", "--records-per-message", "1,10", "--transport", "none", "--repetitions", "100",
                      "--iterations", "1", "--out", str(tmp_path / "out"), columns=240, timeout=300)
    assert result.returncode == 4, result.stderr  # ExitCode.BENCH_FAILURES: the rest is measured and written
    assert "4 combination(s) failed" in result.stderr
    md = (tmp_path / "out" / "bench.md").read_text()
    assert "### Failed combinations" in md
    # the first record and field that differ, with both sides
    assert ("- `orjson x10/msg`: orjson: decoded records differ from the input: record 0, field at: "
            "2026-01-02 03:04:00+00:00 (datetime) in the input, '2026-01-02T03:04:00+00:00' (str) decoded") in md
    assert "failed orjson x10/msg" in result.stdout
    out = tmp_path / "out" / "bench.parquet"
    failures = json.loads(pq.read_schema(out).metadata[b"wirepipe.bench.failures"])
    assert set(failures) == {f"events: orjson{c}{k}" for c in ("", "|lz4:fastest") for k in ("", " x10/msg")}
    # the combinations that work are all there; a failed one has its reason and no figures
    assert "| pickle x10/msg |" in md and "| pickle |" in md
    assert set(pq.read_table(out).column("chain").to_pylist()) == {
        f"pickle{c}{k}" for c in ("", "|lz4:fastest") for k in ("", " x10/msg")}


@pytest.mark.slow
def test_zstd_dictionary_rows_are_smaller_for_small_messages(tmp_path: Path) -> None:
    plan = BenchPlan(datasets=["transaction"], formats=["msgpack"], codecs=["zstd"], levels=["default"],
                     transport="none", iterations=1, repetitions=300, zstd_dict=True, out=tmp_path)
    rows = {m.combo.label: m for m in run_bench(plan).measured["transaction"]}
    assert rows["msgpack|zstd +dict"].compressed < 0.8 * rows["msgpack|zstd"].compressed
    assert (tmp_path / "transaction-msgpack.zdict").exists()


@pytest.mark.slow
def test_records_per_message_shrink_compressed_size(tmp_path: Path) -> None:
    plan = BenchPlan(datasets=["point"], formats=["msgpack"], codecs=["zstd"], levels=["fastest"],
                     transport="none", iterations=1, repetitions=1000, records_per_message=[1, 100], out=tmp_path)
    rows = {m.combo.label: m for m in run_bench(plan).measured["point"]}
    assert rows["msgpack|zstd:fastest x100/msg"].compressed < rows["msgpack|zstd:fastest"].compressed / 2


def test_repetitions_scale_with_payload_size() -> None:
    assert default_repetitions(8) == 500_000  # the FlatMessage Point table's n
    assert default_repetitions(388008) == 100  # its Large Vectors table's n
    assert 100 < default_repetitions(from_dataset("block").raw_bytes) < 1000


@pytest.mark.parametrize(("option", "value", "message"), [
    ("format", "capnproto", "--format: unknown format 'capnproto': allowed json, orjson, "),
    ("codec", "lzo", "--codec: unknown codec 'lzo': allowed zstd, "),
    ("level", "99", "--level: 99 is out of range for zstd: use fastest (1), default (3), best (19) or an integer"),
    ("transport", "kafka", "--transport: Input should be 'none', 'nats' or 'jetstream' (got 'kafka')"),
])
def test_bad_options_are_config_errors(option: str, value: str, message: str, tmp_path: Path) -> None:
    kwargs = {"dataset": None, "inputs": [], "format": None, "codec": "zstd", "level": None, "transport": "none",
              "iterations": None, "repetitions": None, "out": tmp_path, "quick": False,
              "zstd_dict": None, "records_per_message": None, "seed": 0}
    kwargs[option] = value
    with pytest.raises(ConfigError) as caught:
        make_plan(**kwargs)
    assert str(caught.value).startswith(message)
    result = invoke("bench", f"--{option}", value, "--out", str(tmp_path), columns=240)  # refused before it measures
    assert result.returncode == 2 and isinstance(result.exception, SystemExit) and "Traceback" not in result.stderr


@pytest.mark.parametrize(("args", "close"), [
    (["bench", "--format", "msgpak"], "msgpack"), (["bench", "--codec", "zsdt"], "zstd"),
    (["bench", "--dataset", "points"], "point"), (["bench", "--level", "defualt"], "default"),
    (["plan", "--rate", "1k", "--dataset", "points"], "point"), (["plan", "--rate", "1k", "--sink", "parket"], "parquet"),
])
def test_a_misspelt_name_on_the_command_line_gets_the_close_one(args: list[str], close: str, tmp_path: Path) -> None:
    """As in YAML and --set: ``unknown format 'msgpak': allowed ...; did you mean `msgpack`?``, before anything is
    measured."""
    result = invoke(*args, *(["--out", str(tmp_path)] if args[0] == "bench" else []), columns=240)
    assert result.returncode == 2 and f"{args[-1]!r}" in result.stderr, result.output
    assert result.stderr.rstrip().endswith(f"; did you mean `{close}`?"), result.stderr


@pytest.mark.parametrize(("option", "value", "message"), [
    ("dataset", "points", "--dataset: unknown dataset 'points': allowed point, large_vectors, transaction, block, feed"),
    ("codec", "lzo,br", "--codec: unknown codec 'lzo': allowed "),  # br is brotli's alias: not refused
    ("level", "fast", "--level: unknown level 'fast': allowed fastest, default, best or an integer"),
    ("iterations", 0, "--iterations: Input should be greater than or equal to 1 (got 0)"),
    ("repetitions", "many", "--repetitions: Input should be a valid integer, unable to parse string as an integer "
                            "(got 'many')"),
    ("zstd_dict", "yes", "--zstd-dict: Input should be 'train' (got 'yes')"),
    ("records_per_message", "1,a", "--records-per-message: Input should be a valid integer, unable to parse string "
                                   "as an integer (got 'a')"),
    ("records_per_message", "10,0", "--records-per-message: Input should be greater than or equal to 1 (got '0')"),
])
def test_every_option_is_checked_by_the_options_model(option: str, value: Any, message: str, tmp_path: Path) -> None:
    """The option, the bad value and what is allowed, as a YAML field's error names them."""
    kwargs = {"dataset": None, "inputs": [], "format": None, "codec": "zstd", "level": None, "transport": "none",
              "iterations": None, "repetitions": None, "out": tmp_path, "quick": False,
              "zstd_dict": None, "records_per_message": None, "seed": 0, option: value}
    with pytest.raises(ConfigError) as caught:
        make_plan(**kwargs)
    assert str(caught.value).startswith(message), str(caught.value)


def test_options_become_the_plan(tmp_path: Path) -> None:
    plan = make_plan(dataset="point,feed", inputs=[], format="msgpack", codec="br,none", level="fastest,3",
                     transport="jetstream", iterations=4, repetitions=50, out=tmp_path, quick=False,
                     zstd_dict="train", records_per_message="1,10", seed=7)
    assert (plan.datasets, plan.formats, plan.codecs, plan.levels) == (["point", "feed"], ["msgpack"],
                                                                       ["brotli", "none", "zstd"], ["fastest", 3])
    assert (plan.transport, plan.iterations, plan.repetitions, plan.zstd_dict, plan.records_per_message,
            plan.seed) == ("jetstream", 4, 50, True, [1, 10], 7)
    quick = make_plan(dataset=None, inputs=[], format=None, codec=None, level=None, transport="nats",
                      iterations=None, repetitions=None, out=tmp_path, quick=True, zstd_dict=None,
                      records_per_message=None, seed=0)
    assert (quick.datasets, quick.iterations, quick.levels) == (["point", "block"], 3, ["fastest", "default"])
    with pytest.raises(ConfigError, match=r"^--level: 20 is out of range for lz4"):  # --quick's codecs take it
        make_plan(dataset=None, inputs=[], format=None, codec=None, level="20", transport="nats",
                  iterations=None, repetitions=None, out=tmp_path, quick=True, zstd_dict=None,
                  records_per_message=None, seed=0)


@pytest.mark.slow
def test_user_records_from_jsonl(tmp_path: Path) -> None:
    src = tmp_path / "mine.jsonl"
    src.write_text("\n".join(json.dumps({"id": i, "name": f"n{i}", "tags": ["a"] * (i % 4)}) for i in range(50)))
    result = wirepipe("bench", "--input", str(src), "--format", "json,msgpack", "--codec", "none,gzip", "--level",
                      "fastest", "--transport", "none", "--repetitions", "100", "--iterations", "1",
                      "--out", str(tmp_path / "out"), columns=240, timeout=300)
    assert result.returncode == 0, result.stderr
    md = (tmp_path / "out" / "bench.md").read_text()
    assert "## mine" in md and "raw = the record's compact JSON size" in md


@pytest.mark.slow
def test_quick_over_nats_adds_publish_consume_and_latency(tmp_path: Path) -> None:
    result = wirepipe("bench", "--quick", "--repetitions", "300", "--iterations", "1", "--out", str(tmp_path), columns=240, timeout=300)
    assert result.returncode == 0, result.stderr
    md = (tmp_path / "bench.md").read_text()
    assert "transport: nats" in md
    assert "| Publish (ms) | Consume (ms) |" in md and "Latency p50 / p99 (ms)" in md
    assert "### Failed combinations" not in md
    table = pq.read_table(tmp_path / "bench.parquet")
    stages = table.column("stage").to_pylist()
    assert stages.count("publish") == stages.count("consume") == stages.count("serialize") == 2 * 16
    latency = pq.read_table(tmp_path / "bench.latency.parquet")
    # every record of every combination: a row stands for its `records` (records of one message share its times)
    assert pc.sum(latency.column("records")).as_py() == 2 * 16 * 300
    report = (tmp_path / "report.md").read_text()
    assert "end_to_end" in report or "end to end" in report


@pytest.mark.slow
def test_jetstream_transport_counts_every_record(tmp_path: Path) -> None:
    plan = BenchPlan(datasets=["transaction"], formats=["msgpack"], codecs=["none", "zstd"], levels=["fastest"],
                     transport="jetstream", iterations=2, repetitions=400, records_per_message=[1, 10],
                     out=tmp_path)
    run = run_bench(plan)
    rows = run.measured["transaction"]
    assert [m.error for m in rows] == [None] * 4
    assert all({"publish", "consume"} <= set(m.stages) and len(m.stages["consume"].values) == 2 for m in rows)
    assert all(pc.sum(run.latency[f"transaction: {m.combo.label}"].column("records")).as_py() == 2 * 400
               for m in rows)


def test_oversized_messages_fail_the_combination_with_the_reason(tmp_path: Path) -> None:
    from wirepipe.connectors.nats.connection import NatsConnectionConfig
    from wirepipe.connectors.nats.server import EmbeddedServer

    # blocks are ~11 kB as msgpack and ~4 kB with zstd: a server with an 8 kB max_payload
    # takes the compressed ones and the publisher refuses the others (the connection stays up).
    with EmbeddedServer(max_payload=8192) as server:
        plan = BenchPlan(datasets=["block"], formats=["msgpack"], codecs=["none", "zstd"], levels=["fastest"],
                         transport="nats", nats=NatsConnectionConfig(url=server.url), iterations=1, repetitions=100,
                         out=tmp_path)
        rows = {m.combo.label: m for m in run_bench(plan).measured["block"]}
    error = rows["msgpack"].error or ""
    assert re.search(r"the publisher refused \d+ of 100 records", error) and "max_payload 8192 B" in error
    assert rows["msgpack|zstd:fastest"].error is None and rows["msgpack|zstd:fastest"].stages["publish"].values


def test_a_round_trip_failure_names_the_record_and_the_field(tmp_path: Path) -> None:
    """A user's Parquet file with a timestamp: orjson writes it as text, so its records do not come back as
    they went in; the failure names the first record and field that differ, with both values."""
    plan = BenchPlan(datasets=[], inputs=[_timestamps(tmp_path / "events.parquet")], formats=["orjson"],
                     codecs=["none"], transport="none", iterations=1, repetitions=20, out=tmp_path / "out")
    [measured] = run_bench(plan).measured["events"]
    assert measured.error == ("orjson: decoded records differ from the input: record 0, field at: "
                              "2026-01-02 03:04:00+00:00 (datetime) in the input, "
                              "'2026-01-02T03:04:00+00:00' (str) decoded")


def test_the_round_trip_reads_an_absent_field_and_a_null_as_one_value() -> None:
    """The one rule of the round-trip check, at any depth; everything else is a difference."""
    from wirepipe.study.bench.round_trip import round_trip_error

    sent = [{"id": 1, "items": ["a"]}, {"id": 2}, {"id": 3, "user": {"name": "x"}}]
    assert round_trip_error([{"id": 1, "items": ["a"]}, {"id": 2, "items": None},
                             {"id": 3, "user": {"name": "x", "age": None}, "items": None}], sent) is None
    assert round_trip_error([{"id": 1}, {"id": 2}, {"id": 3, "user": {"name": "x"}}], sent) == (
        "record 0, field items: ['a'] in the input, (absent) decoded")
    assert round_trip_error([{"id": 1, "items": ["a"]}, {"id": 2, "items": []}, sent[2]], sent) == (
        "record 1, field items: (absent) in the input, [] decoded")
    assert round_trip_error([{"id": 1, "items": ["a"]}, {"id": 2}, {"id": 3, "user": {"name": None}}], sent) == (
        "record 2, field user.name: 'x' (str) in the input, None (NoneType) decoded")
    assert round_trip_error(sent[1:] + sent[:1], sent) == "record 0, field id: 1 in the input, 2 decoded"


@pytest.mark.slow
def test_an_absent_optional_field_passes_the_same_check_on_every_transport(tmp_path: Path) -> None:
    """The tutorial's events: ``items`` only on a purchase. msgpack-array writes the absent field as null
    (its typed schema has one value for both); in-process and over NATS the round trip is the same check."""
    src = tmp_path / "events.jsonl"
    src.write_text("".join(json.dumps({"id": i, "action": "buy" if i % 3 == 0 else "view",
                                       **({"items": [f"sku-{i}"]} if i % 3 == 0 else {})}) + "\n"
                           for i in range(60)))
    for transport in ("none", "nats"):
        out = tmp_path / transport
        result = wirepipe("bench", "--input", str(src), "--format", "msgpack-array,msgpack", "--codec", "none",
                          "--transport", transport, "--repetitions", "60", "--iterations", "1", "--out", str(out),
                          columns=240, timeout=300)
        assert result.returncode == 0, (transport, result.stdout[-2000:], result.stderr)
        chains = pq.read_table(out / "bench.parquet").column("chain").to_pylist()
        assert set(chains) == {"msgpack-array", "msgpack"}, transport
        assert json.loads(pq.read_schema(out / "bench.parquet").metadata[b"wirepipe.bench.failures"]) == {}
        said = "events: all 60 records of events.jsonl, each once per iteration (N = 60)"
        assert f"### Samples measured\n\n- {said}\n" in (out / "report.md").read_text()
        assert "Measured on all 60 records of events.jsonl, each once per iteration (N = 60); K = 1" in (
            out / "bench.md").read_text()
    again = wirepipe("report", str(tmp_path / "nats"), columns=240)
    assert f"Samples measured\n{said}\n" in again.stdout, again.stdout


@pytest.mark.slow
def test_quick_on_small_records_of_ones_own_adds_a_trained_dictionary_row(tmp_path: Path) -> None:
    """--quick --input on small records (log lines) measures zstd with a dictionary trained on them; records
    larger than a few kB do not get the row (a dictionary pays little there)."""
    small = tmp_path / "logs.jsonl"
    small.write_text("".join(json.dumps({"ts": 1700000000 + i, "level": "info" if i % 5 else "error",
                                         "msg": f"request {i} served in {i % 17} ms", "path": "/api/v1/items"})
                             + "\n" for i in range(300)))
    large = tmp_path / "docs.jsonl"
    large.write_text("".join(json.dumps({"id": i, "body": " ".join(f"w{(i * j) % 97}" for j in range(800))}) + "\n"
                             for i in range(40)))
    result = wirepipe("bench", "--input", str(small), "--input", str(large), "--quick", "--format", "msgpack",
                      "--transport", "none", "--repetitions", "200", "--iterations", "1", "--out",
                      str(tmp_path / "out"), columns=240, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "+dict rows for logs: zstd with a dictionary trained on the records" in result.stdout
    md = (tmp_path / "out" / "bench.md").read_text()
    logs, docs = md.split("## docs")[0], md.split("## docs")[1]
    assert "| msgpack\\|zstd +dict |" in logs and "+dict" not in docs
    assert (tmp_path / "out" / "logs-msgpack.zdict").exists() and not (tmp_path / "out" / "docs-msgpack.zdict").exists()


@pytest.mark.slow
def test_a_format_that_cannot_write_the_records_gets_no_dictionary_and_stops_nothing(tmp_path: Path) -> None:
    """Training the +dict rows encodes the sample with every format: one that cannot write these records (TOML
    and a null some records hold) is left without a dictionary, its rows fail with the reason, and the rest is
    measured; a positional format writes a field some records lack as null (msgpack-array, as bincode)."""
    src = tmp_path / "logs.jsonl"
    src.write_text("".join(json.dumps({"ts": i, "msg": f"request {i}", **({"error": "timeout"} if i % 7 == 0 else {}),
                                       "user": None if i % 5 == 0 else "bob"}) + "\n" for i in range(200)))
    plan = make_plan(dataset=None, inputs=[src], format="msgpack,msgpack-array,toml", codec="zstd", level=None,
                     transport="none", iterations=1, repetitions=200, out=tmp_path / "out", quick=True,
                     zstd_dict=None, records_per_message=None, seed=0)
    rows = {m.combo.label: m for m in run_bench(plan).measured["logs"]}
    assert rows["msgpack|zstd +dict"].error is None and rows["msgpack|zstd +dict"].compressed > 0
    assert rows["msgpack-array|zstd +dict"].error is None and rows["msgpack-array|zstd +dict"].compressed > 0
    toml = [m for label, m in rows.items() if label.startswith("toml")]
    assert toml and all("null has no TOML form" in (m.error or "") for m in toml), [m.error for m in toml]
    assert "toml|zstd +dict" not in rows or rows["toml|zstd +dict"].error is not None
