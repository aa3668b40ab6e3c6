"""The decompress operator: every payload decompressed, with a cap on the output size.

One comprehension over the payload column. ``max_output_size`` refuses a bomb: the record is
dead-lettered, the run goes on. With ``codec: auto`` each record's codec is the one its
``Content-Encoding`` (``Header.CONTENT_ENCODING``, which ``compress`` sets) names. With
``dictionaries: nats://BUCKET`` a zstd frame that names a dictionary by id is decompressed with
that dictionary, fetched before the pass from the store the pipeline hands the operator (the NATS
bucket, or the store ``resources.dictionaries.BUCKET`` declares: ``operators/shared_dictionaries.py``).
With a dictionary (a file or a bucket), a zstd record stamped ``Wirepipe-Dictionary`` (the digest
of the dictionary ``compress`` used) is decompressed only with those exact bytes: one stamped with
another digest is rejected with both digests in the reason, never decoded to other data.

In YAML ``- decompress: {codec: auto, max_output_size: 64MiB}``; in Python ``wirepipe.decompress("auto")``:

>>> import zlib
>>> from wirepipe.core.batch import Batch
>>> Decompress("zlib")(Batch([zlib.compress(b"abc")])).values
[b'abc']
>>> Decompress("zlib", max_output_size=10)(Batch([zlib.compress(b"x" * 100)])).rejected[0].stage
'decompress'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from ..codecs.compression import DEFAULT_MAX_OUTPUT, codec_for_encoding, get_codec
from ..codecs.zstd import dictionary_digest, parse_dictionary_digest, zstd_dictionary_id
from ..core.batch import Batch, header_values
from ..core.errors import StageError
from ..core.models import Size, Strict
from ..core.stages import Stage
from ..core.stores import StoreUse, parse_dictionary_ref
from ..wire import Header, set_headers
from .codec_options import NATS_FIELD, Dictionary, NatsSettings, known_codec, load_dictionary
from .operator import PAYLOADS, BuildContext, Configured, Operator, failing, given, refuse_by_header
from .shared_dictionaries import SharedDictionaries, disowned

_STAMPS = 1024  # Content-Encoding values, (Content-Encoding, Wirepipe-Dictionary) pairs: decided and kept at once
_BARE: tuple[str | None, str | None] = (None, None)  # a record without headers
_ABSENT: set[str | None] = {None}
_COMPRESSION_HEADERS = (Header.CONTENT_ENCODING, Header.DICTIONARY)
_REPLACE_BYTES = (Stage.DESERIALIZE, Stage.SERIALIZE, Stage.COMPRESS)  # a later one makes new bytes (or records)


def _call(value: bytes, fn: Callable[[bytes], bytes]) -> bytes:
    return fn(value)


class Decompress(Configured, Operator):
    """Decompress every payload, refusing output past ``max_output_size``."""

    stage = Stage.DECOMPRESS
    entry = "decompress"
    takes, gives = PAYLOADS, PAYLOADS

    def __init__(self, codec: str = "auto", max_output_size: int | str = DEFAULT_MAX_OUTPUT,
                 dictionary: bytes | str | Path | None = None, dictionaries: str | None = None,
                 nats: Any = None) -> None:
        """The arguments are ``DecompressParams``'s fields, checked as the YAML entry is."""
        self._init(DecompressParams, codec=codec, max_output_size=max_output_size,
                   **given(dictionary=dictionary, dictionaries=dictionaries, nats=nats))

    def _configure(self, params: DecompressParams, ctx: BuildContext) -> None:
        codec, max_output_size, dictionary = params.codec, params.max_output_size, params.dictionary
        dictionaries, nats = params.dictionaries, params.nats
        self.auto = codec == "auto"
        self.max_output_size = max_output_size
        self._dictionary = load_dictionary(dictionary)
        self._local_digest = dictionary_digest(self._dictionary) if self._dictionary is not None else None
        # Frames naming the local dictionary's id decode with it: never asked of the bucket.
        self._local_id = zstd_dictionary_id(self._dictionary) if self._dictionary is not None else 0
        self.params = {"codec": codec, "max_output_size": max_output_size}
        self.name = codec if self.auto else get_codec(codec).name
        self.shared: SharedDictionaries | None = None
        if dictionaries is not None:
            if not self.auto and not get_codec(codec).supports_dictionary:
                raise ValueError(f"codec {self.name} does not take a dictionary (only zstd does)")
            self.params["dictionaries"] = dictionaries
            self.shared = SharedDictionaries(parse_dictionary_ref(dictionaries, name=False), nats,
                                             cap=max_output_size, what="decompress")
            self.prepares = self.io = True
        self._fn = None if self.auto else self._build(self.name)
        # A codec given: records another codec's Content-Encoding names are refused, never passed on as read.
        self._own_encodings = None if self.auto else {None, get_codec(self.name).content_encoding}
        self._plain_out = True  # its bytes go on as they are (no later stage replaces them): say they are plain
        self._by_encoding: dict[str | None, Callable[[bytes], bytes]] = {}
        # With a dictionary in play, each record's Wirepipe-Dictionary stamp picks a checked decompressor.
        self._stamped = self._dictionary is not None or self.shared is not None
        self._by_stamp: dict[tuple[str | None, str | None], Callable[[bytes], bytes]] = {}

    def _build(self, codec_name: str) -> Callable[[bytes], bytes]:
        codec = get_codec(codec_name)
        fn = codec.decompressor(self.max_output_size, self._dictionary if codec.supports_dictionary else None)
        if self.shared is not None and codec.name == "zstd":  # frames that name a dictionary by id
            return self.shared.decompressor(fn, lambda d: codec.decompressor(self.max_output_size, d),
                                            self._dictionary)
        return fn

    def store_uses(self) -> Sequence[StoreUse]:
        """The dictionary store ``dictionaries: nats://BUCKET`` names, if it names one."""
        return (self.shared.use,) if self.shared is not None else ()

    def use_store(self, use: StoreUse, store: Any) -> None:
        assert self.shared is not None
        self.shared.hand(store)

    async def prepare(self, batch: Batch) -> None:
        """Fetch the dictionaries the batch's frames name that are not held yet (before the pass)."""
        if self.shared is not None:
            wanted = self.shared.wanted(batch, self.auto)
            wanted.discard(self._local_id)
            if wanted:
                await self.shared.fetch(wanted)

    def _for_encoding(self, encoding: str | None) -> Callable[[bytes], bytes]:
        fn = self._by_encoding.get(encoding)
        if fn is None:
            if len(self._by_encoding) >= _STAMPS:  # forged encodings, each another key
                self._by_encoding.clear()
            try:
                fn = self._build(codec_for_encoding(encoding).name)
            except (KeyError, ValueError) as exc:  # an unknown encoding; a codec whose library is not installed
                fn = failing(StageError("decompress", "auto", str(exc.args[0]) if exc.args else str(exc)))
            self._by_encoding[encoding] = fn
        return fn

    def _for_stamp(self, encoding: str | None, stamp: str | None) -> Callable[[bytes], bytes]:
        """The function for records of this ``Content-Encoding`` (``codec: auto``) and ``Wirepipe-Dictionary``:
        decided once per pair, so a stamp is compared with a dictionary once, not per record."""
        key = (encoding, stamp)
        fn = self._by_stamp.get(key)
        if fn is None:
            if len(self._by_stamp) >= _STAMPS:  # forged stamps, each another key: decided again, never unbounded
                self._by_stamp.clear()
                if self.shared is not None:
                    self.shared.forget_stamped()
            fn = self._by_stamp[key] = self._checked(encoding, stamp)
        return fn

    def _checked(self, encoding: str | None, stamp: str | None) -> Callable[[bytes], bytes]:
        plain = self._for_encoding(encoding) if self.auto else self._fn
        assert plain is not None
        codec = self.name
        if self.auto:
            try:
                codec = codec_for_encoding(encoding).name
            except (KeyError, ValueError):
                return plain  # refused with its reason
        if stamp is None or not get_codec(codec).supports_dictionary:
            return plain  # unstamped (a peer that does not stamp): the frames' checksum is the check
        try:
            digest = parse_dictionary_digest(stamp)
        except ValueError as exc:
            return failing(StageError("decompress", codec, f"{Header.DICTIONARY}: {exc}: the record cannot be "
                                                            "checked against its dictionary (refused)"))
        zstd = get_codec(codec)
        local = self._dictionary
        if local is None:
            base = failing(StageError("decompress", codec, (
                f"the record was compressed with the zstd dictionary {digest} and its frames do not name it by "
                "id (a dictionary file both ends load): give this decompressor that file as `dictionary:`")))
        elif self._local_digest != digest:
            base = failing(StageError("decompress", codec, disowned(None, "file", str(self._local_digest), digest)))
        else:
            base = zstd.decompressor(self.max_output_size, local)
        if self.shared is None:
            return base
        return self.shared.decompressor(base, lambda d: zstd.decompressor(self.max_output_size, d), local, digest)

    def _by_stamps(self, batch: Batch) -> Batch:
        """Each record through the function of its (``Content-Encoding``, ``Wirepipe-Dictionary``): the pairs
        are one column built by a comprehension, and a batch of one pair (one publisher) is one plain map."""
        h = batch.headers
        encoding, stamp = Header.CONTENT_ENCODING, Header.DICTIONARY
        if not isinstance(h, list):
            return batch.map_values(self._for_stamp(*((h.get(encoding), h.get(stamp)) if h else _BARE)), self.stage,
                                    self.name)
        keys = [(hd.get(encoding), hd.get(stamp)) if hd else _BARE for hd in h]
        distinct = set(keys)
        if len(distinct) == 1:
            return batch.map_values(self._for_stamp(*distinct.pop()), self.stage, self.name)
        fns = {key: self._for_stamp(*key) for key in distinct}
        return batch.map_values(_call, self.stage, self.name, with_column=[fns[k] for k in keys])

    def _other_codec(self, encoding: str | None) -> Callable[[bytes], bytes] | None:
        """The function refusing records another codec compressed (by their ``Content-Encoding``): with ``codec:
        identity`` their compressed bytes would go on as if plain; None for an encoding no codec has."""
        try:
            codec = codec_for_encoding(encoding).name
        except (KeyError, ValueError):
            return None
        if codec == self.name:  # absent, or this codec's own
            return None
        return failing(StageError("decompress", self.name, (
            f"compressed with {codec} (Content-Encoding {encoding}), and this decompress reads {self.name}: "
            "codec: auto decompresses each message by its Content-Encoding")))

    def precedes(self, stages: Sequence[str]) -> None:
        """A later stage that replaces the bytes (deserialize, serialize, compress) makes the compression headers
        its own business; with none, the bytes reach the sink as they are and must not say they are compressed."""
        self._plain_out = not any(stage in _REPLACE_BYTES for stage in stages)

    def __call__(self, batch: Batch) -> Batch:
        if self._own_encodings is not None:
            refuse_by_header(batch, Header.CONTENT_ENCODING, self._own_encodings, self._other_codec, self.stage,
                             self.name)
        if self._stamped:
            batch = self._by_stamps(batch)
        elif self._fn is not None:
            batch.map_values(self._fn, self.stage, self.name)
        else:
            batch = batch.map_by_header(Header.CONTENT_ENCODING, self._for_encoding, self.stage, "auto")
        if self._plain_out and header_values(batch.headers, Header.CONTENT_ENCODING) != _ABSENT:
            set_headers(batch, {}, _COMPRESSION_HEADERS)  # a relay's output decodes without a decompress
        return batch


