"""The records a benchmark encodes: a built-in dataset or the user's own file.

A benchmark cycles a sample of distinct records (up to 1000) through its N
repetitions, so sizes are means over real variety and every figure is deterministic
for the dataset's random seed (``--seed``). Raw size is the dataset's declared raw size; for a user file,
which has no struct to count, it is the record's compact JSON size (said in the table).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import MissingInput, WirepipeError
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
        from .timing import repetitions

        return repetitions(self.records, n)


def from_dataset(name: str, seed: int = 0) -> BenchData:
    ds = get_dataset(name)
    sample = 10 if name == "large_vectors" else SAMPLE_RECORDS
    records = ds.sample(sample, seed=seed)
    return BenchData(name, records, ds.raw_size(records) / len(records), ds.schema)


def from_file(path: Path) -> BenchData:
    """A sample of a JSONL or Parquet file's records, with their typed schema (``schema.infer_schema``)."""
    import orjson

    from ..codecs.formats import json_default

    records = read_records(path, SAMPLE_RECORDS, what="--input ")
    fields = _infer_schema(records, path.stem)
    raw = sum(len(orjson.dumps(r, default=json_default)) for r in records) / len(records)
    return BenchData(path.stem, records, raw, fields, raw_note="JSON")


def read_records(path: Path, limit: int | None = None, what: str = "") -> list[Any]:
    """Up to ``limit`` records of a JSONL file (``$base64`` bytes restored) or a Parquet file (rows as dicts).

    ``MissingInput`` when the file is not there, ``WirepipeError`` for a line that is not JSON or no records;
    ``what`` starts each message (``--input ``)."""
    import orjson

    from ..codecs.formats import restore_bytes

    if not path.exists():
        raise MissingInput(f"{what}{path}: no such file")
    records: list[Any] = []
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        records = (table if limit is None else table.slice(0, limit)).to_pylist()
    else:
        with open(path, "rb") as f:
            for line in f:
                if line.strip():
                    try:
                        records.append(restore_bytes(orjson.loads(line)))
                    except orjson.JSONDecodeError as exc:
                        raise WirepipeError(f"{what}{path}: line {len(records) + 1} is not JSON ({exc})") from None
                if limit is not None and len(records) >= limit:
                    break
    if not records:
        raise WirepipeError(f"{what}{path}: no records")
    return records


def schema_name(stem: str) -> str:
    """A record name from a file name: ``web-events`` -> ``WebEvents``."""
    return "".join(p.title() for p in stem.replace("-", "_").split("_")) or "Record"


def _infer_schema(records: list[Any], name: str) -> Schema:
    """The records' typed schema, so the schema'd formats can run on the user's data; their field names
    when none can be inferred (records that are not dicts, a field null everywhere)."""
    if not isinstance(records[0], dict):
        return None
    from ..schema import SchemaError, infer_schema

    try:
        return infer_schema(records, schema_name(name))
    except SchemaError:
        return tuple(records[0])
