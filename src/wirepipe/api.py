"""The Python API: short factory names for operators and connectors.

    from wirepipe import Pipeline, generate_source, serialize, compress, null_sink
    Pipeline(generate_source("point", count=1_000_000), [serialize("msgpack"), compress("zstd", "fastest")], null_sink())
    generate_source("point", count=1000) | serialize("msgpack") | compress("zstd") | jsonl_sink("out.jsonl")

Each factory validates its arguments with the model that validates the same entry in YAML
(an operator's params model, a connector's config model: the fields are declared once), so a
bad value raises the ``ConfigError`` YAML gives, naming the field:

>>> generate_source("point", count=10, batch_size=0)
Traceback (most recent call last):
...
wirepipe.core.errors.ConfigError: source.batch_size: Input should be greater than or equal to 1 (got 0)

Its parameters are that model's fields, spelled out with their defaults and types, so an editor and a
type checker know them (``tests/test_api.py`` fails when a signature and its model drift apart); each
factory hands its arguments (``locals()``: its parameters, nothing else) to the model, an argument left
at None leaving the field to the model's default. It returns the class it builds.

An unknown name is refused as YAML refuses it, and so is a pipeline whose parts cannot go
together (the rules a whole pipeline has, checked when it is built):

>>> source("bogus")
Traceback (most recent call last):
...
wirepipe.core.errors.ConfigError: source: unknown type 'bogus': allowed generate, jsonl, csv, parquet, nats, jetstream, capture
>>> jetstream_source("S", durable="d") | parquet_sink("out.parquet")
Traceback (most recent call last):
...
wirepipe.core.errors.ConfigError: sink.path: 'out.parquet' is one Parquet file, readable only once closed: ...
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from typing_extensions import deprecated

from .operators.operator import BuildContext, Operator, OperatorChain, given
from .pipelines import pipeline as _pipeline  # noqa: F401 - registers ``source | ... | sink`` (Source.compose)
from .storage.files import PathArg, Paths, fspaths

if TYPE_CHECKING:  # what the factories build and take, for a type checker: none is imported before a call
    from datetime import datetime

    from .connectors.capture_sink import CaptureSink
    from .connectors.capture_source import CaptureSource
    from .connectors.connector import Sink, Source
    from .connectors.csv import CsvSource
    from .connectors.generate import GenerateSource
    from .connectors.jsonl import JsonlSink, JsonlSource
    from .connectors.nats.connection import AuthConfig, NatsConnectionConfig, ReconnectConfig, TLSConfig
    from .connectors.nats.core_sink import NatsSink
    from .connectors.nats.core_source import NatsSource
    from .connectors.nats.jetstream_reader import JetStreamReader
    from .connectors.nats.jetstream_sink import JetStreamSink
    from .connectors.nats.streams import StreamConfig
    from .connectors.null import NullSink
    from .connectors.parquet import ParquetSink, ParquetSource
    from .operators.compress import Compress
    from .operators.decompress import Decompress
    from .operators.deserialize import Deserialize
    from .operators.filter import Filter
    from .operators.map import Map
    from .operators.pack import Pack
    from .operators.route import Subject
    from .operators.schema_options import SchemaSpec
    from .operators.select import Select
    from .operators.serialize import Serialize
    from .operators.unpack import Unpack
    from .schema import RecordSchema



def _operators(kind: str, fields: dict[str, Any]) -> list[Operator]:
    """The operators of one ``kind`` entry, validated and built exactly as the YAML entry is; ``allow_pickle``
    among ``fields`` is the pipeline-wide setting YAML gives beside the operators, not a field of the entry.

    A ``schema`` may also be what only Python can give (a ``RecordSchema``, a class, a tuple of names):
    the params model takes it as it is.
    """
    from .operators import OPERATORS
    from .pipelines.config import build_operators, registered, validate_entry

    fields = dict(fields)
    allow_pickle = fields.pop("allow_pickle", False)
    params = validate_entry(registered(OPERATORS, kind, "operator"), fields, kind)
    return build_operators(params, BuildContext(allow_pickle=allow_pickle), kind)


def _operator(kind: str, fields: dict[str, Any]) -> Any:  # the class the entry builds: the factory names it
    """The one operator of a ``kind`` entry that builds one."""
    [op] = _operators(kind, fields)
    return op


def _connector(role: str, type_: str, fields: dict[str, Any]) -> Any:  # the class it builds: the factory names it
    """The source (``role`` = ``source``) or sink of ``type_``, validated and built as in YAML."""
    from .connectors import SINKS, SOURCES
    from .pipelines.config import build_connector, registered, validate_entry

    model = registered(SOURCES if role == "source" else SINKS, type_, "type", role)
    return build_connector(validate_entry(model, {"type": type_, **fields}, role), role)


# --- operators ------------------------------------------------------------------------------------


def serialize(format: str = "msgpack", schema: SchemaSpec = None, *, message: str | None = None,
              schema_id: int | None = None, extra_fields: Literal["reject", "drop"] = "reject") -> Serialize:
    """``- serialize: {format: ...}`` (in Python ``format`` defaults to msgpack).

    >>> serialize("json")
    Serialize(format='json')
    """
    return _operator("serialize", given(**locals()))


def deserialize(format: str = "auto", schema: SchemaSpec = None, *, message: str | None = None,
                typed: bool | None = None, framed: bool = False, schema_id: int | None = None,
                writer_schemas: Sequence[SchemaSpec] | None = None,
                schema_header: Literal["optional", "required"] | None = None,
                allow_pickle: bool = False) -> Deserialize:
    """``- deserialize: {format: ...}``; ``allow_pickle`` is the pipeline-wide YAML setting.

    >>> deserialize("msgpack").name
    'msgpack'
    """
    return _operator("deserialize", given(**locals()))


def compress(codec: str = "zstd", level: str | int = "default", *, dictionary: bytes | PathArg | None = None,
             nats: NatsConnectionConfig | dict[str, Any] | None = None, digest: str | None = None) -> Compress:
    """``- compress: {codec: ..., level: ...}`` (in Python ``codec`` defaults to zstd).

    >>> compress("zstd", "fastest").canonical()
    'zstd:fastest'
    >>> compress("gzip", 42)
    Traceback (most recent call last):
    ...
    wirepipe.core.errors.ConfigError: compress.level: 42 is out of range for gzip: use fastest (1), default (6), best (9) or an integer 0..9
    """
    return _operator("compress", given(**locals()))


def decompress(codec: str = "auto", *, max_output_size: int | str = 67108864,
               dictionary: bytes | PathArg | None = None, dictionaries: str | None = None,
               nats: NatsConnectionConfig | dict[str, Any] | None = None) -> Decompress:
    """``- decompress: {codec: ...}`` (``auto``: by each record's ``Content-Encoding``).

    >>> decompress("zstd", max_output_size="1MiB").max_output_size
    1048576
    """
    return _operator("decompress", given(**locals()))


def encode(chain: str, schema: SchemaSpec = None, *, max_output_size: int | str = 67108864) -> OperatorChain:
    """``- encode: msgpack|zstd:3``: the encode-side operators of a chain string, in order.

    >>> [op.canonical() for op in encode("msgpack|zstd:3")]
    ['msgpack', 'zstd:3']
    """
    return OperatorChain(_operators("encode", given(**locals())))


def decode(chain: str, schema: SchemaSpec = None, *, max_output_size: int | str = 67108864,
           writer_schemas: Sequence[SchemaSpec] | None = None,
           schema_header: Literal["optional", "required"] | None = None, allow_pickle: bool = False) -> OperatorChain:
    """``- decode: msgpack|lz4``: the decode-side operators of a chain string, in order.

    >>> [op.stage for op in decode("msgpack|lz4")]
    ['decompress', 'deserialize']
    """
    return OperatorChain(_operators("decode", given(**locals())))


def map_values(function: str | Callable[[Any], Any]) -> Map:
    """``- map: {function: module:function}``; in Python a callable works too.

    >>> map_values(abs).name
    'builtins:abs'
    """
    return _operator("map", given(**locals()))


def filter_values(function: str | Callable[[Any], bool]) -> Filter:
    """``- filter: {function: module:function}``: keeps the values it returns true for; in Python a callable
    works too.

    >>> filter_values("operator:truth").name
    'operator:truth'
    """
    return _operator("filter", given(**locals()))


def select_fields(*fields: str) -> Select:
    """``- select: [field, ...]``.

    >>> select_fields("id", "x").params
    {'fields': ['id', 'x']}
    """
    return _operator("select", {"fields": list(fields)})


def pack(records: int) -> Pack:
    """``- pack: {records: k}``: several records per message (see ``operators.pack``).

    >>> pack(100).name
    'pack:100'
    """
    return _operator("pack", given(**locals()))


def unpack() -> Unpack:
    """``- unpack:``.

    >>> unpack().name
    'unpack'
    """
    return _operator("unpack", {})


def subject(template: str) -> Subject:
    """``- subject: orders.{region}``: one NATS subject per record (see ``operators.route``).

    >>> subject("orders.{region}").fields
    ['region']
    """
    return _operator("subject", given(**locals()))


def operator_entry(name: str, **fields: Any) -> OperatorChain:
    """Any registered operator by its YAML name, a plugin's too; the keyword arguments are its fields. An
    entry may build several operators (``encode``), so it is a chain.

    >>> operator_entry("compress", codec="lz4")
    [Compress(codec='lz4', level='default')]
    """
    return OperatorChain(_operators(name, fields))


def source(type_name: str, **fields: Any) -> Source:
    """Any registered source by its YAML ``type``, a plugin's too; the keyword arguments are its fields.

    >>> source("generate", dataset="feed", count=3).name
    'generate:feed'
    """
    return _connector("source", type_name, fields)


def sink(type_name: str, **fields: Any) -> Sink:
    """Any registered sink by its YAML ``type``, a plugin's too; the keyword arguments are its fields.

    >>> sink("jsonl", path="out.jsonl").type
    'jsonl'
    """
    return _connector("sink", type_name, fields)


# --- sources ------------------------------------------------------------------------------------------
# Every source also takes ``count`` and ``duration`` (where it stops on its own); the NATS ones the
# connection's fields (``url``, ``auth``, ``tls`` ...: ``NatsConnectionConfig``).


def generate_source(dataset: str = "point", *, batch_size: int = 1000, seed: int = 0, rate: float | None = None,
                    count: int | None = None, duration: float | str | None = None) -> GenerateSource:
    """``source: {type: generate, ...}``: a synthetic dataset.

    >>> generate_source("point", count=10, batch_size=4).params["batch_size"]
    4
    """
    return _connector("source", "generate", given(**locals()))


def jsonl_source(path: Paths, *, batch_size: int = 1000, envelope: bool = False, count: int | None = None,
                 duration: float | str | None = None) -> JsonlSource:
    """``source: {type: jsonl, path: ...}`` (a file, a glob, a folder or a list).

    >>> jsonl_source("in.jsonl", batch_size=500).config.batch_size
    500
    """
    return _connector("source", "jsonl", {**given(**locals()), "path": fspaths(path)})


def parquet_source(path: Paths, *, batch_size: int = 65536, count: int | None = None,
                   duration: float | str | None = None) -> ParquetSource:
    """``source: {type: parquet, path: ...}`` (a file, a glob, a folder or a list).

    >>> parquet_source(["a.parquet", "b.parquet"]).config.path
    ['a.parquet', 'b.parquet']
    """
    return _connector("source", "parquet", {**given(**locals()), "path": fspaths(path)})


def csv_source(path: Paths, *, batch_size: int = 1000, schema: RecordSchema | Mapping[str, Any] | str | None = None,
               delimiter: str | None = None, quote_char: str | Literal[False] = '"', escape_char: str | None = None,
               double_quote: bool = True, header: bool = True, columns: list[str] | None = None, skip_rows: int = 0,
               null_values: list[str] | None = None, strings_can_be_null: bool = False,
               true_values: list[str] | None = None, false_values: list[str] | None = None, encoding: str = "utf-8",
               block_size: int | str = 1048576, count: int | None = None,
               duration: float | str | None = None) -> CsvSource:
    """``source: {type: csv, path: ...}`` (a file, a glob, a folder or a list; .tsv, .csv.gz ...): records typed
    by ``schema`` (a mapping, a schema file, a ``RecordSchema``) or by the types pyarrow infers.

    >>> print(csv_source("weather.csv", schema={"station": "string", "temp": "float32?"}).schema)
    Record {station: string, temp: float32?}
    """
    return _connector("source", "csv", {**given(**locals()), "path": fspaths(path)})


def nats_source(subject: str, *, queue: str | None = None, batch_size: int = 1000,
                batch_timeout: float | str = 0.005, pending_msgs_limit: int = 65536,
                pending_bytes_limit: int | str = 67108864, gaps: bool | None = None,
                count: int | None = None, duration: float | str | None = None,
                url: str | list[str] | None = None, name: str | None = None,
                auth: AuthConfig | dict[str, Any] | None = None, tls: TLSConfig | dict[str, Any] | None = None,
                connect_timeout: float | str = 10.0, reconnect: ReconnectConfig | dict[str, Any] | None = None,
                ping_interval: float | str = 20.0, pending_size: int | str = 8388608) -> NatsSource:
    """``source: {type: nats, subject: ...}``: core NATS, at-most-once (nothing connects until the run).

    >>> nats_source("points.>", queue="workers").type
    'nats'
    """
    return _connector("source", "nats", given(**locals()))


def jetstream_source(stream: str | None = None, *, subject: str | None = None, durable: str | None = None,
                     ordered: bool = False,
                     deliver: Literal["all", "last", "new", "by_start_sequence", "by_start_time",
                                      "last_per_subject"] = "all",
                     start_seq: int | None = None, start_time: datetime | str | None = None, batch_size: int = 1000,
                     batch_timeout: float | str = 0.005, max_ack_pending: int = 20000, ack_wait: float | str = 30.0,
                     max_deliver: int = 5, expires: float | str = 30.0, heartbeat: float | str = 5.0,
                     stop_at_end: bool = False, ack: Literal["explicit", "all"] = "explicit",
                     pending_bytes_limit: int | str = 67108864, count: int | None = None,
                     duration: float | str | None = None, url: str | list[str] | None = None,
                     name: str | None = None, auth: AuthConfig | dict[str, Any] | None = None,
                     tls: TLSConfig | dict[str, Any] | None = None, connect_timeout: float | str = 10.0,
                     reconnect: ReconnectConfig | dict[str, Any] | None = None, ping_interval: float | str = 20.0,
                     pending_size: int | str = 8388608) -> JetStreamReader:
    """``source: {type: jetstream, stream: ..., durable: ...}``: at-least-once with a durable consumer
    (``JetStreamSource``), or with ``ordered=True`` an ordered consumer that acknowledges nothing
    (``OrderedJetStreamSource``); both are ``JetStreamReader``-s.

    >>> jetstream_source("POINTS", durable="relay").type
    'jetstream'
    """
    return _connector("source", "jetstream", given(**locals()))


def capture_source(path: Paths, *, batch_size: int = 8192, pace: Literal["max", "original"] = "max",
                   speed: float = 1.0, pace_by: Literal["received", "sent"] = "received",
                   max_gap: float | str | None = None, subject: str | None = None,
                   since: datetime | str | None = None, until: datetime | str | None = None,
                   stop_on_error: bool = False, count: int | None = None,
                   duration: float | str | None = None) -> CaptureSource:
    """``source: {type: capture, path: ...}``: replay captured files.

    >>> capture_source("captures/").type
    'capture'
    """
    return _connector("source", "capture", {**given(**locals()), "path": fspaths(path)})


# --- sinks ----------------------------------------------------------------------------------------
# The NATS ones also take the connection's fields, as the NATS sources do.


def null_sink() -> NullSink:
    """``sink: {type: null}``: discards and counts (the benchmark sink).

    >>> null_sink().records
    0
    """
    return _connector("sink", "null", {})


def jsonl_sink(path: PathArg, *, envelope: bool = False, append: bool = False) -> JsonlSink:
    """``sink: {type: jsonl, path: ...}``.

    >>> jsonl_sink("out.jsonl", envelope=True).config.envelope
    True
    """
    return _connector("sink", "jsonl", {**given(**locals()), "path": os.fspath(path)})


def parquet_sink(path: PathArg, *, row_group_rows: int = 65536,
                 compression: Literal["zstd", "snappy", "gzip", "lz4", "brotli", "none"] = "zstd") -> ParquetSink:
    """``sink: {type: parquet, path: ...}`` (``{part}`` in the path: one crash-safe file per flush).

    >>> parquet_sink("out/part-{part}.parquet").parts
    True
    """
    return _connector("sink", "parquet", {**given(**locals()), "path": os.fspath(path)})


def nats_sink(subject: str, *, headers: Literal["wire", "none"] = "wire", flush_timeout: float | str = 10.0,
              max_control_line: int = 4096, stamp_interval: float | str = 1.0,
              url: str | list[str] | None = None, name: str | None = None,
              auth: AuthConfig | dict[str, Any] | None = None, tls: TLSConfig | dict[str, Any] | None = None,
              connect_timeout: float | str = 10.0, reconnect: ReconnectConfig | dict[str, Any] | None = None,
              ping_interval: float | str = 20.0, pending_size: int | str = 8388608) -> NatsSink:
    """``sink: {type: nats, subject: ...}``: core NATS publish (nothing connects until the run).

    >>> nats_sink("points", url="nats://127.0.0.1:4222").type
    'nats'
    >>> nats_sink("points", flush_timeout=-1)
    Traceback (most recent call last):
    ...
    wirepipe.core.errors.ConfigError: sink.flush_timeout: -1 is negative: a duration must be >= 0
    """
    return _connector("sink", "nats", given(**locals()))


def jetstream_sink(subject: str, *, stream: StreamConfig | dict[str, Any] | None = None, msg_id: str = "auto",
                   window: int = 4096, ack_timeout: float | str = 5.0,
                   retry: ReconnectConfig | dict[str, Any] | None = None, headers: Literal["wire", "none"] = "wire",
                   flush_timeout: float | str = 10.0, max_control_line: int = 4096,
                   url: str | list[str] | None = None, name: str | None = None,
                   auth: AuthConfig | dict[str, Any] | None = None, tls: TLSConfig | dict[str, Any] | None = None,
                   connect_timeout: float | str = 10.0, reconnect: ReconnectConfig | dict[str, Any] | None = None,
                   ping_interval: float | str = 20.0, pending_size: int | str = 8388608) -> JetStreamSink:
    """``sink: {type: jetstream, subject: ...}``: publish with acknowledgements.

    >>> jetstream_sink("points", stream={"name": "POINTS"}).type
    'jetstream'
    """
    return _connector("sink", "jetstream", given(**locals()))


def capture_sink(dir: PathArg, *, prefix: str = "capture", max_file_size: int | str = 268435456,
                 max_file_age: float | str = 60.0, row_group_rows: int = 65536, row_group_size: int | str = 67108864,
                 compression: Literal["zstd", "snappy", "gzip", "lz4", "brotli", "none"] = "zstd",
                 fsync: bool = True, metadata: dict[str, str] | None = None) -> CaptureSink:
    """``sink: {type: capture, dir: ...}``: rolling crash-safe Parquet capture files.

    >>> capture_sink("captures/", prefix="points").type
    'capture'
    """
    return _connector("sink", "capture", {**given(**locals()), "dir": os.fspath(dir)})


# --- renamed names, kept for one release ------------------------------------------------------------
# Each keeps its new name's signature (tests/test_api.py checks it), so old code still type-checks.


@deprecated("wirepipe.generate is renamed wirepipe.generate_source")
def generate(dataset: str = "point", *, batch_size: int = 1000, seed: int = 0, rate: float | None = None,
             count: int | None = None, duration: float | str | None = None) -> GenerateSource:
    """Deprecated: ``generate_source``."""
    return generate_source(**locals())


@deprecated("wirepipe.select is renamed wirepipe.select_fields")
def select(*fields: str) -> Select:
    """Deprecated: ``select_fields``."""
    return select_fields(*fields)


@deprecated("wirepipe.operator is renamed wirepipe.operator_entry")
def operator(name: str, **fields: Any) -> OperatorChain:
    """Deprecated: ``operator_entry``."""
    return operator_entry(name, **fields)


# The old name of each renamed factory and its new one (``wirepipe.__getattr__`` reaches the old names; the
# API reference lists them). Their calls warn (``DeprecationWarning``), and a type checker flags them.
RENAMED = {"generate": "generate_source", "select": "select_fields", "operator": "operator_entry"}

__all__ = [
    "capture_sink", "capture_source", "compress", "csv_source", "decode", "decompress", "deserialize", "encode", "filter_values",
    "generate_source", "jetstream_sink", "jetstream_source", "jsonl_sink", "jsonl_source", "map_values", "nats_sink",
    "nats_source", "null_sink", "operator_entry", "pack", "parquet_sink", "parquet_source", "select_fields",
    "serialize", "sink", "source", "subject", "unpack",
]
