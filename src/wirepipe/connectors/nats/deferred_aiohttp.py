"""aiohttp imported when a WebSocket connection first uses it, not when nats-py is imported.

nats-py's transport module imports aiohttp at its top for the WebSocket transport (``ws://``, ``wss://``
URLs): ~0.15 s of CPU at the start of every process that talks to NATS (a worker, ``tap``, ``capture``, each
restart of a pool's worker), though a ``nats://`` connection never touches it. ``defer()`` (the package
runs it) hands that module a stand-in while it is imported: the first attribute nats-py asks of it (when it
opens a WebSocket) imports aiohttp and answers from it. Nothing else sees the stand-in: it is in
``sys.modules`` only while nats-py's transport module runs its top, and an ``import aiohttp`` anywhere else
gets aiohttp itself. Where aiohttp is not installed, or already imported, nothing changes.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Sequence
from typing import Any

TRANSPORT = "nats.aio.transport"  # the nats-py module that imports aiohttp at its top
LIBRARY = "aiohttp"


class _StandIn(types.ModuleType):
    """aiohttp, as nats-py's transport module holds it: imported at the first attribute asked for."""

    def __getattr__(self, name: str) -> Any:
        if sys.modules.get(LIBRARY) is self:  # asked while nats-py's module runs its top: import the real one
            del sys.modules[LIBRARY]
        return getattr(importlib.import_module(LIBRARY), name)


class _Loader(importlib.abc.Loader):
    """The transport module's own loader, with the stand-in in ``sys.modules`` while its top runs."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        if LIBRARY in sys.modules or importlib.util.find_spec(LIBRARY) is None:
            self.loader.exec_module(module)
            return
        stand_in = _StandIn(LIBRARY)
        sys.modules[LIBRARY] = stand_in
        try:
            self.loader.exec_module(module)
        finally:
            if sys.modules.get(LIBRARY) is stand_in:
                del sys.modules[LIBRARY]


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nats-py's transport module as the other finders do, and gives it ``_Loader``."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != TRANSPORT:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


def defer() -> None:
    """Install the finder, once, unless nats-py's transport module is imported already."""
    if TRANSPORT not in sys.modules and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
