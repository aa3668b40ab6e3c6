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

An unknown name is refused as YAML refuses it, and so is a pipeline whose parts cannot go
together (the rules a whole pipeline has, checked when it is built):

>>> source("bogus")
Traceback (most recent call last):
...
wirepipe.core.errors.ConfigError: source: unknown type 'bogus': allowed generate, jsonl, parquet, nats, jetstream, capture
>>> jetstream_source("S", durable="d") | parquet_sink("out.parquet")
Traceback (most recent call last):
...
wirepipe.core.errors.ConfigError: sink.path: 'out.parquet' is one Parquet file, readable only once closed: ...
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from typing_extensions import deprecated

from .operators.operator import BuildContext, Operator, OperatorChain
from .pipelines import pipeline as _pipeline  # noqa: F401 - registers ``source | ... | sink`` (Source.compose)
from .storage.files import PathArg, Paths, fspaths

if TYPE_CHECKING:
    from .connectors.connector import Sink, Source

_UNSET: Any = object()


def _fields(**fields: Any) -> dict[str, Any]:
    """The fields a caller gave (an argument left at its default stays out: the model's default applies)."""
    return {k: v for k, v in fields.items() if v is not _UNSET}


def _operators(kind: str, fields: dict[str, Any], *, schema: Any = None, allow_pickle: bool = False) -> list[Any]:
    """The operators of one ``kind`` entry, validated and built exactly as the YAML entry is.

    ``schema`` may also be what only Python can give (a ``RecordSchema``, a class, a tuple of names):
    the params model takes it as it is.
    """
    from .operators import OPERATORS
    from .pipelines.config import build_operators, registered, validate_entry

    if schema is not None:
        fields = {**fields, "schema": schema}
    params = validate_entry(registered(OPERATORS, kind, "operator"), fields, kind)
    return build_operators(params, BuildContext(allow_pickle=allow_pickle), kind)


def _connector(role: str, type_: str, fields: dict[str, Any]) -> Any:  # a Source or a Sink, by role
    """The source (``role`` = ``source``) or sink of ``type_``, validated and built as in YAML."""
    from .connectors import SINKS, SOURCES
    from .pipelines.config import build_connector, registered, validate_entry

    model = registered(SOURCES if role == "source" else SINKS, type_, "type", role)
    return build_connector(validate_entry(model, {"type": type_, **fields}, role), role)


# --- operators ------------------------------------------------------------------------------------


def serialize(format: str = "msgpack", schema: Any = None, **kwargs: Any) -> Operator:
    """``- serialize: {format: ...}``.

    >>> serialize("json")
    Serialize(format='json')
    """
    op: Operator = _operators("serialize", {"format": format, **kwargs}, schema=schema)[0]
    return op


def deserialize(format: str = "auto", schema: Any = None, *, allow_pickle: bool = False, **kwargs: Any) -> Operator:
    """``- deserialize: {format: ...}``; ``allow_pickle`` is the pipeline-wide YAML setting.

    >>> deserialize("msgpack").name
    'msgpack'
    """
    op: Operator = _operators("deserialize", {"format": format, **kwargs}, schema=schema,
                              allow_pickle=allow_pickle)[0]
    return op


def compress(codec: str = "zstd", level: str | int | None = None, **kwargs: Any) -> Operator:
    """``- compress: {codec: ..., level: ...}``.

    >>> compress("zstd", "fastest").canonical()
    'zstd:fastest'
    >>> compress("gzip", 42)
    Traceback (most recent call last):
    ...
    wirepipe.core.errors.ConfigError: compress.level: 42 is out of range for gzip: use fastest (1), default (6), best (9) or an integer 0..9
    """
    op: Operator = _operators("compress", {"codec": codec, **_fields(level=level if level is not None else _UNSET),
                                           **kwargs})[0]
    return op


