"""``wirepipe bench --reference-tables``: published serialization benchmarks, reproduced with wirepipe's formats.

The FlatMessage benchmark's Point table (``Point``, k=10 x n=500,000) and Large Vectors table
(``LargeVectors``, k=10 x n=100): one record serialized n times, then deserialized n times, per
iteration, through the same ``Serialize``/``Deserialize`` operators a pipeline runs (batches of
1000, so the fixed layouts pack a batch at a time; ``bench.timing`` runs them). The record is the
published one: ``Point {x: -12, y: 110}`` (the values the Point table's sizes pin down, see
``REFERENCE_POINT``) and the dataset's first ``large_vectors`` record (the Large Vectors table
gives ranges, not values). Each time is the mean [min - max] over the k iterations, in
milliseconds, as the published tables give theirs; the size is the exact size of that record's
payload, its difference to the raw struct, and next to it the published (Linux) size. One row per
published row, named by its Python counterpart:

=================  ================================  ===========================================
published row      wirepipe row                      note
=================  ================================  ===========================================
FlatMessage        n/a                               a Rust-only zero-copy format; the nearest
                                                     thing here is ``arrow`` (an extra row)
postcard (schema)  postcard                          same bytes as Rust postcard
bincode (schema)   bincode-varint                    bincode 2's default ``config::standard()``
                                                     (the published 2-byte Point)
rmp (schema)       msgpack-array                     positional msgpack
rmp                msgpack                           msgpack map
protobuf (schema)  protobuf                          official runtime, descriptor from the schema
json               json                              stdlib json
bson               bson (typed schema)               pymongo's bson; u32 and i64 as int64, as
                                                     Rust's bson crate writes a struct
cbor               cbor                              cbor2
simd_json          orjson                            the fast JSON library of Python
flexbuffers        flexbuffers (typed schema)        flatbuffers' pure-Python flexbuffers; numeric
                                                     lists as typed vectors, as Rust's serializer
toml               toml                              tomllib + tomli-w
=================  ================================  ===========================================

Extra rows: ``bincode`` (fixint: bincode 1 / ``legacy()``, wirepipe's default bincode), msgpack
and json with the typed schema (the msgspec engine), avro, arrow. Where a size differs from the
published one, the row's note says why (``SIZE_NOTES``); docs/performance/reference-tables.md has
the arithmetic. Two smaller tables follow: a Rust transaction serde benchmark's question
(``transaction`` with its byte fields as bytes versus as lists of ints) and a feed JSON
benchmark's (the whole ``feed`` as compact JSON with base64 signatures versus binary formats).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...codecs.formats import FORMATS
from ...core.batch import Batch
from ...core.table import Table
from ...datasets import get_dataset
from ...operators.deserialize import Deserialize
from ...operators.serialize import Serialize
from .timing import best_of, chunks, repetitions, time_batches

REFERENCE_ROWS: list[tuple[str, str | None, bool]] = [
    # (published row, wirepipe format, with the dataset's typed schema)
    ("FlatMessage", None, False),
    ("postcard (schema)", "postcard", True),
    ("bincode (schema)", "bincode-varint", True),
    ("rmp (schema)", "msgpack-array", True),
    ("rmp", "msgpack", False),
    ("protobuf (schema)", "protobuf", True),
    ("json", "json", False),
    ("bson", "bson", True),  # Rust's bson serializes the typed struct: the schema gives u32 its int64
    ("cbor", "cbor", False),
    ("simd_json", "orjson", False),
    ("flexbuffers", "flexbuffers", True),  # and Rust's flexbuffers its typed vectors
    ("toml", "toml", False),
]
EXTRA_ROWS: list[tuple[str, str, bool]] = [
    ("bincode (fixint)", "bincode", True),
    ("msgpack (schema)", "msgpack", True),
    ("json (schema)", "json", True),
    ("avro (schema)", "avro", True),
    ("arrow", "arrow", False),
]
REFERENCE_SHAPES = {"point": (10, 500_000), "large_vectors": (10, 100)}  # (k, n) as published
TITLES = {"point": "Point", "large_vectors": "Large Vectors"}
# The Point table's sizes pin its Point down: protobuf's 13 bytes need one negative int32 (10-byte varint),
# json's 17 characters, cbor's 8 and postcard's 3 bytes leave x in -10..-24 and y in 100..125.
REFERENCE_POINT = {"x": -12, "y": 110}
# The published sizes (the Linux tables; Windows and macOS print the same), by published row.
REFERENCE_SIZES: dict[str, dict[str, int]] = {
    "point": {"FlatMessage": 26, "postcard (schema)": 3, "bincode (schema)": 2, "rmp (schema)": 3, "rmp": 7,
              "protobuf (schema)": 13, "json": 17, "bson": 19, "cbor": 8, "simd_json": 17, "flexbuffers": 17,
              "toml": 16},
    "large_vectors": {"FlatMessage": 388060, "bincode (schema)": 407012, "postcard (schema)": 358260,
                      "protobuf (schema)": 358265, "rmp": 445039, "rmp (schema)": 445013, "cbor": 320339,
                      "flexbuffers": 264099, "json": 539243, "simd_json": 539243, "bson": 960615,
                      "toml": 606238},
}
# Rows whose size does not depend on the values drawn (fixed widths, or widths the ranges fix):
# there wirepipe's size must be the published one, and tests/test_reference_tables.py holds it to that.
EXACT = {
    "point": {name for name in REFERENCE_SIZES["point"] if name != "FlatMessage"},
    "large_vectors": {"bson", "flexbuffers"},
}
# Why a size differs from the published one, in a few words (docs/performance/reference-tables.md has the
# arithmetic).
_NA = "n/a: Rust-only zero-copy (nearest: arrow)"
SIZE_NOTES: dict[str, dict[str, str]] = {
    "point": {"FlatMessage": _NA, "bincode (fixint)": "fixint, bincode 1 / legacy()",
              "msgpack (schema)": "msgspec: the msgpack bytes", "json (schema)": "msgspec: the json bytes"},
    "large_vectors": {
        "FlatMessage": _NA,
        "postcard (schema)": "u32 varints: their draw",
        "bincode (schema)": "u32 varints: their draw",
        "protobuf (schema)": "u32 varints: their draw",
        "rmp (schema)": "f32 as float64 (+4 B each); u32: draw",
        "rmp": "f32 as float64 (+4 B each); u32: draw",
        "cbor": "floats as float64 (Rust: narrower); u32: draw",
        "json": "digits: their draw",
        "simd_json": "digits: their draw",
        "toml": "an item a line (+4 B each); digits: draw",
        "bson": "schema: u32 as int64, as Rust's bson",
        "flexbuffers": "schema: typed vectors, narrowest width",
        "bincode (fixint)": "fixint: raw + four u64 lengths",
        "msgpack (schema)": "msgspec: the msgpack bytes",
        "json (schema)": "msgspec: the json bytes",
    },
}
BATCH = 1000
WARMUP = 5000  # repetitions of the warm-up (at most n/10): the round-trip check, the size and the time estimate


@dataclass
class Row:
    name: str
    fmt: str | None
    size: int | None = None
    ser_ms: list[float] | None = None
    deser_ms: list[float] | None = None
    note: str = ""


ROW_BUDGET_S = 30.0  # a row whose warm-up shows k iterations would take longer runs fewer


def reference_record(dataset: str, seed: int = 0) -> Any:
    """The record a reference table measures: the published Point, or the dataset's first record."""
    if dataset == "point":
        return dict(REFERENCE_POINT)
    return get_dataset(dataset).sample(1, seed=seed)[0]


