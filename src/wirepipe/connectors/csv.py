"""CSV connector: the ``csv`` source.

Read with pyarrow's streaming CSV reader (``pyarrow.csv.open_csv``), one block (``block_size``) at a
time, so a file of any size takes a block's memory; ``.gz``, ``.bz2``, ``.zst`` and ``.lz4`` files are
decompressed as they are read (by their name), ``encoding`` transcodes any other text to UTF-8.

Types. With ``schema:`` (the typed schema, ``wirepipe.schema``) each column has its field's type:
``int32 int64 uint32 float32 float64 bool string bytes bytes[N]``, optional (``?``) where a value may be
null; a CSV column holds no list or nested record. Without one, pyarrow infers each file's columns from
its first block: ``int64``, ``float64``, ``bool`` (optional) or ``string``. Dates, times and
timestamps stay the text the file has (``string``): the typed schema has no time type, and a text as
written is what a JSON Lines file gives too. A column empty in the whole first block is ``string``. The
inferred types are logged per file; ``wirepipe schema infer FILE.csv`` prints them as a schema to give.

Nulls. A value among ``null_values`` (``""``, ``NA``, ``null`` ...) is null in a column that is not text;
in a ``string`` or ``bytes`` column it stays text unless ``strings_can_be_null``.

Bad rows are dead-lettered with the file, the row and why, and the run goes on, as a line of a JSON Lines
file that is not JSON: a row with more or fewer fields than the header, a value that does not fit its
column's type (the record holds the row's text by column), an empty value where the schema requires one,
text that is not UTF-8. Rows are numbered as pyarrow counts them, from 1 with the header and ``skip_rows``
counted, blank lines not: the line number, when no quoted value spans lines. A file that cannot be read
at all (not CSV, a damaged ``.gz``, a row larger than ``block_size``) stops the run with its name, as an
unreadable Parquet file does.
"""

from __future__ import annotations

import codecs
import logging
from collections.abc import AsyncIterator, Generator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, WrapValidator, field_validator

from ..core.batch import RECORDS, Batch
from ..core.errors import ConfigError, WirepipeError
from ..core.models import Size, SourceLimits
from ..core.stores import SchemaFromStore, registered_schema, registry_ref
from ..schema import Kind, RecordSchema, SchemaError, load_schema_file, parse_schema
from ..storage.files import Paths, fspaths, input_files
from .csv_columns import Column, columns_schema, convert, inferred_type, text_of
from .files import FileSource

log = logging.getLogger("wirepipe")

# pyarrow's defaults, spelled out so that the reference shows them
NULL_VALUES = ("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "N/A", "NA",
               "NULL", "NaN", "n/a", "nan", "null")
TRUE_VALUES = ("1", "True", "TRUE", "true")
FALSE_VALUES = ("0", "False", "FALSE", "false")
COMPRESSED = (".gz", ".bz2", ".zst", ".lz4")  # decompressed by pyarrow as they are read
SUFFIXES = tuple(f"{kind}{packed}" for kind in (".csv", ".tsv") for packed in ("", *COMPRESSED))
CSV_KINDS = frozenset({Kind.INT32, Kind.INT64, Kind.UINT32, Kind.FLOAT32, Kind.FLOAT64, Kind.BOOL, Kind.STRING,
                       Kind.BYTES, Kind.FIXED})


