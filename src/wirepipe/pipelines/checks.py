"""What a pipeline checks of its parts, built from YAML or in Python alike, before anything runs.

The parts declare what the pipeline must check (``Sink.refuse_source``: e.g. one Parquet file behind a source
acknowledged at every flush): ``check_parts`` runs it for every pipeline when it is constructed and again when a
run starts (``run.py``). What flows between them is checked there too (``check_flow``): the kind of values each
operator and the sink take (records or payloads), the schema a positional format takes from its source and the
stages before and after each operator (``Operator.follows``, ``precedes``), so
``wirepipe validate`` refuses what a run would otherwise refuse at its first batch. It also refuses a dead letter
published where the source reads (``ReadsSubjects.subjects``, ``PublishesToSubjects.publishes_to``): each dead letter would come back,
fail again and be dead-lettered again, forever; a JetStream source's stream subjects are known once it is open,
so a run checks again then (``check_dead_letter_loop``). A record that still comes back with the pipeline's own
dead-letter headers is not dead-lettered again (``run.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..connectors.connector import PublishesToSubjects, ReadsSubjects, Sink, Source
from ..core.batch import PAYLOADS, SAME
from ..core.errors import ConfigError
from ..core.stores import SchemaFromStore
from ..operators.operator import Operator
from ..wire import subjects_overlap


def check_parts(source: Source, sink: Sink | None, dead_letter: Sink | None, operators: Sequence[Operator] = ()
                ) -> None:
    """The rules that belong to a whole pipeline, as its parts declare them: ``ConfigError`` at the field of
    the part that cannot follow the source (YAML adds the file; the message is the same)."""
    check_flow(source, operators, sink)
    for where, part in (("sink", sink), ("dead_letter", dead_letter)):
        refusal = part.refuse_source(source) if part is not None else None
        if refusal is not None:
            raise ConfigError(refusal.message, path=f"{where}.{refusal.field}")
    check_dead_letter_loop(source, dead_letter)


def check_dead_letter_loop(source: Source, dead_letter: Sink | None) -> None:
    """``ConfigError`` at ``dead_letter.subject`` when the source reads what the dead letter publishes."""
    if not (isinstance(dead_letter, PublishesToSubjects) and isinstance(source, ReadsSubjects)):
        return
    template, read = dead_letter.publishes_to, source.subjects
    if not read:
        return
    loops = [s for s in read if subjects_overlap(s, template)]
    if not loops:
        return
    what = f"subject {loops[0]!r}" if len(read) == 1 else f"subjects {', '.join(map(repr, read))}"
    other = "dlq." + template
    hint = f" such as {other!r}" if not any(subjects_overlap(s, other) for s in read) else ""
    raise ConfigError(f"{template!r} is read by the source ({source.type} {what}): every dead letter would come "
                      f"back to this pipeline, fail again and be dead-lettered again, forever; publish dead "
                      f"letters on a subject the source does not read{hint}", path="dead_letter.subject")


def check_flow(source: Source, operators: Sequence[Operator], sink: Sink | None,
               where: Sequence[str] | None = None) -> None:
    """What each operator and the sink declare they take from upstream (``operators/operator.py``): the kind of
    values, records or payloads, as far as the parts before them tell it, and the schema the source attaches
    for a positional format given none. ``ConfigError`` at the part's field (``where``: each operator's path
    in a YAML file; ``operators[i].<stage>`` by default)."""
    kind, origin = source.gives, f"the source ({source.type})"
    registered = isinstance(source, SchemaFromStore) and source.schema_ref is not None  # typed, known at start
    for i, op in enumerate(operators):
        at = where[i] if where is not None else f"operators[{i}].{op.stage}"
        op.follows([before.stage for before in operators[:i]])
        op.precedes([after.stage for after in operators[i + 1:]])
        refusal = None if registered else op.refuse_schema(source.schema)
        if refusal is not None:
            raise ConfigError(refusal.message, path=f"{at}.{refusal.field}")
        if op.takes is not None and kind is not None and kind != op.takes:
            raise ConfigError(_misfit(f"{op.stage} ({op.name}) works on", op.takes, kind, origin), path=at)
        if op.gives != SAME:
            kind, origin = op.gives, f"{at} ({op.name})"
    takes = sink.takes if sink is not None else None
    if takes is not None and kind is not None and kind != takes:
        raise ConfigError(_misfit(f"the {sink.type} sink writes", takes, kind, origin), path="sink")  # type: ignore[union-attr]


def _misfit(what: str, takes: str, kind: str, origin: str) -> str:
    if takes == PAYLOADS:
        return f"{what} payloads (bytes), but {origin} gives decoded {kind}: put a `serialize` before it"
    return f"{what} decoded {takes}, but {origin} gives {kind} (bytes): put a `deserialize` before it"
