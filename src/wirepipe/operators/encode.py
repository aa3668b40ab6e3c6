"""The ``encode`` and ``decode`` operators: a whole chain string (``msgpack|zstd:3``) in one entry.

``encode`` expands to ``serialize`` then one ``compress`` per codec; ``decode`` to the
``decompress`` steps in reverse order, then ``deserialize``. The chain syntax is
``codecs.chain``'s; this module only turns it into operators.

In YAML ``- encode: msgpack|zstd:3``; in Python ``wirepipe.encode("msgpack|zstd:3")``:

>>> params = EncodeParams(chain="msgpack|zstd:3")
>>> [op.canonical() for op in params.build(BuildContext())]
['msgpack', 'zstd:3']
>>> [op.stage for op in DecodeParams(chain="msgpack|zstd:3").build(BuildContext())]
['decompress', 'deserialize']
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator

from ..codecs.chain import Chain
from ..codecs.compression import DEFAULT_MAX_OUTPUT
from ..pipelines.models import Size, Strict
from .base import BuildContext, Operator
from .compress import Decompress
from .serialize import Deserialize, SchemaParam


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
        return Chain.parse(self.chain).operators(self.schema_)[0]


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
