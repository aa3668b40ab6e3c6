"""Operators: one module per operator, holding all of it.

A module here holds the operator class, its params model (the YAML entry, which also
validates the Python factory in ``wirepipe.api``) and its registration: a module-level
``OPERATORS = {"name": ParamsModel}`` and ``RANK`` (where its name comes in the
"allowed operators" lists). ``OPERATORS`` below finds them by scanning this package on first
lookup (a lookup by name first tries the module of that name: ``serialize.py``), so adding an
operator touches its own module only. Other packages add operators
through the ``wirepipe.operators`` entry-point group (see ``wirepipe.core.registry``).

The operators: ``serialize``, ``deserialize``, ``compress``, ``decompress``, ``encode``,
``decode``, ``map``, ``filter``, ``select``, ``pack``, ``unpack``, ``subject`` (``route.py``).
What a pair shares sits in one module that registers nothing: ``schema_options.py`` (the
``schema:`` option, for serialize and deserialize), ``codec_options.py`` (codec names and zstd
dictionaries, for compress and decompress), ``chain_operators.py`` (a chain as operators, for encode
and decode), ``function_options.py`` (``module:function``, for map and filter); ``operator.py`` is the
operator shape.

>>> list(OPERATORS)[:4]
['serialize', 'deserialize', 'compress', 'decompress']
"""

from __future__ import annotations

from typing import Any

from ..core.registry import Declared, Registry

OPERATORS: Registry[Any] = Registry("wirepipe.operators", Declared(__name__, "OPERATORS"))

__all__ = ["OPERATORS"]
