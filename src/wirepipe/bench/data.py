"""The records a benchmark encodes: a built-in dataset or the user's own file.

A benchmark cycles a sample of distinct records (up to 1000) through its N
repetitions, so sizes are means over real variety and every figure is deterministic
for the dataset's seed. Raw size is the dataset's declared raw size; for a user file,
which has no struct to count, it is the record's compact JSON size (said in the table).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..datasets import get_dataset
from ..errors import WirepipeError
from .plan import SAMPLE_RECORDS


@dataclass
class BenchData:
    name: str
    records: list[Any]
    raw_bytes: float  # mean raw bytes per record
    fields: tuple[str, ...] | None
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
    fields = tuple(records[0]) if isinstance(records[0], dict) else None
    raw = sum(len(orjson.dumps(r, default=json_default)) for r in records) / len(records)
    return BenchData(path.stem, records, raw, fields, raw_note="JSON")
