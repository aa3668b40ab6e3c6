"""wirepipe codecs inside Faust: same bytes as wirepipe pipelines, both ways, without a Kafka broker.

Faust is imported inside the tests (it is an optional extra and slow to import); the
registry fixture restores Faust's codec registry after tests that register names.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from wirepipe.operators.chain_operators import chain_operators

# Faust is imported inside the tests (collecting this file must not import it). The test
# command installs the `faust` extra; without it these tests fail rather than hide.

TESTS = Path(__file__).parent


# --- helpers -------------------------------------------------------------------------------------


@pytest.fixture
def codecs() -> Any:
    """Faust's codec module, its entry points loaded as an app's first lookup does; registry restored after."""
    from faust.serializers import codecs

    from wirepipe.integrations.faust import install_guard

    codecs.get_codec("json")
    registry = install_guard()
    saved = dict(registry.data)
    yield codecs
    registry.data.clear()
    registry.data.update(saved)


def sample(dataset: str, count: int) -> list[Any]:
    from wirepipe.datasets import get_dataset

    return get_dataset(dataset).sample(count)


def run_yaml(tmp_path: Path, text: str) -> Any:
    from wirepipe.pipelines.config import load_pipeline

    path = tmp_path / "pipeline.yaml"
    path.write_text(textwrap.dedent(text))
    pipeline = load_pipeline(path)
    stats = pipeline.run()
    assert stats.rejected == 0, stats.rejected_by_stage
    return pipeline


def payloads(path: Path) -> list[bytes]:
    import pyarrow.parquet as pq

    return pq.read_table(path).column("value").to_pylist()


def write_payloads(path: Path, values: list[bytes]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"value": pa.array(values, type=pa.binary())}), path)


# Wirepipe chain -> the Faust serializer that must write the same bytes.
CHAINS = {
    "msgpack|zstd": "msgpack|zstd",
    "msgpack|zstd:19": "msgpack|zstd:19",
    "json|gzip": "wp-json|gzip",
    "orjson|lz4": "orjson|lz4",
    "cbor|brotli:5": "cbor|brotli:5",
    "msgpack|deflate|none": "msgpack|deflate|none",
    "arrow|xz": "arrow|xz",
    "cbor|bz2:1": "cbor|bz2:1",
    "orjson|zlib:best": "orjson|zlib:best",
}


# --- registration ----------------------------------------------------------------------------------


def test_entry_points_register_on_faust_first_lookup_without_importing_wirepipe() -> None:
    """A fresh process that only uses Faust gets wirepipe's codecs, and its very first lookup is guarded."""
    code = textwrap.dedent("""
        import sys
        from faust.serializers import codecs
        try:
            codecs.get_codec("bogus|json")          # the lookup that loads the entry points
        except KeyError as exc:
            print("error:", exc)
        print("bytes:", codecs.dumps("msgpack|zstd", {"x": 1, "b": b"\\x00"}).hex())
        print("json:", type(codecs.get_codec("json")).__module__)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    from wirepipe.codecs.chain import Chain

    lines = dict(line.split(": ", 1) for line in out.strip().splitlines())
    assert lines["error"].startswith("unknown Faust codec 'bogus': known codecs are ")
    assert "msgpack" in lines["error"] and "zstd" in lines["error"]
    assert bytes.fromhex(lines["bytes"]) == Chain.parse("msgpack|zstd").encoder()({"x": 1, "b": b"\x00"})
    assert lines["json"] == "faust.serializers.codecs"


def test_entry_points_in_the_installed_metadata_match_the_module() -> None:
    from importlib.metadata import entry_points

    from wirepipe.integrations import faust as wf

    eps = {ep.name: ep for ep in entry_points(group="faust.codecs") if ep.module == wf.__name__}
    assert set(eps) == set(wf.STEPS), "pyproject.toml [faust.codecs] and STEPS disagree: reinstall or update"
    for ep in eps.values():
        assert ep.load() is getattr(wf, ep.attr)
    assert "msgpack-array" not in wf.STEPS  # needs a schema: register_codec
    assert wf.STEPS["wp-json"] == "json" and wf.STEPS["wp-pickle"] == "pickle"


def test_faust_builtin_names_keep_faust_codecs(codecs: Any) -> None:
    from wirepipe.integrations.faust import FAUST_BUILTINS, WirepipeCodec, register

    builtin = {name for name, c in codecs.codecs.items() if type(c).__module__ == "faust.serializers.codecs"}
    assert builtin == set(FAUST_BUILTINS)
    register()
    for name in FAUST_BUILTINS:
        assert not isinstance(codecs.get_codec(name), WirepipeCodec), name
    obj = {"a": [1, 2], "s": "é"}
    assert codecs.loads("json", codecs.dumps("json", obj)) == obj


def test_register_keeps_a_codec_the_app_registered_itself(codecs: Any) -> None:
    from wirepipe.integrations.faust import register

    mine = codecs.raw()
    codecs.register("zstd", mine)
    with pytest.warns(UserWarning, match="'zstd' is already registered"):
        registered = register()
    assert registered["zstd"] is mine and codecs.get_codec("zstd") is mine


# --- Faust's codec API, bytes equal to wirepipe ------------------------------------------------------


@pytest.mark.parametrize("chain", list(CHAINS))
def test_faust_codec_api_writes_wirepipe_bytes(codecs: Any, chain: str) -> None:
    from wirepipe.codecs.chain import Chain
    from wirepipe.integrations.faust import faust_serializer

    assert faust_serializer(chain) == CHAINS[chain]
    records = sample("transaction", 20)
    encode = Chain.parse(chain).encoder()
    decode = Chain.parse(chain).decoder()
    for record in records:
        data = codecs.dumps(CHAINS[chain], record)
        assert data == encode(record)
        assert codecs.loads(CHAINS[chain], data) == record == decode(data)
    # Chaining clones the first node; the registered codecs keep no children.
    for name in CHAINS[chain].split("|"):
        assert codecs.get_codec(name).children == ()


@pytest.mark.parametrize("chain", ["msgpack|zstd", "json|gzip", "arrow|xz", "cbor|brotli:5"])
def test_pipeline_payloads_equal_faust_bytes_and_decode_both_ways(codecs: Any, tmp_path: Path, chain: str) -> None:
    """wirepipe publishes -> Faust decodes; Faust encodes -> wirepipe decodes; same bytes either way."""
    records = sample("transaction", 50)
    serializer = CHAINS[chain]
    run_yaml(tmp_path, f"""
        name: publish
        source: {{type: generate, dataset: transaction, count: 50, batch_size: 16}}
        operators:
          - encode: "{chain}"
        sink: {{type: parquet, path: {tmp_path / "wirepipe.parquet"}}}
    """)
    published = payloads(tmp_path / "wirepipe.parquet")
    assert published == [codecs.dumps(serializer, r) for r in records]
    assert [codecs.loads(serializer, p) for p in published] == records

    write_payloads(tmp_path / "faust.parquet", [codecs.dumps(serializer, r) for r in records])
    run_yaml(tmp_path, f"""
        name: consume
        source: {{type: parquet, path: {tmp_path / "faust.parquet"}}}
        operators:
          - decode: "{chain}"
          - encode: "{chain}"
        sink: {{type: parquet, path: {tmp_path / "again.parquet"}}}
    """)
    assert payloads(tmp_path / "again.parquet") == published


# --- faust.Record ---------------------------------------------------------------------------------


def test_record_with_wirepipe_serializer_round_trips(codecs: Any) -> None:
    from tests.faust_records import Point, Reading
    from wirepipe.codecs.chain import Chain

    p = Point(x=3, y=120)
    data = p.dumps()
    assert data == Chain.parse("msgpack|zstd").encoder()({"x": 3, "y": 120})
    assert Point.loads(data) == p

    r = Reading(sensor="t1", value=21.5, raw=b"\x00\xff")
    back = Reading.loads(r.dumps())
    assert back == r and isinstance(back, Reading) and back.raw == b"\x00\xff"
    assert Chain.parse("msgpack|zstd").decoder()(r.dumps())["__faust"] == {"ns": Reading._options.namespace}


def test_wirepipe_serialize_of_a_record_writes_what_faust_writes(codecs: Any) -> None:
    from tests.faust_records import Point, Reading
    from wirepipe.core.batch import Batch

    records = [Reading(sensor="a", value=1.0), Reading(sensor="b", value=2.5, raw=b"\x01")]
    encode, decode = chain_operators("msgpack|zstd", schema=Reading)
    batch = Batch(list(records))
    for op in encode:
        batch = op(batch)
    assert batch.values == [r.dumps() for r in records]
    for op in decode:
        batch = op(batch)
    assert batch.values == records and all(type(v) is Reading for v in batch.values)

    points = [Point(x=1, y=2)]
    batch = Batch(list(points))
    for op in chain_operators("msgpack|zstd")[0]:
        batch = op(batch)
    assert batch.values == [points[0].dumps()]


def test_record_schema_gives_field_order() -> None:
    from tests.faust_records import Point3, Renamed, Transaction
    from wirepipe.operators.schema_options import resolve_schema

    assert resolve_schema("tests.faust_records:Point3") == ("x", "y", "z")
    assert resolve_schema(Point3) == ("x", "y", "z")
    from wirepipe.datasets import get_dataset

    assert resolve_schema(Transaction) == get_dataset("transaction").fields
    assert resolve_schema(Renamed) == ("T", "sensor")
    assert set(Renamed(temperature=1.5).asdict()) == {"T", "sensor"}


def test_deserialize_schema_record_gives_typed_records_from_faust_bytes(codecs: Any, tmp_path: Path) -> None:
    from tests.faust_records import Transaction

    records = sample("transaction", 30)
    write_payloads(tmp_path / "faust.parquet", [Transaction(**r).dumps(serializer="msgpack|zstd") for r in records])
    from wirepipe.pipelines.config import load_pipeline

    path = tmp_path / "typed.yaml"
    path.write_text(textwrap.dedent(f"""
        name: typed
        source: {{type: parquet, path: {tmp_path / "faust.parquet"}}}
        operators:
          - decompress: {{codec: zstd}}
          - deserialize: {{format: msgpack, schema: "tests.faust_records:Transaction"}}
    """))
    pipeline = load_pipeline(path)
    from wirepipe.testing import TestingSink

    pipeline.sink = sink = TestingSink()  # the typed records themselves, as a Python sink gets them
    stats = pipeline.run()
    assert stats.rejected == 0
    assert all(type(v) is Transaction for v in sink.records)
    assert [v.asdict() for v in sink.records] == records


def test_typed_records_are_written_to_jsonl_as_the_dicts_faust_encodes(codecs: Any, tmp_path: Path) -> None:
    """A JSONL sink writes a ``faust.Record`` as the dict Faust itself would encode (not a rejection)."""
    from tests.faust_records import Transaction
    from wirepipe.codecs.formats import restore_bytes
    from wirepipe.connectors.jsonl import JsonlSink
    from wirepipe.operators.deserialize import Deserialize
    from wirepipe.testing import TestingSource, run

    records = sample("transaction", 20)
    payloads = [Transaction(**r).dumps(serializer="msgpack") for r in records]
    stats = run(TestingSource(payloads, batch_size=7), [Deserialize("msgpack", schema="tests.faust_records:Transaction")],
                JsonlSink(tmp_path / "out.jsonl"))
    assert stats.rejected == 0
    written = [restore_bytes(json.loads(line)) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [{k: v for k, v in w.items() if k != "__faust"} for w in written] == records


def test_deserialize_schema_record_ignores_faust_namespace_of_unknown_class(codecs: Any) -> None:
    """A payload whose "__faust" names a class this process never imported still builds the schema's class."""
    from tests.faust_records import Reading
    from wirepipe.codecs.chain import Chain
    from wirepipe.core.batch import Batch
    from wirepipe.operators.deserialize import Deserialize

    data = Chain.parse("msgpack").encoder()({"sensor": "s", "value": 1.0, "raw": b"", "__faust": {"ns": "elsewhere.Reading"}})
    batch = Deserialize("msgpack", schema="tests.faust_records:Reading")(Batch([data]))
    assert batch.rejected == [] and batch.values == [Reading(sensor="s", value=1.0)]


def test_msgpack_array_with_record_field_order_matches_faust(codecs: Any, tmp_path: Path) -> None:
    from tests.faust_records import Point3
    from wirepipe.integrations.faust import register_codec

    register_codec("point3-array", "msgpack-array", schema=Point3)
    points = [Point3(x=i, y=2 * i, z=-i) for i in range(20)]
    faust_bytes = [p.dumps(serializer="point3-array|zstd") for p in points]
    write_payloads(tmp_path / "faust.parquet", faust_bytes)
    run_yaml(tmp_path, f"""
        name: positional
        source: {{type: parquet, path: {tmp_path / "faust.parquet"}}}
        operators:
          - decode: {{chain: "msgpack-array|zstd", schema: "tests.faust_records:Point3"}}
          - encode: {{chain: "msgpack-array|zstd", schema: "tests.faust_records:Point3"}}
        sink: {{type: parquet, path: {tmp_path / "wirepipe.parquet"}}}
    """)
    assert payloads(tmp_path / "wirepipe.parquet") == faust_bytes
    from wirepipe.codecs.chain import Chain

    assert Chain.parse("msgpack|zstd").decoder()(faust_bytes[3]) == [3, 6, -3]
    assert [Point3.loads(b, serializer="point3-array|zstd") for b in faust_bytes] == points


def test_msgpack_array_uses_wire_names_of_renamed_fields(codecs: Any) -> None:
    from tests.faust_records import Renamed
    from wirepipe.integrations.faust import register_codec

    register_codec("renamed-array", "msgpack-array", schema=Renamed)
    r = Renamed(temperature=21.5, sensor="t")
    data = r.dumps(serializer="renamed-array")
    assert codecs.loads("msgpack", data) == [21.5, "t"]
    assert Renamed.loads(data, serializer="renamed-array") == r


# --- an agent ---------------------------------------------------------------------------------------


async def test_agent_receives_values_encoded_by_wirepipe(codecs: Any) -> None:
    import faust
    from faust.exceptions import ValueDecodeError

    from tests.faust_records import Transaction
    from wirepipe.codecs.chain import Chain
    from wirepipe.core.batch import Batch

    records = sample("transaction", 10)
    batch = Batch(list(records))
    for op in chain_operators("msgpack|zstd:19")[0]:
        batch = op(batch)
    published = batch.values

    app = faust.App("wirepipe-test", broker="kafka://localhost:1", store="memory://")
    topic = app.topic("transactions", value_type=Transaction, value_serializer="msgpack|zstd:19")
    seen: list[Any] = []

    @app.agent(topic)
    async def consume(stream: Any) -> Any:
        async for tx in stream:
            seen.append(tx)
            yield len(tx.payload)

    async with consume.test_context(channel=topic) as agent:
        for data in published:
            await agent.put(data)
        bomb = Chain.parse("zstd").encoder()(b"\0" * (65 * 1024 * 1024))
        with pytest.raises(ValueDecodeError, match=r"decompress \(zstd\): output exceeds max_output_size"):
            await agent.put(bomb)  # Faust wraps wirepipe's RefusedError; the agent never sees the value
    assert [type(t) for t in seen] == [Transaction] * len(records)
    assert [t.asdict() for t in seen] == records
    assert list(agent.results.values())[: len(records)] == [len(r["payload"]) for r in records]


# --- errors and refusals ------------------------------------------------------------------------------


def test_unknown_codec_names_it_and_the_known_ones(codecs: Any) -> None:
    from wirepipe.core.errors import WirepipeError
    from wirepipe.integrations.faust import UnknownCodecError

    for chain, name in [("bogus|json", "bogus"), ("json|bogus", "bogus"), ("bogus", "bogus"),
                        ("msgpack|zstd|nope", "nope")]:
        with pytest.raises(UnknownCodecError) as info:
            codecs.get_codec(chain)
        err = info.value
        assert err.name == name
        assert str(err).startswith(f"unknown Faust codec {name!r}: known codecs are ")
        assert {"json", "msgpack", "zstd", "wp-json"} <= set(err.known)
        assert isinstance(err, KeyError) and isinstance(err, TypeError) and isinstance(err, WirepipeError)
    with pytest.raises(UnknownCodecError, match="99 is out of range for zstd"):
        codecs.get_codec("msgpack|zstd:99")
    with pytest.raises(UnknownCodecError, match="msgpack-array is positional"):
        codecs.get_codec("msgpack-array|zstd")
    with pytest.raises(UnknownCodecError, match="registered as 'brotli'"):
        codecs.get_codec("msgpack|br")
    # Faust's normal lookups are unchanged, its odd ones too.
    assert type(codecs.get_codec("json")).__name__ == "json"
    assert type(codecs.get_codec("|json")).__name__ == "json"
    assert [type(n).__name__ for n in codecs.get_codec("json|binary").nodes] == ["json", "binary"]
    assert codecs.codecs.get("bogus") is None and "bogus" not in codecs.codecs


def test_decompression_bombs_are_refused_inside_faust(codecs: Any) -> None:
    from wirepipe.codecs.chain import Chain
    from wirepipe.core.errors import RefusedError
    from wirepipe.integrations.faust import register_codec

    big = b"\0" * (65 * 1024 * 1024)  # past the default 64 MiB cap
    with pytest.raises(RefusedError, match="decompression bomb"):
        codecs.loads("zstd", Chain.parse("zstd").encoder()(big))
    small = b"\0" * (2 * 1024 * 1024)
    for codec in ["zstd", "zlib", "gzip", "deflate", "brotli", "bz2", "xz", "lz4", "none"]:
        register_codec(f"{codec}-1m", codec, max_output_size=1024 * 1024)
        data = Chain.parse(codec).encoder()(small)
        assert codecs.loads(codec, data) == small
        with pytest.raises(RefusedError, match="max_output_size"):
            codecs.loads(f"msgpack|{codec}-1m", data)


def test_pickle_is_refused_unless_registered_as_trusted(codecs: Any) -> None:
    import pickle

    from wirepipe.core.errors import RefusedError
    from wirepipe.integrations.faust import register_codec

    value = {"a": 1, "b": b"\x00"}
    data = codecs.dumps("wp-pickle|zstd", value)
    assert pickle.loads(codecs.loads("zstd", data)) == value
    with pytest.raises(RefusedError, match="register_codec\\('trusted-pickle', 'pickle', allow_pickle=True\\)"):
        codecs.loads("wp-pickle|zstd", data)
    register_codec("trusted-pickle", "pickle", allow_pickle=True)
    assert codecs.loads("trusted-pickle|zstd", data) == value


# --- levels, dictionaries, names ------------------------------------------------------------------------


def test_register_codec_levels_dictionaries_and_chains(codecs: Any, tmp_path: Path) -> None:
    from wirepipe.codecs.chain import Chain
    from wirepipe.codecs.zstd import train_zstd_dictionary
    from wirepipe.integrations.faust import register_codec

    records = sample("transaction", 200)
    encode_msgpack = Chain.parse("msgpack").encoder()
    serialized = [encode_msgpack(r) for r in records]
    dictionary = train_zstd_dictionary(serialized, size=4096)
    dict_path = tmp_path / "tx.zdict"
    dict_path.write_bytes(dictionary)

    register_codec("zstd19", "zstd:19")
    register_codec("zstd-dict", "zstd", dictionary=dict_path)
    register_codec("tx-wire", "msgpack|zstd:5", dictionary=dictionary)  # a whole chain as one codec

    with_dict = Chain.parse("msgpack|zstd").encoder(dictionary=dictionary)
    for record, data in zip(records[:20], serialized, strict=False):
        assert codecs.dumps("msgpack|zstd19", record) == Chain.parse("msgpack|zstd:19").encoder()(record)
        assert codecs.dumps("msgpack|zstd-dict", record) == with_dict(record)
        assert codecs.loads("msgpack|zstd-dict", with_dict(record)) == record
        assert codecs.dumps("tx-wire", record) == Chain.parse("msgpack|zstd:5").encoder(dictionary=dictionary)(record)
        assert codecs.loads("tx-wire", codecs.dumps("tx-wire", record)) == record
        assert len(codecs.dumps("zstd-dict", data)) < len(codecs.dumps("zstd", data))
    assert "zstd dictionary, 4096 bytes" in repr(codecs.get_codec("msgpack|zstd-dict"))


def test_register_codec_refuses_names_it_would_silently_change(codecs: Any) -> None:
    from wirepipe.integrations.faust import register_codec

    for name in ["json", "pickle", "raw", "binary", "yaml"]:
        with pytest.raises(ValueError, match="a Faust built-in codec"):
            register_codec(name, "msgpack")
    codecs.register("house", codecs.raw())
    with pytest.raises(ValueError, match="'house' is already taken"):
        register_codec("house", "zstd")
    register_codec("house", "zstd", replace=True)
    assert codecs.loads("house", codecs.dumps("house", b"x" * 100)) == b"x" * 100
    for bad in ["", "a|b"]:
        with pytest.raises(ValueError, match="cannot be a Faust codec name"):
            register_codec(bad, "zstd")
    with pytest.raises(ValueError, match="unknown step 'zzz'"):
        register_codec("z", "zzz")
    with pytest.raises(ValueError, match="needs its field order"):
        register_codec("arr", "msgpack-array")


def test_cli_start_up_does_not_import_faust() -> None:
    code = ("import sys\nsys.argv = ['wirepipe', '--help']\nfrom wirepipe.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('FAUST' if any(m == 'faust' or m.startswith(('faust.', 'wirepipe.integrations')) for m in sys.modules) else 'CLEAN')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip().splitlines()[-1] == "CLEAN"


# --- the bridge: Kafka (Faust) -> NATS (wirepipe), bytes unchanged ---------------------------------------


async def test_bridge_faust_agent_forwards_kafka_bytes_to_nats_for_wirepipe(codecs: Any, nats_url: str) -> None:
    """The Faust guide's bridge (docs/how-to/faust.md): a Faust agent reads raw bytes and publishes them to NATS unchanged."""
    import asyncio

    import faust
    import nats

    from wirepipe.core.batch import Batch

    records = sample("transaction", 25)
    kafka_values = [codecs.dumps("msgpack|zstd", r) for r in records]  # what Faust producers wrote
    nc = await asyncio.wait_for(nats.connect(nats_url, allow_reconnect=False), 10)
    received: list[Any] = []
    done = asyncio.Event()

    async def on_msg(msg: Any) -> None:
        received.append(msg)
        if len(received) == len(records):
            done.set()

    await nc.subscribe("bridge.transactions", cb=on_msg)
    app = faust.App("wirepipe-bridge", broker="kafka://localhost:1", store="memory://")
    topic = app.topic("transactions", value_serializer="raw")

    @app.agent(topic)
    async def bridge(stream: Any) -> Any:
        async for payload in stream:
            await nc.publish("bridge.transactions", payload,
                             headers={"Content-Type": "application/msgpack", "Content-Encoding": "zstd"})
            yield payload

    try:
        async with bridge.test_context(channel=topic) as agent:
            for value in kafka_values:
                await agent.put(value)
        await asyncio.wait_for(done.wait(), 10)
    finally:
        await nc.close()

    assert [m.data for m in received] == kafka_values
    # The NATS side decodes with wirepipe's operators: a fixed chain, or by header (format: auto).
    fixed = Batch([m.data for m in received], headers=[m.headers for m in received])
    for op in chain_operators("msgpack|zstd")[1]:
        fixed = op(fixed)
    assert fixed.values == records and fixed.rejected == []
    from wirepipe.operators.decompress import Decompress
    from wirepipe.operators.deserialize import Deserialize

    auto = Batch([m.data for m in received], headers=[m.headers for m in received])
    auto = Deserialize("auto")(Decompress("auto")(auto))
    assert auto.values == records and auto.rejected == []