class CsvSource(SchemaFromStore, FileSource):
    """Reads CSV files block by block into records (dicts in the file's column order), typed by ``schema``
    or by the types pyarrow infers; bad rows are dead-lettered (see the module doc). A registered schema
    (``schema: registry/NAME@VERSION``) comes from the store the pipeline hands the source, fetched when the
    pipeline opens, before its sink (``fetch_from_stores``), as a deserialize's is."""

    type = "csv"
    config: CsvSourceConfig
    gives = RECORDS

    def __init__(self, path: Paths, **fields: Any) -> None:
        """``fields`` are ``CsvSourceConfig``'s (``schema``, ``delimiter``, ``header``, ``batch_size``, ...)."""
        self._init(CsvSourceConfig, path=fspaths(path), **fields)

    def _configure(self, config: CsvSourceConfig) -> None:
        super()._configure(config)
        self._ref = registry_ref(config.schema_)
        self.schema = config.typed_schema()  # given: the schema'd formats downstream take it

    def check_input(self) -> None:
        """The files are there and, with a schema, their headers name its fields: a usage error before the run
        (a registered schema's, once it is fetched)."""
        for path in input_files(self.config.path):
            if self.schema is not None:
                CsvFile(path, self.config, self.schema).columns()

    async def fetch_from_stores(self) -> None:
        """The registered schema ``schema:`` names, fetched from the store the pipeline handed the source, and the
        files' headers checked against it: a refusal (``ConfigError`` at ``source.schema``) before the pipeline
        opens its outputs."""
        if self._ref is None or self.schema is not None:
            return
        store = self._handed("source")
        registered = await registered_schema(store, self._ref, "source")
        try:
            if not isinstance(registered.schema, RecordSchema):
                raise ValueError("a CSV source needs a typed schema, not field names alone")
            schema = csv_schema(registered.schema)
        except ValueError as exc:
            raise ConfigError(f"{self._ref}: {exc}", path="source.schema") from None
        log.info("source: reading %s as %s (%s) from %s", self.config.path, registered, registered.fingerprint,
                 store.where)
        self.schema = schema
        self.check_input()

    async def batches(self) -> AsyncIterator[Batch]:
        import asyncio

        await self.fetch_from_stores()  # fetched when the pipeline opened (here for a source read on its own)
        left = self.count if self.count is not None else -1  # -1: no count
        seq = 0
        pending = Rows([])
        for path in input_files(self.config.path):
            file = CsvFile(path, self.config, self.schema)
            columns = file.columns()
            if self.schema is None and columns:
                log.info("%s: column types inferred from its first %s (no schema given): %s", path,
                         _bytes(self.config.block_size), columns_schema(columns))
            blocks = file.blocks()
            try:
                # pyarrow parses in a thread, without the GIL: the next block is read while operators run
                while left and (rows := await asyncio.to_thread(next, blocks, None)) is not None:
                    pending = pending.then(rows)
                    start = 0
                    while left and len(pending.values) - start >= (size := self._next_size(left)):
                        part = pending.slice(start, start + size)
                        start += size
                        yield self._batch(part, seq)
                        seq += size
                        left = left - size if left > 0 else left
                        if self.stopping.is_set():
                            return
                    pending = pending.slice(start, len(pending.values))
            finally:
                blocks.close()
        if left and pending.values:
            yield self._batch(pending, seq)

    def _next_size(self, left: int) -> int:
        """The next batch's records: ``batch_size``, or what is left of ``count`` (``left``; -1: no count)."""
        batch_size = self.config.batch_size
        return batch_size if left < 0 else min(batch_size, left)

    def _batch(self, rows: Rows, seq: int) -> Batch:
        batch = Batch(rows.values, meta={"seq": list(range(seq, seq + len(rows.values)))}, schema=self.schema)
        if rows.bad:
            batch.rejected = [batch.reject(i, self.stage, self.type, why) for i, why in rows.bad.items()]
            batch.keep([i for i in range(len(rows.values)) if i not in rows.bad])
        return batch


# --- one file ---------------------------------------------------------------------------------------


@dataclass
class Rows:
    """Rows of a file in its order: records (dicts), and at ``bad`` the rows that could not be read (their
    text) with the reason."""

    values: list[Any]
    bad: dict[int, str] = field(default_factory=dict)

    def then(self, more: Rows) -> Rows:
        """These rows followed by ``more``."""
        if not self.values:
            return more
        n = len(self.values)
        return Rows(self.values + more.values, {**self.bad, **{n + i: why for i, why in more.bad.items()}})

    def slice(self, start: int, stop: int) -> Rows:
        """The rows from ``start`` to ``stop``."""
        return Rows(self.values[start:stop], {i - start: why for i, why in self.bad.items() if start <= i < stop})


