"""The compress operator: every payload compressed with one codec at one level.

One comprehension over the payload column; sets ``Content-Encoding`` (``Header.CONTENT_ENCODING``)
so a consumer with ``decompress: {codec: auto}`` (``operators/decompress.py``) picks the codec.
Levels are ``fastest``, ``default``, ``best`` or the codec's own integers; zstd takes a trained
dictionary (``operators/codec_options.py``): a file both ends load, or one in a dictionary store
(``nats://BUCKET/NAME``: the NATS bucket, or the store ``resources.dictionaries.BUCKET`` declares;
``operators/shared_dictionaries.py``), whose id every frame then carries.
With a dictionary every record is stamped ``Wirepipe-Dictionary`` (``Header.DICTIONARY``: the SHA-256
digest of the exact bytes compressed with), which a consumer checks its own copy against; ``digest:``
pins those bytes in the config, so a publisher whose dictionary is not them does not start.

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

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from ..codecs.compression import DEFAULT_MAX_OUTPUT, get_codec
from ..codecs.zstd import dictionary_digest, parse_dictionary_digest, zstd_compressor, zstd_dictionary_id
from ..core.batch import Batch
from ..core.errors import WirepipeError
from ..core.models import Strict
from ..core.stages import Stage
from ..core.stores import StoreUse, is_nats_ref, parse_dictionary_ref
from ..wire import Header, set_header
from .codec_options import NATS_FIELD, Dictionary, NatsSettings, known_codec, load_dictionary
from .operator import PAYLOADS, BuildContext, Configured, Operator, given
from .shared_dictionaries import SharedDictionaries


class Compress(Configured, Operator):
    """Compress every payload with one codec at one level; sets ``Content-Encoding``."""

    stage = Stage.COMPRESS
    entry = "compress"
    takes, gives = PAYLOADS, PAYLOADS
    adds_headers = (Header.CONTENT_ENCODING, Header.DICTIONARY)

    def __init__(self, codec: str = "zstd", level: str | int | None = None,
                 dictionary: bytes | str | Path | None = None, nats: Any = None, digest: str | None = None) -> None:
        """The arguments are ``CompressParams``'s fields, checked as the YAML entry is."""
        self._init(CompressParams, codec=codec, **given(level=level, dictionary=dictionary, nats=nats, digest=digest))

    def _configure(self, params: CompressParams, ctx: BuildContext) -> None:
        c = get_codec(params.codec)
        dictionary, nats = params.dictionary, params.nats
        self.pinned = params.digest
        self.codec = c
        self.level = params.level
        self.params = {"codec": c.name, "level": self.level}
        if dictionary is not None:
            self.params["dictionary"] = str(dictionary) if not isinstance(dictionary, bytes) else "<bytes>"
        self.name = f"{c.name}:{self.level}" if self.level != "default" else c.name
        self._encoding = c.content_encoding
        self.shared: SharedDictionaries | None = None
        self.dictionary_id = 0  # the id every frame carries (a dictionary shared through NATS)
        self.digest: str | None = None  # Wirepipe-Dictionary: the digest of the dictionary's bytes, if one is used
        self.local_dictionary: bytes | None = None  # a dictionary given as a file or bytes (its frames carry no id)
        self._fn: Callable[[bytes], bytes] | None
        if is_nats_ref(dictionary):
            # From the store the pipeline hands it, when it starts (``open``); its id goes in every frame so
            # consumers find it.
            assert isinstance(dictionary, str)
            if not c.supports_dictionary:
                raise ValueError(f"codec {c.name} does not take a dictionary (only zstd does)")
            self.shared = SharedDictionaries(parse_dictionary_ref(dictionary, name=True), nats, cap=DEFAULT_MAX_OUTPUT,
                                             what="compress")
            self._fn = None
            self.io = True
        else:
            data = self.local_dictionary = load_dictionary(dictionary)
            self._fn = c.compressor(self.level, data)
            if data is not None:
                self.digest = self._pinned(data, f"dictionary {dictionary if isinstance(dictionary, str) else '<bytes>'}")

    def _pinned(self, data: bytes, what: str) -> str:
        """The digest of ``data``; ``ValueError`` when the config pins another one."""
        digest = dictionary_digest(data)
        if self.pinned is not None and digest != self.pinned:
            raise ValueError(f"{what} is {digest}, not the pinned digest {self.pinned}: refused (the dictionary "
                             "is not the bytes this config names)")
        return digest

    def store_uses(self) -> Sequence[StoreUse]:
        """The dictionary store ``dictionary: nats://BUCKET/NAME`` names, if it names one."""
        return (self.shared.use,) if self.shared is not None else ()

    def use_store(self, use: StoreUse, store: Any) -> None:
        assert self.shared is not None
        self.shared.hand(store)

    async def open(self, parts: Sequence[Any]) -> None:
        """The dictionary from its store (opened by the pipeline), fixed for the run."""
        if self.shared is None:
            return
        data = await self.shared.named()
        try:
            self.digest = self._pinned(data, f"compress: dictionary {self.shared.ref}")
        except ValueError as exc:
            raise WirepipeError(str(exc)) from None
        self.dictionary_id = zstd_dictionary_id(data)
        self._fn = zstd_compressor(self.codec.resolve_level(self.level), data, write_dict_id=True)

    def __call__(self, batch: Batch) -> Batch:
        if self.codec.name != "none":
            fn = self._fn
            if fn is None:
                raise WirepipeError(f"compress: dictionary {self.shared and self.shared.ref} is fetched when the "
                                    "pipeline starts: run the operator in a Pipeline (or await its open() first)")
            batch.map_values(fn, self.stage, self.name)
        if self.digest is None:  # a stamp the records came with names the bytes of an earlier compression
            set_header(batch, Header.CONTENT_ENCODING, self._encoding, drop=Header.DICTIONARY)
        else:
            set_header(batch, Header.CONTENT_ENCODING, self._encoding)
            set_header(batch, Header.DICTIONARY, self.digest)
        return batch