def row_size(fmt: str, typed: bool, dataset: str, seed: int = 0) -> int:
    """The exact payload size of the table's record in ``fmt`` (what the Size column shows)."""
    ds = get_dataset(dataset)
    schema = ds.schema if typed or FORMATS[fmt].needs_schema else None
    return len(Serialize(fmt, schema=schema)(Batch([reference_record(dataset, seed)])).values[0])


def measure_row(name: str, fmt: str | None, typed: bool, dataset: str, k: int, n: int, seed: int = 0,
                budget_s: float = ROW_BUDGET_S) -> Row:
    """One row: k iterations of n serializations and n deserializations of one record.

    A warm-up of ``WARMUP`` repetitions (at most a tenth of n) checks the round trip, gives the
    size and estimates an iteration; when k iterations would pass ``budget_s`` (the pure-Python
    flexbuffers and toml, arrow's one IPC stream per record on ``point``), the row runs fewer,
    at least one, and says so.
    """
    row = Row(name, fmt, note=SIZE_NOTES.get(dataset, {}).get(name, ""))
    if fmt is None:
        return row
    if not FORMATS[fmt].available():
        row.note = f"n/a: {FORMATS[fmt].library} is not installed"
        return row
    ds = get_dataset(dataset)
    record = reference_record(dataset, seed)
    schema = ds.schema if typed or FORMATS[fmt].needs_schema else None
    ser, deser = Serialize(fmt, schema=schema), Deserialize(fmt, schema=schema)
    warm = max(1, min(n // 10, WARMUP))
    batches = chunks(repetitions([record], n), BATCH)
    row.ser_ms, row.deser_ms = [], []
    it = 0
    while it <= k:  # iteration 0 warms up (on `warm` repetitions) and checks the round trip
        serialized = time_batches(ser, batches if it else chunks(repetitions([record], warm), BATCH))
        deserialized = time_batches(deser, serialized.outputs, keep=it == 0)
        errors = serialized.errors + deserialized.errors
        if errors:
            row.note = f"failed: {errors[0]}"
            row.ser_ms = row.deser_ms = None
            return row
        if it == 0:
            row.size = len(serialized.outputs[0][0])
            if not _same(deserialized.outputs[0][0], record, ds.schema):
                row.note = "failed: decoded record differs from the input"
                row.ser_ms = row.deser_ms = None
                return row
            per_iteration = (serialized.ms + deserialized.ms) * n / warm
            fits = max(1, int(budget_s * 1000 / max(per_iteration, 1e-3)))
            if fits < k:
                k = fits
                row.note = "; ".join(x for x in (f"k={k} (time budget)", row.note) if x)
        else:
            row.ser_ms.append(serialized.ms)
            row.deser_ms.append(deserialized.ms)
        it += 1
    return row


def _same(decoded: Any, record: Any, schema: Any) -> bool:
    from ...schema import with_defaults

    return bool(decoded == record or decoded == with_defaults(schema)(record))


def measure_table(dataset: str, k: int, n: int, seed: int = 0,
               progress: Callable[[str], None] | None = None, budget_s: float = ROW_BUDGET_S) -> tuple[list[Row], int]:
    """Every published row and extra row for ``dataset``; (rows, raw size of the record)."""
    rows = []
    for name, fmt, typed in [*REFERENCE_ROWS, *EXTRA_ROWS]:
        if progress is not None:
            progress(f"{dataset}: {name}")
        rows.append(measure_row(name, fmt, typed, dataset, k, n, seed, budget_s))
    return rows, get_dataset(dataset).fixed_raw_size or 0


def _stat(values: list[float]) -> str:
    return f"{sum(values) / len(values):.2f} [{min(values):.2f} - {max(values):.2f}]"


def table_lines(rows: list[Row], raw: int, dataset: str | None = None) -> list[list[str]]:
    """The published columns (Algorithm, Size (b) [±% vs raw], Ser. (ms), Deser. (ms), Ser+Deser. (ms)),
    with the published size after Size ("-" for a row the published table has not)."""
    published = REFERENCE_SIZES.get(dataset or "", {})
    out = []
    for r in rows:
        label = r.name if r.fmt in (None, r.name) else f"{r.name} → {r.fmt}"
        theirs = published.get(r.name)
        theirs_cell = "-" if theirs is None else f"{theirs} (same)" if theirs == r.size else str(theirs)
        if r.ser_ms is None or r.deser_ms is None or r.size is None:
            out.append([label, "-", theirs_cell, "-", "-", "-"])
            continue
        pct = round((r.size - raw) * 100 / raw) if raw else 0
        both = [a + b for a, b in zip(r.ser_ms, r.deser_ms, strict=True)]
        out.append([label, f"{r.size} [{pct:+d}%]", theirs_cell, _stat(r.ser_ms), _stat(r.deser_ms), _stat(both)])
    return out


def reference_table(dataset: str, rows: list[Row], raw: int, k: int, n: int, seed: int = 0) -> Table:
    """The measured rows as the published table, each row's note beside or beneath it; on a narrow terminal the
    single stages give way to their sum."""
    what = f"the published Point {REFERENCE_POINT}" if dataset == "point" else f"record 0 of --seed {seed}"
    return Table(f"FlatMessage {TITLES[dataset]} table: {dataset} (k={k} x n={n}, raw {raw} bytes; {what})",
                 ["Algorithm", "Size (b)", "published (b)", "Ser. (ms)", "Deser. (ms)", "Ser+Deser. (ms)"],
                 table_lines(rows, raw, dataset), priority=[0, 0, 0, 1, 1, 0], notes=[r.note for r in rows])


# --- the transaction serde and feed JSON benchmarks ------------------------------------------------


def _as_int_lists(value: Any) -> Any:
    if isinstance(value, bytes):
        return list(value)
    if isinstance(value, dict):
        return {k: _as_int_lists(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_int_lists(v) for v in value]
    return value


def _per_record_us(fmt: str, records: list[Any], schema: Any, reps: int) -> tuple[int, float, float]:
    """(total payload bytes, best ser. µs per record, best deser. µs per record): the records as one batch."""
    ser, deser = Serialize(fmt, schema=schema), Deserialize(fmt, schema=schema)
    serialized = best_of(reps, lambda: time_batches(ser, [records]))
    deserialized = best_of(reps, lambda: time_batches(deser, serialized.outputs, keep=False))
    n = len(records)
    return sum(map(len, serialized.outputs[0])), serialized.ns / n / 1e3, deserialized.ns / n / 1e3


def transaction_table(count: int = 1000, reps: int = 5, seed: int = 0) -> list[list[str]]:
    """The Rust transaction serde benchmark's question: byte fields as bytes versus as lists of ints (mean size,
    best µs per record)."""
    ds = get_dataset("transaction")
    records = ds.sample(count, seed=seed)
    as_lists = [_as_int_lists(r) for r in records]
    rows = []
    for fmt in ("msgpack", "orjson", "cbor", "bincode"):
        for label, recs, schema in (("bytes", records, None), ("lists of ints", as_lists, None)):
            if fmt == "bincode":
                if label != "bytes":
                    continue
                schema = ds.schema
            size, s, d = _per_record_us(fmt, recs, schema, reps)
            rows.append([fmt, label, f"{size / count:.1f}", f"{s:.2f}", f"{d:.2f}", f"{s + d:.2f}"])
    return rows


def feed_table(count: int = 1000, reps: int = 5, seed: int = 0) -> list[list[str]]:
    """The feed JSON benchmark's question: the whole feed as compact JSON (base64 signatures) versus binary
    formats."""
    ds = get_dataset("feed")
    records = ds.sample(count, seed=seed)
    rows = []
    base = None
    for fmt, typed in (("orjson", False), ("json", True), ("msgpack", False), ("msgpack", True), ("cbor", False),
                       ("bincode", True), ("postcard", True), ("protobuf", True), ("avro", True)):
        size, s, d = _per_record_us(fmt, records, ds.schema if typed else None, reps)
        total_s, total_d = s * count / 1e3, d * count / 1e3
        if base is None:
            base = total_d
        name = f"{fmt} (schema)" if typed and fmt in ("json", "msgpack") else fmt
        rows.append([name, str(size), f"{total_s:.2f}", f"{total_d:.2f}", f"{base / total_d:.1f}x"])
    return rows


REFERENCE_TABLES = ("point", "large_vectors", "transaction", "feed")


def print_reference_tables(console: Any, iterations: int | None = None, repetitions: int | None = None,
                      seed: int = 0, small_count: int = 1000, tables: list[str] | None = None,
                      width: int | None = None) -> dict[str, Any]:
    """Print the tables (all four unless ``tables`` names some) in ``width`` columns (the terminal's);
    returns their rows for tests and files."""
    from ...codecs.deflate import deflate_choice
    from ...core.table import terminal_width, wrap

    width = width or terminal_width()

    def show(text: str) -> None:
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    chosen = list(tables or REFERENCE_TABLES)
    out: dict[str, Any] = {}
    for dataset, (k, n) in REFERENCE_SHAPES.items():
        if dataset not in chosen:
            continue
        k, n = iterations or k, repetitions or n
        with console.status("measuring") as status:
            rows, raw = measure_table(dataset, k, n, seed, progress=lambda text: status.update(text))
        show(reference_table(dataset, rows, raw, k, n, seed).text(width, None))
        out[dataset] = rows
    if "transaction" in chosen:
        out["transaction"] = transaction_table(small_count, seed=seed)
        show(Table(f"Rust transaction serde benchmark: byte fields ({small_count} records, best of 5, per record)",
                   ["format", "byte fields as", "mean size (b)", "ser. (µs)", "deser. (µs)", "ser+deser. (µs)"],
                   out["transaction"], [False, False, True, True, True, True]).text(width, None))
    if "feed" in chosen:
        out["feed"] = feed_table(small_count, seed=seed)
        show(Table(f"feed JSON benchmark: the whole feed ({small_count} signed messages, best of 5)",
                   ["format", "size (b)", "ser. (ms)", "deser. (ms)", "deser. vs orjson"], out["feed"])
             .text(width, None))
    show("\n".join(wrap(f"zlib/gzip/deflate ran on: {deflate_choice()}; times under load swing 2-3x: compare "
                        "rows of one run", width)))
    return out
