"""The records a benchmark encodes: a built-in dataset or the user's own file.

A benchmark cycles a sample of distinct records (up to 1000) through its N
repetitions, so sizes are means over real variety and every figure is deterministic
for the dataset's seed. Raw size is the dataset's declared raw size; for a user file,
which has no struct to count, it is the record's compact JSON size (said in the table).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import WirepipeError
from ..datasets import get_dataset
from .combos import SAMPLE_RECORDS

if TYPE_CHECKING:
    from ..codecs.formats import Schema


@dataclass
class BenchData:
    name: str
    records: list[Any]
    raw_bytes: float  # mean raw bytes per record
    fields: Schema  # a typed RecordSchema, or only the field names when none could be inferred
    raw_note: str = "raw"

    def values(self, n: int) -> list[Any]:
        """``n`` repetitions cycling the sample."""
        k = len(self.records)
        return (self.records * (n // k + 1))[:n]


def from_dataset(name: str, seed: int = 0) -> BenchData:
    ds = get_dataset(name)
    sample = 10 if name == "large_vectors" else SAMPLE_RECORDS
    records = ds.sample(sample, seed=seed)
    return BenchData(name, records, ds.raw_size(records) / len(records), ds.schema)


def from_file(path: Path) -> BenchData:
    """Records from a JSONL file (``$base64`` bytes restored) or a Parquet file (rows as dicts)."""
    import orjson

    from ..codecs.formats import json_default, restore_bytes

    if not path.exists():
        raise WirepipeError(f"--input {path}: no such file")
    records: list[Any] = []
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        records = pq.read_table(path).slice(0, SAMPLE_RECORDS).to_pylist()
    else:
        with open(path, "rb") as f:
            for line in f:
                if line.strip():
                    try:
                        records.append(restore_bytes(orjson.loads(line)))
                    except orjson.JSONDecodeError as exc:
                        raise WirepipeError(f"--input {path}: line {len(records) + 1} is not JSON ({exc})") from None
                if len(records) >= SAMPLE_RECORDS:
                    break
    if not records:
        raise WirepipeError(f"--input {path}: no records")
    fields = _infer_schema(records, path.stem)
    raw = sum(len(orjson.dumps(r, default=json_default)) for r in records) / len(records)
    return BenchData(path.stem, records, raw, fields, raw_note="JSON")


def _infer_schema(records: list[Any], name: str) -> Schema:
    """The typed schema of the records as Arrow infers it (nullable only where a null was seen),
    so the schema'd formats can run on the user's data; their field names when Arrow cannot."""
    if not isinstance(records[0], dict):
        return None
    import pyarrow as pa

    from ..schema import Field, RecordSchema, SchemaError, from_arrow

    try:
        table = pa.Table.from_pylist(records)
        schema = pa.schema([f.with_nullable(table.column(f.name).null_count > 0) for f in table.schema])
        inferred = from_arrow(schema, name="".join(p.title() for p in name.replace("-", "_").split("_")) or "Record")
        return RecordSchema(inferred.name, tuple(Field(f.name, _required_inside(f.type)) for f in inferred.fields))
    except (pa.ArrowException, SchemaError, TypeError, ValueError):
        return tuple(records[0])


def _required_inside(t: Any) -> Any:
    """``t`` with list items and nested fields required (Arrow infers them all nullable)."""
    from ..schema import Field, RecordSchema, Type

    if t.kind == "list":
        return Type("list", item=_required_inside(t.item).required(), optional=t.optional)
    if t.kind == "record":
        fields = tuple(Field(f.name, _required_inside(f.type).required()) for f in t.record.fields)
        return Type("record", record=RecordSchema(t.record.name, fields), optional=t.optional)
    return t
