"""zstd: its two functions, its frames (the dictionary id a frame asks for) and its dictionaries (trained on
records, named by id, proven by digest: the ``Wirepipe-Dictionary`` header).

A dictionary both ends load from a file is used as it is; one shared through NATS
(``operators/shared_dictionaries.py``) is found by the id every frame then carries.
"""

from __future__ import annotations

import hashlib
import re

from .capped import Fn, bomb, corrupt


def zstd_compress(level: int, dictionary: bytes | None) -> Fn:
    # A dictionary both ends load from a file: the 4-byte dictionary id is not written.
    return zstd_compressor(level, dictionary, write_dict_id=not dictionary)


def zstd_compressor(level: int, dictionary: bytes | None, *, write_dict_id: bool) -> Fn:
    """``compress(data)`` of zstd at ``level`` with ``dictionary``; ``write_dict_id`` puts the dictionary's
    id in every frame's header, so a consumer can find the dictionary by it (a dictionary shared through
    NATS: ``operators/shared_dictionaries.py``).

    A frame compressed with a dictionary carries zstd's content checksum (4 bytes): decompressed with
    other dictionary bytes (one that claims the same id, a file that changed) it fails the checksum
    instead of giving other data. A frame without a dictionary has no second input to mismatch and
    stays 4 bytes smaller (a quarter of a 16-byte ``point`` frame).
    """
    import zstandard

    d = zstandard.ZstdCompressionDict(dictionary) if dictionary else None
    return zstandard.ZstdCompressor(level=level, dict_data=d, write_dict_id=write_dict_id,
                                    write_checksum=d is not None).compress


def zstd_decompress(cap: int, dictionary: bytes | None) -> Fn:
    import zstandard

    d = zstandard.ZstdCompressionDict(dictionary) if dictionary else None
    dctx = zstandard.ZstdDecompressor(dict_data=d)
    inner = dctx.decompress
    content_size = zstandard.frame_content_size
    ZstdError = zstandard.ZstdError

    def decompress(data: bytes) -> bytes:
        # A frame may declare its size; zstandard would allocate it whatever the cap says.
        try:
            declared = content_size(data)
        except ZstdError as exc:
            raise corrupt("zstd", f"not a zstd frame ({exc})") from None
        if declared > cap:
            raise bomb("zstd", cap)
        try:
            # positional: max_output_size, read_across_frames, allow_extra_data (keywords cost ~100 ns)
            return inner(data, cap, False, False)
        except ZstdError as exc:
            if declared < 0 and "did not decompress full frame" in str(exc):
                raise bomb("zstd", cap) from None
            raise corrupt("zstd", _zstd_reason(str(exc), data, dictionary)) from None

    return decompress


def _zstd_reason(error: str, data: bytes, dictionary: bytes | None) -> str:
    """zstd's error, and which dictionary the frame asks for when that is why it failed."""
    wanted = zstd_frame_dictionary_id(data)
    if not wanted or (dictionary and zstd_dictionary_id(dictionary) == wanted):
        if "checksum" in error:
            return (f"{error}: the frame was decompressed with other dictionary bytes than it was compressed "
                    "with (or it is damaged): refused rather than decoded to other data")
        return error
    return (f"{error}: the frame was compressed with zstd dictionary {wanted}, which this decompressor does not "
            "have (a dictionary shared through NATS: `dictionaries: nats://BUCKET`)")


def zstd_frame_dictionary_id(data: bytes) -> int:
    """The dictionary id a zstd frame's header carries (0: none, or not a zstd frame).

    >>> import zstandard
    >>> zstd_frame_dictionary_id(zstandard.ZstdCompressor().compress(b"abc")), zstd_frame_dictionary_id(b"xyz")
    (0, 0)
    """
    import zstandard

    try:
        return int(zstandard.get_frame_parameters(data).dict_id)
    except zstandard.ZstdError:
        return 0


def zstd_dictionary_id(dictionary: bytes) -> int:
    """The id a trained zstd dictionary declares (0 for raw content, which has none)."""
    import zstandard

    return int(zstandard.ZstdCompressionDict(dictionary).dict_id())


MAX_DICTIONARY_SIZE = 64 * 1024 * 1024  # the largest zstd dictionary read (a file, a bucket's entry compared)
DIGEST_PREFIX = "sha256:"
_DIGEST = re.compile(r"sha256:[0-9a-fA-F]{64}")


def dictionary_digest(dictionary: bytes) -> str:
    """What ``Wirepipe-Dictionary`` carries for a dictionary: ``sha256:`` and the 64 lowercase hex digits of
    the SHA-256 of its exact bytes (an id names a dictionary, the digest proves which bytes).

    >>> dictionary_digest(b"abc")
    'sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'
    """
    return DIGEST_PREFIX + hashlib.sha256(dictionary).hexdigest()


def parse_dictionary_digest(text: str) -> str:
    """``text`` as a dictionary digest, lowercased; ``ValueError`` saying the form otherwise.

    >>> parse_dictionary_digest("SHA256:" + "AB" * 32) == "sha256:" + "ab" * 32
    True
    >>> parse_dictionary_digest("ab12")
    Traceback (most recent call last):
    ...
    ValueError: 'ab12' is not a dictionary digest: sha256: and the 64 hex digits of the dictionary's SHA-256
    """
    if not isinstance(text, str) or not _DIGEST.fullmatch(text.lower()):
        raise ValueError(f"{text!r} is not a dictionary digest: sha256: and the 64 hex digits of the "
                         "dictionary's SHA-256")
    return text.lower()


def dictionary_size(samples: list[bytes]) -> int:
    """How large a dictionary to train on ``samples``: a tenth of their bytes, within 1-16 KiB (zstd's
    own advice is ~100x smaller than the samples; past 16 KiB small records gain little more)."""
    return min(16384, max(1024, sum(map(len, samples)) // 10))


def train_zstd_dictionary(samples: list[bytes], size: int = 16 * 1024, level: int = 3) -> bytes:
    """Train a zstd dictionary on sample payloads (the serialized records of a dataset).

    Small messages gain most: a dictionary lets each frame refer to what the typical
    record looks like instead of describing it again. Its id is derived from its content,
    so a dictionary trained on other samples has another id.
    """
    import zstandard

    if len(samples) < 8:
        raise ValueError(f"need at least 8 samples to train a zstd dictionary, got {len(samples)}")
    return zstandard.train_dictionary(size, list(samples), level=level).as_bytes()