# --- config: ``- compress: {...}`` ----------------------------------------------------------------


class CompressParams(Strict):
    codec: str = Field(description="the codec every payload is compressed with (sets Content-Encoding)")
    level: str | int = Field(default="default", description="fastest, default, best, or the codec's own "
                             "integer level")
    dictionary: Dictionary = Field(default=None, description="a trained zstd dictionary: a file both ends load, "
                                   "or nats://BUCKET/NAME, from a dictionary store: the NATS bucket, or the store "
                                   "resources.dictionaries.BUCKET declares (bytes in Python)")
    nats: NatsSettings = Field(default=None, description=NATS_FIELD)
    digest: str | None = Field(default=None, description="sha256:<64 hex digits>: the dictionary's bytes, pinned; "
                               "a dictionary with another digest is refused (the run does not start)")

    _codec = field_validator("codec")(known_codec)

    @field_validator("digest")
    @classmethod
    def _digest(cls, v: str | None, info: Any) -> str | None:
        if v is None:
            return v
        if info.data.get("dictionary") is None:
            raise ValueError("digest pins the bytes of a dictionary: give `dictionary:` beside it")
        return parse_dictionary_digest(v)

    @field_validator("level")
    @classmethod
    def _level(cls, v: str | int, info: Any) -> str | int:
        codec = info.data.get("codec")
        if codec is not None:
            get_codec(codec).resolve_level(v)  # ValueError names the codec's range
        return v

    @field_validator("dictionary")
    @classmethod
    def _shared(cls, v: str | None) -> str | None:
        if is_nats_ref(v):
            assert isinstance(v, str)
            parse_dictionary_ref(v, name=True)
        return v

    def build(self, ctx: BuildContext) -> list[Operator]:
        return [Compress.from_params(self, ctx)]


RANK = 20  # where it comes in "allowed operators" lists (see operators/__init__.py)
OPERATORS: dict[str, type[Any]] = {"compress": CompressParams}
