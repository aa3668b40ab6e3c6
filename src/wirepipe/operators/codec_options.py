"""What ``compress`` and ``decompress`` share: the codec-name check and the zstd dictionary options.

A dictionary is given as a file path in YAML (both ends load the same file) or as bytes in
Python, or named in a dictionary store (``nats://BUCKET/NAME``, ``core.stores.parse_dictionary_ref``); a codec
name may be an alias (``br`` for brotli), resolved to the codec's own name.

>>> known_codec("zstd"), load_dictionary(b"raw")
('zstd', b'raw')
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import WrapValidator

from ..codecs.compression import get_codec
from ..core.stores import is_nats_ref


def load_dictionary(dictionary: bytes | str | Path | None) -> bytes | None:
    """A zstd dictionary given inline (bytes) or as a file path (a ``nats://`` one is not a file: the
    publisher names it, ``compress: {dictionary: nats://BUCKET/NAME}``, and a consumer finds it by the
    id in the frames, ``decompress: {dictionaries: nats://BUCKET}``)."""
    if dictionary is None or isinstance(dictionary, bytes):
        return dictionary
    if is_nats_ref(dictionary):
        raise ValueError(f"{dictionary}: a dictionary shared through NATS is found by the id the frames carry: "
                         "give the bucket as `dictionaries: nats://BUCKET`")
    return _read_dictionary_file(Path(dictionary))


def _read_dictionary_file(path: Path) -> bytes:
    """The file's bytes, at most ``MAX_DICTIONARY_SIZE`` read; ``ValueError`` saying why it cannot be read."""
    from ..codecs.zstd import MAX_DICTIONARY_SIZE
    from ..core.limits import FileTooLarge, read_at_most

    what = f"zstd dictionary file {path}"
    try:
        return read_at_most(path, MAX_DICTIONARY_SIZE, "a zstd dictionary")
    except FileNotFoundError:
        raise ValueError(f"{what}: no such file") from None
    except IsADirectoryError:
        raise ValueError(f"{what}: a folder, not a file") from None
    except FileTooLarge as exc:
        raise ValueError(f"{what} is {exc} (wirepipe dict train makes 1-16 KiB ones by default)") from None
    except OSError as exc:
        raise ValueError(f"{what}: cannot be read ({exc.strerror or exc})") from None


def known_codec(v: str) -> str:
    """The codec's own name for ``v`` (an alias resolved); ``ValueError`` listing the known ones."""
    try:
        return get_codec(v).name
    except KeyError as exc:
        raise ValueError(exc.args[0]) from None


def _bytes_or(value: Any, as_yaml: Callable[[Any], Any]) -> Any:
    """A dictionary's bytes (or a ``pathlib.Path``) as given in Python; anything else validated as YAML's path."""
    if isinstance(value, bytes):
        return value
    return as_yaml(os.fspath(value) if isinstance(value, os.PathLike) else value)


Dictionary = Annotated[str | None, WrapValidator(_bytes_or)]


def _settings_or(value: Any, as_yaml: Callable[[Any], Any]) -> Any:
    """A connection's settings given in Python as a model (``NatsConnectionConfig``) taken as its fields."""
    dump = getattr(value, "model_dump", None)
    return as_yaml(dump(exclude_unset=True) if callable(dump) else value)


# An operator's own ``nats:`` beside a ``nats://`` reference: the settings of the store it implies, checked as a
# NATS connection where the pipeline builds that store (``pipelines/resources.py``: the operator knows no transport)
NatsSettings = Annotated[dict[str, Any] | None, WrapValidator(_settings_or)]
NATS_FIELD = ("how the nats:// store is reached (url, auth, tls ...: a NATS connection's fields); default: as the "
              "pipeline's NATS source or sink. Declaring resources.dictionaries.BUCKET with nats: says it once")
