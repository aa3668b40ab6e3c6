"""What the tracing hook costs: off against a run loop built without it, and on against off.

    python benchmarks/bench_tracing_overhead.py [--records 200000] [--batch-size 1000] [--rounds 101]

The pipeline is the one of ``bench_metrics_overhead.py``: ``TestingSource (point records) ->
msgpack -> zstd:fastest -> decompress -> deserialize -> null``, small records, so a per-batch cost
weighs as much as it can. Three variants run interleaved in each round, in this process:

- **without the hook**: the run (``PipelineRun``) with its methods that mention tracing recompiled
  from their own source with every statement and condition about tracing removed (``ast``), i.e.
  the run loop as it would be had the hook never been added;
- **off**: ``Pipeline`` as shipped, no ``tracing:`` and no OTEL_* variable (the default);
- **on**: tracing on, to an OpenTelemetry SDK provider whose batch processor hands the spans to an
  exporter that drops them: the cost of making the spans and the ``traceparent`` headers, not of a
  network.

Prints records/s per round and the median of the rounds' ratios off / without and on / off with a
95% interval (``median_interval``, as ``bench_metrics_overhead.py``).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import os
import statistics
import textwrap
import time
from typing import Any

from wirepipe.connectors.null import NullSink
from wirepipe.datasets import get_dataset
from wirepipe.operators.compress import Compress
from wirepipe.operators.decompress import Decompress
from wirepipe.operators.deserialize import Deserialize
from wirepipe.operators.serialize import Serialize
from wirepipe.pipelines import run as run_module
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.pipelines.run import PipelineRun
from wirepipe.study.report.statistics import median_interval
from wirepipe.testing import TestingSource

HOOKED = ("_process", "_run_operators", "record_batch")  # of PipelineRun


def _mentions_tracing(node: ast.AST) -> bool:
    """True when ``node`` reads or writes anything named ``tracing`` (a docstring does not count)."""
    for n in ast.walk(node):
        if (isinstance(n, ast.Name) and "tracing" in n.id) or (isinstance(n, ast.Attribute) and "tracing" in n.attr):
            return True
    return False


class _StripTracing(ast.NodeTransformer):
    """Remove ``if <about tracing>:`` blocks (keeping their ``else``), assignments of tracing names, and
    operands about tracing in ``and`` / ``or`` conditions."""

    def visit_If(self, node: ast.If) -> Any:
        if isinstance(node.test, ast.BoolOp) and not all(map(_mentions_tracing, node.test.values)):
            node.test = self.visit(node.test)  # `if a and <tracing>:` -> `if a:`
        elif _mentions_tracing(node.test):
            return [self.visit(n) for n in node.orelse] or None
        return self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> Any:
        if isinstance(node.value, ast.BoolOp) and not any(map(_mentions_tracing, node.targets)):
            node.value = self.visit(node.value)  # `x = a or <tracing>` -> `x = a`
            return node
        return None if _mentions_tracing(node) else node

    def visit_BoolOp(self, node: ast.BoolOp) -> Any:
        kept = [self.visit(v) for v in node.values if not _mentions_tracing(v)]
        if not kept:
            raise AssertionError("a condition about tracing alone: rewrite the hook as an `if`")
        return kept[0] if len(kept) == 1 else ast.BoolOp(op=node.op, values=kept)


def pipeline_without_the_hook() -> type[Pipeline]:
    """``Pipeline`` whose runs' hooked methods are recompiled without the tracing hook (checked: nothing is
    left)."""
    methods: dict[str, Any] = {}
    for name in HOOKED:
        tree = ast.parse(textwrap.dedent(inspect.getsource(getattr(PipelineRun, name))))
        assert _mentions_tracing(tree), f"{name} has no tracing hook: update HOOKED"
        stripped = ast.fix_missing_locations(_StripTracing().visit(tree))
        assert not _mentions_tracing(stripped), f"{name}: the hook is still there:\n{ast.unparse(stripped)}"
        namespace: dict[str, Any] = {}
        exec(compile(stripped, f"<{name} without the tracing hook>", "exec"), vars(run_module), namespace)
        methods[name] = namespace[name]
    bare = type("RunWithoutTheHook", (PipelineRun,), methods)

    class PipelineWithoutTheHook(Pipeline):
        def new_run(self) -> PipelineRun:
            self.last_run = bare(self)
            return self.last_run

    return PipelineWithoutTheHook


def dropping_provider() -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    return provider


def run_once(kind: type[Pipeline], chunks: list[list[dict[str, int]]], tracing: Any) -> float:
    ops = [Serialize("msgpack"), Compress("zstd", "fastest"), Decompress("zstd"), Deserialize("msgpack")]
    pipe = kind(TestingSource.from_batches(chunks, raw_record_nbytes=8), ops, NullSink(), name="overhead",
                tracing=tracing)
    wall = time.perf_counter()
    stats = pipe.run()
    return stats.records_out / (time.perf_counter() - wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=101)
    args = parser.parse_args()
    for key in [k for k in os.environ if k.startswith("OTEL_")]:
        del os.environ[key]  # "off" is the default: no variable turns tracing on
    chunks = list(get_dataset("point").records(args.records, seed=0, batch_size=args.batch_size))
    bare = pipeline_without_the_hook()
    provider = dropping_provider()
    variants = {"without": (bare, None), "off": (Pipeline, None), "on": (Pipeline, provider)}
    for kind, tracing in variants.values():  # warm-up: imports, codec set-up, the SDK
        run_once(kind, chunks, tracing)
    rates: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.rounds):
        order = names[r % 3:] + names[:r % 3]  # rotate who goes first: drift on a shared machine hits all alike
        for name in order:
            kind, tracing = variants[name]
            rates[name].append(run_once(kind, chunks, tracing))
        print(f"round {r}: " + ", ".join(f"{n} {rates[n][-1]:>10,.0f}" for n in names) + " records/s")
    for a, b in (("off", "without"), ("on", "off")):
        ratios = [y / x for x, y in zip(rates[b], rates[a], strict=True)]
        mid, low, high = median_interval(ratios)
        print(f"{a} / {b}: ratio {mid:.3f} [95% {low:.3f}-{high:.3f}] (median of the rounds' ratios; "
              f"median records/s {statistics.median(rates[a]):,.0f} vs {statistics.median(rates[b]):,.0f})")
    print(f"batch size {args.batch_size}, {args.records:,} records, {args.rounds} interleaved rounds")


if __name__ == "__main__":
    main()
