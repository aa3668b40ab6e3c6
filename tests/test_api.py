"""The Python front door (``wirepipe``, ``wirepipe.api``): its names follow one rule, a renamed name still
works for a release with a warning that names the new one, and each factory's signature is its model's
fields, with their defaults and types."""

from __future__ import annotations

import ast
import builtins
import inspect
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

import pytest

import wirepipe
from wirepipe import api
from wirepipe.connectors import SINKS, SOURCES
from wirepipe.connectors.connector import Sink, Source
from wirepipe.operators import OPERATORS


def _entry(factory: str) -> tuple[str, str] | None:
    """The registry entry a factory is named after by the rule (docs/reference/api.md), or None."""
    for suffix, registry, role in (("_source", SOURCES, "source"), ("_sink", SINKS, "sink")):
        if factory.endswith(suffix) and factory.removesuffix(suffix) in registry:
            return role, factory.removesuffix(suffix)
    if factory in OPERATORS:
        return "operator", factory
    head = factory.split("_")[0]
    if head in OPERATORS and _shadows(head):  # map_values: `map` would shadow the builtin
        return "operator", head
    return None


def _shadows(name: str) -> bool:
    return hasattr(builtins, name) or name in sys.stdlib_module_names


def test_no_public_name_shadows_a_builtin_or_a_standard_module() -> None:
    shadowing = [name for name in wirepipe.__all__ if _shadows(name)]
    assert not shadowing, shadowing


def test_every_factory_is_named_after_what_it_builds() -> None:
    """``<type>_source``, ``<type>_sink``, an operator by its YAML entry (``<entry>_<noun>`` where the entry
    alone would shadow a builtin); ``source``, ``sink`` and ``operator_entry`` take any of them by name."""
    generic = {"source", "sink", "operator_entry"}
    unnamed = [name for name in api.__all__ if name not in generic and _entry(name) is None]
    assert not unnamed, unnamed
    assert {_entry(n) for n in api.__all__} - {None} >= {("source", t) for t in ("generate", "jsonl", "nats")}


# What each renamed factory is called with, and how two results are compared.
_RENAMED_CALLS: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "generate_source": (("feed",), {"count": 7, "batch_size": 3}),
    "select_fields": (("id", "x"), {}),
    "operator_entry": (("compress",), {"codec": "lz4"}),
}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (Source, Sink)):
        return type(a) is type(b) and a.params == b.params
    return type(a) is type(b) and repr(a) == repr(b)


@pytest.mark.parametrize(("old", "new"), sorted(api.RENAMED.items()))
def test_a_renamed_factory_still_builds_the_same_and_warns_with_its_new_name(old: str, new: str) -> None:
    args, kwargs = _RENAMED_CALLS[new]
    with pytest.warns(DeprecationWarning) as caught:
        got = getattr(wirepipe, old)(*args, **kwargs)
    assert [str(w.message) for w in caught] == [f"wirepipe.{old} is renamed wirepipe.{new}"]
    assert caught[0].filename == __file__  # the warning points at the caller's line
    assert _same(got, getattr(wirepipe, new)(*args, **kwargs))
    assert old not in wirepipe.__all__ and new in wirepipe.__all__


