"""The Python front door (``wirepipe``, ``wirepipe.api``): its names follow one rule, and a renamed name
still works for a release, with a warning that names the new one."""

from __future__ import annotations

import builtins
import sys
from typing import Any

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
    from pathlib import Path

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
