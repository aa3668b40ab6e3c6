"""wirepipe: stream-processing pipelines for the payload path on NATS.

Names are imported lazily, so ``import wirepipe`` (and ``wirepipe --help``) stays fast: the core
classes by their module (``_LAZY``), the Python factories as ``wirepipe.api.__all__`` lists them. A
type checker reads the same names, each with its own type, from the imports under ``TYPE_CHECKING``,
which never run (the package ships ``py.typed``; ``tests/test_api.py`` checks that they are exactly the
public names and the old names of renamed ones, and that a user's mypy sees no ``Any`` among them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "Batch": "wirepipe.core.batch",
    "Pipeline": "wirepipe.pipelines.pipeline",
    "RunStats": "wirepipe.pipelines.stats",
    "load_pipeline": "wirepipe.pipelines.config",
    "Operator": "wirepipe.operators.operator",
    "OperatorChain": "wirepipe.operators.operator",
    "Source": "wirepipe.connectors.connector",
    "Sink": "wirepipe.connectors.connector",
    "Chain": "wirepipe.codecs.chain",
    "WirepipeError": "wirepipe.core.errors",
    "ConfigError": "wirepipe.core.errors",
    "StageError": "wirepipe.core.errors",
    "RefusedError": "wirepipe.core.errors",
}

if TYPE_CHECKING:  # `X as X`: re-exported, for a type checker's strictest settings too
    from .api import capture_sink as capture_sink
    from .api import capture_source as capture_source
    from .api import compress as compress
    from .api import csv_source as csv_source
    from .api import decode as decode
    from .api import decompress as decompress
    from .api import deserialize as deserialize
    from .api import encode as encode
    from .api import filter_values as filter_values
    from .api import generate as generate  # renamed: generate_source (deprecated)
    from .api import generate_source as generate_source
    from .api import jetstream_sink as jetstream_sink
    from .api import jetstream_source as jetstream_source
    from .api import jsonl_sink as jsonl_sink
    from .api import jsonl_source as jsonl_source
    from .api import map_values as map_values
    from .api import nats_sink as nats_sink
    from .api import nats_source as nats_source
    from .api import null_sink as null_sink
    from .api import operator as operator  # renamed: operator_entry (deprecated)
    from .api import operator_entry as operator_entry
    from .api import pack as pack
    from .api import parquet_sink as parquet_sink
    from .api import parquet_source as parquet_source
    from .api import select as select  # renamed: select_fields (deprecated)
    from .api import select_fields as select_fields
    from .api import serialize as serialize
    from .api import sink as sink
    from .api import source as source
    from .api import subject as subject
    from .api import unpack as unpack
    from .codecs.chain import Chain as Chain
    from .connectors.connector import Sink as Sink
    from .connectors.connector import Source as Source
    from .core.batch import Batch as Batch
    from .core.errors import ConfigError as ConfigError
    from .core.errors import RefusedError as RefusedError
    from .core.errors import StageError as StageError
    from .core.errors import WirepipeError as WirepipeError
    from .operators.operator import Operator as Operator
    from .operators.operator import OperatorChain as OperatorChain
    from .pipelines.config import load_pipeline as load_pipeline
    from .pipelines.pipeline import Pipeline as Pipeline
    from .pipelines.stats import RunStats as RunStats
else:  # at run time: each name imported on its first use (PEP 562); hidden from a type checker, so a
    # misspelt name is its error rather than an ``Any``

    def _api_names(renamed: bool = False) -> list[str]:
        """The Python factories: ``wirepipe.api.__all__``, the one list of them (imported on first use); with
        ``renamed``, the old names of renamed ones too (``wirepipe.api.RENAMED``: deprecated, not in ``__all__``)."""
        import importlib

        api = importlib.import_module("wirepipe.api")
        return [*api.__all__, *(api.RENAMED if renamed else ())]

    def __getattr__(name: str) -> Any:
        import importlib

        if name in _LAZY:
            return getattr(importlib.import_module(_LAZY[name]), name)
        if name == "__all__":
            return [*_LAZY, *_api_names(), "__version__"]
        if not name.startswith("_") and name in _api_names(renamed=True):  # a private name's probe imports nothing
            return getattr(importlib.import_module("wirepipe.api"), name)
        raise AttributeError(f"module 'wirepipe' has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*globals(), *_LAZY, *_api_names()})
