"""wirepipe: stream-processing pipelines for the payload path on NATS.

Names are imported lazily, so ``import wirepipe`` (and ``wirepipe --help``) stays fast: the core
classes by their module, the Python factories as ``wirepipe.api.__all__`` lists them.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "Batch": "wirepipe.core.batch",
    "Pipeline": "wirepipe.pipelines.pipeline",
    "OperatorChain": "wirepipe.operators.operator",
    "load_pipeline": "wirepipe.pipelines.config",
    "Chain": "wirepipe.codecs.chain",
    "WirepipeError": "wirepipe.core.errors",
    "ConfigError": "wirepipe.core.errors",
    "StageError": "wirepipe.core.errors",
    "RefusedError": "wirepipe.core.errors",
}


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
    if not name.startswith("_") and name in _api_names(renamed=True):  # a probe for a private name imports nothing
        return getattr(importlib.import_module("wirepipe.api"), name)
    raise AttributeError(f"module 'wirepipe' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_api_names()})
