"""A CSV column: its type (given by the schema or inferred from the file's first block) and the raw bytes
pyarrow read converted to it, vectorized, with the reason each value that does not fit is dead-lettered
(``connectors/csv.py`` reads the files)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from ..schema import Kind, RecordSchema, Type

if TYPE_CHECKING:
    from .csv import CsvSourceConfig

TEXT_KINDS = frozenset({Kind.STRING, Kind.BYTES})  # kept as text: null only with strings_can_be_null


class Column(NamedTuple):
    name: str
    type: Type
    inferred: bool  # from the first block, not a given schema (said in a reason)


def text_of(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "replace")


def columns_schema(columns: list[Column], name: str = "Record") -> RecordSchema:
    """The typed schema of a file's columns (what ``wirepipe schema infer`` and the source's log say)."""
    from ..schema import Field as SchemaField

    return RecordSchema(name, tuple(SchemaField(c.name, c.type) for c in columns))


def inferred_type(arrow: Any, text_null: bool) -> Type:
    """The type an inferred column is read as: pyarrow's int64, double and bool, optional; text for the rest
    (strings, dates and timestamps as written, a column empty in the whole first block), optional only when
    ``strings_can_be_null`` (else it is never null)."""
    import pyarrow.types as pt

    if pt.is_int64(arrow):
        return Type(Kind.INT64, optional=True)
    if pt.is_floating(arrow):
        return Type(Kind.FLOAT64, optional=True)
    if pt.is_boolean(arrow):
        return Type(Kind.BOOL, optional=True)
    return Type(Kind.STRING, optional=text_null)


# --- a column of raw bytes to its type ---------------------------------------------------------------


def convert(raw: Any, column: Column, config: CsvSourceConfig) -> tuple[Any, dict[int, str]]:
    """A column as pyarrow read it (raw bytes) in ``column``'s type, with the reason for each row whose value
    does not fit (null in the array). Vectorized; a failing cast is split in halves to find its rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from ..schema.types import arrow_type

    t = column.type
    target = arrow_type(t)
    bad: dict[int, str] = {}
    nullable = t.kind not in TEXT_KINDS or config.strings_can_be_null
    if t.kind in (Kind.BYTES, Kind.FIXED):
        array = raw
    else:
        array, why = _cast(raw, pa.string(), f"column {column.name!r} is not UTF-8 text (give the source its "
                                             "`encoding:`)")
        bad |= why
    if nullable and len(array):
        array = pc.if_else(pc.is_in(array, value_set=pa.array(config.null_values, array.type)),
                           pa.scalar(None, array.type), array)
    if t.kind is Kind.BOOL:
        text = pc.utf8_trim_whitespace(array)
        yes = pc.is_in(text, value_set=pa.array(config.true_values, pa.string()))
        no = pc.is_in(text, value_set=pa.array(config.false_values, pa.string()))
        neither = pc.and_(pc.is_valid(text), pc.invert(pc.or_(yes, no)))
        for j in pc.indices_nonzero(neither).to_pylist():
            bad.setdefault(j, _misfit(column, array[j].as_py(), f"neither true ({', '.join(config.true_values)}) nor "
                                                               f"false ({', '.join(config.false_values)})"))
        array = pc.if_else(yes, True, pc.if_else(no, False, pa.scalar(None, pa.bool_())))
    elif t.kind not in TEXT_KINDS:
        source = pc.utf8_trim_whitespace(array) if t.kind is not Kind.FIXED else array
        array, why = _cast(source, target, None, column)
        for j, reason in why.items():
            bad.setdefault(j, reason)
    if not t.optional and array.null_count:
        for j in pc.indices_nonzero(pc.is_null(array)).to_pylist():
            bad.setdefault(j, f"column {column.name!r} is empty ({text_of(raw[j].as_py())!r}) where the schema requires a value "
                              f"(`{column.name}?: {t}` makes it optional)")
    return array, bad


def _cast(array: Any, target: Any, reason: str | None, column: Column | None = None) -> tuple[Any, dict[int, str]]:
    """``array`` cast to ``target``; the rows that do not cast become null, each with ``reason`` (or what
    does not fit ``column``). The rows are found by casting halves: a few casts for a few bad rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        return pc.cast(array, target), {}
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    rows = _failing(array, target, 0)
    mask = pc.is_in(pa.array(range(len(array))), value_set=pa.array(rows, pa.int64()))
    cleared = pc.if_else(mask, pa.scalar(None, array.type), array)
    why = {j: reason if reason is not None else _misfit(column, array[j].as_py(), f"not {_an(target)}")  # type: ignore[arg-type]
           for j in rows}
    return pc.cast(cleared, target), why


def _failing(array: Any, target: Any, offset: int) -> list[int]:
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        pc.cast(array, target)
        return []
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        if len(array) == 1:
            return [offset]
    half = len(array) // 2
    return _failing(array.slice(0, half), target, offset) + _failing(array.slice(half), target, offset + half)


def _an(arrow: Any) -> str:
    import pyarrow as pa

    from ..schema import from_arrow

    spelled = str(from_arrow(pa.schema([pa.field("x", arrow, nullable=False)])).fields[0].type)
    return f"an {spelled}" if spelled[0] in "aeiou" else f"a {spelled}"


def _misfit(column: Column, value: Any, what: str) -> str:
    shown = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    why = f"column {column.name!r}: {shown!r} is {what}"
    if column.inferred:
        why += " (the type inferred from the file's first block; give the source a `schema:` to type it otherwise)"
    return why
