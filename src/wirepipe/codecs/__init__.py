"""Formats, codecs and the chains that join them: how a value becomes a payload and back.

Formats
=======

A **format** turns a value (a record, usually a dict) into bytes and back: ``json``,
``msgpack``, ``cbor``, ``arrow``, ``protobuf``, ... Each is a ``Format`` in the ``FORMATS``
registry, looked up by name with ``get_format``; its library is imported only when an
encoder or decoder is built. Typed formats (protobuf, avro, bincode, postcard,
``msgpack-array``) need a schema; ``pickle`` decodes only when asked to allow it.

Codecs and levels
=================

A **codec** compresses bytes into bytes: ``zstd``, ``gzip``, ``lz4``, ``brotli``, ``snappy``,
``none``, ... Each is a ``Codec`` in the ``CODECS`` registry (``get_codec``). Every codec
speaks the same level vocabulary, ``fastest``, ``default`` or ``best``, or an integer in
its own range, and every decompressor refuses output past ``max_output_size``
(``DEFAULT_MAX_OUTPUT``) before allocating it, so a decompression bomb is one refused record.

    >>> zstd = get_codec("zstd")
    >>> zstd.resolve_level("best")
    19
    >>> zstd.level_help()
    'fastest (1), default (3), best (19) or an integer -131072..22'

Chains
======

A **chain** is the one string a pipeline's config, the CLI and a metrics row agree on: a
format first, then codecs in the order they are applied when encoding, each ``name[:level]``,
joined by ``|`` (Faust's syntax, so the same string works as a Faust ``value_serializer``
through ``wirepipe.integrations.faust``). ``Chain.parse`` validates every name and level,
``str()`` gives the canonical spelling back (a default level is left out), and a chain
builds one encoder and one decoder that compose its steps:

    >>> chain = Chain.parse("msgpack|zstd:best")
    >>> chain.format, [str(step) for step in chain.codecs]
    ('msgpack', ['zstd:best'])
    >>> encode, decode = chain.encoder(), chain.decoder()
    >>> payload = encode({"id": 7, "name": "a"})
    >>> payload[:4].hex()  # zstd's frame magic: the msgpack bytes are inside, compressed
    '28b52ffd'
    >>> decode(payload)
    {'id': 7, 'name': 'a'}
    >>> str(Chain.parse("json|gzip:default"))
    'json|gzip'

A wrong chain is a ``ValueError`` that says what is allowed:

    >>> Chain.parse("msgpack|zstd:99")
    Traceback (most recent call last):
    ...
    ValueError: 99 is out of range for zstd: use fastest (1), default (3), best (19) or an integer -131072..22

In a pipeline the same string is ``encode: "msgpack|zstd:3"`` (the ``serialize`` and
``compress`` operators it expands to) and ``decode:`` on the consumer. On the wire each
format names its ``Content-Type`` and each codec its ``Content-Encoding``
(``format_for_content_type``, ``codec_for_encoding``), which is how ``format: auto`` and
``codec: auto`` decode a record by its headers.
"""

from .chain import Chain, Step
from .compression import CODECS, DEFAULT_MAX_OUTPUT, Codec, codec_for_encoding, get_codec
from .formats import FORMATS, Format, format_for_content_type, get_format
from .zstd import train_zstd_dictionary

__all__ = [
    "CODECS",
    "DEFAULT_MAX_OUTPUT",
    "FORMATS",
    "Chain",
    "Codec",
    "Format",
    "Step",
    "codec_for_encoding",
    "format_for_content_type",
    "get_codec",
    "get_format",
    "train_zstd_dictionary",
]
