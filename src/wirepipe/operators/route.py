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

from pydantic import Field, field_validator

from ..core.batch import Batch, describe_error
from ..core.models import Strict
from ..core.stages import Stage
from ..wire import SubjectTemplate, publish_template_problem
from .operator import BuildContext, Configured, Operator, with_shorthand


class Subject(Configured, Operator):
    """Set ``batch.subjects`` from a template over each record's fields and meta columns; a record that lacks
    a field the template names is rejected (dead-lettered with the field's name), the others carry on."""

    stage = Stage.ROUTE
    entry = "subject"

    def __init__(self, template: str) -> None:
        """``template`` as ``SubjectParams`` checks it in YAML."""
        self._init(SubjectParams, template=template)

    def _configure(self, params: SubjectParams, ctx: BuildContext) -> None:
        self.template = SubjectTemplate(params.template)
        self.fields = self.template.fields
        self.name = params.template
        self.params = {"template": params.template}

    def __call__(self, batch: Batch) -> Batch:
        try:  # the hot path: one comprehension over the column
            batch.subjects = self.template.render(batch, from_records=True)
        except Exception:
            self._record_by_record(batch)
        return batch

    def _record_by_record(self, batch: Batch) -> None:
        subjects: list[str] = []
        kept: list[int] = []
        for i in range(len(batch.values)):
            try:
                subject = self.template.render(batch.slice(i, i + 1), from_records=True)[0]
            except KeyError as exc:
                why = f"no field {exc.args[0]!r} for subject template {self.name!r}"
                batch.rejected.append(batch.reject(i, self.stage, self.name, why))
            except Exception as exc:
                batch.rejected.append(batch.reject(i, self.stage, self.name, describe_error(exc)))
            else:
                subjects.append(subject)
                kept.append(i)
        batch.keep(kept)
        batch.subjects = subjects


# --- config: ``- subject: orders.{region}`` ---------------------------------------------------------


class SubjectParams(Strict):
    template: str = Field(description="e.g. orders.{region} (record fields and meta columns such as seq)")

    @field_validator("template")
    @classmethod
    def _publishable(cls, v: str) -> str:
        """A template no record could be published on (a wildcard, an empty token) is refused here, not at
        every record's publish."""
        problem = publish_template_problem(v)
        if problem is not None:
            raise ValueError(problem)
        return v

    def build(self, ctx: BuildContext) -> list[Operator]:
        return [Subject.from_params(self, ctx)]


RANK = 60  # where it comes in "allowed operators" lists (see operators/__init__.py)
OPERATORS = {"subject": with_shorthand(SubjectParams, "template", str)}