class CsvFile:
    """One CSV file as the source's config reads it: its typed columns (``columns``) and its rows, block by
    block (``blocks``)."""

    def __init__(self, path: Path, config: CsvSourceConfig, schema: RecordSchema | None) -> None:
        """``schema``: the source's (given, or registered and fetched), None: the types inferred."""
        self.path = path
        self.config = config
        self.schema = schema
        self._columns: list[Column] | None = None

    @property
    def delimiter(self) -> str:
        if self.config.delimiter is not None:
            return self.config.delimiter
        return "\t" if self.path.name.lower().removesuffix(_packed(self.path)).endswith(".tsv") else ","

    def columns(self) -> list[Column]:
        """The columns in the file's order, typed (reads the first block: the header, and the types when no
        schema gives them). ``ConfigError`` when the header and the schema disagree."""
        if self._columns is None:
            import pyarrow as pa

            schema = self.schema
            try:
                with self._reader() as reader:
                    arrow = reader.schema
            except EmptyFile:
                arrow = pa.schema([])
            try:
                names = arrow.names
            except UnicodeDecodeError:
                raise WirepipeError(f"{self.path}: the header is not UTF-8 text: give the source its `encoding:` "
                                    f"(latin-1, cp1252, utf-16 ...)") from None
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise WirepipeError(f"{self.path}: column(s) {', '.join(map(repr, twice))} more than once in the header: "
                                    "rename them, or give the source `columns:` (with header: true, they replace it)")
            if schema is None:
                text_null = self.config.strings_can_be_null
                self._columns = [Column(f.name, inferred_type(f.type, text_null), True) for f in arrow]
            else:
                self._columns = self._typed_by(schema, names)
        return self._columns

    def _typed_by(self, schema: RecordSchema, names: list[str]) -> list[Column]:
        declared = {f.name: f.type for f in schema.fields}
        extra = [n for n in names if n not in declared]
        missing = [f.name for f in schema.fields if f.name not in names and not f.type.optional]
        if names and (extra or missing):
            problems = ([f"column(s) {', '.join(map(repr, extra))} not in the schema (add them, e.g. "
                         f"`{extra[0]}: string?`)"] if extra else []) + \
                       ([f"no column for its required field(s) {', '.join(map(repr, missing))}"] if missing else [])
            raise ConfigError(f"{self.path}: " + "; ".join(problems) + f" (the header has {', '.join(names)})",
                              path="source.schema")
        columns = [Column(n, declared[n], False) for n in names]
        return columns + [Column(f.name, f.type, False) for f in schema.fields if f.name not in names]

    def _reader(self, text: bool = False, invalid: Any = None) -> Any:
        """pyarrow's streaming reader: types inferred, or every column as raw bytes (``text``) for ``convert``.
        The header row, ``skip_rows`` and the names given are pyarrow's ``ReadOptions``."""
        import pyarrow as pa
        import pyarrow.csv as pcsv

        c = self.config
        names = c.columns
        if names is None and not c.header:
            names = list(self.schema) if self.schema is not None else None
        read = pcsv.ReadOptions(use_threads=False, block_size=c.block_size, skip_rows=c.skip_rows,
                                skip_rows_after_names=1 if c.columns is not None and c.header else 0,
                                column_names=names, autogenerate_column_names=names is None and not c.header,
                                encoding=c.encoding)
        parse = pcsv.ParseOptions(delimiter=self.delimiter, quote_char=c.quote_char or False,
                                  escape_char=c.escape_char or False, double_quote=c.double_quote,
                                  newlines_in_values=True, invalid_row_handler=invalid or _skip)
        convert = pcsv.ConvertOptions(null_values=c.null_values, true_values=c.true_values,
                                      false_values=c.false_values, strings_can_be_null=c.strings_can_be_null,
                                      timestamp_parsers=[])
        if text:
            convert.column_types = {col.name: pa.binary() for col in self.columns()}
            convert.include_columns = [col.name for col in self.columns()]
            convert.include_missing_columns = True
        try:
            stream = pa.input_stream(str(self.path), compression=_compression(self.path))
            return pcsv.open_csv(stream, read_options=read, parse_options=parse, convert_options=convert)
        except (pa.ArrowInvalid, OSError, UnicodeError) as exc:
            if "Empty CSV file" in str(exc):
                raise EmptyFile(str(self.path)) from None
            raise self._unreadable(exc) from None

    def _unreadable(self, exc: BaseException, row: int | None = None) -> WirepipeError:
        if isinstance(exc, FileNotFoundError):
            from ..core.errors import MissingInput

            return MissingInput(f"{self.path}: no such file")
        where = f" from row {row} on" if row is not None else ""
        return WirepipeError(f"{self.path}: not a readable CSV file{where} ({_reason(exc)})")

    def blocks(self) -> Generator[Rows, None, None]:
        """The file's rows, a block at a time: records, and the rows that could not be read with their reason."""
        import pyarrow as pa

        columns = self.columns()
        if not columns:
            return
        invalid: list[tuple[int, str, str]] = []  # (row, text, why) pyarrow skipped, in file order

        def skipped(row: Any) -> str:
            expected = "the header has" if self.config.header or self.config.columns else "there are"
            invalid.append((row.number, row.text, f"{row.actual_columns} fields where {expected} {row.expected_columns} "
                                                  f"columns (a delimiter or a quote out of place?)"))
            return "skip"

        c = self.config
        # the number pyarrow gives the first data row: rows are counted from 1 with the skipped ones and the header
        row = c.skip_rows + (1 if c.header else 0) + 1
        try:
            reader = self._reader(text=True, invalid=skipped)
        except EmptyFile:
            return
        with reader:
            while True:
                try:
                    rb = reader.read_next_batch()
                except StopIteration:
                    break
                except (pa.ArrowInvalid, OSError, UnicodeError) as exc:
                    raise self._unreadable(exc, row) from None
                rows = self._rows(rb, columns, row, invalid)
                row += len(rows.values)
                if rows.values:
                    yield rows
        if invalid:  # rows after the last one read
            yield Rows([text for _, text, _ in invalid],
                       {i: self._where(r, why) for i, (r, _, why) in enumerate(invalid)})

    def _where(self, row: int, why: str) -> str:
        return f"{self.path} row {row}: {why}"

    def _rows(self, rb: Any, columns: list[Column], first: int, invalid: list[tuple[int, str, str]]) -> Rows:
        """A block's rows in file order, numbered from ``first``: its records, with the rows pyarrow skipped
        (``invalid``, taken from the list as they are placed) at their numbers among them."""
        import pyarrow as pa

        arrays: list[Any] = []
        misfits: dict[int, str] = {}
        for i, column in enumerate(columns):
            array, why = convert(rb.column(i), column, self.config)
            arrays.append(array)
            for j, reason in why.items():
                misfits.setdefault(j, reason)
        records = pa.RecordBatch.from_arrays(arrays, names=[c.name for c in columns]).to_pylist()
        for j in misfits:  # the record as it was read: its text by column
            records[j] = {k: text_of(v) for k, v in rb.slice(j, 1).to_pylist()[0].items()}
        values: list[Any] = []
        bad: dict[int, str] = {}
        placed: list[int] = []  # where skipped rows went
        taken = 0
        while invalid and invalid[0][0] - first <= len(values) + len(records) - taken:
            number, text, reason = invalid.pop(0)
            before = number - first - len(values)  # records ahead of it
            values += records[taken:taken + before]
            taken += before
            placed.append(len(values))
            bad[len(values)] = self._where(number, reason)
            values.append(text)
        values += records[taken:]
        for j, reason in misfits.items():
            p = _position(j, placed)
            bad[p] = self._where(first + p, reason)
        return Rows(values, dict(sorted(bad.items())))


