"""The ``subject`` operator: one NATS subject per record from the record's own fields.

A NATS sink sees payload bytes, not records, so subjects that depend on a field
(``orders.{region}``) are rendered here, while the values are still records (before
``serialize``); the sink then publishes with ``subject: "{subject}"`` (or a template
around it, e.g. ``out.{subject}``). ``{seq}`` and other per-record meta columns work too.

In YAML ``- subject: orders.{region}``; in Python ``wirepipe.subject("orders.{region}")``:

>>> from wirepipe.core.batch import Batch
>>> Subject("orders.{region}")(Batch([{"region": "eu"}, {"region": "us"}])).subjects
['orders.eu', 'orders.us']
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ..core.batch import Batch
from ..core.models import Strict
from ..wire import template_fields
from .base import BuildContext, Operator, with_shorthand


class Subject(Operator):
    """Set ``batch.subjects`` from a template over each record's fields and meta columns."""

    stage = "route"

    def __init__(self, template: str) -> None:
        fields = template_fields(template)
        self.template = template
        self.fields = fields
        self.name = template
        self.params = {"template": template}

    def __call__(self, batch: Batch) -> Batch:
        if not self.fields:
            batch.subjects = self.template
            return batch
        fmt = self.template.format
        meta = {k: col for k, col in batch.meta.items() if k in self.fields}
        if not meta:
            subjects = [fmt(**_fields(v)) for v in batch.values]
        else:
            names = list(meta)
            subjects = [fmt(**_fields(v), **dict(zip(names, row, strict=True)))
                        for v, *row in zip(batch.values, *meta.values(), strict=True)]
        batch.subjects = subjects
        return batch


def _fields(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if hasattr(value, "asdict"):
        return value.asdict()
    if hasattr(value, "model_dump"):
        return value.model_dump()
    return getattr(value, "__dict__", {})


# --- config: ``- subject: orders.{region}`` ---------------------------------------------------------


class SubjectParams(Strict):
    template: str = Field(description="e.g. orders.{region} (record fields and meta columns such as seq)")

    def build(self, ctx: BuildContext) -> list[Operator]:
        return [Subject(self.template)]


RANK = 60  # where it comes in "allowed operators" lists (see operators/__init__.py)
OPERATORS = {"subject": with_shorthand(SubjectParams, "template", str)}
