"""Two schemas compared field by field: what differs, whether records written with one can be read with the
other by field name, and the function that reads them so.

A consumer meets records written with a schema other than its own: a publisher on an older or newer version,
or one whose schema lists the same fields in another order (``wirepipe schema infer`` keeps the records'
order, a hand-written schema may not). The ``Wirepipe-Schema`` header says which (``schema.schema_fingerprint``).
A positional format (msgpack-array, avro, bincode, postcard, protobuf's numbers) read with the consumer's
schema would put values under other fields' names; read with the writer's schema and then taken field by
name, the record is right. Whether that can be done is Avro's schema resolution, on the schema language:

- a field both schemas have is read when the writer's type reads as the reader's: the same type; ``int32``
  or ``uint32`` as ``int64`` or ``float64``; ``float32`` as ``float64``; ``bytes[N]`` as ``bytes``; ``T`` as
  ``T?``; lists item by item and nested records field by field, by these same rules. Not ``T?`` as ``T``
  (a null has nowhere to go), nor a narrowing (``int64`` as ``int32``, ``int64`` as ``float64``: precision);
- a field only the reader has is read as None where it is optional there; a required one cannot be read;
- a field only the writer has is left out (the reader did not ask for it);
- order is free: fields go by name;
- a schema of field names only (msgpack-array's ``schema: [a, b]``, a class's field order) has no types to
  compare: its fields read as they are.

``compare_schemas(writer, reader)`` gives the ``SchemaDiff`` (``wirepipe schema diff`` prints it, a dead
letter's reason quotes its ``summary``); ``reader_of(writer, reader)`` the function from a record decoded
with the writer's schema to the reader's. ``incompatibilities(rule, new, versions)`` applies a registry's
compatibility rule (``RULES``: Confluent's backward, forward, full, none and their transitive forms) to a new
version, by the same resolution: what ``wirepipe schema push`` checks.

>>> from wirepipe.schema import parse_schema
>>> old, new = parse_schema({"a": "int32", "b": "string"}), parse_schema({"b": "string", "a": "int64", "c?": "bool"})
>>> diff = compare_schemas(old, new)
>>> diff.readable, diff.summary()
(True, 'a moved (1st in the writer schema, 2nd here); a int32 -> int64; c added (bool?)')
>>> reader_of(old, new)({"a": 1, "b": "x"})
{'b': 'x', 'a': 1, 'c': None}
>>> compare_schemas(new, old).problems
('a: int64 in the writer schema, int32 here (no int64 reads as int32)',)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .fingerprint import schema_fingerprint
from .language import Kind
from .types import RecordSchema, Type

AnySchema = RecordSchema | Sequence[str]  # a typed schema, or field names only

# writer kind -> the reader kinds its values read as, besides its own (nothing is lost on the way)
_WIDENS = {Kind.INT32: (Kind.INT64, Kind.FLOAT64), Kind.UINT32: (Kind.INT64, Kind.FLOAT64),
           Kind.FLOAT32: (Kind.FLOAT64,), Kind.FIXED: (Kind.BYTES,)}
_FLOATS = (Kind.FLOAT32, Kind.FLOAT64)


@dataclass(frozen=True)
class Change:
    """One difference between a writer's schema and a reader's, at a field path (``user.zip``, ``rows[].k``).

    ``kind`` is ``added`` (the reader has it, the writer not), ``removed`` (the writer has it, the reader not),
    ``retyped`` or ``moved`` (its place among the fields both have differs); ``why`` says why the reader
    cannot read the writer's records there (``problem`` in a sentence), or is None.
    """

    path: str
    kind: str
    writer: str | None = None  # the field's type in the writer's schema (retyped, removed), or its position (moved)
    reader: str | None = None  # the same in the reader's
    why: str | None = None

    def __str__(self) -> str:
        if self.kind == "moved":
            return f"{self.path} moved ({self.writer} in the writer schema, {self.reader} here)"
        if self.kind == "retyped":
            return f"{self.path} {self.writer} -> {self.reader}"
        return f"{self.path} {self.kind} ({self.reader if self.kind == 'added' else self.writer})"

    @property
    def problem(self) -> str | None:
        """Why the reader cannot read the writer's records here, said from the reader's side; None if it can."""
        return self.problem_between()

    def problem_between(self, writer: str = "the writer schema", reader: str = "here") -> str | None:
        """``problem`` with the two schemas called ``writer`` and ``reader`` (``in version 2``, ``in the new
        schema``: the reader's label reads after a type, the writer's after "in" and "from")."""
        if self.why is None:
            return None
        if self.kind == "added":
            return f"required {reader}, absent from {writer}"
        return f"{self.writer} in {writer}, {self.reader} {reader} ({self.why})"


@dataclass(frozen=True)
class SchemaDiff:
    """What differs between the schema records were written with and the one they are read with."""

    writer: AnySchema
    reader: AnySchema
    changes: tuple[Change, ...]

    @property
    def identical(self) -> bool:
        """The same fields, in the same order, of the same types: the same fingerprint."""
        return not self.changes

    @property
    def problems(self) -> tuple[str, ...]:
        """Why the reader cannot read the writer's records by field name, one reason per field; empty when it can."""
        return self.problems_between()

    def problems_between(self, writer: str = "the writer schema", reader: str = "here") -> tuple[str, ...]:
        """``problems`` with the two schemas called as ``Change.problem_between`` calls them."""
        return tuple(f"{c.path}: {c.problem_between(writer, reader)}" for c in self.changes if c.why)

    @property
    def readable(self) -> bool:
        """Whether records written with ``writer`` read by field name as ``reader``'s (``reader_of``)."""
        return not self.problems

    def summary(self) -> str:
        """Every change on one line, ``;``-separated ("identical" when there is none)."""
        return "; ".join(map(str, self.changes)) or "identical"