def _position(j: int, placed: list[int]) -> int:
    """Where the ``j``-th record of a block is among its rows, the skipped ones having taken ``placed`` (sorted)."""
    p = j
    for q in placed:
        if q <= p:
            p += 1
    return p


class EmptyFile(Exception):
    """A file without a byte: no header, no rows."""


def _skip(_row: Any) -> str:
    return "skip"


def _packed(path: Path) -> str:
    suffix = path.suffix.lower()
    return suffix if suffix in COMPRESSED else ""


def _compression(path: Path) -> str | None:
    return {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".lz4": "lz4"}.get(_packed(path))


def _bytes(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n:,} bytes"


def _reason(exc: BaseException) -> str:
    from ..core.batch import describe_error

    return describe_error(exc)


# --- the config ---------------------------------------------------------------------------------------


def _schema_or(value: Any, as_yaml: Any) -> Any:
    """A ``RecordSchema`` (Python) as it is; anything else validated as YAML's spellings."""
    return value if isinstance(value, RecordSchema) else as_yaml(value)


class CsvSourceConfig(SourceLimits):
    """``source: {type: csv, path: weather.csv}`` (a file, a glob, a folder or a list; .csv, .tsv, compressed
    .csv.gz ...)"""

    suffixes: ClassVar[tuple[str, ...]] = SUFFIXES  # the files it reads, by name (``connectors/files.py``)

    type: Literal["csv"]
    path: str | list[str] = Field(description="a file, a glob, a folder (its files in name order) or a list of them; "
                                   ".gz, .bz2, .zst and .lz4 files are decompressed as they are read")
    batch_size: int = Field(default=1000, ge=1, description="records per batch: the unit operators, metrics and "
                            "commits work on")
    schema_: Annotated[dict[str, Any] | str | None, WrapValidator(_schema_or)] = Field(
        default=None, alias="schema", description="the columns' types: a mapping of field: type, a schema file "
        "(.yaml, .yml, .json) or a registered schema (registry/NAME, its latest version when the pipeline starts, "
        "registry/NAME@VERSION, nats://BUCKET/NAME@VERSION: see resources.schemas), by the header's names (a file "
        "without a header: in the columns' order); without "
        "it, each file's types are inferred from its first block (int64, float64, bool, string; dates and "
        "timestamps stay text)")
    delimiter: str | None = Field(default=None, min_length=1, max_length=1, description="the character between "
                                  "fields (default: a tab for .tsv files, else a comma)")
    quote_char: Annotated[str, Field(min_length=1, max_length=1)] | Literal[False] = Field(
        default='"', description="the character that quotes a value holding delimiters, quotes or line breaks; "
        "false: no quoting")
    escape_char: str | None = Field(default=None, min_length=1, max_length=1, description="a character that makes "
                                    "the next one literal (null: none)")
    double_quote: bool = Field(default=True, description="two quote characters in a quoted value are one")
    header: bool = Field(default=True, description="the first row (after skip_rows) names the columns")
    columns: list[str] | None = Field(default=None, min_length=1, description="the columns' names, in order: "
                                      "for a file without a header (or in place of its header); default: the "
                                      "header's, or the schema's fields when header is false")
    skip_rows: int = Field(default=0, ge=0, description="rows to skip before the header (a title, comments)")
    null_values: list[str] = Field(default_factory=lambda: list(NULL_VALUES), description="values read as null "
                                   "in columns that are not text (pyarrow's)")
    strings_can_be_null: bool = Field(default=False, description="null_values are null in string and bytes columns "
                                      "too (by default such a column keeps \"\" and NA as text)")
    true_values: list[str] = Field(default_factory=lambda: list(TRUE_VALUES), description="values read as true "
                                   "in a bool column")
    false_values: list[str] = Field(default_factory=lambda: list(FALSE_VALUES), description="values read as false "
                                    "in a bool column")
    encoding: str = Field(default="utf-8", description="the files' text encoding (latin-1, utf-16, cp1252 ...); "
                          "other than UTF-8, the text is transcoded as it is read")
    block_size: Size = Field(default=1 << 20, ge=1 << 10, description="bytes read at a time, at least a row's "
                             "size; without a schema the types are inferred from a file's first block")

    @field_validator("schema_")
    @classmethod
    def _schema(cls, v: Any) -> Any:
        ref = registry_ref(v)  # a registered schema: fetched when the pipeline starts
        if ref is not None and ref.name is None:
            raise ValueError(f"{v}: the columns are read with one schema: name it, {v}/NAME (its latest version "
                             "when the pipeline starts) or with @VERSION after the name")
        if v is not None and ref is None:
            csv_schema(v)
        return v

    @field_validator("encoding")
    @classmethod
    def _encoding(cls, v: str) -> str:
        try:
            codecs.lookup(v)
        except LookupError:
            raise ValueError(f"unknown encoding {v!r}: a Python codec name (utf-8, latin-1, utf-16, cp1252 ...)") from None
        return v

    def typed_schema(self) -> RecordSchema | None:
        """The schema given (None: none, or a registered one, fetched when the pipeline starts)."""
        return None if self.schema_ is None or registry_ref(self.schema_) else csv_schema(self.schema_)

    def build(self) -> CsvSource:
        return CsvSource.from_config(self)


