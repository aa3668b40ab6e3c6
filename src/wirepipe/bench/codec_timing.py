"""In-process timing of the codec chain: serialize, compress, decompress, deserialize.

Each stage runs the same operators a pipeline runs, over the N repetitions in batches
(the way a pipeline sees them), timed with a monotonic clock. Serialize and
deserialize depend only on the format, so they are timed once per format per
iteration and shared by that format's codec rows; compress and decompress are timed
per codec and level. Iterations are the outer loop, so drift on a busy machine spreads
over every combination alike. The first iteration also checks the round trip: a
combination whose output differs from its input (or that rejects a record) is
reported as failed with the reason, never dropped.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..codecs.formats import FORMATS
from ..core.batch import Batch
from ..core.errors import ConfigError
from ..operators.base import Operator
from ..operators.compress import Compress
from ..operators.decompress import Decompress
from ..operators.deserialize import Deserialize
from ..operators.pack import Pack
from ..operators.serialize import Serialize
from ..operators.unpack import Unpack
from ..pipelines.pipeline import Pipeline
from ..testing import TestingSource
from .combos import Combo
from .data import BenchData

_ns = time.monotonic_ns


@dataclass
class StageTime:
    stage: str
    operator: str
    params: dict[str, Any]
    records: int
    bytes_in: int | None
    bytes_out: int | None
    start_ns: int
    end_ns: int


@dataclass
class ComboResult:
    combo: Combo
    iterations: list[list[StageTime]] = field(default_factory=list)
    error: str | None = None
    wire_done: bool = False  # every iteration also went through NATS (set by the transport phase)
    digest: str | None = None  # of the serialized payloads: equal digests = byte-identical formats


def _chunks(values: list[Any], size: int) -> list[list[Any]]:
    return [values[i:i + size] for i in range(0, len(values), size)]


def _timed(op: Operator, chunks: list[list[Any]], schema: Any
           ) -> tuple[list[list[Any]], int, int, list[str]]:
    """Run ``op`` over every chunk, as a pipeline runs it; (outputs, start, end, rejection reasons)."""
    process = Pipeline(TestingSource(()), [op], name="codec-timing").process_batch
    errors: list[str] = []
    start = _ns()
    out = []
    for chunk in chunks:
        b = process(Batch(chunk, schema=schema))
        out.append(b.values)
        if b.rejected:
            errors.append(b.rejected[0].error)
    end = _ns()
    return out, start, end, errors


def round_trip_error(decoded: list[Any], values: list[Any], fmt: str, schema: Any) -> str | None:
    """Why decoded differs from the input (the first differing record and field), or None when it equals it;
    for typed formats, in the schema's shape (absent optional fields read as None; msgpack-array, positional
    at the top level only, there)."""
    if decoded == values:
        return None
    from ..schema import RecordSchema, with_defaults

    if isinstance(schema, RecordSchema) and FORMATS[fmt].typed:
        fill = with_defaults(schema)
        values = [fill(v) for v in values]
    elif isinstance(schema, RecordSchema) and FORMATS[fmt].needs_schema:
        values = [{name: v.get(name) for name in schema.names} if type(v) is dict else v for v in values]
    return first_difference(decoded, values)


def first_difference(got: list[Any], wanted: list[Any]) -> str | None:
    """The first place two lists of records differ, as a reader finds it: the record's index, the field's path
    and both values, with their types when those differ.

    >>> first_difference([{"a": 1, "b": [1, 2]}], [{"a": 1, "b": [1, 3]}])
    'record 0, field b[1]: 3 in the input, 2 decoded'
    >>> first_difference([{"a": "1"}], [{"a": 1, "b": None}])
    "record 0, field a: 1 (int) in the input, '1' (str) decoded"
    """
    if len(got) != len(wanted):
        return f"{len(got)} records decoded from {len(wanted)}"
    for i, (g, w) in enumerate(zip(got, wanted, strict=True)):
        where = _difference(g, w, "")
        if where is not None:
            path, gv, wv = where
            field = f", field {path}" if path else ""
            typed = type(gv) is not type(wv) and _ABSENT not in (gv, wv)
            return (f"record {i}{field}: {_shown(wv, typed)} in the input, {_shown(gv, typed)} decoded")
    return None


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


_ABSENT = _Absent()


def _difference(got: Any, wanted: Any, path: str) -> tuple[str, Any, Any] | None:
    if isinstance(got, dict) and isinstance(wanted, dict):
        for key in [*wanted, *(k for k in got if k not in wanted)]:
            sub = f"{path}.{key}" if path else str(key)
            found = _difference(got.get(key, _ABSENT), wanted.get(key, _ABSENT), sub)
            if found is not None:
                return found
        return None
    if isinstance(got, (list, tuple)) and isinstance(wanted, (list, tuple)):
        for j, (g, w) in enumerate(zip(got, wanted, strict=False)):
            found = _difference(g, w, f"{path}[{j}]")
            if found is not None:
                return found
        return None if len(got) == len(wanted) else (path, f"{len(got)} items", f"{len(wanted)} items")
    return None if got == wanted else (path, got, wanted)  # 1 and 1.0 are equal for a round trip


def _shown(value: Any, typed: bool, limit: int = 60) -> str:
    text = repr(value) if isinstance(value, (str, bytes, _Absent)) else str(value)
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return f"{text} ({type(value).__name__})" if typed else text


def _nbytes(chunks: list[list[bytes]]) -> int:
    return sum(sum(map(len, c)) for c in chunks)


def batch_size_for(raw_bytes: float) -> int:
    """Batches of about 1 MB of raw data, 1..1000 records, as a pipeline would carry them."""
    return max(1, min(1000, int(1_000_000 / max(raw_bytes, 1.0))))


def time_codecs(data: BenchData, combos: list[Combo], repetitions: int, iterations: int,
                dictionaries: dict[str, str] | None = None,
                progress: Callable[[Combo], None] | None = None,
                into: dict[Combo, ComboResult] | None = None) -> list[ComboResult]:
    """Time every combination over ``iterations`` x ``repetitions`` (plus one warm-up iteration).

    Results accumulate in ``into`` (one entry per combination, an iteration at a time), so an
    interrupted run still has every iteration that finished. ``progress(combo)`` is called
    after each combination's iteration, the warm-up included.
    """
    values = data.values(repetitions)
    raw_total = round(data.raw_bytes * repetitions)
    results = into if into is not None else {}
    results.update({c: ComboResult(c) for c in combos})
    # Serialize/deserialize depend on the format and on how many records go in one message.
    groups = list(dict.fromkeys((c.format, c.records_per_message) for c in combos))
    by_group = {g: [c for c in combos if (c.format, c.records_per_message) == g] for g in groups}
    size = batch_size_for(data.raw_bytes)
    inputs = {k: _chunks(values, max(k, size // k * k)) for k in {c.records_per_message for c in combos}}
    schema = data.fields
    ops: dict[Combo, tuple[Compress | None, Decompress | None]] = {}
    for c in combos:
        if c.codec == "none":
            ops[c] = (None, None)
            continue
        d = (dictionaries or {}).get(c.format) if c.dictionary else None
        ops[c] = (Compress(c.codec, c.level, dictionary=d), Decompress(c.codec, dictionary=d))
    gc_was_enabled = gc.isenabled()
    try:
        for it in range(iterations + 1):  # iteration 0 is the warm-up
            for fmt, k in groups:
                chunks = inputs[k]
                positional = schema if FORMATS[fmt].needs_schema else None
                try:
                    ser, deser = Serialize(fmt, schema=positional), Deserialize(fmt, schema=positional,
                                                                                allow_pickle=True)
                except ConfigError as exc:  # a schema'd format the data's schema cannot drive
                    for c in by_group[(fmt, k)]:
                        results[c].error = results[c].error or f"{fmt}: {exc.detail}"
                    continue
                framing: list[StageTime] = []
                gc.collect()
                gc.disable()  # a collection in the middle of a stage would be charged to it
                if k > 1:
                    pack, unpack = Pack(k), Unpack()
                    chunks, p0, p1, _ = _timed(pack, chunks, schema)
                payloads, s0, s1, ser_err = _timed(ser, chunks, schema)
                decoded, d0, d1, deser_err = _timed(deser, payloads, schema)
                if k > 1:
                    decoded, q0, q1, unpack_err = _timed(unpack, decoded, schema)
                    deser_err += unpack_err
                gc.enable()
                if k > 1:
                    framing = [StageTime("pack", pack.name, pack.params, repetitions, None, None, p0, p1),
                               StageTime("unpack", unpack.name, unpack.params, repetitions, None, None, q0, q1)]
                ser_bytes = _nbytes(payloads)
                ser_row = StageTime("serialize", ser.name, ser.params, repetitions, raw_total, ser_bytes, s0, s1)
                deser_row = StageTime("deserialize", deser.name, deser.params, repetitions, ser_bytes, None, d0, d1)
                differs = None if it else round_trip_error(_flat(decoded), values, fmt, schema)
                format_error = _first(ser_err + deser_err) or (
                    f"{fmt}: decoded records differ from the input: {differs}" if differs else None)
                digest = _digest(payloads) if it == 0 else None
                for c in by_group[(fmt, k)]:
                    r = results[c]
                    if digest is not None:
                        r.digest = digest
                    if progress is not None:
                        progress(c)
                    if r.error:
                        continue
                    if format_error:
                        r.error = format_error
                        continue
                    comp, decomp = ops[c]
                    if comp is None or decomp is None:
                        rows = [*framing[:1], ser_row, deser_row, *framing[1:]]
                    else:
                        gc.collect()
                        gc.disable()
                        packed, c0, c1, c_err = _timed(comp, payloads, schema)
                        unpacked, u0, u1, u_err = _timed(decomp, packed, schema)
                        gc.enable()
                        if c_err or u_err:
                            r.error = _first(c_err + u_err)
                            continue
                        if it == 0 and unpacked != payloads:
                            r.error = f"{c.chain}: decompressed payloads differ from the serialized ones"
                            continue
                        comp_bytes = _nbytes(packed)
                        rows = [*framing[:1], ser_row,
                                StageTime("compress", comp.name, comp.params, repetitions, ser_bytes, comp_bytes, c0, c1),
                                StageTime("decompress", decomp.name, decomp.params, repetitions, comp_bytes, ser_bytes,
                                          u0, u1),
                                deser_row, *framing[1:]]
                    if it:
                        r.iterations.append(rows)
    finally:
        if gc_was_enabled:
            gc.enable()
    return list(results.values())


def _digest(chunks: list[list[bytes]]) -> str:
    """A fingerprint of every serialized payload: two formats with the same one wrote the same bytes."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    for chunk in chunks:
        for payload in chunk:
            h.update(len(payload).to_bytes(8, "little"))
            h.update(payload)
    return h.hexdigest()


def _flat(chunks: list[list[Any]]) -> list[Any]:
    return [v for c in chunks for v in c]


def _first(errors: list[str]) -> str | None:
    return errors[0] if errors else None
