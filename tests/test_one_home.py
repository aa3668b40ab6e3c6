"""One home per concept: each mechanism below is written once, and the callers use that one.

Behaviour first (what the shared home does for every caller), then the concept table of
``docs/architecture.md`` row by row: each row's check scans the package (its syntax trees, parsed once) and
fails if a second copy of the mechanism comes back. ``ROWS`` ties every row of the table to its check.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from wirepipe.core.batch import Batch
from wirepipe.operators.route import Subject
from wirepipe.operators.serialize import Serialize
from wirepipe.wire import SubjectTemplate

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "wirepipe"


@dataclasses.dataclass
class Order:
    region: str
    id: int


def test_the_subject_operator_dead_letters_a_record_without_the_field_and_routes_the_rest() -> None:
    out = Subject("orders.{region}")(Batch([{"region": "eu"}, {"id": 2}, {"region": "us"}], meta={"seq": [1, 2, 3]}))
    assert out.subjects == ["orders.eu", "orders.us"]
    assert out.meta["seq"] == [1, 3]
    assert [(r.stage, r.error, r.meta["seq"]) for r in out.rejected] == [
        ("route", "no field 'region' for subject template 'orders.{region}'", 2)]


def test_typed_records_are_one_dict_for_serialize_and_for_subjects() -> None:
    """A dataclass is the dict of its fields to the ``subject`` template and to every format alike."""
    from pydantic import BaseModel

    class Tag(BaseModel):
        region: str

    batch = Batch([Order("eu", 1), Tag(region="us"), {"region": "ap"}], meta={"seq": [7, 8, 9]})
    routed = Subject("orders.{region}.{seq}")(batch)
    assert routed.subjects == ["orders.eu.7", "orders.us.8", "orders.ap.9"]
    assert Serialize("json")(routed).values == [b'{"region":"eu","id":1}', b'{"region":"us"}', b'{"region":"ap"}']
    refused = Subject("x.{region}")(Batch([3]))
    assert refused.rejected[0].error == ("TypeError: expected a record (a dict, a dataclass, a msgspec Struct, a "
                                         "faust.Record or a pydantic model), got int")


def test_a_typed_record_is_one_dict_written_compared_and_shown() -> None:
    """A dataclass, a msgspec Struct, a faust.Record and a pydantic model are each the dict ``as_dict`` makes of
    them to the formats, to subject templates and to what ``wirepipe test`` compares and ``tap`` shows (``plain``):
    a Faust record keeps its ``__faust`` metadata, a Struct its encoded names, nested records are dicts too."""
    import faust
    import msgspec
    from pydantic import BaseModel

    from wirepipe.core.fields import plain
    from wirepipe.core.records import as_dict

    class Leg(BaseModel):
        venue: str

    class Quote(BaseModel):
        region: str
        legs: list[Leg]

    class Tick(msgspec.Struct, rename="camel"):
        region: str
        at_ms: int
        raw: bytes

    class Trade(faust.Record, namespace="tests.one_home.Trade"):
        region: str
        qty: int

    cases = [
        (Order("eu", 1), {"region": "eu", "id": 1}),
        (Quote(region="us", legs=[Leg(venue="x")]), {"region": "us", "legs": [{"venue": "x"}]}),
        (Tick("ap", 5, b"\x00"), {"region": "ap", "atMs": 5, "raw": b"\x00"}),
        (Trade(region="sa", qty=3), {"region": "sa", "qty": 3, "__faust": {"ns": "tests.one_home.Trade"}}),
    ]
    records = [record for record, _ in cases]
    dicts = [expected for _, expected in cases]
    assert [as_dict(r) for r in records] == dicts
    assert [plain(r) for r in records] == [plain(d) for d in dicts]
    assert plain(records[2])["raw"] == {"$base64": "AA=="}
    assert Serialize("json")(Batch(records)).values == Serialize("json")(Batch(dicts)).values
    assert Subject("t.{region}")(Batch(records)).subjects == ["t.eu", "t.us", "t.ap", "t.sa"]
    assert plain(object).startswith("<class")  # not a record: shown as its repr


def test_a_sink_template_and_the_operator_render_with_one_class() -> None:
    batch = Batch([b"a", b"b"], subjects=["in.1", "in.2"], meta={"seq": [5, 6]})
    assert SubjectTemplate("out.{subject}.{seq}").render(batch) == ["out.in.1.5", "out.in.2.6"]
    assert SubjectTemplate("points").render(batch) == "points"
    from wirepipe.core.errors import WirepipeError

    with pytest.raises(WirepipeError, match="no column 'region'"):
        SubjectTemplate("orders.{region}").render(batch)


def test_batch_columns_broadcast_a_shared_subject_and_headers() -> None:
    shared = Batch([1, 2, 3], subjects="s", headers={"k": "v"})
    assert shared.subjects_column() == ["s", "s", "s"]
    assert shared.headers_column() == [{"k": "v"}] * 3
    each = Batch([1, 2], subjects=["a", "b"], headers=[None, {"k": "w"}])
    assert (each.subjects_column(), each.headers_column()) == (["a", "b"], [None, {"k": "w"}])
    assert Batch([1]).subjects_column() == [None]
    picked: list[str | None] = []

    def pick(value: str | None) -> object:
        picked.append(value)
        return lambda v: (v, value)

    assert shared.map_by_header("k", pick, "map", "x").values == [(1, "v"), (2, "v"), (3, "v")]
    assert picked == ["v"]  # one pick for records that share their headers
    assert each.map_by_header("k", pick, "map", "x").values == [(1, None), (2, "w")]


def test_one_subject_vocabulary_matches_alike_as_a_regex_a_match_and_an_overlap() -> None:
    """A pattern receives the same subjects whether they are matched one by one, as a regular expression over
    a column (a capture sliced by subject) or as a template with no placeholder (a dead-letter loop)."""
    import itertools
    import re

    from wirepipe.wire import subject_matches, subject_problem, subject_regex, subjects_overlap

    patterns = ["a", "a.b", "a.*", "*.b", "a.>", ">", "*", "a.*.>", "*.*", "a.b.c"]
    subjects = [".".join(p) for n in (1, 2, 3, 4) for p in itertools.product("ab", repeat=n)]
    for pattern, subject in itertools.product(patterns, subjects):
        expected = bool(re.fullmatch(subject_regex(pattern), subject))
        assert subject_matches(pattern, subject) is expected, (pattern, subject)
        assert subjects_overlap(pattern, subject) is expected, (pattern, subject)
    # what a subscription's wildcard is, a publish refuses
    assert [subject_problem(s, 100) is not None for s in ("a.*", "a.>", "a.b", "a*.b")] == [True, True, False, False]
    with pytest.raises(ValueError, match="`>` comes last"):
        subject_regex("a.>.b")


def test_header_names_are_plain_strings_every_library_takes_as_keys() -> None:
    """``Header`` is the one vocabulary of header names, and its names are ``str`` itself: a header dict goes
    to orjson (which refuses enum members as keys), YAML and Arrow as it is, with no ``.value``."""
    import orjson
    import pyarrow as pa
    import yaml

    from wirepipe.wire import HEADER_NAMES, Header

    assert all(type(name) is str for name in HEADER_NAMES) and Header.SENT_AT in HEADER_NAMES
    headers = {Header.CONTENT_TYPE: "application/json", Header.SENT_AT: "1"}
    assert orjson.loads(orjson.dumps(headers)) == {"Content-Type": "application/json", "Wirepipe-Sent-At": "1"}
    assert yaml.safe_load(yaml.safe_dump(headers)) == headers
    assert pa.array([list(headers.items())], pa.map_(pa.string(), pa.string())).to_pylist() == [list(headers.items())]


def test_type_kinds_are_one_enum_that_still_spells_as_the_language() -> None:
    """``Type.kind`` is a ``Kind`` member whichever way the type was made, and what leaves the process (the
    schema's document, messages) is the language's plain spelling."""
    import yaml

    from wirepipe.schema import Kind, Type, parse_schema

    schema = parse_schema({"id": "uint32", "tags": "list<string>?", "key": "bytes[4]", "in": {"x": "float64"}})
    assert [f.type.kind for f in schema.fields] == [Kind.UINT32, Kind.LIST, Kind.FIXED, Kind.RECORD]
    assert Type("int32").kind is Kind.INT32 and Kind.INT32 == "int32" and f"{Kind.INT32}" == "int32"
    document = schema.to_document()
    assert yaml.safe_load(yaml.safe_dump(document)) == document
    assert all(type(t) is str for t in document["fields"].values() if not isinstance(t, dict))
    assert schema.check({"id": True, "key": b"abcd", "in": {"x": 1.0}}) == "id: expected uint32, got bool True"


# --- the concept table: a second copy of a mechanism fails here ----------------------------------------


@functools.cache
def _modules() -> tuple[tuple[str, ast.Module], ...]:
    """(path under ``src/wirepipe``, syntax tree) of every module, parsed once for every check."""
    files = sorted(p for p in SRC.rglob("*.py") if ".egg-info" not in p.parts)
    return tuple((p.relative_to(SRC).as_posix(), _indexed(ast.parse(p.read_text(encoding="utf-8")))) for p in files)


def _elsewhere(*homes: str) -> Iterator[tuple[str, ast.Module]]:
    """Every module but the ``homes`` (paths under ``src/wirepipe``)."""
    return ((rel, tree) for rel, tree in _modules() if rel not in homes)


def _nodes(tree: ast.AST, kind: type[ast.AST] | tuple[type[ast.AST], ...]) -> list[Any]:
    """The nodes of ``tree`` of ``kind``, in the order ``ast.walk`` finds them (a whole module's from its index)."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    index = _INDEX.get(id(tree))
    if index is None:
        return [n for n in ast.walk(tree) if isinstance(n, kinds)]
    return [n for k, nodes in index.items() if issubclass(k, kinds) for n in nodes]


_INDEX: dict[int, dict[type[ast.AST], list[ast.AST]]] = {}  # a module's nodes by their type, built once


def _indexed(tree: ast.Module) -> ast.Module:
    index: dict[type[ast.AST], list[ast.AST]] = {}
    for node in ast.walk(tree):
        index.setdefault(type(node), []).append(node)
    _INDEX[id(tree)] = index
    return tree


def _calls(tree: ast.AST, name: str | None = None) -> list[ast.Call]:
    """The calls in ``tree``; with ``name``, those of a plain name (``isinstance(...)``)."""
    return [n for n in _nodes(tree, ast.Call)
            if name is None or (isinstance(n.func, ast.Name) and n.func.id == name)]


def _method(call: ast.Call) -> tuple[str, str]:
    """(owner, attribute) of ``owner.attribute(...)`` where owner is a plain name, else ("", the function's name)."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return (func.value.id if isinstance(func.value, ast.Name) else "", func.attr)
    return "", func.id if isinstance(func, ast.Name) else ""


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants of a module and its classes and functions."""
    return {id(node.body[0].value) for node in _nodes(tree, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                                              ast.AsyncFunctionDef))
            if node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def _strings(tree: ast.AST) -> list[ast.Constant]:
    """The string constants of ``tree`` that are not docstrings."""
    docs = _docstrings(tree)
    return [n for n in _nodes(tree, ast.Constant) if isinstance(n.value, str) and id(n) not in docs]


def test_a_batchs_columns_are_read_through_the_batch() -> None:
    """``isinstance(batch.subjects, ...)``/``isinstance(batch.headers, ...)`` belongs to ``core/batch.py``;
    the others ask it (``subjects_column``, ``headers_column``, ``map_by_header``)."""
    found = []
    for rel, tree in _elsewhere("core/batch.py"):
        for call in _calls(tree, "isinstance"):
            first = call.args[0] if call.args else None
            if isinstance(first, ast.Attribute) and first.attr in ("subjects", "headers") and \
                    isinstance(first.value, ast.Name) and first.value.id == "batch":
                found.append(f"{rel}:{call.lineno}")
    assert found == []


def test_typed_records_become_dicts_only_in_core_records() -> None:
    """Only ``core/records.py`` asks what kind of typed record a value is: a Faust record's ``to_representation``
    or ``asdict``, a msgspec Struct's ``__struct_fields__``, a dataclass's ``__dataclass_fields__`` (probed by
    name or read); everyone else calls ``as_dict``/``is_typed_record``. ``model_dump`` is every pydantic model's,
    a config's too (a connection's settings given in Python), so only a bare ``x.model_dump()`` of a value counts
    (a config dumped to JSON passes arguments)."""
    kinds = {"to_representation", "asdict", "__struct_fields__", "__struct_encode_fields__", "__dataclass_fields__"}
    found = []
    for rel, tree in _elsewhere("core/records.py"):
        for node in _nodes(tree, (ast.Call, ast.Attribute)):
            probe = isinstance(node, ast.Call) and _method(node) in (("", "hasattr"), ("", "getattr")) and \
                len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value in kinds
            read = isinstance(node, ast.Attribute) and node.attr in kinds - {"asdict"}
            bare_dump = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "model_dump" and not node.args and not node.keywords
            if probe or read or bare_dump:
                found.append(f"{rel}:{node.lineno}")
    assert found == []


def _walks_two_values(fn: ast.FunctionDef) -> bool:
    """``fn`` calls itself and asks of two of its parameters whether each is a mapping (or a dict): a walker of two
    nested values side by side."""
    params = {a.arg for a in fn.args.args}
    recursive = any(_method(c) == ("", fn.name) for c in _calls(fn))
    mappings = {c.args[0].id for c in _calls(fn, "isinstance") if len(c.args) == 2
                and isinstance(c.args[0], ast.Name) and c.args[0].id in params
                and any(isinstance(t, ast.Name) and t.id in ("Mapping", "dict") for t in ast.walk(c.args[1]))}
    return recursive and len(mappings) >= 2


def test_two_values_are_compared_by_one_walker() -> None:
    """``core.fields.first_difference`` is the one walker of two nested values (``wirepipe test``'s expectations,
    the study's round trip, a reload's changed field); no other function walks two values side by side."""
    found = [f"{rel}:{fn.name}" for rel, tree in _modules() for fn in _nodes(tree, ast.FunctionDef)
             if _walks_two_values(fn)]
    assert found == ["core/fields.py:first_difference"]


def test_stage_names_are_spelled_once() -> None:
    """Parts declare their stage from ``core.stages.Stage`` and no module compares a stage with a literal name,
    so a part and the report that reads its rows back cannot drift apart."""
    import importlib
    import pkgutil

    import wirepipe.connectors
    import wirepipe.operators
    from wirepipe.core.stages import Stage

    names = {v for k, v in vars(Stage).items() if k.isupper() and isinstance(v, str)}
    declared = set()
    for package in (wirepipe.operators, wirepipe.connectors):
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
            for obj in vars(importlib.import_module(info.name)).values():
                stage = getattr(obj, "stage", None) if isinstance(obj, type) else None
                if isinstance(stage, str) and stage not in ("operator", "source", "sink"):  # the base classes'
                    declared.add(stage)
    assert declared and declared <= names, declared - names
    literal = [f"{rel}:{node.lineno}" for rel, tree in _modules() for node in _nodes(tree, ast.Compare)
               if isinstance(node.left, ast.Attribute) and node.left.attr == "stage"
               and any(isinstance(c, (ast.Constant, ast.Tuple)) for c in node.comparators)]
    assert literal == []


def test_a_duration_is_written_for_a_reader_in_core_units_only() -> None:
    """``core.units.format_duration`` writes every duration a reader is told (a bench's estimate, a plan's
    retention): no other function both builds text and scales seconds by the hour or the day (divides by, compares
    with or lists 3600 or 86400). ``ps``'s uptime column (``12m03s``: two units, the width of a clock) is the one
    other spelling, and it stays in its column."""
    found = []
    for rel, tree in _elsewhere("core/units.py"):
        for fn in _nodes(tree, ast.FunctionDef):
            scales = {c.value for n in _nodes(fn, (ast.BinOp, ast.Compare, ast.Tuple))
                      for c in ast.iter_child_nodes(n) if isinstance(c, ast.Constant) and c.value in (3600, 86400)}
            if scales and _nodes(fn, ast.JoinedStr):
                found.append(f"{rel}:{fn.name}")
    assert found == ["cli/services.py:_uptime"]


def test_tables_are_drawn_by_core_table_only() -> None:
    """``core/table.py`` draws every table wirepipe prints (text that fits the terminal, Markdown, HTML): no other
    module imports a table library (``rich.table``, tabulate...), pads cells into columns (``ljust``/``rjust``) or
    writes a Markdown rule or an HTML table. A live view redraws that text (rich's ``Live`` around a ``Text``)."""
    found = []
    for rel, tree in _elsewhere("core/table.py"):
        for node in _nodes(tree, (ast.Import, ast.ImportFrom)):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            if any(n.split(".")[0] in ("tabulate", "prettytable", "texttable") or n == "rich.table" for n in names):
                found.append(f"{rel}:{node.lineno}: imports a table library")
        found += [f"{rel}:{n.lineno}: pads a column" for n in _nodes(tree, ast.Attribute) if n.attr in ("ljust", "rjust")]
        found += [f"{rel}:{n.lineno}: writes a Markdown or HTML table" for n in _strings(tree)
                  if "|---" in n.value or "<table" in n.value]
    assert found == []


def test_module_attr_references_are_loaded_by_the_registry_only() -> None:
    """``module:attr`` is resolved by ``core.registry.load_ref`` only: no other module imports by name and splits
    at ``:``."""
    found = [rel for rel, tree in _elsewhere("core/registry.py")
             if any(_method(c)[1] == "import_module" for c in _calls(tree))
             and any(_method(c)[1] == "partition" and c.args and isinstance(c.args[0], ast.Constant)
                     and c.args[0].value == ":" for c in _calls(tree))]
    assert found == []


def test_type_kinds_are_compared_as_the_enum() -> None:
    """A type's kind is a ``schema.Kind`` member: no module compares a ``.kind`` with the literal name of one
    (``t.kind == "int32"``), which would read past a kind renamed in the language."""
    from wirepipe.schema import Kind

    spelled = {k.value for k in Kind}
    found = []
    for rel, tree in _modules():
        for node in _nodes(tree, ast.Compare):
            sides = [node.left, *node.comparators]
            literals = [c.value for side in sides for c in ([side] if not isinstance(side, ast.Tuple) else side.elts)
                        if isinstance(c, ast.Constant)]
            if any(isinstance(s, ast.Attribute) and s.attr == "kind" for s in sides) and spelled & set(literals):
                found.append(f"{rel}:{node.lineno}")
    assert found == []


def test_varints_are_read_in_codecs_varints_only() -> None:
    """LEB128 is read and written in ``codecs/varints.py`` only: no other module masks seven bits (``& 0x7F``)."""
    found = [rel for rel, tree in _elsewhere("codecs/varints.py")
             for n in _nodes(tree, ast.BinOp) if isinstance(n.op, ast.BitAnd)
             and any(isinstance(side, ast.Constant) and side.value == 0x7F for side in (n.left, n.right))]
    assert found == []


def test_level_names_are_listed_once() -> None:
    """``codecs.compression.LEVEL_NAMES`` is the level vocabulary (``fastest``, ``default``, ``best``): no other
    module lists it again (a table's headers, a check of a level) but through it. A choice of some of them (the
    quick bench's levels) is no vocabulary."""
    names = {"fastest", "default", "best"}
    found = [f"{rel}:{n.lineno}" for rel, tree in _elsewhere("codecs/compression.py")
             for n in _nodes(tree, (ast.Tuple, ast.List, ast.Set))
             if names <= {e.value for e in n.elts if isinstance(e, ast.Constant)}]
    assert found == []


def test_files_are_written_by_storage_only() -> None:
    """A Parquet file lives the one life of ``storage/lifecycle.py`` (its ``ParquetWriter``, ``write_table``), on
    the local disk or through another filesystem (Beam's ``FileSystems``); a temporary file is renamed into place
    by ``storage/files.py`` only (``os.replace``, a filesystem's ``rename``, a hard link). A second writer of
    either kind fails here."""
    found = []
    for rel, tree in _modules():
        for call in _calls(tree):
            owner, name = _method(call)
            if (name == "ParquetWriter" or (name == "write_table" and owner in ("pq", "parquet"))) and \
                    rel != "storage/lifecycle.py":
                found.append(f"{rel}:{call.lineno}: writes Parquet")
            if (name in ("rename", "link") or (name == "replace" and owner == "os")) and rel != "storage/files.py":
                found.append(f"{rel}:{call.lineno}: renames a file")
    assert found == []


def test_header_names_are_spelled_in_wire_only() -> None:
    """``wire.Header`` names every header wirepipe reads or writes: no other module spells one of its
    ``Wirepipe-*`` or ``Nats-*`` names as a string (prose that mentions one is no spelling)."""
    from wirepipe.wire import HEADER_NAMES

    ours = {n for n in HEADER_NAMES if n.startswith(("Wirepipe-", "Nats-"))}
    found = [f"{rel}:{n.lineno}" for rel, tree in _elsewhere("wire/headers.py") for n in _strings(tree)
             if n.value in ours]
    assert found == []


def test_a_subject_template_is_one_class() -> None:
    """Only ``wire/subjects.py`` defines a subject template (``SubjectTemplate``)."""
    found = [f"{rel}:{n.lineno}" for rel, tree in _elsewhere("wire/subjects.py") for n in _nodes(tree, ast.ClassDef)
             if "Template" in n.name]
    assert found == []


def test_subjects_are_matched_only_in_wire() -> None:
    """No other module compares subject tokens with ``>``/``*`` (a second matcher would drift from the server's
    rules)."""
    found = [f"{rel}:{n.lineno}" for rel, tree in _elsewhere("wire/subjects.py") for n in _nodes(tree, ast.Compare)
             if any(isinstance(c, ast.Constant) and c.value in (">", "*") for c in n.comparators)]
    assert found == []


def test_nats_is_reached_through_the_one_connection() -> None:
    """Only ``connectors/nats/connection.py`` makes a nats-py client (``nats.connect``, ``NATS()``): every other
    part (the study's bench and plan too) connects through ``NatsConnection``, so a server's auth, TLS,
    timeouts and reconnects hold for all of it. A command's ``--url``/``--creds``/``--set`` become that
    connection's config in ``cli/connection.py`` only (the ``auth: {creds: ...}`` it builds)."""
    clients = [f"{rel}:{c.lineno}" for rel, tree in _elsewhere("connectors/nats/connection.py")
               for c in _calls(tree) if _method(c) in (("nats", "connect"), ("nats", "NATS"), ("", "NATS"))]
    creds = [f"{rel}:{n.lineno}" for rel, tree in _elsewhere("cli/connection.py") for n in _nodes(tree, ast.Dict)
             if any(isinstance(k, ast.Constant) and k.value == "creds" for k in n.keys)]
    assert (clients, creds) == ([], [])


def test_nats_py_private_attributes_are_touched_in_the_reader_only() -> None:
    """``connectors/nats/reader.py`` is the one reader of nats-py's internals (``NATS_PY_PRIVATE`` lists them and
    tests/test_nats_private.py pins them): no other module touches one on an object not its own."""
    from wirepipe.connectors.nats.reader import NATS_PY_PRIVATE

    # The parser's ``buf`` and ``state`` are plain names reached only through ``Client._ps``: the private names
    # guard them (``x.state`` elsewhere is another object's).
    private = {name for names in NATS_PY_PRIVATE.values() for name in names if name.startswith("_")}
    found = [f"{rel}:{n.lineno}" for rel, tree in _elsewhere("connectors/nats/reader.py")
             for n in _nodes(tree, ast.Attribute)
             if n.attr in private and not (isinstance(n.value, ast.Name) and n.value.id == "self")]
    found += [f"{rel}:{n.lineno}" for rel, tree in _elsewhere("connectors/nats/reader.py") for n in _strings(tree)
              if n.value in private]
    assert found == []


_CODE_CLOCKS = {"perf_counter", "perf_counter_ns", "monotonic_ns", "process_time_ns", "thread_time", "thread_time_ns"}


def test_code_is_timed_by_the_one_harness() -> None:
    """``study/bench/timing.py`` is the one timing harness (batches, the collector as in a run, ``time_each``,
    ``best_of``, ``Stopwatch``): no other module reads ``perf_counter``; no loop of the study reads a clock that
    times code (``monotonic_ns``...); only the harness and the run loop's ``core/collector.py`` set the collector's
    policy (``gc.freeze``, ``gc.disable``); the study and the benchmarks cut no batches by hand. Stamps on
    batches (the run loop, metrics) and the study's timeouts (``time.monotonic``) are no timing loops."""
    harness = "study/bench/timing.py"
    found = []
    for rel, tree in _elsewhere(harness):
        found += [f"{rel}:{n.lineno}: reads perf_counter" for n in _nodes(tree, ast.Attribute)
                  if n.attr.startswith("perf_counter")]
        if rel.startswith("study/"):
            for loop in _nodes(tree, (ast.For, ast.While, ast.ListComp, ast.GeneratorExp)):
                found += [f"{rel}:{c.lineno}: times code in a loop" for c in _calls(loop)
                          if _method(c)[1] in _CODE_CLOCKS]
        if rel != "core/collector.py":
            found += [f"{rel}:{c.lineno}: sets the collector's policy" for c in _calls(tree)
                      if _method(c) in (("gc", "freeze"), ("gc", "disable"))]
    batching = re.compile(r"def _chunks|\[\w+\[i:i \+ \w+\] for i in range")
    timing_code = [*(SRC / "study" / "bench").glob("*.py"), *(SRC / "study" / "plan").glob("*.py"),
                   *(ROOT / "benchmarks").glob("*.py")]
    found += [f"{p.name}: cuts batches" for p in timing_code if p != SRC / harness and batching.search(p.read_text())]
    found += [f"benchmarks/{p.name}: sets the collector's policy" for p in (ROOT / "benchmarks").glob("*.py")
              if re.search(r"gc\.disable\(\)|gc\.freeze\(\)", p.read_text())]
    assert found == []


def test_the_public_names_are_listed_once() -> None:
    """``wirepipe.api.__all__`` is the one list of the factories: the package exports exactly those (and its
    core classes), and every public function of ``api`` is in it, or is the old name of a renamed one."""
    import inspect

    import wirepipe
    from wirepipe import api

    functions = {n for n, f in vars(api).items() if inspect.isfunction(f) and f.__module__ == api.__name__
                 and not n.startswith("_")}
    assert functions == {*api.__all__, *api.RENAMED}
    assert set(wirepipe.__all__) == {*api.__all__, "Batch", "Pipeline", "RunStats", "Operator", "OperatorChain",
                                     "Source", "Sink", "load_pipeline", "Chain", "WirepipeError", "ConfigError",
                                     "StageError", "RefusedError", "__version__"}
    assert all(getattr(wirepipe, name) is getattr(api, name) for name in api.__all__)


# Each row of docs/architecture.md's concept table (its first cell) and the check that guards it.
ROWS = {
    "a batch's subjects and headers": test_a_batchs_columns_are_read_through_the_batch,
    "a typed record as a dict": test_typed_records_become_dicts_only_in_core_records,
    "two values compared": test_two_values_are_compared_by_one_walker,
    "stage names": test_stage_names_are_spelled_once,
    "a duration for a reader": test_a_duration_is_written_for_a_reader_in_core_units_only,
    "tables": test_tables_are_drawn_by_core_table_only,
    "`module:attr` references": test_module_attr_references_are_loaded_by_the_registry_only,
    "type kinds": test_type_kinds_are_compared_as_the_enum,
    "varints": test_varints_are_read_in_codecs_varints_only,
    "compression level names": test_level_names_are_listed_once,
    "files on disk, Parquet files": test_files_are_written_by_storage_only,
    "header names": test_header_names_are_spelled_in_wire_only,
    "subject templates": test_a_subject_template_is_one_class,
    "subject patterns": test_subjects_are_matched_only_in_wire,
    "the NATS connection": test_nats_is_reached_through_the_one_connection,
    "nats-py's private attributes": test_nats_py_private_attributes_are_touched_in_the_reader_only,
    "the public names": test_the_public_names_are_listed_once,
    "timing code": test_code_is_timed_by_the_one_harness,
}


def test_every_row_of_the_concept_table_has_its_check() -> None:
    """docs/architecture.md's concept table and ``ROWS`` name the same concepts, in the same order: a row added to
    the table without a check here (or a check without its row) fails."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text[text.index("## One home per concept"):]
    concepts = [m.group(1).strip() for m in re.finditer(r"^\| ([^|]+?) \|", table, re.M)][1:]  # past the header
    assert concepts == list(ROWS)
