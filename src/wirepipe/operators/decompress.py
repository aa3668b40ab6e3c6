"""The decompress operator: every payload decompressed, with a cap on the output size.

One comprehension over the payload column. ``max_output_size`` refuses a bomb: the record is
dead-lettered, the run goes on. With ``codec: auto`` each record's codec is the one its
``Content-Encoding`` (``Header.CONTENT_ENCODING``, which ``compress`` sets) names.

In YAML ``- decompress: {codec: auto, max_output_size: 64MiB}``; in Python ``wirepipe.decompress("auto")``:

>>> import zlib
>>> from wirepipe.core.batch import Batch
>>> Decompress("zlib")(Batch([zlib.compress(b"abc")])).values
[b'abc']
>>> Decompress("zlib", max_output_size=10)(Batch([zlib.compress(b"x" * 100)])).rejected[0].stage
'decompress'
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import field_validator

from ..codecs.compression import DEFAULT_MAX_OUTPUT, codec_for_encoding, get_codec
from ..core.batch import Batch
from ..core.errors import StageError
from ..core.models import Size, Strict
from ..wire import Header
from .base import PAYLOADS, BuildContext, Operator, failing
from .codec_options import Dictionary, known_codec, load_dictionary


class Decompress(Operator):
    """Decompress every payload, refusing output past ``max_output_size``."""

    stage = "decompress"
    takes, gives = PAYLOADS, PAYLOADS

    def __init__(self, codec: str = "auto", max_output_size: int = DEFAULT_MAX_OUTPUT,
                 dictionary: bytes | str | Path | None = None) -> None:
        self.auto = codec == "auto"
        self.max_output_size = max_output_size
        self._dictionary = load_dictionary(dictionary)
        self.params = {"codec": codec, "max_output_size": max_output_size}
        self.name = codec if self.auto else get_codec(codec).name
        self._fn = None if self.auto else self._build(self.name)
        self._by_encoding: dict[str | None, Callable[[bytes], bytes]] = {}

    def _build(self, codec_name: str) -> Callable[[bytes], bytes]:
        codec = get_codec(codec_name)
        return codec.decompressor(self.max_output_size, self._dictionary if codec.supports_dictionary else None)

    def _for_encoding(self, encoding: str | None) -> Callable[[bytes], bytes]:
        fn = self._by_encoding.get(encoding)
        if fn is None:
            try:
                fn = self._build(codec_for_encoding(encoding).name)
            except (KeyError, ValueError) as exc:  # an unknown encoding; a codec whose library is not installed
                fn = failing(StageError("decompress", "auto", str(exc.args[0]) if exc.args else str(exc)))
            self._by_encoding[encoding] = fn
        return fn

    def __call__(self, batch: Batch) -> Batch:
        if self._fn is not None:
            batch.map_values(self._fn, self.stage, self.name)
            return batch
        headers = batch.headers
        if headers is None or isinstance(headers, dict):
            encoding = headers.get(Header.CONTENT_ENCODING.value) if headers else None
            batch.map_values(self._for_encoding(encoding), self.stage, "auto")
            return batch
        # Per-record headers: decode each record with the codec its header names.
        pick, content_encoding = self._for_encoding, Header.CONTENT_ENCODING.value
        batch.map_values(lambda v, h: pick(h.get(content_encoding) if h else None)(v),
                         self.stage, "auto", with_column=headers)
        return batch


# --- config: ``- decompress: {...}`` --------------------------------------------------------------


class DecompressParams(Strict):
    codec: str = "auto"
    max_output_size: Size = DEFAULT_MAX_OUTPUT
    dictionary: Dictionary = None

    @field_validator("codec")
    @classmethod
    def _codec(cls, v: str) -> str:
        return v if v == "auto" else known_codec(v)

    def build(self, ctx: BuildContext) -> list[Operator]:
        return [Decompress(self.codec, max_output_size=self.max_output_size, dictionary=self.dictionary)]


RANK = 21  # where it comes in "allowed operators" lists (see operators/__init__.py)
OPERATORS: dict[str, type[Any]] = {"decompress": DecompressParams}
