"""The select operator: keep only the named fields of every (dict) record, in that order.

It runs on decoded values, typically to drop what a relay does not forward. A record that
lacks a field is dead-lettered with the missing name.

In YAML ``- select: [id, x]``; in Python ``wirepipe.select_fields("id", "x")``:

>>> from wirepipe.core.batch import Batch
>>> Select(["id", "y"])(Batch([{"id": 1, "x": 2.5, "y": 1}])).values
[{'id': 1, 'y': 1}]
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

from pydantic import Field

from ..core.batch import Batch
from ..core.models import Strict
from ..core.stages import Stage
from .operator import RECORDS, BuildContext, Configured, Operator, with_shorthand


class Select(Configured, Operator):
    """Keep only the named fields of every (dict) record, in that order."""

    stage = Stage.SELECT
    entry = "select"
    takes = RECORDS

    def __init__(self, fields: Sequence[str]) -> None:
        """``fields`` as ``SelectParams`` checks them in YAML (a list of at least one name)."""
        self._init(SelectParams, fields=fields)

    def _configure(self, params: SelectParams, ctx: BuildContext) -> None:
        self.fields = tuple(params.fields)
        self.name = ",".join(self.fields)
        self.params = {"fields": list(self.fields)}
        get = operator.itemgetter(*self.fields)
        names = self.fields
        self._fn = (lambda r: {names[0]: get(r)}) if len(names) == 1 else (lambda r: dict(zip(names, get(r), strict=False)))

    def __call__(self, batch: Batch) -> Batch:
        return batch.map_values(self._fn, self.stage, self.name)


# --- config: ``- select: [field, ...]`` -------------------------------------------------------------


class SelectParams(Strict):
    fields: list[str] = Field(min_length=1, description="the fields each record keeps, in this order")

    def build(self, ctx: BuildContext) -> list[Operator]:
        return [Select.from_params(self, ctx)]


RANK = 42  # where it comes in "allowed operators" lists (see operators/__init__.py)
OPERATORS = {"select": with_shorthand(SelectParams, "fields", list)}
