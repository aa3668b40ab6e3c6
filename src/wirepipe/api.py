"""The Python API: short factory names for operators and connectors.

    from wirepipe import Pipeline, generate, serialize, compress, null_sink
    Pipeline(generate("point", count=1_000_000), [serialize("msgpack"), compress("zstd", "fastest")], null_sink())
    generate("point", count=1000) | serialize("msgpack") | compress("zstd") | jsonl_sink("out.jsonl")
"""

from __future__ import annotations

from typing import Any

from .connectors.files import JsonlSink, JsonlSource, NullSink, ParquetSink, ParquetSource
from .connectors.generate import GenerateSource
from .operators.compress import Compress, Decompress
from .operators.framing import Pack, Unpack
from .operators.serialize import Deserialize, Serialize
from .operators.transform import Filter, Map, Select
from .pipelines import pipeline as _pipeline  # noqa: F401 - registers ``source | ... | sink`` (Source.compose)


def generate(dataset: str = "point", **kwargs: Any) -> GenerateSource:
    return GenerateSource(dataset, **kwargs)


def serialize(format: str = "msgpack", schema: Any = None) -> Serialize:
    return Serialize(format, schema=schema)


def deserialize(format: str = "auto", schema: Any = None, **kwargs: Any) -> Deserialize:
    return Deserialize(format, schema=schema, **kwargs)


def compress(codec: str = "zstd", level: str | int | None = None, **kwargs: Any) -> Compress:
    return Compress(codec, level, **kwargs)


def decompress(codec: str = "auto", **kwargs: Any) -> Decompress:
    return Decompress(codec, **kwargs)


def encode(chain: str, schema: Any = None) -> list[Any]:
    """The encode-side operators of a chain string, e.g. ``encode("msgpack|zstd:3")``."""
    from .operators.chain import chain_operators

    return chain_operators(chain, schema)[0]


def decode(chain: str, schema: Any = None) -> list[Any]:
    """The decode-side operators of a chain string."""
    from .operators.chain import chain_operators

    return chain_operators(chain, schema)[1]


def map_values(function: Any) -> Map:
    return Map(function)


def filter_values(function: Any) -> Filter:
    return Filter(function)


def select(*fields: str) -> Select:
    return Select(fields)


def pack(records: int) -> Pack:
    """Several records per message (see ``operators.framing``)."""
    return Pack(records)


def unpack() -> Unpack:
    return Unpack()


def null_sink() -> NullSink:
    return NullSink()


def jsonl_sink(path: str, **kwargs: Any) -> JsonlSink:
    return JsonlSink(path, **kwargs)


def parquet_sink(path: str, **kwargs: Any) -> ParquetSink:
    return ParquetSink(path, **kwargs)


def jsonl_source(path: str | list[str], **kwargs: Any) -> JsonlSource:
    return JsonlSource(path, **kwargs)


def parquet_source(path: str | list[str], **kwargs: Any) -> ParquetSource:
    return ParquetSource(path, **kwargs)
