"""Record transforms for relays and clean-up: ``map``, ``filter`` and ``select``.

They run on decoded values (between ``deserialize`` and ``serialize``). ``map`` and
``filter`` take a Python callable, in config as an import path ``module:function``.
A record whose callable raises is dead-lettered like a record that fails to decode.

In YAML ``- map: {function: mymodule:fix}``, ``- filter: {function: ...}``, ``- select: [id, x]``;
in Python ``wirepipe.map_values(fn)``, ``wirepipe.filter_values(fn)``, ``wirepipe.select("id", "x")``:

>>> from wirepipe.batch import Batch
>>> batch = Batch([{"id": 1, "x": 2.5}, {"id": 2, "x": -1.0}])
>>> batch = Filter(lambda r: r["x"] > 0)(Map(lambda r: {**r, "y": 1})(batch))
>>> Select(["id", "y"])(batch).values
[{'id': 1, 'y': 1}]
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, WrapValidator

from ..batch import Batch, describe_error
from ..models import Strict
from .base import BuildContext, Operator


def import_callable(ref: str | Callable[..., Any]) -> Callable[..., Any]:
    """A callable given directly or as ``module:attr``."""
    if callable(ref):
        return ref
    from .serialize import import_path

    fn = import_path(ref)
    if not callable(fn):
        raise ValueError(f"{ref!r} is not callable")
    return fn


def _ref_name(ref: str | Callable[..., Any]) -> str:
    return ref if isinstance(ref, str) else f"{ref.__module__}:{getattr(ref, '__qualname__', repr(ref))}"


class Map(Operator):
    """Replace every value by ``function(value)``."""

    stage = "map"

    def __init__(self, function: str | Callable[[Any], Any]) -> None:
        self._fn = import_callable(function)
        self.name = _ref_name(function)
        self.params = {"function": self.name}

    def __call__(self, batch: Batch) -> Batch:
        return batch.map_values(self._fn, self.stage, self.name)


class Filter(Operator):
    """Keep the records for which ``function(value)`` is true."""

    stage = "filter"

    def __init__(self, function: str | Callable[[Any], bool]) -> None:
        self._fn = import_callable(function)
        self.name = _ref_name(function)
        self.params = {"function": self.name}

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


class Select(Operator):
    """Keep only the named fields of every (dict) record, in that order."""

    stage = "select"

    def __init__(self, fields: Sequence[str]) -> None:
        if not fields:
            raise ValueError("select needs at least one field")
        self.fields = tuple(fields)
        self.name = ",".join(self.fields)
        self.params = {"fields": list(self.fields)}
        get = operator.itemgetter(*self.fields)
        names = self.fields
        self._fn = (lambda r: {names[0]: get(r)}) if len(names) == 1 else (lambda r: dict(zip(names, get(r), strict=False)))

    def __call__(self, batch: Batch) -> Batch:
        return batch.map_values(self._fn, self.stage, self.name)


# --- config: ``- map: {...}``, ``- filter: {...}``, ``- select: [...]`` -----------------------------


def _callable_or(value: Any, as_yaml: Callable[[Any], Any]) -> Any:
    """A Python callable as given (YAML cannot spell one); anything else validated as YAML's string."""
    return value if callable(value) and not isinstance(value, str) else as_yaml(value)


class FunctionParams(Strict):
    function: Annotated[str, WrapValidator(_callable_or)] = Field(
        description="import path module:function (a callable in Python)")


class MapParams(FunctionParams):
    def build(self, ctx: BuildContext) -> list[Operator]:
        return [Map(self.function)]


class FilterParams(FunctionParams):
    def build(self, ctx: BuildContext) -> list[Operator]:
        return [Filter(self.function)]


class SelectParams(Strict):
    fields: list[str] = Field(min_length=1)

    def build(self, ctx: BuildContext) -> list[Operator]:
        return [Select(self.fields)]


def _fields_shorthand(v: Any) -> Any:
    return {"fields": v} if isinstance(v, list) else v


RANK = 40  # where these come in "allowed operators" lists (see operators/__init__.py)
OPERATORS = {"map": MapParams, "filter": FilterParams,
             "select": Annotated[SelectParams, BeforeValidator(_fields_shorthand)]}