def csv_schema(spec: RecordSchema | Mapping[str, Any] | str) -> RecordSchema:
    """The typed schema ``spec`` gives (a mapping, a schema file); ``ValueError`` for a field a CSV column
    cannot hold (a list, a nested record)."""
    try:
        if isinstance(spec, RecordSchema):
            schema = spec
        elif isinstance(spec, str):
            if Path(spec).suffix.lower() not in (".yaml", ".yml", ".json"):
                raise ValueError(f"{spec!r}: a schema file (.yaml, .yml, .json), a mapping of field: type or a "
                                 "registered schema (registry/NAME, with @VERSION after the name to pin one, or "
                                 "nats://BUCKET/NAME)")
            schema = load_schema_file(spec)
        else:
            schema = parse_schema(spec)
    except SchemaError as exc:
        raise ValueError(str(exc)) from None
    flat = [f"{f.name}: {f.type}" for f in schema.fields if f.type.kind not in CSV_KINDS]
    if flat:
        raise ValueError(f"a CSV column holds one value ({', '.join(sorted(k.value for k in CSV_KINDS if k != Kind.FIXED))}, "
                         f"bytes[N]), not {', '.join(flat)}")
    return schema


SOURCES = {"csv": CsvSourceConfig}
RANK = 3  # where its types come in the "allowed" lists (connectors/__init__.py)