def compare_schemas(writer: AnySchema, reader: AnySchema) -> SchemaDiff:
    """The changes from ``writer``'s schema to ``reader``'s, each with why it cannot be read, if it cannot."""
    changes: list[Change] = []
    if schema_fingerprint(writer) != schema_fingerprint(reader):
        _compare_fields(_fields(writer), _fields(reader), "", changes)
    return SchemaDiff(writer, reader, tuple(changes))


def reader_of(writer: AnySchema, reader: AnySchema) -> Callable[[Any], Any]:
    """The function from a record decoded with ``writer``'s schema (or a framed list of them) to the same
    record in ``reader``'s: its fields in the reader's order, by name; one only the reader has as None; one
    only the writer has left out; an integer read as a float made one. Only for a readable pair
    (``compare_schemas(writer, reader).readable``)."""
    record = _record_reader(_fields(writer), _fields(reader))
    return lambda value: [record(r) for r in value] if type(value) is list else record(value)


# --- compatibility rules: what a registry lets a name's next version be ---------------------------------------

# A name's rule, as Confluent's and Apicurio's registries spell them (lower case): a new version is checked
# against the latest one, or with _transitive against every one registered before it.
BACKWARD, FORWARD, FULL, NONE = "backward", "forward", "full", "none"
RULES = (BACKWARD, f"{BACKWARD}_transitive", FORWARD, f"{FORWARD}_transitive", FULL, f"{FULL}_transitive", NONE)
RULE_MEANINGS = {
    BACKWARD: "a consumer with the new version reads what the latest one wrote: upgrade consumers first",
    f"{BACKWARD}_transitive": "a consumer with the new version reads what every earlier one wrote",
    FORWARD: "a consumer with the latest version reads what the new one writes: upgrade publishers first",
    f"{FORWARD}_transitive": "a consumer with any earlier version reads what the new one writes",
    FULL: "backward and forward against the latest version: upgrade either end first",
    f"{FULL}_transitive": "backward and forward against every earlier version",
    NONE: "no check: any schema may be the next version",
}


