"""``wirepipe bench --reference-tables``: the published tables' shape, with every size that does not depend on
the values drawn equal to the published one; and the formats the tables brought in (``bincode-varint``, the typed
``bson`` and ``flexbuffers``), with hand-computed bytes from their specs (tiny k and n keep it fast)."""

from __future__ import annotations

import json
import re
import struct

import bson
import msgpack
import pytest

from tests.cli import invoke, wirepipe
from wirepipe.codecs import FORMATS
from wirepipe.core.batch import Batch
from wirepipe.core.errors import StageError
from wirepipe.datasets import DATASETS
from wirepipe.operators.deserialize import Deserialize
from wirepipe.operators.serialize import Serialize
from wirepipe.schema import parse_schema
from wirepipe.study.bench.reference_tables import (
    EXACT,
    EXTRA_ROWS,
    REFERENCE_POINT,
    REFERENCE_ROWS,
    REFERENCE_SIZES,
    measure_row,
    reference_record,
    row_size,
)

# --- the command ---------------------------------------------------------------------------------


def _table_rows(text: str) -> dict[str, list[str]]:
    """The rows of the plain-text grids (cells apart by two spaces or more), by their first cell."""
    return {cells[0]: cells for cells in (re.split(r" {2,}", line.strip()) for line in text.splitlines())
            if len(cells) > 2}


def _reference_tables(columns: int) -> str:
    out = wirepipe("bench", "--reference-tables", "--dataset", "point,transaction,feed", "-k", "2", "-n", "300",
                   columns=columns, timeout=220)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.timeout(240)
@pytest.mark.slow
def test_reference_tables_command_prints_the_published_point_with_the_published_sizes() -> None:
    text = _reference_tables(250)
    assert ("FlatMessage Point table: point (k=2 x n=300, raw 8 bytes; the published Point {'x': -12, 'y': 110})"
            in text)
    header = next(line for line in text.splitlines() if line.startswith("Algorithm"))
    assert re.split(r" {2,}", header.strip()) == ["Algorithm", "Size (b)", "published (b)", "Ser. (ms)", "Deser. (ms)",
                                                  "Ser+Deser. (ms)", "note"]
    assert "seed" not in text.lower()  # the random seed is --seed; the published benchmarks are named by what they are
    rows = _table_rows(text.split("Rust transaction serde benchmark")[0])
    for name, fmt, _typed in REFERENCE_ROWS:
        label = name if fmt in (None, name) else f"{name} → {fmt}"
        cells = rows[label]
        published = REFERENCE_SIZES["point"][name]
        if fmt is None:
            assert cells[1] == "-" and cells[2] == str(published) and "n/a" in cells[-1]
            continue
        pct = round((published - 8) * 100 / 8)
        assert cells[1] == f"{published} [{pct:+d}%]" and cells[2] == f"{published} (same)", (label, cells)
        # mean [min - max] for each time column
        assert all(re.fullmatch(r"\d+\.\d\d \[\d+\.\d\d - \d+\.\d\d\]", c) for c in cells[3:6]), cells
    for name, fmt, _typed in EXTRA_ROWS:  # no published counterpart: "-"
        assert rows[name if fmt == name else f"{name} → {fmt}"][2] == "-"
    assert rows["bincode (fixint) → bincode"][1] == "8 [+0%]"
    assert "Rust transaction serde benchmark: byte fields" in text and "lists of ints" in text
    assert "feed JSON benchmark: the whole feed" in text and "deser. vs orjson" in text
    feed = DATASETS["feed"].sample(1000)
    total = sum(len(msgpack.packb(r)) for r in feed)
    assert _table_rows(text.split("feed JSON benchmark")[1])["msgpack"][1] == str(total), "feed msgpack size is the exact total"


@pytest.mark.timeout(240)
@pytest.mark.slow
def test_reference_tables_fit_80_columns_and_cut_no_name() -> None:
    text = _reference_tables(80)
    assert max(map(len, text.splitlines())) <= 80
    lines = [line.strip() for line in text.splitlines()]
    for name, fmt, _typed in [*REFERENCE_ROWS, *EXTRA_ROWS]:  # each row's name whole, on a line of its own
        assert (name if fmt in (None, name) else f"{name} → {fmt}") in lines, name
    assert any("Ser+Deser. (ms)" in line for line in lines)  # the sum stays; single stages may give way to it
    assert re.search(r"\(not shown at 80 columns: (Ser\. \(ms\), )?Deser\. \(ms\); widen the terminal to see them\)",
                     " ".join(lines))