def test_the_api_reference_lists_every_renamed_name() -> None:
    page = (Path(__file__).parent.parent / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    assert [f"| `{old}` | `{new}` |" in page for old, new in api.RENAMED.items()] == [True] * len(api.RENAMED)


def test_a_chain_goes_wherever_an_operator_goes() -> None:
    """``encode``, ``decode`` and ``operator_entry`` return an ``OperatorChain``: a pipeline opens it in place,
    each of its operators a stage of its own."""
    from wirepipe import (
        OperatorChain,
        Pipeline,
        decode,
        encode,
        generate_source,
        operator_entry,
        select_fields,
    )
    from wirepipe.testing import TestingSink

    chains = [encode("msgpack|zstd"), decode("msgpack|zstd"), operator_entry("select", fields=["x"])]
    assert [type(c) for c in chains] == [OperatorChain] * 3
    sink = TestingSink()
    source = generate_source("point", count=30, batch_size=10)
    pipeline = Pipeline(source, [*chains[:2], select_fields("x")], sink, dead_letter=sink)
    assert [op.stage for op in pipeline.operators] == ["serialize", "compress", "decompress", "deserialize", "select"]
    stats = pipeline.run()
    expected = [{"x": r["x"]} for r in source.dataset.sample(30, seed=0)]
    assert (stats.records_out, stats.rejected, sink.records) == (30, 0, expected)
    piped = generate_source("point", count=3) | chains[0] | [chains[1]] | chains[2]
    assert [op.stage for op in piped.operators] == ["serialize", "compress", "decompress", "deserialize", "select"]
    with pytest.raises(TypeError, match=r"^'msgpack' is not an operator: build one with a wirepipe factory"):
        Pipeline(generate_source("point", count=3), ["msgpack"])  # type: ignore[list-item]


def test_a_misspelt_argument_is_refused_before_the_model_by_its_name() -> None:
    """The factories' parameters are spelled out: a type checker refuses a misspelt one, and Python names it
    (``source``/``sink``/``operator_entry`` take any fields: the model names the allowed ones)."""
    with pytest.raises(TypeError, match=r"nats_sink\(\) got an unexpected keyword argument 'subjcet'"):
        wirepipe.nats_sink("points", subjcet="x")  # type: ignore[call-arg]
    with pytest.raises(wirepipe.ConfigError, match=r"^sink: unknown field 'subjcet': allowed .*\bsubject\b"):
        wirepipe.sink("nats", subject="points", subjcet="x")


# --- the factories' signatures against their models ---------------------------------------------------

# Python defaults a YAML entry does not have (the entry must name them): `serialize()` is msgpack.
PYTHON_DEFAULTS = {("serialize", "format"): "msgpack", ("compress", "codec"): "zstd"}
# Not a field of the entry: the pipeline-wide setting YAML gives beside the operators.
CONTEXT = {"allow_pickle"}
# A value for each required parameter, to build what each factory builds.
SAMPLES = {"path": "in.jsonl", "dir": "captures/", "subject": "points", "chain": "msgpack|zstd",
           "function": "operator:truth", "fields": "x", "records": 2, "template": "orders.{region}"}
NEEDS = {"jetstream_source": {"stream": "POINTS"}}  # what else a factory needs to build (stream or subject)


def _model(factory: str) -> type[Any]:
    entry = _entry(factory)
    assert entry is not None, factory
    role, key = entry
    model = {"source": SOURCES, "sink": SINKS, "operator": OPERATORS}[role][key]
    return typing.get_args(model)[0] if typing.get_origin(model) is typing.Annotated else model


def _fields(model: type[Any]) -> dict[str, Any]:
    """The model's fields by the name YAML gives them (``schema``, not ``schema_``), ``type`` (the tag) left out."""
    return {info.alias or name: info for name, info in model.model_fields.items() if name != "type"}


NAMED = [pytest.param(name, id=name) for name in api.__all__ if name not in ("source", "sink", "operator_entry")]


def _hints(factory: Any) -> dict[str, Any]:
    """A factory's annotations, evaluated with the names ``api`` imports for type checkers only."""
    tree = ast.parse(Path(api.__file__).read_text(encoding="utf-8"))
    [block] = [n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING"]
    names: dict[str, Any] = {"__name__": api.__name__, "__package__": "wirepipe"}
    exec(compile(ast.Module(body=block.body, type_ignores=[]), api.__file__, "exec"), names)
    return typing.get_type_hints(factory, {**vars(api), **names})


@pytest.mark.parametrize("name", NAMED)
def test_a_factory_takes_its_models_fields_with_their_defaults(name: str) -> None:
    """Every field of the model is a parameter and every parameter a field, with the model's default (a
    field built by a factory, ``reconnect``'s, and one whose default is None: None)."""
    params = inspect.signature(getattr(api, name)).parameters
    fields = _fields(_model(name))
    assert set(params) - CONTEXT == set(fields), name
    entry = _entry(name)[1]  # type: ignore[index]
    for key, info in fields.items():
        param = params[key]
        if param.kind is param.VAR_POSITIONAL:  # select_fields(*fields)
            assert info.is_required()
        elif info.is_required():
            expected = PYTHON_DEFAULTS.get((entry, key), param.empty)
            assert param.default == expected, (name, key)
        elif info.default_factory is not None or info.default is None:
            assert param.default is None, (name, key)
        else:
            assert (param.default, type(param.default)) == (info.default, type(info.default)), (name, key)


@pytest.mark.parametrize("name", NAMED)
def test_a_factorys_defaults_build_what_the_models_own_defaults_build(name: str) -> None:
    """Given explicitly (as a factory gives them) the defaults pass the model's checks and make the same model."""
    model, fields = _model(name), _fields(_model(name))
    tag = {"type": typing.get_args(model.model_fields["type"].annotation)[0]} if "type" in model.model_fields else {}
    required = {k: [SAMPLES[k]] if k == "fields" else SAMPLES.get(k, PYTHON_DEFAULTS.get((_entry(name)[1], k)))  # type: ignore[index]
                for k, info in fields.items() if info.is_required()}
    params = inspect.signature(getattr(api, name)).parameters
    defaults = {k: p.default for k, p in params.items() if k in fields and p.default not in (None, p.empty)}
    required |= NEEDS.get(name, {})
    assert model.model_validate({**tag, **defaults, **required}) == model.model_validate({**tag, **required})


def _flat(annotation: Any) -> tuple[list[Any], set[str]]:
    """A type's union members, ``Annotated`` taken off, and the names of the validators it carried."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        members, marks = _flat(typing.get_args(annotation)[0])
        return members, marks | {getattr(getattr(m, "func", None), "__name__", "") for m in annotation.__metadata__}
    if origin in (typing.Union, types.UnionType):
        members, marks = [], set()
        for arg in typing.get_args(annotation):
            more, also = _flat(arg)
            members, marks = members + more, marks | also
        return members, marks
    return [annotation], set()


def _refusal(hint: Any, info: Any) -> str | None:
    """Why a parameter typed ``hint`` does not take every value the field's type admits, or None."""
    taken, _ = _flat(hint)
    wanted, marks = _flat(info.annotation)
    marks |= {getattr(getattr(m, "func", None), "__name__", "") for m in info.metadata}
    if marks & {"_duration", "_size"} and str not in taken:
        return "a duration or a size is also a string ('30s', '64MiB')"
    literals = {value for t in taken if typing.get_origin(t) is Literal for value in typing.get_args(t)}
    for want in wanted:
        if typing.get_origin(want) is Literal:
            if set(typing.get_args(want)) != literals:
                return f"the values {typing.get_args(want)}, not {sorted(literals)}"
            continue
        base = typing.get_origin(want) or want
        if not any(isinstance(b := typing.get_origin(t) or t, type) and issubclass(base, b) for t in taken):
            return f"{want} is not taken"
    return None


@pytest.mark.parametrize("name", NAMED)
def test_a_factorys_parameters_take_what_its_models_fields_take(name: str) -> None:
    hints, fields = _hints(getattr(api, name)), _fields(_model(name))
    for param in inspect.signature(getattr(api, name)).parameters.values():
        if param.kind is param.VAR_POSITIONAL:  # select_fields(*fields): each one a field's item
            hints[param.name] = types.GenericAlias(list, (hints[param.name],))
    refused = {key: why for key, info in fields.items() if (why := _refusal(hints[key], info))}
    assert not refused, (name, refused)


@pytest.mark.parametrize("name", NAMED)
def test_a_factorys_return_type_is_the_class_it_builds(name: str) -> None:
    factory = getattr(api, name)
    params = inspect.signature(factory).parameters.values()
    args = [SAMPLES[p.name] for p in params if p.kind is p.VAR_POSITIONAL]
    kwargs = {p.name: SAMPLES[p.name] for p in params if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD}
    built = factory(*args, **kwargs, **NEEDS.get(name, {}))
    declared = _hints(factory)["return"]
    assert type(built) is declared or (name in BY_SETTING and isinstance(built, declared)), name


# Factories whose class follows a setting: they return the base both classes share.
BY_SETTING = {"jetstream_source"}


def test_jetstream_source_returns_either_reader_as_its_shared_base() -> None:
    from wirepipe.connectors.nats.jetstream_ordered import OrderedJetStreamSource
    from wirepipe.connectors.nats.jetstream_reader import JetStreamReader
    from wirepipe.connectors.nats.jetstream_source import JetStreamSource

    assert _hints(api.jetstream_source)["return"] is JetStreamReader
    assert type(api.jetstream_source("S", durable="d")) is JetStreamSource
    assert type(api.jetstream_source("S", ordered=True)) is OrderedJetStreamSource


@pytest.mark.parametrize(("old", "new"), sorted(api.RENAMED.items()))
def test_a_renamed_factory_keeps_its_new_names_signature(old: str, new: str) -> None:
    assert inspect.signature(getattr(api, old)) == inspect.signature(getattr(api, new))


# --- what a user's type checker sees ---------------------------------------------------------------------


def test_the_packages_typed_names_are_its_public_names() -> None:
    """The imports a type checker reads (``if TYPE_CHECKING:`` in ``wirepipe/__init__.py``) are exactly the
    public names and the old names of renamed ones, each re-exported (``X as X``) and the object that
    ``wirepipe.X`` gives at run time."""
    import importlib

    tree = ast.parse(Path(wirepipe.__file__).read_text(encoding="utf-8"))
    [block] = [n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING"]
    typed = {a.asname: (f"wirepipe{'.' + node.module if node.module else ''}", a.name)
             for node in block.body if isinstance(node, ast.ImportFrom) for a in node.names}
    assert [(a, n) for a, (_, n) in typed.items() if a != n] == []
    assert set(typed) == {*wirepipe.__all__, *api.RENAMED} - {"__version__"}
    assert [n for n, (m, a) in typed.items() if getattr(importlib.import_module(m), a) is not getattr(wirepipe, n)] == []


SNIPPET = '''\
"""A user's program, written as the README and the docs write one."""
import wirepipe
from wirepipe import (Pipeline, compress, decode, encode, generate_source, jsonl_sink, map_values, null_sink,
                      serialize)

pipeline = Pipeline(generate_source("point", count=1000), [serialize("msgpack"), compress("zstd", "fastest")],
                    null_sink(), name="quickstart")
stats = pipeline.run()
composed = (generate_source("feed", count=100) | encode("msgpack|zstd") | decode("msgpack|zstd")
            | map_values(abs) | jsonl_sink("out.jsonl"))
reveal_type(pipeline)
reveal_type(stats)
reveal_type(composed)
reveal_type(composed.run())
reveal_type(serialize("msgpack") | compress("zstd"))
reveal_type(wirepipe.load_pipeline("pipeline.yaml"))
operators = [serialize("json"), map_values(abs), compress("lz4")]  # a list a user keeps: still operators
sources = [generate_source("feed", count=10), wirepipe.jsonl_source("in.jsonl")]
pipelines = [Pipeline(s, operators, null_sink()) for s in sources]
'''
OLD_NAMES = '''\
import wirepipe

wirepipe.generate("point", count=10)
wirepipe.select("x")
wirepipe.operator("compress", codec="lz4")
'''


@pytest.mark.slow  # a cold mypy over the package: seconds
def test_a_users_mypy_sees_every_public_name_typed(tmp_path: Path) -> None:
    """mypy (``--strict``) on a user's program: what ``Pipeline.run()`` returns, what the factories and ``|``
    build, and every public name reveal their own types, never ``Any`` (nor a callable returning ``Any``); the
    old names of renamed factories are flagged (PEP 702)."""
    import re
    import subprocess

    reveals = "".join(f"reveal_type(wirepipe.{name})\n" for name in sorted(wirepipe.__all__))
    (tmp_path / "snippet.py").write_text(SNIPPET + reveals, encoding="utf-8")
    (tmp_path / "old_names.py").write_text(OLD_NAMES, encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--enable-error-code", "deprecated", "--follow-imports=silent",
         "--cache-dir", str(tmp_path / "cache"), "snippet.py", "old_names.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**__import__("os").environ, "MYPYPATH": str(Path(wirepipe.__file__).parent.parent)})  # the tested code
    lines = (SNIPPET + reveals).splitlines()
    revealed = {lines[int(n) - 1].strip(): t for n, t in re.findall(r'^snippet\.py:(\d+): note: Revealed type is "(.*)"$',
                                                                  out.stdout, re.M)}
    errors = [line for line in out.stdout.splitlines() if ": error: " in line]
    deprecated = [line for line in errors if line.startswith("old_names.py:") and line.endswith("[deprecated]")]
    assert errors == deprecated and len(deprecated) == 3, out.stdout + out.stderr
    assert len(revealed) == 6 + len(wirepipe.__all__), out.stdout
    anys = {expr: t for expr, t in revealed.items() if t == "Any" or t.endswith("-> Any")}
    assert not anys, anys
    pipeline, stats = "wirepipe.pipelines.pipeline.Pipeline", "wirepipe.pipelines.stats.RunStats"
    assert [revealed[f"reveal_type({e})"] for e in ("pipeline", "stats", "composed", "composed.run()")] == \
        [pipeline, stats, pipeline, stats]
    assert revealed['reveal_type(serialize("msgpack") | compress("zstd"))'] == "wirepipe.operators.operator.OperatorChain"
    assert revealed['reveal_type(wirepipe.load_pipeline("pipeline.yaml"))'] == pipeline
