"""The compress and decompress operators.

Both are one comprehension over the payload column. ``Decompress`` takes a maximum
output size (a bomb is refused, the record dead-lettered) and, with ``codec: auto``,
picks the codec of each record from its ``Content-Encoding`` header.

In YAML ``- compress: {codec: zstd, level: fastest}``; in Python ``wirepipe.compress("zstd", "fastest")``:

>>> from wirepipe.batch import Batch
>>> packed = Compress("zstd", 3)(Batch([b"abc" * 100]))
>>> len(packed.values[0]) < 300, packed.headers
(True, {'Content-Encoding': 'zstd'})
>>> Decompress("auto")(packed).values == [b"abc" * 100]
True
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, WrapValidator, field_validator

from ..batch import Batch
from ..codecs.compression import DEFAULT_MAX_OUTPUT, codec_for_encoding, get_codec
from ..errors import StageError
from ..models import Size, Strict
from .base import BuildContext, Operator, failing


def load_dictionary(dictionary: bytes | str | Path | None) -> bytes | None:
    """A zstd dictionary given inline (bytes) or as a file path."""
    if dictionary is None or isinstance(dictionary, bytes):
        return dictionary
    return Path(dictionary).read_bytes()


class Compress(Operator):
    """Compress every payload with one codec at one level; sets ``Content-Encoding``."""

    stage = "compress"

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
        _set_header(batch, "Content-Encoding", self._encoding)
        return batch


class Decompress(Operator):
    """Decompress every payload, refusing output past ``max_output_size``."""

    stage = "decompress"

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
            except KeyError as exc:
                fn = failing(StageError("decompress", "auto", exc.args[0]))
            self._by_encoding[encoding] = fn
        return fn

    def __call__(self, batch: Batch) -> Batch:
        if self._fn is not None:
            batch.map_values(self._fn, self.stage, self.name)
            return batch
        headers = batch.headers
        if headers is None or isinstance(headers, dict):
            encoding = headers.get("Content-Encoding") if headers else None
            batch.map_values(self._for_encoding(encoding), self.stage, "auto")
            return batch
        # Per-record headers: decode each record with the codec its header names.
        pick = self._for_encoding
        batch.map_values(lambda v, h: pick(h.get("Content-Encoding") if h else None)(v),
                         self.stage, "auto", with_column=headers)
        return batch


def _set_header(batch: Batch, key: str, value: str) -> None:
    """Set a wire header on every record: shared dict when possible, per record otherwise."""
    h = batch.headers
    if h is None:
        batch.headers = {key: value}
    elif isinstance(h, dict):
        batch.headers = {**h, key: value}
    else:
        batch.headers = [{**d, key: value} if d else {key: value} for d in h]


# --- config: ``- compress: {...}`` and ``- decompress: {...}`` ------------------------------------


def known_codec(v: str) -> str:
    """The codec's own name for ``v`` (an alias resolved); ``ValueError`` listing the known ones."""
    try:
        return get_codec(v).name
    except KeyError as exc:
        raise ValueError(exc.args[0]) from None


def _bytes_or(value: Any, as_yaml: Callable[[Any], Any]) -> Any:
    """A dictionary's bytes as given in Python; anything else validated as YAML's path."""
    return value if isinstance(value, bytes) else as_yaml(value)


Dictionary = Annotated[str | None, WrapValidator(_bytes_or)]


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


RANK = 20  # where these come in "allowed operators" lists (see operators/__init__.py)
OPERATORS: dict[str, type[Any]] = {"compress": CompressParams, "decompress": DecompressParams}