@dataclass(frozen=True)
class Incompatibility:
    """Why a new version breaks a name's rule against one registered version: which way records cannot be read
    (``backward``: the new version cannot read what ``version`` wrote; ``forward``: the other way), and at
    which fields."""

    direction: str
    version: int
    problems: tuple[str, ...]

    def __str__(self) -> str:
        if self.direction == BACKWARD:
            what = f"a consumer with the new schema cannot read what version {self.version} wrote"
        else:
            what = f"a consumer with version {self.version} cannot read what the new schema writes"
        return f"{what}: {'; '.join(self.problems)}"


def incompatibilities(rule: str, new: AnySchema, versions: Sequence[tuple[int, AnySchema]]) -> list[Incompatibility]:
    """Why ``new`` breaks ``rule`` against a name's registered ``versions`` (``(number, schema)``, oldest first):
    empty when it may be registered as the next one.

    >>> from wirepipe.schema import parse_schema
    >>> v1 = parse_schema({"id": "int64", "name": "string"})
    >>> [str(i) for i in incompatibilities("backward", parse_schema({"id": "int64", "email": "string"}), [(1, v1)])]
    ['a consumer with the new schema cannot read what version 1 wrote: email: required in the new schema, absent from version 1']
    >>> incompatibilities("backward", parse_schema({"id": "int64", "email?": "string"}), [(1, v1)])
    []
    """
    if rule not in RULES:
        raise ValueError(f"unknown compatibility rule {rule!r}: allowed {', '.join(RULES)}")
    base, _, transitive = rule.partition("_")
    if base == NONE or not versions:
        return []
    checked = versions if transitive else versions[-1:]
    out: list[Incompatibility] = []
    for number, old in reversed(checked):
        label = f"version {number}"
        if base in (BACKWARD, FULL):
            problems = compare_schemas(old, new).problems_between(label, "in the new schema")
            if problems:
                out.append(Incompatibility(BACKWARD, number, problems))
        if base in (FORWARD, FULL):
            problems = compare_schemas(new, old).problems_between("the new schema", f"in {label}")
            if problems:
                out.append(Incompatibility(FORWARD, number, problems))
    return out


# --- comparing ---------------------------------------------------------------------------------------------

Fields = list[tuple[str, Type | None]]  # a record's fields in order; None: a type not given (field names only)


def _fields(schema: AnySchema | None) -> Fields:
    if isinstance(schema, RecordSchema):
        return [(f.name, f.type) for f in schema.fields]
    return [(name, None) for name in schema or ()]


def _compare_fields(writer: Fields, reader: Fields, prefix: str, changes: list[Change]) -> None:
    w_types, r_types = dict(writer), dict(reader)
    common = [name for name, _ in reader if name in w_types]
    w_at = {name: at for at, (name, _) in enumerate(writer, 1)}
    r_at = {name: at for at, (name, _) in enumerate(reader, 1)}
    in_place = {name for name in common if w_at[name] == r_at[name]}
    for name in _moved([n for n, _ in writer if n in r_types], common, in_place):
        changes.append(Change(prefix + name, "moved", _ordinal(w_at[name]), _ordinal(r_at[name])))
    for name, r_type in reader:
        path = prefix + name
        if name not in w_types:
            required = r_type is not None and not r_type.optional
            changes.append(Change(path, "added", reader=_spelled(r_type),
                                  why="required" if required else None))
        else:
            _compare_types(w_types[name], r_type, path, changes)
    for name, w_type in writer:
        if name not in r_types:
            changes.append(Change(prefix + name, "removed", writer=_spelled(w_type)))


