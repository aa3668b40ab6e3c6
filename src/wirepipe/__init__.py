"""wirepipe: stream-processing pipelines for the payload path on NATS.

Names are imported lazily, so ``import wirepipe`` (and ``wirepipe --help``) stays fast.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "Batch": "wirepipe.core.batch",
    "Pipeline": "wirepipe.pipelines.pipeline",
    "load_pipeline": "wirepipe.pipelines.config",
    "Chain": "wirepipe.codecs.chain",
    "WirepipeError": "wirepipe.core.errors",
    "ConfigError": "wirepipe.core.errors",
    "StageError": "wirepipe.core.errors",
    "RefusedError": "wirepipe.core.errors",
}
_API = ("generate", "serialize", "deserialize", "compress", "decompress", "encode", "decode", "map_values",
        "filter_values", "select", "pack", "unpack", "subject", "operator", "null_sink", "jsonl_sink", "parquet_sink",
        "nats_sink", "jetstream_sink", "capture_sink", "jsonl_source", "parquet_source", "nats_source",
        "jetstream_source", "capture_source", "source", "sink")

__all__ = [*_LAZY, *_API, "__version__"]


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _API:
        return getattr(importlib.import_module("wirepipe.api"), name)
    raise AttributeError(f"module 'wirepipe' has no attribute {name!r}")
