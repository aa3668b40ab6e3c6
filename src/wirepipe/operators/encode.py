"""The encode entry: a codec chain's encode side, ``serialize`` then one ``compress`` per codec.

In YAML ``- encode: msgpack|zstd:3``; in Python ``wirepipe.encode("msgpack|zstd:3")``:

>>> [op.canonical() for op in EncodeParams(chain="msgpack|zstd:3").build(BuildContext())]
['msgpack', 'zstd:3']
"""

from __future__ import annotations

from typing import cast

from ..codecs.formats import Schema
from .chain_operators import ChainParams, chain_operators
from .operator import BuildContext, Operator, with_shorthand


class EncodeParams(ChainParams):
    def build(self, ctx: BuildContext) -> list[Operator]:
        return chain_operators(self.chain, cast(Schema, self.schema_))[0]


RANK = 30  # where it comes in "allowed operators" lists (see operators/__init__.py)
OPERATORS = {"encode": with_shorthand(EncodeParams, "chain", str)}  # - encode: msgpack|zstd:3
