"""The records a benchmark encodes: a sample of a built-in dataset or of the user's own file.

A benchmark measures a sample of distinct records (up to 1000), cycled through its N repetitions
when N is larger and cut to N when it is smaller, so sizes are means over real variety and every
figure is deterministic for the random seed (``--seed``). A dataset's sample is its first records
for the seed; a file's is drawn at random, in random order, from all of its records (reading the
file once to count them), so a file sorted by time or by key is measured on all of it, not on its
head. What was measured is said in words (``BenchData.sample``) in the plan, ``bench.md`` and the
report. Raw size is the dataset's declared raw size; for a user file, which has no struct to count,
it is the record's compact JSON size (said in the table).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...core.errors import MissingInput, WirepipeError
from ...datasets import get_dataset
from .combos import SAMPLE_RECORDS, default_repetitions

if TYPE_CHECKING:
    from ...codecs.formats import Schema


@dataclass
class BenchData:
    name: str
    records: list[Any]  # the sample measured
    raw_bytes: float  # mean raw bytes per record of the sample
    fields: Schema  # a typed RecordSchema, or only the field names when none could be inferred
    raw_note: str = "raw"
    seed: int = 0
    file: str | None = None  # the file's name (None: a built-in dataset's generated records)
    total: int | None = None  # the file's records, of which ``records`` is a sample
    repetitions: int = 0  # N, once the plan is known (``for_plan``)
    raw_of: Callable[[Any], float] = field(default=lambda _r: 0.0, repr=False)  # one record's raw bytes

    def values(self, n: int) -> list[Any]:
        """``n`` repetitions cycling the sample."""
        from .timing import repetitions

        return repetitions(self.records, n)

    def for_plan(self, repetitions: int | None, scale: float = 1.0) -> BenchData:
        """The data a plan measures: N repetitions (``repetitions``, else about 4 MB of raw data per iteration,
        ``default_repetitions``), over the sample's first N records when N is smaller than the sample."""
        n = repetitions or default_repetitions(self.raw_bytes, scale)
        if n >= len(self.records):
            return replace(self, repetitions=n)
        if self.file is not None and len(self.records) == self.total:  # all of a small file, in its order
            import random

            records = random.Random(self.seed).sample(self.records, n)
        else:  # a random sample in random order, or a dataset's first records: its first n
            records = self.records[:n]
        return replace(self, records=records, raw_bytes=sum(map(self.raw_of, records)) / n, repetitions=n)

    @property
    def sample(self) -> str:
        """What was measured, in words: ``1,000 of the 27,004 records of flights.jsonl, drawn at random (seed 0),
        each once per iteration (N = 1,000)``."""
        k = len(self.records)
        if self.file is None:
            what = f"{k:,} {self.name} records generated with seed {self.seed}"
        elif k == self.total:
            what = f"all {k:,} records of {self.file}"
        else:
            what = f"{k:,} of the {self.total:,} records of {self.file}, drawn at random (seed {self.seed})"
        n = self.repetitions or k
        return what + (f", each once per iteration (N = {n:,})" if n == k
                       else f", cycled through the N = {n:,} repetitions of an iteration")


def from_dataset(name: str, seed: int = 0) -> BenchData:
    ds = get_dataset(name)
    sample = 10 if name == "large_vectors" else SAMPLE_RECORDS
    records = ds.sample(sample, seed=seed)
    return BenchData(name, records, ds.raw_size(records) / len(records), ds.schema, seed=seed,
                     raw_of=lambda r: ds.raw_size([r]))


def from_file(path: Path, seed: int = 0) -> BenchData:
    """A random sample of a file's records (``sample_records``: JSONL, Parquet, CSV ...), with their typed schema
    (``schema.infer_schema``)."""
    from ...connectors.files import file_stem

    records, total = sample_records(path, SAMPLE_RECORDS, seed, what="--input ")
    fields = _infer_schema(records, file_stem(path))
    raw = sum(map(_json_size, records)) / len(records)
    return BenchData(file_stem(path), records, raw, fields, raw_note="JSON", seed=seed, file=path.name, total=total,
                     raw_of=_json_size)


def _json_size(record: Any) -> int:
    import orjson

    from ...codecs.formats import json_default

    return len(orjson.dumps(record, default=json_default))


def sample_records(path: Path, k: int, seed: int = 0, what: str = "") -> tuple[list[Any], int]:
    """Up to ``k`` records of a file of records (JSONL, Parquet, CSV: ``connectors.files``) drawn at random
    (seeded), in random order (any first n of them are a random sample too), and how many records the file has;
    every record, in the file's order, when it has ``k`` or fewer.

    The file is read twice, the first time only to count its records, so memory holds the sample and not the
    file. Errors as ``read_records``."""
    import random

    kind = _file_type(path, what)
    if kind == "parquet":
        import pyarrow.parquet as pq

        total = pq.ParquetFile(path).metadata.num_rows
        if total <= k:
            return read_records(path, what=what), total
        picked = random.Random(seed).sample(range(total), k)
        return pq.read_table(path).take(picked).to_pylist(), total
    if kind == "jsonl":
        total = _count_lines(path, what)
        if total <= k:
            return read_records(path, what=what), total
        picked = random.Random(seed).sample(range(total), k)
        by_number = dict(_jsonl(path, what, set(picked)))
        return [by_number[i] for i in picked], total
    total = sum(1 for _ in _read(path, what))
    if total <= k:
        return read_records(path, what=what), total
    picked = random.Random(seed).sample(range(total), k)
    wanted = set(picked)
    by_number = {i: record for i, record in enumerate(_read(path, what)) if i in wanted}
    return [by_number[i] for i in picked], total


