"""The compress operator: every payload compressed with one codec at one level.

One comprehension over the payload column; sets ``Content-Encoding`` (``Header.CONTENT_ENCODING``)
so a consumer with ``decompress: {codec: auto}`` (``operators/decompress.py``) picks the codec.
Levels are ``fastest``, ``default``, ``best`` or the codec's own integers; zstd takes a trained
dictionary (``operators/codec_options.py``).

In YAML ``- compress: {codec: zstd, level: fastest}``; in Python ``wirepipe.compress("zstd", "fastest")``:

>>> from wirepipe.core.batch import Batch
>>> from wirepipe.operators.decompress import Decompress
>>> packed = Compress("zstd", 3)(Batch([b"abc" * 100]))
>>> len(packed.values[0]) < 300, packed.headers
(True, {'Content-Encoding': 'zstd'})
>>> Decompress("auto")(packed).values == [b"abc" * 100]
True
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from ..codecs.compression import get_codec
from ..core.batch import Batch
from ..core.models import Strict
from ..wire import Header, set_header
from .base import PAYLOADS, BuildContext, Operator
from .codec_options import Dictionary, known_codec, load_dictionary


class Compress(Operator):
    """Compress every payload with one codec at one level; sets ``Content-Encoding``."""

    stage = "compress"
    takes, gives = PAYLOADS, PAYLOADS
    adds_headers = (Header.CONTENT_ENCODING.value,)

    def __init__(self, codec: str = "zstd", level: str | int | None = None,
                 dictionary: bytes | str | Path | None = None) -> None:
        c = get_codec(codec)
        self.codec = c
        self.level = "default" if level is None else level
        self.params = {"codec": c.name, "level": self.level}
        if dictionary is not None:
            self.params["dictionary"] = str(dictionary) if not isinstance(dictionary, bytes) else "<bytes>"
        self.name = f"{c.name}:{self.level}" if self.level != "default" else c.name
        self._fn = c.compressor(self.level, load_dictionary(dictionary))
        self._encoding = c.content_encoding

    def __call__(self, batch: Batch) -> Batch:
        if self.codec.name != "none":
            batch.map_values(self._fn, self.stage, self.name)
        set_header(batch, Header.CONTENT_ENCODING.value, self._encoding)
        return batch


# --- config: ``- compress: {...}`` ----------------------------------------------------------------


class CompressParams(Strict):
    codec: str
    level: str | int = "default"
    dictionary: Dictionary = Field(default=None, description="path of a trained zstd dictionary (bytes in Python)")

    _codec = field_validator("codec")(known_codec)

    @field_validator("level")
    @classmethod
    def _level(cls, v: str | int, info: Any) -> str | int:
        codec = info.data.get("codec")
        if codec is not None:
            get_codec(codec).resolve_level(v)  # ValueError names the codec's range
        return v

    def build(self, ctx: BuildContext) -> list[Operator]:
        return [Compress(self.codec, self.level, dictionary=self.dictionary)]


RANK = 20  # where it comes in "allowed operators" lists (see operators/__init__.py)
OPERATORS: dict[str, type[Any]] = {"compress": CompressParams}
