"""Connector registry: the ``type`` of a source or sink in config, and the model that validates it.

Entries are ``module:ConfigClass`` strings so that nothing is imported until a config
is validated; every config class has a ``type: Literal[...]`` field and ``build()``, and
is the one declaration of the connector's fields: YAML and the Python factories in
``wirepipe.api`` both validate with it. Adding a connector is its module plus its line
here; another package adds one through the ``wirepipe.connectors`` entry-point group,
named ``source.<type>`` or ``sink.<type>`` (see ``wirepipe.registry``).

>>> SOURCES["generate"].__name__, "jetstream" in SINKS
('GenerateConfig', True)
"""

from __future__ import annotations

from typing import Any

from ..registry import Registry

SOURCES: Registry[Any] = Registry("wirepipe.connectors", {
    "generate": "wirepipe.connectors.generate:GenerateConfig",
    "jsonl": "wirepipe.connectors.files:JsonlSourceConfig",
    "parquet": "wirepipe.connectors.files:ParquetSourceConfig",
    "nats": "wirepipe.connectors.nats:NatsSourceConfig",
    "jetstream": "wirepipe.connectors.jetstream:JetStreamSourceConfig",
    "capture": "wirepipe.connectors.capture:CaptureSourceConfig",
}, prefix="source.")

SINKS: Registry[Any] = Registry("wirepipe.connectors", {
    "null": "wirepipe.connectors.files:NullSinkConfig",
    "jsonl": "wirepipe.connectors.files:JsonlSinkConfig",
    "parquet": "wirepipe.connectors.files:ParquetSinkConfig",
    "nats": "wirepipe.connectors.nats:NatsSinkConfig",
    "jetstream": "wirepipe.connectors.jetstream:JetStreamSinkConfig",
    "capture": "wirepipe.connectors.capture:CaptureSinkConfig",
}, prefix="sink.")

def source_models() -> list[Any]:
    return list(SOURCES.values())


def sink_models() -> list[Any]:
    return list(SINKS.values())