def _file_type(path: Path, what: str) -> str:
    """The source type that reads ``path`` (``MissingInput`` when it is not there, ``ConfigError`` naming the
    types that are read when its name says none)."""
    from ...connectors.files import file_type

    if not path.exists():
        raise MissingInput(f"{what}{path}: no such file")
    return file_type(path, what.strip() or None)


def _count_lines(path: Path, what: str) -> int:
    """Records (non-blank lines) of a JSONL file, without parsing them; ``WirepipeError`` when there are none."""
    from ...connectors.jsonl import bounded_lines

    with open(path, "rb") as f:
        total = sum(1 for _ in bounded_lines(f))
    if not total:
        raise WirepipeError(f"{what}{path}: no records")
    return total


def read_records(path: Path, limit: int | None = None, what: str = "") -> list[Any]:
    """Up to ``limit`` records of a file of records: JSONL (``$base64`` bytes restored), Parquet (rows as dicts),
    CSV (typed as the ``csv`` source types them, inferred from up to ``WIDE_BLOCK`` of the file), or another
    type a file source reads (``connectors.files``).

    ``MissingInput`` when the file is not there, ``ConfigError`` for a type no source reads, ``WirepipeError``
    for a record that cannot be read (a line that is not JSON, a bad CSV row) or no records; ``what`` starts
    each message (``--input ``)."""
    kind = _file_type(path, what)
    records: list[Any] = []
    if kind == "parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        records = (table if limit is None else table.slice(0, limit)).to_pylist()
    else:
        for _, record in _jsonl(path, what) if kind == "jsonl" else enumerate(_read(path, what)):
            records.append(record)
            if limit is not None and len(records) >= limit:
                break
    if not records:
        raise WirepipeError(f"{what}{path}: no records")
    return records


WIDE_BLOCK = 16 << 20  # a CSV file's types inferred from up to this much of it (the source's default: 1 MiB)


def _read(path: Path, what: str) -> Iterator[Any]:
    """The records of a file as the source of its type reads them; ``WirepipeError`` with the reason of the
    first one it cannot read."""
    import asyncio

    from ...connectors.files import file_source, file_type

    fields: dict[str, Any] = {"block_size": WIDE_BLOCK} if file_type(path) == "csv" else {}
    source = file_source(path, **fields)
    loop = asyncio.new_event_loop()
    batches = source.batches()
    try:
        loop.run_until_complete(source.open())
        while True:
            try:
                batch = loop.run_until_complete(anext(batches))
            except StopAsyncIteration:
                return
            if batch.rejected:
                raise WirepipeError(f"{what}{batch.rejected[0].error}")
            yield from batch.values
    finally:
        loop.run_until_complete(batches.aclose())
        loop.run_until_complete(source.close())
        loop.close()


def _jsonl(path: Path, what: str, only: set[int] | None = None) -> Iterator[tuple[int, Any]]:
    """(index, record) of a JSONL file's records (blank lines skipped, ``$base64`` bytes restored), only those
    whose index is in ``only`` when given (the others are not parsed); ``WirepipeError`` naming the line that
    is not JSON."""
    import orjson

    from ...codecs.formats import restore_bytes
    from ...connectors.jsonl import MAX_LINE, bounded_lines
    from ...core.limits import size_text

    with open(path, "rb") as f:
        index = -1
        for lineno, line in bounded_lines(f):
            index += 1
            if line is None:
                raise WirepipeError(f"{what}{path}: line {lineno} is longer than {size_text(MAX_LINE)}, the most a JSON "
                                    "line may be")
            if only is not None and index not in only:
                continue
            try:
                yield index, restore_bytes(orjson.loads(line))
            except orjson.JSONDecodeError as exc:
                raise WirepipeError(f"{what}{path}: line {index + 1} is not JSON ({exc})") from None


def schema_name(stem: str) -> str:
    """A record name from a file name: ``web-events`` -> ``WebEvents``."""
    return "".join(p.title() for p in stem.replace("-", "_").split("_")) or "Record"


def _infer_schema(records: list[Any], name: str) -> Schema:
    """The records' typed schema, so the schema'd formats can run on the user's data; their field names
    when none can be inferred (records that are not dicts, a field null everywhere)."""
    if not isinstance(records[0], dict):
        return None
    from ...schema import SchemaError, infer_schema

    try:
        return infer_schema(records, schema_name(name))
    except SchemaError:
        return tuple(records[0])
