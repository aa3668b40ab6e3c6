"""The map operator: every value replaced by ``function(value)``.

It runs on decoded values (between ``deserialize`` and ``serialize``). In config the function is
an import path ``module:function`` (``operators/function_options.py``). A record whose function
raises is dead-lettered like a record that fails to decode; the others carry on.

In YAML ``- map: {function: mymodule:fix}``; in Python ``wirepipe.map_values(fn)``:

>>> from wirepipe.core.batch import Batch
>>> Map(lambda r: {**r, "y": 1})(Batch([{"id": 1}])).values
[{'id': 1, 'y': 1}]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.batch import Batch
from ..core.stages import Stage
from .function_options import FunctionOperator, FunctionParams
from .operator import BuildContext, Operator


class Map(FunctionOperator):
    """Replace every value by ``function(value)``."""

    stage = Stage.MAP
    entry = "map"
    gives = None  # what the function returns

    def __init__(self, function: str | Callable[[Any], Any]) -> None:
        """``function`` as ``MapParams`` checks it in YAML (a callable in Python)."""
        self._init(MapParams, function=function)

    def __call__(self, batch: Batch) -> Batch:
        return batch.map_values(self._fn, self.stage, self.name)


# --- config: ``- map: {function: module:function}`` -----------------------------------------------


class MapParams(FunctionParams):
    def build(self, ctx: BuildContext) -> list[Operator]:
        return [Map.from_params(self, ctx)]


RANK = 40  # where it comes in "allowed operators" lists (see operators/__init__.py)
OPERATORS = {"map": MapParams}
