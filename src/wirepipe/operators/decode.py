"""The decode entry: a codec chain's decode side, the ``decompress`` steps in reverse order, then ``deserialize``.

In YAML ``- decode: msgpack|zstd:3``; in Python ``wirepipe.decode("msgpack|zstd:3")``:

>>> [op.stage for op in DecodeParams(chain="msgpack|zstd:3").build(BuildContext())]
['decompress', 'deserialize']
"""

from __future__ import annotations

from typing import Literal

from ..codecs.chain import Chain
from .chain_operators import ChainParams
from .decompress import Decompress
from .deserialize import Deserialize
from .operator import BuildContext, Operator, with_shorthand
from .schema_options import SCHEMA_HEADER_FIELD, WRITER_SCHEMAS_FIELD, WriterSchemaParam


class DecodeParams(ChainParams):
    writer_schemas: list[WriterSchemaParam] = WRITER_SCHEMAS_FIELD
    schema_header: Literal["optional", "required"] | None = SCHEMA_HEADER_FIELD

    def build(self, ctx: BuildContext) -> list[Operator]:
        chain = Chain.parse(self.chain)
        ops: list[Operator] = [Decompress(s.name, max_output_size=self.max_output_size) for s in reversed(chain.codecs)]
        if chain.format:
            ops.append(Deserialize(chain.format, schema=self.schema_, allow_pickle=ctx.allow_pickle,
                                   writer_schemas=self.writer_schemas, schema_header=self.schema_header))
        return ops


RANK = 31  # where it comes in "allowed operators" lists (see operators/__init__.py)
OPERATORS = {"decode": with_shorthand(DecodeParams, "chain", str)}  # - decode: msgpack|zstd:3
