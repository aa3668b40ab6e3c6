"""The unpack operator: every list value (a message ``pack`` made) back into its records.

It runs after ``deserialize``; see ``operators/pack.py`` for the framing. An unpacked record
repeats its message's meta columns, except the ``ack`` handle, which only the first record of
the message carries (a message is acknowledged once, after all its records were written). A
value that is not a list is dead-lettered.

In YAML ``- unpack:``; in Python ``wirepipe.unpack()``:

>>> from wirepipe.core.batch import Batch
>>> out = Unpack()(Batch([[1, 2], 3]))
>>> out.values, [r.error for r in out.rejected]
([1, 2], ['expected a list of records, got int'])
"""

from __future__ import annotations

from itertools import chain, repeat
from typing import Annotated

from pydantic import BeforeValidator

from ..core.batch import PACKED, Batch
from ..core.models import Strict
from ..core.stages import Stage
from .operator import RECORDS, BuildContext, Configured, Operator


class Unpack(Configured, Operator):
    """Turn every list value back into its records."""

    stage = Stage.UNPACK
    entry = "unpack"
    takes, gives = RECORDS, None  # the values of each list
    name = "unpack"

    def __init__(self) -> None:
        self._init(UnpackParams)

    def _configure(self, params: UnpackParams, ctx: BuildContext) -> None:
        self.params = {}

    def __call__(self, batch: Batch) -> Batch:
        values = batch.values
        bad = [i for i, v in enumerate(values) if type(v) is not list]
        if bad:
            for i in bad:
                batch.rejected.append(batch.reject(i, self.stage, self.name,
                                                   f"expected a list of records, got {type(values[i]).__name__}"))
            keep = sorted(set(range(len(values))) - set(bad))
            batch.keep(keep)
            values = batch.values
        counts = [len(v) for v in values]
        batch.meta.pop(PACKED, None)  # each value is one record again
        acks = batch.meta.pop("ack", None)
        batch.repeat(counts)
        if acks is not None:  # only the first record of a message carries its ack
            batch.meta["ack"] = list(chain.from_iterable(
                chain((a,), repeat(None, n - 1)) if n else () for a, n in zip(acks, counts, strict=True)))
        batch.values = list(chain.from_iterable(values))
        return batch


# --- config: ``- unpack:`` -------------------------------------------------------------------------


class UnpackParams(Strict):
    def build(self, ctx: BuildContext) -> list[Operator]:
        return [Unpack.from_params(self, ctx)]


RANK = 51  # where it comes in "allowed operators" lists (see operators/__init__.py)
OPERATORS = {"unpack": Annotated[UnpackParams, BeforeValidator(lambda v: {} if v is None else v,
                                                              json_schema_input_type=UnpackParams | None)]}