def decompress(codec: str = "auto", **kwargs: Any) -> Operator:
    """``- decompress: {codec: ...}`` (``auto``: by each record's ``Content-Encoding``).

    >>> decompress("zstd", max_output_size="1MiB").max_output_size
    1048576
    """
    op: Operator = _operators("decompress", {"codec": codec, **kwargs})[0]
    return op


def encode(chain: str, schema: Any = None, **kwargs: Any) -> OperatorChain:
    """``- encode: msgpack|zstd:3``: the encode-side operators of a chain string, in order.

    >>> [op.canonical() for op in encode("msgpack|zstd:3")]
    ['msgpack', 'zstd:3']
    """
    return OperatorChain(_operators("encode", {"chain": chain, **kwargs}, schema=schema))


def decode(chain: str, schema: Any = None, *, allow_pickle: bool = False, **kwargs: Any) -> OperatorChain:
    """``- decode: msgpack|lz4``: the decode-side operators of a chain string, in order.

    >>> [op.stage for op in decode("msgpack|lz4")]
    ['decompress', 'deserialize']
    """
    return OperatorChain(_operators("decode", {"chain": chain, **kwargs}, schema=schema,
                                    allow_pickle=allow_pickle))


def map_values(function: str | Callable[[Any], Any]) -> Operator:
    """``- map: {function: module:function}``; in Python a callable works too.

    >>> map_values(abs).name
    'builtins:abs'
    """
    op: Operator = _operators("map", {"function": function})[0]
    return op


def filter_values(function: str | Callable[[Any], bool]) -> Operator:
    """``- filter: {function: module:function}``; in Python a callable works too.

    >>> filter_values("operator:truth").name
    'operator:truth'
    """
    op: Operator = _operators("filter", {"function": function})[0]
    return op


def select_fields(*fields: str) -> Operator:
    """``- select: [field, ...]``.

    >>> select_fields("id", "x").params
    {'fields': ['id', 'x']}
    """
    op: Operator = _operators("select", {"fields": list(fields)})[0]
    return op


def pack(records: int) -> Operator:
    """``- pack: {records: k}``: several records per message (see ``operators.pack``).

    >>> pack(100).name
    'pack:100'
    """
    op: Operator = _operators("pack", {"records": records})[0]
    return op


def unpack() -> Operator:
    """``- unpack:``.

    >>> unpack().name
    'unpack'
    """
    op: Operator = _operators("unpack", {})[0]
    return op


def subject(template: str) -> Operator:
    """``- subject: orders.{region}``: one NATS subject per record (see ``operators.route``).

    >>> subject("orders.{region}").fields
    ['region']
    """
    op: Operator = _operators("subject", {"template": template})[0]
    return op


def operator_entry(name: str, **fields: Any) -> OperatorChain:
    """Any registered operator by its YAML name, a plugin's too; the keyword arguments are its fields. An
    entry may build several operators (``encode``), so it is a chain.

    >>> operator_entry("compress", codec="lz4")
    [Compress(codec='lz4', level='default')]
    """
    return OperatorChain(_operators(name, fields, schema=fields.pop("schema", None),
                                    allow_pickle=fields.pop("allow_pickle", False)))


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


def generate_source(dataset: str = "point", **kwargs: Any) -> Source:
    """``source: {type: generate, ...}``: a synthetic dataset.

    >>> generate_source("point", count=10, batch_size=4).params["batch_size"]
    4
    """
    return _connector("source", "generate", {"dataset": dataset, **kwargs})


def jsonl_source(path: Paths, **kwargs: Any) -> Source:
    """``source: {type: jsonl, path: ...}`` (a file, a glob, a folder or a list).

    >>> jsonl_source("in.jsonl", batch_size=500).batch_size
    500
    """
    return _connector("source", "jsonl", {"path": fspaths(path), **kwargs})


def parquet_source(path: Paths, **kwargs: Any) -> Source:
    """``source: {type: parquet, path: ...}`` (a file, a glob, a folder or a list).

    >>> parquet_source(["a.parquet", "b.parquet"]).path
    ['a.parquet', 'b.parquet']
    """
    return _connector("source", "parquet", {"path": fspaths(path), **kwargs})


