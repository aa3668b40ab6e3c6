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

from ..registry import Registry, declared_in

OPERATORS: Registry[Any] = Registry("wirepipe.operators", lambda: declared_in(__name__, "OPERATORS"))

__all__ = ["OPERATORS"]