# --- config: ``- decompress: {...}`` --------------------------------------------------------------


class DecompressParams(Strict):
    codec: str = Field(default="auto", description="the codec payloads are decompressed with; auto: by each "
                       "message's Content-Encoding")
    max_output_size: Size = Field(default=DEFAULT_MAX_OUTPUT, description="a payload that would inflate past "
                                  "this is refused before it is allocated (a decompression bomb)")
    dictionary: Dictionary = Field(default=None, description="a trained zstd dictionary file (bytes in Python)")
    dictionaries: str | None = Field(default=None, description="nats://BUCKET: the dictionary store where zstd "
                                     "frames that name a dictionary by id find it (fetched once per id, then kept): "
                                     "the NATS bucket, or the store resources.dictionaries.BUCKET declares")
    nats: NatsSettings = Field(default=None, description=NATS_FIELD)

    @field_validator("codec")
    @classmethod
    def _codec(cls, v: str) -> str:
        return v if v == "auto" else known_codec(v)

    @field_validator("dictionaries")
    @classmethod
    def _bucket(cls, v: str | None) -> str | None:
        if v is not None:
            parse_dictionary_ref(v, name=False)
        return v

    def build(self, ctx: BuildContext) -> list[Operator]:
        return [Decompress.from_params(self, ctx)]


RANK = 21  # where it comes in "allowed operators" lists (see operators/__init__.py)
OPERATORS: dict[str, type[Any]] = {"decompress": DecompressParams}
