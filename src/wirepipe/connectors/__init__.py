"""Connector registry: the ``type`` of a source or sink in config, and the model that validates it.

A connector lives in one module here, holding all of it: the runtime class, its config model
(``type: Literal[...]``, every field with its default and constraint, ``build()``; YAML, the
runtime class's own keyword arguments and the factories in ``wirepipe.api`` all validate with
it) and its registration at the bottom, ``SOURCES = {"type": Config}`` and/or ``SINKS = {...}``
with ``RANK`` (where its types come in the "allowed" lists). ``SOURCES`` and ``SINKS`` below
find them by scanning this package on first lookup (a lookup by type first tries the module of
that name: ``null.py``), so adding a connector touches its own module only. Another package adds one through the ``wirepipe.connectors`` entry-point group,
named ``source.<type>`` or ``sink.<type>`` (see ``wirepipe.core.registry``).

>>> SOURCES["generate"].__name__, list(SINKS)[:3]
('GenerateConfig', ['null', 'jsonl', 'parquet'])
"""

from __future__ import annotations

from typing import Any

from ..core.registry import Declared, Registry

SOURCES: Registry[Any] = Registry("wirepipe.connectors", Declared(__name__, "SOURCES"), prefix="source.")
SINKS: Registry[Any] = Registry("wirepipe.connectors", Declared(__name__, "SINKS"), prefix="sink.")


def source_models() -> list[Any]:
    return list(SOURCES.values())


def sink_models() -> list[Any]:
    return list(SINKS.values())
