"""The filter operator: keep the records for which ``function(value)`` is true.

It runs on decoded values. In config the function is an import path ``module:function``
(``operators/function_options.py``). A record whose function raises is dead-lettered; the
others are kept or dropped by the function's answer.

In YAML ``- filter: {function: mymodule:wanted}``; in Python ``wirepipe.filter_values(fn)``:

>>> from wirepipe.core.batch import Batch
>>> Filter(lambda r: r["x"] > 0)(Batch([{"x": 2.5}, {"x": -1.0}])).values
[{'x': 2.5}]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.batch import Batch, describe_error
from ..core.stages import Stage
from .function_options import FunctionOperator, FunctionParams
from .operator import BuildContext, Operator


class Filter(FunctionOperator):
    """Keep the records for which ``function(value)`` is true."""

    stage = Stage.FILTER
    entry = "filter"

    def __init__(self, function: str | Callable[[Any], bool]) -> None:
        """``function`` as ``FilterParams`` checks it in YAML (a callable in Python)."""
        self._init(FilterParams, function=function)

    def __call__(self, batch: Batch) -> Batch:
        fn = self._fn
        try:
            kept = [i for i, v in enumerate(batch.values) if fn(v)]
        except Exception:  # redo record by record: the failing ones are dead-lettered
            kept = []
            for i, v in enumerate(batch.values):
                try:
                    if fn(v):
                        kept.append(i)
                except Exception as exc:
                    batch.rejected.append(batch.reject(i, self.stage, self.name, describe_error(exc)))
        if len(kept) != len(batch.values):
            batch.keep(kept)
        return batch


# --- config: ``- filter: {function: module:function}`` --------------------------------------------


class FilterParams(FunctionParams):
    def build(self, ctx: BuildContext) -> list[Operator]:
        return [Filter.from_params(self, ctx)]


RANK = 41  # where it comes in "allowed operators" lists (see operators/__init__.py)
OPERATORS = {"filter": FilterParams}
