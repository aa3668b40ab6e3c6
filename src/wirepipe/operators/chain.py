"""A codec chain as operators: ``msgpack|zstd:3`` becomes Serialize, Compress (and back).

The chain itself (``codecs.chain.Chain``) is a codec-layer value; turning it into
operators belongs to the operators layer, which sits above codecs.
"""

from __future__ import annotations

from typing import Any

from ..codecs.chain import Chain
from ..codecs.formats import Schema
from .compress import Compress, Decompress
from .serialize import Deserialize, Serialize


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
