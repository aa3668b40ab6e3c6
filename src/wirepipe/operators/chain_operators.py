"""A codec chain as operators: ``msgpack|zstd:3`` becomes Serialize, Compress (and back).

The chain itself (``codecs.chain.Chain``) is a codec-layer value; turning it into
operators belongs to the operators layer, which sits above codecs. What the ``encode``
(``operators/encode.py``) and ``decode`` (``operators/decode.py``) entries share is here:
the chain option and the expansion into operators.

>>> encode, decode = chain_operators("msgpack|zstd:3")
>>> [op.canonical() for op in encode], [op.stage for op in decode]
(['msgpack', 'zstd:3'], ['decompress', 'deserialize'])
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from ..codecs.chain import Chain
from ..codecs.compression import DEFAULT_MAX_OUTPUT
from ..codecs.formats import Schema
from ..core.models import Size, Strict
from .compress import Compress
from .decompress import Decompress
from .deserialize import Deserialize
from .schema_options import SCHEMA_FIELD, SchemaParam
from .serialize import Serialize


def chain_operators(chain: Chain | str, schema: Schema = None) -> tuple[list[Any], list[Any]]:
    """The encode-side and decode-side operators of a chain (a ``Chain`` or its string)."""
    if isinstance(chain, str):
        chain = Chain.parse(chain)
    encode: list[Any] = [Serialize(chain.format, schema=schema)] if chain.format else []
    encode += [Compress(s.name, s.level) for s in chain.codecs]
    decode: list[Any] = [Decompress(s.name) for s in reversed(chain.codecs)]
    if chain.format:
        decode.append(Deserialize(chain.format, schema=schema))
    return encode, decode


class ChainParams(Strict):
    """The chain option of ``encode`` and ``decode``: ``msgpack|zstd:3``, a schema, the decompression cap."""

    chain: str = Field(description="format|codec[:level]|..., in the order it is applied when encoding")
    schema_: SchemaParam = SCHEMA_FIELD
    max_output_size: Size = Field(default=DEFAULT_MAX_OUTPUT, description="the decompression cap (decode)")

    @field_validator("chain")
    @classmethod
    def _parse(cls, v: str) -> str:
        return str(Chain.parse(v))
