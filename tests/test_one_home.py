"""One home per concept: each mechanism below is written once, and the callers use that one.

Behaviour first (what the shared home does for every caller), then a scan of the package that fails
if a second copy of a mechanism comes back.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from wirepipe.core.batch import Batch
from wirepipe.operators.route import Subject
from wirepipe.operators.serialize import Serialize
from wirepipe.wire import SubjectTemplate

SRC = Path(__file__).resolve().parent.parent / "src" / "wirepipe"


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
    assert refused.rejected[0].error == ("TypeError: expected a record (a dict, a dataclass, a faust.Record or a "
                                         "pydantic model), got int")


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


# --- scans: a second copy of a mechanism fails here ---------------------------------------------------


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name]


def _source_files() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if ".egg-info" not in p.parts)


def test_only_the_batch_looks_at_how_its_subjects_and_headers_are_held() -> None:
    """``isinstance(batch.subjects, ...)``/``isinstance(batch.headers, ...)`` belongs to ``core/batch.py``;
    the others ask it (``subjects_column``, ``headers_column``, ``map_by_header``)."""
    found = []
    for path in _source_files():
        if path.relative_to(SRC).as_posix() == "core/batch.py":
            continue
        for call in _calls(ast.parse(path.read_text(encoding="utf-8")), "isinstance"):
            first = call.args[0] if call.args else None
            if isinstance(first, ast.Attribute) and first.attr in ("subjects", "headers") and \
                    isinstance(first.value, ast.Name) and first.value.id == "batch":
                found.append(f"{path.relative_to(SRC)}:{call.lineno}")
    assert found == []


def test_one_varint_one_import_path_loader_one_subject_template() -> None:
    """LEB128 is read in ``codecs/varints.py`` only, ``module:attr`` is resolved by ``core.registry.load_ref``
    only, and only ``wire/subjects.py`` defines a subject template."""
    varint_loops, loaders, templates = [], [], []
    for path in _source_files():
        rel = path.relative_to(SRC).as_posix()
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        if rel != "codecs/varints.py" and "& 0x7F" in text:
            varint_loops.append(rel)
        if rel != "core/registry.py" and _calls(tree, "import_module") and '.partition(":")' in text:
            loaders.append(rel)
        templates += [f"{rel}:{n.lineno}" for n in ast.walk(tree)
                      if isinstance(n, ast.ClassDef) and "Template" in n.name and rel != "wire/subjects.py"]
    assert (varint_loops, loaders, templates) == ([], [], [])


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


def test_subjects_are_matched_only_in_wire() -> None:
    """No other module compares subject tokens with ``>``/``*`` (a second matcher would drift from the server's
    rules)."""
    found = []
    for path in _source_files():
        rel = path.relative_to(SRC).as_posix()
        if rel == "wire/subjects.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and any(isinstance(c, ast.Constant) and c.value in (">", "*")
                                                     for c in node.comparators):
                found.append(f"{rel}:{node.lineno}")
    assert found == []


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
    literal = []
    for path in _source_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "stage" \
                    and any(isinstance(c, (ast.Constant, ast.Tuple)) for c in node.comparators):
                literal.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert literal == []