def nats_source(subject: str, **kwargs: Any) -> Source:
    """``source: {type: nats, subject: ...}``: core NATS, at-most-once (nothing connects until the run).

    >>> nats_source("points.>", queue="workers").type
    'nats'
    """
    return _connector("source", "nats", {"subject": subject, **kwargs})


def jetstream_source(stream: str | None = None, **kwargs: Any) -> Source:
    """``source: {type: jetstream, stream: ..., durable: ...}``: at-least-once with a durable consumer.

    >>> jetstream_source("POINTS", durable="relay").type
    'jetstream'
    """
    return _connector("source", "jetstream", {**_fields(stream=stream if stream is not None else _UNSET), **kwargs})


def capture_source(path: Paths, **kwargs: Any) -> Source:
    """``source: {type: capture, path: ...}``: replay captured files.

    >>> capture_source("captures/").type
    'capture'
    """
    return _connector("source", "capture", {"path": fspaths(path), **kwargs})


# --- sinks ----------------------------------------------------------------------------------------


def null_sink() -> Sink:
    """``sink: {type: null}``: discards and counts (the benchmark sink).

    >>> null_sink().records
    0
    """
    return _connector("sink", "null", {})


def jsonl_sink(path: PathArg, **kwargs: Any) -> Sink:
    """``sink: {type: jsonl, path: ...}``.

    >>> jsonl_sink("out.jsonl", envelope=True).envelope
    True
    """
    return _connector("sink", "jsonl", {"path": os.fspath(path), **kwargs})


def parquet_sink(path: PathArg, **kwargs: Any) -> Sink:
    """``sink: {type: parquet, path: ...}`` (``{part}`` in the path: one crash-safe file per flush).

    >>> parquet_sink("out/part-{part}.parquet").parts
    True
    """
    return _connector("sink", "parquet", {"path": os.fspath(path), **kwargs})


def nats_sink(subject: str, **kwargs: Any) -> Sink:
    """``sink: {type: nats, subject: ...}``: core NATS publish (nothing connects until the run).

    >>> nats_sink("points", url="nats://127.0.0.1:4222").type
    'nats'
    >>> nats_sink("points", flush_timeout=-1)
    Traceback (most recent call last):
    ...
    wirepipe.core.errors.ConfigError: sink.flush_timeout: -1 is negative: a duration must be >= 0
    """
    return _connector("sink", "nats", {"subject": subject, **kwargs})


def jetstream_sink(subject: str, **kwargs: Any) -> Sink:
    """``sink: {type: jetstream, subject: ...}``: publish with acknowledgements.

    >>> jetstream_sink("points", stream={"name": "POINTS"}).type
    'jetstream'
    """
    return _connector("sink", "jetstream", {"subject": subject, **kwargs})


def capture_sink(dir: PathArg, **kwargs: Any) -> Sink:
    """``sink: {type: capture, dir: ...}``: rolling crash-safe Parquet capture files.

    >>> capture_sink("captures/", prefix="points").type
    'capture'
    """
    return _connector("sink", "capture", {"dir": os.fspath(dir), **kwargs})


# --- renamed names, kept for one release ------------------------------------------------------------


@deprecated("wirepipe.generate is renamed wirepipe.generate_source")
def generate(dataset: str = "point", **kwargs: Any) -> Source:
    """Deprecated: ``generate_source``."""
    return generate_source(dataset, **kwargs)


@deprecated("wirepipe.select is renamed wirepipe.select_fields")
def select(*fields: str) -> Operator:
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
    "capture_sink", "capture_source", "compress", "decode", "decompress", "deserialize", "encode", "filter_values",
    "generate_source", "jetstream_sink", "jetstream_source", "jsonl_sink", "jsonl_source", "map_values", "nats_sink",
    "nats_source", "null_sink", "operator_entry", "pack", "parquet_sink", "parquet_source", "select_fields",
    "serialize", "sink", "source", "subject", "unpack",
]
