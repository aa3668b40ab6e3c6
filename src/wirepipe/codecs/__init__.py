"""Format and compression registries and the chain syntax that joins them."""

from .chain import Chain, Step
from .compression import (
    CODECS,
    DEFAULT_MAX_OUTPUT,
    Codec,
    codec_for_encoding,
    get_codec,
    train_zstd_dictionary,
)
from .formats import FORMATS, Format, format_for_content_type, get_format

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
