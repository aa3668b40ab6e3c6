"""A codec chain as operators: ``msgpack|zstd:3`` becomes Serialize, Compress (and back).

The chain itself (``codecs.chain.Chain``) is a codec-layer value; turning it into
operators belongs to the operators layer, which sits above codecs. The ``encode`` entry
expands to ``serialize`` then one ``compress`` per codec; ``decode`` to the ``decompress``
steps in reverse order, then ``deserialize``.

In YAML ``- encode: msgpack|zstd:3``; in Python ``wirepipe.encode("msgpack|zstd:3")``:

>>> params = EncodeParams(chain="msgpack|zstd:3")
>>> [op.canonical() for op in params.build(BuildContext())]
['msgpack', 'zstd:3']
>>> [op.stage for op in DecodeParams(chain="msgpack|zstd:3").build(BuildContext())]
['decompress', 'deserialize']
"""

from __future__ import annotations

from typing import Annotated, Any, cast

from pydantic import BeforeValidator, Field, field_validator

from ..codecs.chain import Chain
from ..codecs.compression import DEFAULT_MAX_OUTPUT
from ..codecs.formats import Schema
from ..models import Size, Strict
from .base import BuildContext, Operator
from .compress import Compress, Decompress
from .serialize import Deserialize, SchemaParam, Serialize


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
    chain: str
    schema_: SchemaParam = Field(default=None, alias="schema")
    max_output_size: Size = DEFAULT_MAX_OUTPUT

    @field_validator("chain")
    @classmethod
    def _parse(cls, v: str) -> str:
        return str(Chain.parse(v))


class EncodeParams(ChainParams):
    def build(self, ctx: BuildContext) -> list[Operator]:
        return chain_operators(self.chain, cast(Schema, self.schema_))[0]


class DecodeParams(ChainParams):
    def build(self, ctx: BuildContext) -> list[Operator]:
        chain = Chain.parse(self.chain)
        ops: list[Operator] = [Decompress(s.name, max_output_size=self.max_output_size) for s in reversed(chain.codecs)]
        if chain.format:
            ops.append(Deserialize(chain.format, schema=self.schema_, allow_pickle=ctx.allow_pickle))
        return ops


def _chain_shorthand(v: Any) -> Any:
    return {"chain": v} if isinstance(v, str) else v


RANK = 30  # where these come in "allowed operators" lists (see operators/__init__.py)
OPERATORS = {
    "encode": Annotated[EncodeParams, BeforeValidator(_chain_shorthand)],
    "decode": Annotated[DecodeParams, BeforeValidator(_chain_shorthand)],
}
