"""In-process timing of the codec chain: serialize, compress, decompress, deserialize.

Each stage runs the same operators a pipeline runs, over the N repetitions in batches
(the way a pipeline sees them), through the one timing harness (``bench.timing``: the
collector as in a run). Serialize and deserialize depend only on the format, so they are
timed once per format per iteration and shared by that format's codec rows; compress and
decompress are timed per codec and level. Iterations are the outer loop, so drift on a
busy machine spreads over every combination alike. The first iteration (the warm-up)
also checks the round trip: a combination whose output differs from its input (or that
rejects a record) is reported as failed with the reason, never dropped (``round_trip``: the
same check the transport makes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...codecs.formats import FORMATS
from ...core.errors import ConfigError
from ...core.stages import Stage
from ...operators.compress import Compress
from ...operators.decompress import Decompress
from ...operators.deserialize import Deserialize
from ...operators.pack import Pack
from ...operators.serialize import Serialize
from ...operators.unpack import Unpack
from .combos import Combo
from .data import BenchData
from .round_trip import round_trip_error
from .timing import Timed, batch_size_for, chunks, time_batches


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


def _nbytes(batches: list[list[bytes]]) -> int:
    return sum(sum(map(len, c)) for c in batches)


def _row(stage: str, op: Any, timed: Timed, records: int, bytes_in: int | None, bytes_out: int | None) -> StageTime:
    return StageTime(stage, op.name, op.params, records, bytes_in, bytes_out, timed.start_ns, timed.end_ns)


@dataclass
class _FormatTiming:
    """One iteration of a format (and its framing): the rows its codec rows share, the payloads they compress."""

    rows_before: list[StageTime]  # pack, serialize
    rows_after: list[StageTime]  # deserialize, unpack
    payloads: list[list[bytes]]
    error: str | None = None
    digest: str | None = None


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
    results = into if into is not None else {}
    results.update({c: ComboResult(c) for c in combos})
    # Serialize/deserialize depend on the format and on how many records go in one message.
    by_group: dict[tuple[str, int], list[Combo]] = {}
    for c in combos:
        by_group.setdefault((c.format, c.records_per_message), []).append(c)
    size = batch_size_for(data.raw_bytes)
    inputs = {k: chunks(values, max(k, size // k * k)) for k in {c.records_per_message for c in combos}}
    ops = _codec_operators(combos, dictionaries or {})
    for it in range(iterations + 1):  # iteration 0 is the warm-up
        for (fmt, k), members in by_group.items():
            timing = _time_format(fmt, k, inputs[k], data, values, repetitions, warm_up=it == 0)
            for c in members:
                r = results[c]
                if timing.digest is not None:
                    r.digest = timing.digest
                if not r.error:
                    _add_iteration(r, ops[c], timing, repetitions, it)
                if progress is not None:  # after the step: the progress journal lists what finished
                    progress(c)
    return list(results.values())


def _add_iteration(r: ComboResult, ops: tuple[Compress | None, Decompress | None], timing: _FormatTiming,
                   repetitions: int, it: int) -> None:
    """One iteration of a combination on its format's timing (iteration 0, the warm-up, only checks), or why it
    failed."""
    r.error = timing.error
    if timing.error:
        return
    comp, decomp = ops
    rows: list[StageTime] | str = [*timing.rows_before, *timing.rows_after]
    if comp is not None and decomp is not None:
        rows = _time_codec(r.combo, comp, decomp, timing, repetitions, warm_up=it == 0)
    if isinstance(rows, str):
        r.error = rows
    elif it:
        r.iterations.append(rows)


def _codec_operators(combos: list[Combo], dictionaries: dict[str, str]
                     ) -> dict[Combo, tuple[Compress | None, Decompress | None]]:
    """Each combination's compress and decompress operators (none without a codec), built once for every
    iteration."""
    ops: dict[Combo, tuple[Compress | None, Decompress | None]] = {}
    for c in combos:
        if c.codec == "none":
            ops[c] = (None, None)
            continue
        d = dictionaries.get(c.format) if c.dictionary else None
        ops[c] = (Compress(c.codec, c.level, dictionary=d), Decompress(c.codec, dictionary=d))
    return ops


def _time_format(fmt: str, k: int, batches: list[list[Any]], data: BenchData, values: list[Any],
                 repetitions: int, *, warm_up: bool) -> _FormatTiming:
    """[pack,] serialize, deserialize[, unpack] over the repetitions; on the warm-up, the round trip checked
    and the payloads' digest taken."""
    schema = data.fields
    positional = schema if FORMATS[fmt].needs_schema else None
    try:
        ser, deser = Serialize(fmt, schema=positional), Deserialize(fmt, schema=positional, allow_pickle=True)
    except ConfigError as exc:  # a schema'd format the data's schema cannot drive
        return _FormatTiming([], [], [], error=f"{fmt}: {exc.detail}")
    before: list[StageTime] = []
    after: list[StageTime] = []
    if k > 1:
        pack = Pack(k)
        packed = time_batches(pack, batches, schema=schema)
        before.append(_row(Stage.PACK, pack, packed, repetitions, None, None))
        batches = packed.outputs
    serialized = time_batches(ser, batches, schema=schema)
    # the decoded records are read only by the round-trip check and by unpack
    deserialized = time_batches(deser, serialized.outputs, schema=schema, keep=warm_up or k > 1)
    decoded, errors = deserialized, serialized.errors + deserialized.errors
    if k > 1:
        unpack = Unpack()
        decoded = time_batches(unpack, deserialized.outputs, schema=schema, keep=warm_up)
        errors += decoded.errors
        after.append(_row(Stage.UNPACK, unpack, decoded, repetitions, None, None))
    ser_bytes = _nbytes(serialized.outputs)
    before.append(_row(Stage.SERIALIZE, ser, serialized, repetitions, round(data.raw_bytes * repetitions), ser_bytes))
    after.insert(0, _row(Stage.DESERIALIZE, deser, deserialized, repetitions, ser_bytes, None))
    differs = round_trip_error(_flat(decoded.outputs), values) if warm_up else None
    error = _first(errors) or (f"{fmt}: decoded records differ from the input: {differs}" if differs else None)
    return _FormatTiming(before, after, serialized.outputs, error, _digest(serialized.outputs) if warm_up else None)


def _time_codec(c: Combo, comp: Compress, decomp: Decompress, timing: _FormatTiming, repetitions: int, *,
                warm_up: bool) -> list[StageTime] | str:
    """The combination's rows with its compress and decompress timed over the format's payloads, or why it
    failed."""
    packed = time_batches(comp, timing.payloads)
    unpacked = time_batches(decomp, packed.outputs, keep=warm_up)  # compared with the payloads on the warm-up
    if packed.errors or unpacked.errors:
        return (packed.errors + unpacked.errors)[0]
    if warm_up and unpacked.outputs != timing.payloads:
        return f"{c.chain}: decompressed payloads differ from the serialized ones"
    ser_bytes, comp_bytes = _nbytes(timing.payloads), _nbytes(packed.outputs)
    return [*timing.rows_before, _row(Stage.COMPRESS, comp, packed, repetitions, ser_bytes, comp_bytes),
            _row(Stage.DECOMPRESS, decomp, unpacked, repetitions, comp_bytes, ser_bytes), *timing.rows_after]


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
