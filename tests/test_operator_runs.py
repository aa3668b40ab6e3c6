"""The operators run in one place: ``run_operators``, the loop ``Pipeline.process_batch`` is built on.

The run loop has three ways to run a pass (on the event loop; in slices between which a core
NATS source reads its socket; in a thread), the metrics recorder, the Beam DoFn, the bench and
the capacity plan need it too. They all call the one loop, so an operator behaves, rejects and is
stamped alike whichever way it ran.
"""

from __future__ import annotations

import ast
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from wirepipe.connectors.connector import CountsLoss, ReadsWhileBusy
from wirepipe.metrics.recorder import MetricsRecorder
from wirepipe.operators.deserialize import Deserialize
from wirepipe.operators.map import Map
from wirepipe.operators.pack import Pack
from wirepipe.operators.serialize import Serialize
from wirepipe.pipelines import pipeline as pipeline_module
from wirepipe.pipelines import run as run_module
from wirepipe.testing import TestingSink, TestingSource, run

SRC = Path(__file__).resolve().parent.parent / "src" / "wirepipe"


def _loops_calling_their_variable(tree: ast.AST) -> list[int]:
    """Lines of ``for x in <operators>:`` loops whose body calls ``x(...)``: operators run one after
    another (an iterable whose source names ``op``: ``ops``, ``self.operators``, ``chain_operators(...)``;
    composing a codec's per-record functions or calling hooks is not running operators)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor)) and isinstance(node.target, ast.Name) \
                and "op" in ast.unparse(node.iter).lower():
            name = node.target.id
            calls = [c for stmt in node.body for c in ast.walk(stmt) if isinstance(c, ast.Call)
                     and isinstance(c.func, ast.Name) and c.func.id == name]
            if calls:
                found.append(node.lineno)
    return found


def test_one_loop_in_the_package_runs_operators_one_after_another() -> None:
    loops = {}
    for path in sorted(SRC.rglob("*.py")):
        lines = _loops_calling_their_variable(ast.parse(path.read_text(encoding="utf-8")))
        if lines:
            loops[str(path.relative_to(SRC))] = lines
    assert list(loops) == ["pipelines/pipeline.py"], loops
    source = (SRC / "pipelines" / "pipeline.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    (line,) = loops["pipelines/pipeline.py"]
    owner = [f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.lineno <= line <= f.end_lineno]
    assert owner == ["run_operators"]


def test_the_checker_sees_a_second_loop() -> None:
    code = "def f(ops, b):\n    for op in ops:\n        b = op(b)\n    return b\n"
    assert _loops_calling_their_variable(ast.parse(code)) == [2]


class DroppingSource(TestingSource, CountsLoss, ReadsWhileBusy):
    """A testing source that says it has a socket to serve and loses what it does not read (as core NATS
    does): the run loop then runs long passes off the event loop."""

    __test__ = False
    lost = 0

    def losses(self) -> dict[str, int]:
        return {"lost": 0}

    def discard(self, records: int) -> None:
        pass


def _fails_on_seven(v: int) -> dict[str, int]:
    if v % 100 == 7:
        raise ValueError("seven")
    return {"v": v}


def _ops(pack: bool) -> list[Any]:
    ops: list[Any] = [Map(_fails_on_seven), Serialize("json"), Deserialize("json")]
    return [*ops, Pack(3)] if pack else ops


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["slice", "thread"])
@pytest.mark.parametrize("metrics", [False, True])
@pytest.mark.parametrize("pack", [False, True])
def test_offloaded_passes_run_the_one_loop_and_equal_a_plain_run(monkeypatch: pytest.MonkeyPatch, mode: str,
                                                                 metrics: bool, pack: bool) -> None:
    records = list(range(300))
    plain = TestingSink()
    run(TestingSource(records, batch_size=100), _ops(pack), plain)

    calls: list[tuple[bool, bool, int]] = []  # (on the main thread, timed, records in)
    original = pipeline_module.run_operators

    def counting(operators: Any, batch: Any, timed: bool = False) -> Any:
        calls.append((threading.current_thread() is threading.main_thread(), timed, len(batch.values)))
        return original(operators, batch, timed)

    monkeypatch.setattr(pipeline_module, "run_operators", counting)
    monkeypatch.setattr(run_module, "_OFFLOAD_NS", 0)  # every pass is "long"
    monkeypatch.setattr(run_module, "_OFFLOAD_MODE", mode)
    recorder = MetricsRecorder(None, flush_interval=None) if metrics else None
    sink = TestingSink()
    stats = run(DroppingSource(records, batch_size=100), _ops(pack), sink, metrics=recorder)

    assert sink.records == plain.records
    assert [(r.stage, r.value) for r in sink.rejects] == [(r.stage, r.value) for r in plain.rejects] \
        == [("map", 7), ("map", 107), ("map", 207)]
    assert stats.batches == 3
    sliced = mode == "slice" and not metrics and not pack
    if sliced:  # slices on the event loop: more passes than batches, each over part of a batch
        assert all(main for main, _, _ in calls) and len(calls) > 3
        assert sum(n for _, _, n in calls) == 300
    else:  # one pass per batch, in a thread
        assert [(main, n) for main, _, n in calls] == [(False, 100)] * 3
    assert all(timed == metrics for _, timed, _ in calls)
    if recorder is not None:
        stages, _ = recorder.tables()
        assert stages.num_rows == 3 * (len(_ops(pack)) + 2)
        rows = stages.to_pylist()
        assert [r["rejected"] for r in rows if r["stage"] == "map"] == [1, 1, 1]
        assert [r["records"] for r in rows if r["step"] == 0] == [100, 100, 100]
        assert all(r["start_ns"] <= r["end_ns"] for r in rows)


class Watched(TestingSource):
    """A testing source that notes every attribute the run loop (or its own ``batches``) reads of it."""

    __test__ = False

    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("__"):
            object.__getattribute__(self, "__dict__").setdefault("read", Counter())[name] += 1
        return object.__getattribute__(self, name)


def test_the_run_loop_asks_a_source_its_capabilities_once_not_per_batch() -> None:
    """What a source declares (``connectors/connector.py``) is asked when the run starts: a run of 50 batches reads
    no capability member, nor any flag of an earlier wirepipe, more often than a run of 5."""
    from wirepipe.connectors.connector import _RETIRED_SOURCE, SOURCE_CAPABILITIES, _members

    reads = []
    for batches in (5, 50):
        source = Watched(range(batches * 10), batch_size=10)
        run(source, [], TestingSink())
        reads.append(source.__dict__["read"])
    per_batch = {name for name in reads[1] if reads[1][name] > reads[0][name]}
    contract = set(_RETIRED_SOURCE).union(*(_members(c) for c in SOURCE_CAPABILITIES))
    assert per_batch and not per_batch & contract, sorted(per_batch & contract)