def _compare_types(w: Type | None, r: Type | None, path: str, changes: list[Change]) -> None:
    if w == r:
        return
    if w is None or r is None:  # one schema names its fields only: nothing to compare, but not the same schema
        changes.append(Change(path, "retyped", _spelled(w), _spelled(r)))
        return
    if w.optional and not r.optional:
        changes.append(Change(path, "retyped", str(w), str(r), "a null has nowhere to go"))
        return
    wk, rk = w.kind, r.kind
    if wk == rk == Kind.RECORD:
        _compare_fields(_fields(w.record), _fields(r.record), path + ".", changes)
        if w.optional != r.optional:
            changes.append(Change(path, "retyped", str(w), str(r)))
        return
    if wk == rk == Kind.LIST:
        before = len(changes)
        _compare_types(w.item, r.item, path + "[]", changes)
        if w.optional != r.optional and len(changes) == before:
            changes.append(Change(path, "retyped", str(w), str(r)))
        return
    fits = (wk == rk and w.size == r.size) or rk in _WIDENS.get(wk, ())
    changes.append(Change(path, "retyped", str(w), str(r),
                          None if fits else f"no {w.required()} reads as {r.required()}"))


def _moved(writer_order: list[str], reader_order: list[str], in_place: frozenset[str] | set[str] = frozenset()
           ) -> list[str]:
    """The fields (both schemas have) that changed place: those outside a longest common subsequence of the two
    orders, in the reader's order (``a, b, c`` -> ``b, c, a``: a moved, not b and c). Of two such subsequences,
    the one keeping more of ``in_place`` (fields at the same position in both): ``a, b, c`` -> ``c, b``: c moved
    (3rd, 1st), not b (2nd, 2nd)."""
    if writer_order == reader_order:
        return []
    n, m = len(writer_order), len(reader_order)
    longest = [[(0, 0)] * (m + 1) for _ in range(n + 1)]  # (fields kept, of them in place)
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            longest[i][j] = max(longest[i + 1][j], longest[i][j + 1], _matched(longest, i, j, writer_order,
                                                                               reader_order, in_place))
    kept, i, j = set(), 0, 0
    while i < n and j < m:
        if longest[i][j] == _matched(longest, i, j, writer_order, reader_order, in_place):
            kept.add(reader_order[j])
            i, j = i + 1, j + 1
        elif longest[i + 1][j] == longest[i][j]:
            i += 1
        else:
            j += 1
    return [name for name in reader_order if name not in kept]


def _matched(longest: list[list[tuple[int, int]]], i: int, j: int, writer_order: list[str], reader_order: list[str],
             in_place: frozenset[str] | set[str]) -> tuple[int, int]:
    """``_moved``'s score of keeping the field at ``writer_order[i]`` and ``reader_order[j]`` (none: not one)."""
    if writer_order[i] != reader_order[j]:
        return (-1, 0)
    kept, placed = longest[i + 1][j + 1]
    return kept + 1, placed + (writer_order[i] in in_place)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _spelled(t: Type | None) -> str:
    return "any" if t is None else str(t)


# --- reading by name ---------------------------------------------------------------------------------------


def _record_reader(writer: Fields, reader: Fields) -> Callable[[Any], Any]:
    w_types = dict(writer)
    steps = [(name, _value_reader(w_types.get(name), r_type) if name in w_types else None) for name, r_type in reader]
    if all(step is None for _, step in steps):
        names = [name for name, _ in steps]
        return lambda rec: {name: rec.get(name) for name in names}
    return lambda rec: {name: (rec.get(name) if step is None else step(rec.get(name))) for name, step in steps}


def _value_reader(w: Type | None, r: Type | None) -> Callable[[Any], Any] | None:
    """What a value of writer type ``w`` goes through to be of reader type ``r`` (None: nothing)."""
    if w is None or r is None or w == r:
        return None
    if w.kind == r.kind == Kind.RECORD:
        record = _record_reader(_fields(w.record), _fields(r.record))
        return lambda v: None if v is None else record(v)
    if w.kind == r.kind == Kind.LIST:
        item = _value_reader(w.item, r.item)
        return None if item is None else (lambda v: None if v is None else [item(x) for x in v])
    if r.kind in _FLOATS and w.kind not in _FLOATS:
        return lambda v: None if v is None else float(v)
    return None
