"""The names of the stages a batch goes through: the one spelling for the parts that name themselves
(an operator's ``stage``, a source's and a sink's) and for what reads them back (metrics rows, the
report, the study's tables).

Plain ``str`` constants, not enum members: a stage name goes as it is into metrics Parquet, dead-letter
envelopes, Prometheus labels and YAML snapshots, which take strings (YAML's safe dumper and orjson's
dict keys refuse ``str`` enum members).

>>> Stage.SERIALIZE, Stage.PUBLISH_SIDE
('serialize', ('serialize', 'compress', 'publish'))
"""

from __future__ import annotations

from typing import Final


class Stage:
    """Stage names, and the groups of them that reports add up."""

    GENERATE: Final = "generate"
    READ: Final = "read"
    CONSUME: Final = "consume"
    DECOMPRESS: Final = "decompress"
    DESERIALIZE: Final = "deserialize"
    MAP: Final = "map"
    FILTER: Final = "filter"
    SELECT: Final = "select"
    ROUTE: Final = "route"
    PACK: Final = "pack"
    UNPACK: Final = "unpack"
    SERIALIZE: Final = "serialize"
    COMPRESS: Final = "compress"
    PUBLISH: Final = "publish"
    WRITE: Final = "write"

    ENCODE: Final = (SERIALIZE, COMPRESS)
    DECODE: Final = (DECOMPRESS, DESERIALIZE)
    PUBLISH_SIDE: Final = (SERIALIZE, COMPRESS, PUBLISH)  # what a publisher spends on a record
    CONSUME_SIDE: Final = (CONSUME, DECOMPRESS, DESERIALIZE)  # what a consumer spends on it
    MAKING_DATA: Final = (GENERATE, READ)  # making records, not moving them
