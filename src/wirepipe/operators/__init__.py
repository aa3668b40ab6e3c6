"""Operators: one module per operator (or per operator and its inverse), holding all of it.

A module here holds the operator class, its params model (the YAML entry, which also
validates the Python factory in ``wirepipe.api``) and its registration: a module-level
``OPERATORS = {"name": ParamsModel}`` and ``RANK`` (where its names come in the
"allowed operators" lists). ``OPERATORS`` below finds them by scanning this package on first
lookup, so adding an operator touches its own module only. Other packages add operators
through the ``wirepipe.operators`` entry-point group (see ``wirepipe.registry``).

>>> list(OPERATORS)[:4]
['serialize', 'deserialize', 'compress', 'decompress']
"""

from __future__ import annotations

from typing import Any

from ..registry import Registry


def _builtin_operators() -> dict[str, Any]:
    """name -> params model of every module in this package that declares ``OPERATORS``."""
    import importlib
    import pkgutil

    modules = [importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)]
    declaring = sorted((m for m in modules if hasattr(m, "OPERATORS")), key=lambda m: (m.RANK, m.__name__))
    return {name: params for m in declaring for name, params in m.OPERATORS.items()}


OPERATORS: Registry[Any] = Registry("wirepipe.operators", _builtin_operators)

__all__ = ["OPERATORS"]