def test_reference_tables_refuse_an_unknown_table() -> None:
    out = invoke("bench", "--reference-tables", "--dataset", "blocks")
    assert out.returncode == 2 and "unknown table blocks" in out.stderr


# --- sizes: the published ones exactly wherever the values drawn do not change them ------------------


def test_point_every_row_has_the_published_exact_size() -> None:
    assert reference_record("point") == REFERENCE_POINT == {"x": -12, "y": 110}
    assert EXACT["point"] == {name for name, fmt, _ in REFERENCE_ROWS if fmt is not None}
    for name, fmt, typed in REFERENCE_ROWS:
        if fmt is not None:
            assert row_size(fmt, typed, "point") == REFERENCE_SIZES["point"][name], name


def test_large_vectors_fixed_width_rows_have_the_published_exact_size() -> None:
    rows = {name: (fmt, typed) for name, fmt, typed in REFERENCE_ROWS}
    assert EXACT["large_vectors"] == {"bson", "flexbuffers"}
    for name in EXACT["large_vectors"]:
        fmt, typed = rows[name]
        assert fmt is not None and row_size(fmt, typed, "large_vectors") == REFERENCE_SIZES["large_vectors"][name], name
    # and the arithmetic behind them: bson elements are type + index key + value (int32 4, int64 8, double 8)
    keys = sum(len(str(i)) + 1 for n in (2000, 10000, 25000, 30000) for i in range(n))
    body = keys + 67000 + 2000 * 4 + 10000 * 8 + 25000 * 8 + 30000 * 8  # u32 as int64: 8 bytes
    arrays = 4 * (4 + 1) + sum(1 + len(k) + 1 for k in ("ints", "floats", "uints", "doubles"))
    assert 4 + arrays + body + 1 == 960615
    # flexbuffers: the vectors at 2 (i16), 4 (f32), 4 (u32) and 4 bytes (whole doubles at f32 width), plus 99
    assert 2000 * 2 + 10000 * 4 + 25000 * 4 + 30000 * 4 + 99 == 264099


