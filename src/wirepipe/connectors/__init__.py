"""Connector registry: the ``type`` of a source or sink in config, and the model that validates it.

Entries are ``module:ConfigClass`` strings so that nothing is imported until a config
is validated; every config class has a ``type: Literal[...]`` field and ``build()``.
"""

from __future__ import annotations

import importlib
from typing import Any

SOURCES: dict[str, str] = {
    "generate": "wirepipe.connectors.generate:GenerateConfig",
    "jsonl": "wirepipe.connectors.files:JsonlSourceConfig",
    "parquet": "wirepipe.connectors.files:ParquetSourceConfig",
    "nats": "wirepipe.connectors.nats:NatsSourceConfig",
    "jetstream": "wirepipe.connectors.jetstream:JetStreamSourceConfig",
    "capture": "wirepipe.connectors.capture:CaptureSourceConfig",
}

SINKS: dict[str, str] = {
    "null": "wirepipe.connectors.files:NullSinkConfig",
    "jsonl": "wirepipe.connectors.files:JsonlSinkConfig",
    "parquet": "wirepipe.connectors.files:ParquetSinkConfig",
    "nats": "wirepipe.connectors.nats:NatsSinkConfig",
    "jetstream": "wirepipe.connectors.jetstream:JetStreamSinkConfig",
    "capture": "wirepipe.connectors.capture:CaptureSinkConfig",
}


def load(ref: str) -> Any:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def source_models() -> list[Any]:
    return [load(ref) for ref in SOURCES.values()]


def sink_models() -> list[Any]:
    return [load(ref) for ref in SINKS.values()]