def _varint_len(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def _bvarint_len(n: int) -> int:
    return 1 if n < 251 else 3 if n < 1 << 16 else 5 if n < 1 << 32 else 9


@pytest.mark.timeout(120)
def test_large_vectors_other_rows_differ_by_what_the_notes_say() -> None:
    """Each difference to the published size is the draw of the u32s (varints), float widths or toml's layout."""
    r = DATASETS["large_vectors"].sample(1)[0]
    size = {name: row_size(fmt, typed, "large_vectors") for name, fmt, typed in REFERENCE_ROWS if fmt is not None}
    theirs = REFERENCE_SIZES["large_vectors"]
    u = r["uints"]
    # postcard and protobuf: same fixed parts as the published ones, only the u32 varints differ
    pc_u = sum(_varint_len(v) for v in u)
    assert size["postcard (schema)"] == 10 + 2000 * 2 + 40000 + pc_u + 240000
    assert theirs["postcard (schema)"] - (10 + 4000 + 40000 + 240000) == 74250  # their u32s: 74,250 B
    assert (size["protobuf (schema)"] - size["postcard (schema)"]
            == theirs["protobuf (schema)"] - theirs["postcard (schema)"] == 5)
    # bincode 2 varints: four 3-byte lengths, 2000 zigzagged 400..440 (251 + u16), fixed floats
    bv_u = sum(_bvarint_len(v) for v in u)
    assert size["bincode (schema)"] == 12 + 2000 * 3 + 40000 + bv_u + 240000
    # msgpack: rmp writes an f32 as float32 (5 B), msgpack-python every float as float64 (9 B)
    mp_u = sum(len(msgpack.packb(v)) for v in u)
    assert size["rmp (schema)"] == 1 + (3 + 2000 * 2) + (3 + 10000 * 9) + (3 + mp_u) + (3 + 30000 * 9)
    their_u = theirs["rmp (schema)"] - (1 + 4003 + (3 + 10000 * 5) + 3 + 270003)
    assert their_u == theirs["bincode (schema)"] - (12 + 6000 + 40000 + 240000) == 121000  # one draw, two formats
    assert size["rmp"] - size["rmp (schema)"] == theirs["rmp"] - theirs["rmp (schema)"] == 26  # the four keys
    # toml: tomli-w writes an item a line ("    v,\n"), Rust's toml "[a, b, c]": 4 B more an item, 3 an array
    assert size["toml"] - size["json"] == 4 * 67000 + 4 * 3 + (theirs["toml"] - theirs["json"])
    assert theirs["toml"] - theirs["json"] == 66995 and size["simd_json"] == size["json"]


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_large_vectors_table_measures_the_sizes_row_size_gives() -> None:
    for name, fmt, typed in [("bincode (schema)", "bincode-varint", True), ("bson", "bson", True),
                             ("bincode (fixint)", "bincode", True)]:
        row = measure_row(name, fmt, typed, "large_vectors", k=1, n=2)
        assert row.size == row_size(fmt, typed, "large_vectors") and row.ser_ms and row.deser_ms, (name, row)
    assert measure_row("bincode (fixint)", "bincode", True, "large_vectors", 1, 2).size == 388032


# --- bincode-varint: bincode 2's config::standard(), bytes from its spec -----------------------------


def _bv(spec: dict) -> tuple:
    s = parse_schema(spec)
    f = FORMATS["bincode-varint"]
    return s, f.encoder(s), f.decoder(s)


def test_bincode_varint_point_bytes() -> None:
    s, enc, dec = _bv({"x": "int32", "y": "int32"})
    # zigzag: -12 -> 23 (0x17), 110 -> 220 (0xdc): one byte each, below 251
    assert enc(REFERENCE_POINT) == b"\x17\xdc" and dec(b"\x17\xdc") == REFERENCE_POINT
    assert enc({"x": 1, "y": -2}) == b"\x02\x03"
    assert enc({"x": -126, "y": -125}) == b"\xfb\xfb\x00" + b"\xf9"  # zigzag 251 needs the u16 form, 249 not
    assert enc({"x": 2**31 - 1, "y": -(2**31)}) == b"\xfc" + struct.pack("<I", 2**32 - 2) + b"\xfc\xff\xff\xff\xff"
    # Vec<Point>: the count as a varint, then the points
    assert enc([{"x": 1, "y": 2}] * 3) == b"\x03" + b"\x02\x04" * 3
    assert FORMATS["bincode-varint"].decoder(s, framed=True)(b"\x03" + b"\x02\x04" * 3) == [{"x": 1, "y": 2}] * 3
    assert FORMATS["bincode-varint"].content_type == "application/vnd.wirepipe.bincode-varint"


@pytest.mark.parametrize(("value", "wire"), [
    (0, "00"), (250, "fa"), (251, "fbfb00"), (300, "fb2c01"), (65535, "fbffff"), (65536, "fc00000100"),
    (2**32 - 1, "fcffffffff"),
])
def test_bincode_varint_uint32_boundaries(value: int, wire: str) -> None:
    _s, enc, dec = _bv({"v": "uint32"})
    assert enc({"v": value}).hex() == wire and dec(bytes.fromhex(wire)) == {"v": value}
    _s, enc_list, dec_list = _bv({"v": "list<uint32>"})  # the numpy path writes what the scalar path writes
    assert enc_list({"v": [value, 7, value]}) == b"\x03" + bytes.fromhex(wire) + b"\x07" + bytes.fromhex(wire)
    assert dec_list(enc_list({"v": [value, 7, value]})) == {"v": [value, 7, value]}


@pytest.mark.parametrize(("value", "wire"), [
    (-1, "01"), (-125, "f9"), (-126, "fbfb00"), (2**15 - 1, "fbfeff"), (2**15, "fc00000100"),
    (-(2**31), "fcffffffff"), (-(2**31) - 1, "fd0100000001000000"), (2**31, "fd0000000001000000"),
    (-(2**63), "fdffffffffffffffff"), (2**63 - 1, "fdfeffffffffffffff"),
])
def test_bincode_varint_int64_boundaries_and_negatives(value: int, wire: str) -> None:
    _s, enc, dec = _bv({"v": "int64"})
    assert enc({"v": value}).hex() == wire and dec(bytes.fromhex(wire)) == {"v": value}
    _s, enc_list, dec_list = _bv({"v": "list<int64>"})
    assert dec_list(enc_list({"v": [value, -1, value]})) == {"v": [value, -1, value]}
    assert enc_list({"v": [value]}) == b"\x01" + bytes.fromhex(wire)


def test_bincode_varint_lengths_strings_options_fixed_arrays() -> None:
    _s, enc, dec = _bv({"name": "string", "blob": "bytes", "key": "bytes[2]", "opt": "int64?", "flag": "bool",
                        "f": "float32", "d": "float64"})
    rec = {"name": "hé", "blob": b"z" * 251, "key": b"\xaa\xbb", "opt": None, "flag": True, "f": 0.5, "d": -2.0}
    wire = (b"\x03" + "hé".encode() + b"\xfb\xfb\x00" + b"z" * 251 + b"\xaa\xbb" + b"\x00" + b"\x01"
            + struct.pack("<f", 0.5) + struct.pack("<d", -2.0))
    assert enc(rec) == wire and dec(wire) == rec
    rec["opt"] = -1
    assert enc(rec)[-15:-13] == b"\x01\x01"  # Some, zigzag(-1) = 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(DATASETS))
def test_bincode_varint_round_trips_every_dataset(name: str) -> None:
    from wirepipe.schema import with_defaults

    ds = DATASETS[name]
    records = ds.sample(1 if name == "large_vectors" else 50, seed=4)
    expected = [with_defaults(ds.schema)(r) for r in records]
    b = Deserialize("bincode-varint", schema=name)(Serialize("bincode-varint", schema=name)(Batch(list(records))))
    assert not b.rejected and b.values == expected
    f = FORMATS["bincode-varint"]
    framed = f.encoder(ds.schema)(records)
    assert f.decoder(ds.schema, framed=True)(framed) == expected
    if name == "point":  # the batch-at-once paths write and read what the per-record ones do
        column = f.column_encoder(ds.schema)(records)
        assert column == [f.encoder(ds.schema)(r) for r in records]
        assert f.column_decoder(ds.schema)(column) == records


def test_bincode_varint_refuses_misfits_with_the_field_path() -> None:
    good = DATASETS["transaction"].sample(3)
    bad = {**good[1], "inputs": [{**good[1]["inputs"][0], "sig_op_count": "one"}]}
    b = Serialize("bincode-varint", schema="transaction")(Batch([good[0], bad, good[2]]))
    assert len(b.values) == 2 and "inputs[0].sig_op_count: expected int32, got str" in b.rejected[0].error
    b = Serialize("bincode-varint", schema="point")(Batch([{"x": 1, "y": 2}, {"x": 1, "y": 2**40},
                                                           {"x": True, "y": 0}]))
    assert len(b.values) == 1 and "y: 1099511627776 is out of range for int32" in b.rejected[0].error
    assert "x" in b.rejected[1].error


@pytest.mark.parametrize("bad", [
    b"", b"\x17", b"\xfb\x00", b"\xfc\x00\x00\x00", b"\xfd" + bytes(8) + b"\x00", b"\xfe\x00", b"\xff\x00",
    b"\x17\xdc\x00",
])
def test_bincode_varint_refuses_corrupt_points(bad: bytes) -> None:
    _s, _enc, dec = _bv({"x": "int32", "y": "int32"})
    with pytest.raises(StageError):
        dec(bad)
    b = Deserialize("bincode-varint", schema="point")(Batch([b"\x17\xdc", bad, b"\x02\x03"]))  # the column path
    assert b.values == [REFERENCE_POINT, {"x": 1, "y": -2}] and len(b.rejected) == 1


def test_bincode_varint_refuses_corrupt_input_never_crashes() -> None:
    import random

    rng = random.Random(7)
    f = FORMATS["bincode-varint"]
    for name in ("transaction", "feed", "large_vectors"):
        ds = DATASETS[name]
        dec, framed = f.decoder(ds.schema), f.decoder(ds.schema, framed=True)
        good = f.encoder(ds.schema)(ds.sample(1, seed=2)[0])
        cases = [good[: len(good) // 2], good[:-1], b"", b"\xff" * 7, good + b"\x01"]
        for _ in range(40 if name != "large_vectors" else 6):
            mutated = bytearray(good)
            for _ in range(rng.randint(1, 3)):
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
            cases += [bytes(mutated), good[: rng.randrange(len(good))]]
        for case in cases:
            for decode in (dec, framed):
                try:
                    decode(case)
                except StageError as exc:
                    assert exc.stage == "deserialize"
        for case in cases[:5]:
            with pytest.raises(StageError):
                dec(case)
    _s, _e, dec_bool = _bv({"b": "bool", "o": "int32?"})
    for bad in (b"\x02\x00", b"\x01\x02", b"\x01\x01"):
        with pytest.raises(StageError, match=r"bool|option|truncated"):
            dec_bool(bad)


def test_bincode_varint_is_listed_by_the_codecs_command() -> None:
    out = wirepipe("codecs", env={"PATH": ""}, columns=250).stdout
    at = out.splitlines().index(next(x for x in out.splitlines() if x.startswith("bincode-varint ")))
    row = " ".join(out.splitlines()[at:at + 3])  # the notes wrap beneath their row
    assert "application/vnd.wirepipe.bincode-varint" in row and "bincode 2" in row


# --- bson and flexbuffers with a typed schema: what Rust's serializers write ----------------------------


def test_bson_with_a_schema_writes_uint32_and_int64_as_int64() -> None:
    s = parse_schema({"a": "int32", "b": "uint32", "c": "int64", "xs": "list<uint32>", "o": "int64?"})
    rec = {"a": 1, "b": 2, "c": 3, "xs": [4, 5], "o": None}
    typed = FORMATS["bson"].encoder(s)(rec)
    assert typed == bson.encode({"a": 1, "b": bson.Int64(2), "c": bson.Int64(3),
                                 "xs": [bson.Int64(4), bson.Int64(5)], "o": None})
    assert typed[4] == 0x10 and b"\x12b\x00" in typed and b"\x120\x00" in typed  # int32, then int64 elements
    assert FORMATS["bson"].decoder(s)(typed) == rec
    assert FORMATS["bson"].encoder()(rec) == bson.encode(rec)  # without a schema: pymongo's by-value choice
    b = Serialize("bson", schema=s)(Batch([rec, {**rec, "xs": [1, "2"]}, {**rec, "b": -1}]))
    assert len(b.values) == 1 and "xs[1]" in b.rejected[0].error and "b: -1 is out of range" in b.rejected[1].error


def test_flexbuffers_with_a_schema_writes_typed_vectors_of_the_narrowest_width() -> None:
    from flatbuffers import flexbuffers

    ds = DATASETS["large_vectors"]
    r = ds.sample(1)[0]
    payload = FORMATS["flexbuffers"].encoder(ds.schema)(r)
    root = flexbuffers.GetRoot(payload).AsMap
    widths = {k: (root[k].AsTypedVector.ElementType.name, root[k].AsTypedVector._byte_width) for k in r}
    assert widths == {"ints": ("INT", 2), "floats": ("FLOAT", 4), "uints": ("UINT", 4), "doubles": ("FLOAT", 4)}
    assert flexbuffers.Loads(payload) == r == FORMATS["flexbuffers"].decoder(ds.schema)(payload)
    assert len(FORMATS["flexbuffers"].encoder()(r)) == 331099  # untyped vectors: a type byte an item
    s = parse_schema({"small": "list<int32>", "d": "list<float64>", "u": "uint32", "k": "bytes", "o": "string?"})
    rec = {"small": [1] * 300, "d": [0.1, 2.0], "u": 200, "k": b"\x00", "o": None}
    root = flexbuffers.GetRoot(FORMATS["flexbuffers"].encoder(s)(rec)).AsMap
    assert root["small"].AsTypedVector._byte_width == 2  # the length 300 needs 2 bytes
    assert root["d"].AsTypedVector._byte_width == 8  # 0.1 is no f32
    assert root["u"].IsInt and root["u"]._type.name == "UINT"
    assert FORMATS["flexbuffers"].decoder(s)(FORMATS["flexbuffers"].encoder(s)(rec)) == rec
    b = Serialize("flexbuffers", schema=s)(Batch([rec, {**rec, "u": "x"}]))
    assert len(b.values) == 1 and "u: expected uint32, got str" in b.rejected[0].error


@pytest.mark.parametrize("name", ["point", "transaction", "feed", "block"])
def test_bson_and_flexbuffers_with_a_schema_round_trip(name: str) -> None:
    from wirepipe.schema import with_defaults

    ds = DATASETS[name]
    records = ds.sample(10, seed=3)
    for fmt in ("bson", "flexbuffers"):
        b = Deserialize(fmt, schema=name)(Serialize(fmt, schema=name)(Batch(list(records))))
        fill = with_defaults(ds.schema)
        assert not b.rejected and [fill(v) for v in b.values] == [fill(r) for r in records], fmt
        framed = FORMATS[fmt].encoder(ds.schema)(records)
        assert [fill(v) for v in FORMATS[fmt].decoder(ds.schema)(framed)] == [fill(r) for r in records], fmt


def test_point_json_is_the_published_17_characters() -> None:
    assert len(json.dumps(REFERENCE_POINT, separators=(",", ":"))) == REFERENCE_SIZES["point"]["json"]
