"""Runs a benchmark plan: every dataset x combination, with a progress bar, into files.

Outputs in ``--out``: ``bench.parquet`` (one row per stage per iteration per
combination: the stage columns then the bench's own, ``metrics.columns.bench_schema``,
with the run metadata; ``wirepipe report`` reads it), ``bench.md`` (the
tables and recommendations; a failed combination has no rows, its reason is in the metadata), ``bench.progress.jsonl`` (a line per measured step,
appended as it finishes: what a run had done when it stopped), and trained zstd
dictionaries when asked for.
"""

from __future__ import annotations

import functools
import json
import signal
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.stages import Stage
from ..report.recommend import DEFAULT_BANDWIDTH
from .codec_timing import ComboResult, StageTime, time_codecs
from .combos import BenchPlan, Combo
from .data import BenchData, from_dataset, from_file
from .estimate import Estimate
from .study_tables import Measured, Spread

JOURNAL = "bench.progress.jsonl"  # a line per measured step, appended as it finishes


@dataclass
class BenchRun:
    """Everything one ``wirepipe bench`` measured."""

    plan: BenchPlan
    run_id: str
    measured: dict[str, list[Measured]] = field(default_factory=dict)  # by dataset
    raw_rows: list[dict[str, Any]] = field(default_factory=list)
    latency: dict[str, Any] = field(default_factory=dict)  # row label -> the consumer's latency rows
    bandwidth: float = DEFAULT_BANDWIDTH
    interrupted: bool = False  # Ctrl-C: what finished is kept, the rest is in not_measured
    not_measured: list[str] = field(default_factory=list)
    samples: dict[str, str] = field(default_factory=dict)  # dataset -> what was measured (``BenchData.sample``)

    @property
    def failed(self) -> list[str]:
        return list(self.errors)

    @property
    def errors(self) -> dict[str, str]:
        """Why each failed combination failed, by ``dataset: label``."""
        return {f"{d}: {m.combo.label}": m.error for d, ms in self.measured.items() for m in ms if m.error}


def load_data(plan: BenchPlan) -> list[BenchData]:
    """Each dataset's and file's sample, with its N (``BenchData.for_plan``)."""
    samples = [from_dataset(d, plan.seed) for d in plan.datasets] + [from_file(p, plan.seed) for p in plan.inputs]
    return [data.for_plan(plan.repetitions, plan.scale) for data in samples]


def train_dictionaries(data: BenchData, formats: list[str], out: Path) -> dict[str, str]:
    """One zstd dictionary per format, trained on the serialized sample; format -> file path.

    The files stay in ``out`` so the recommended config can point at them.
    """
    import zstandard

    from ...codecs.formats import get_format
    from ...codecs.zstd import dictionary_size, train_zstd_dictionary
    from ...storage.files import write_bytes_atomic

    paths: dict[str, str] = {}
    out.mkdir(parents=True, exist_ok=True)
    for fmt in formats:
        try:
            encode = get_format(fmt).encoder(data.fields)
            samples = [encode(r) for r in data.values(max(len(data.records), 200))]
        except Exception:  # a format that cannot write these records: its own rows fail, with the reason
            continue
        try:
            d = train_zstd_dictionary(samples, size=dictionary_size(samples))
        except (ValueError, zstandard.ZstdError):  # too little or too uniform data: no +dict rows then
            continue
        path = write_bytes_atomic(out / f"{data.name}-{fmt}.zdict", d)
        paths[fmt] = str(path)
    return paths


def _per_record(total_bytes: int | None, repetitions: int) -> float | None:
    return None if total_bytes is None else total_bytes / repetitions


def _progress(step: Callable[[Combo, BenchData, str], None], data: BenchData, kind: str, combo: Combo) -> None:
    step(combo, data, kind)


def measured_from(data: BenchData, result: ComboResult, repetitions: int, latency: Any = None) -> Measured:
    m = Measured(data.name, result.combo, data.raw_bytes, repetitions, error=result.error)
    if result.error or not result.iterations:
        m.error = m.error or "no iteration completed"
        return m
    for rows in result.iterations:
        for row in rows:
            m.stages.setdefault(row.stage, Spread([])).values.append((row.end_ns - row.start_ns) / 1e6)
    first = {row.stage: row for row in result.iterations[0]}
    m.size = _per_record(first[Stage.SERIALIZE].bytes_out, repetitions)
    m.compressed = _per_record(first[Stage.COMPRESS].bytes_out, repetitions) if Stage.COMPRESS in first else m.size
    if latency is not None and latency.num_rows:
        import numpy as np

        ms = np.repeat((np.asarray(latency.column("done_ns")) - np.asarray(latency.column("sent_ns"))) / 1e6,
                       np.asarray(latency.column("records")))  # a row stands for `records` records
        m.latency_ms = {f"p{q}": float(np.percentile(ms, q, method="inverted_cdf")) for q in (50, 90, 99)}
    return m


def raw_rows(run_id: str, data: BenchData, result: ComboResult) -> list[dict[str, Any]]:
    """Rows in the metrics schema (one per stage per iteration), labelled with the combination."""
    out = []
    label = f"{data.name}: {result.combo.label}"
    for i, rows in enumerate(result.iterations):
        for step, row in enumerate(rows):
            out.append(_row(run_id, label, data.name, result.combo, i, step, row))
            if row.stage == Stage.SERIALIZE:
                out[-1]["payload_digest"] = result.digest
    return out


def _row(run_id: str, label: str, dataset: str, combo: Combo, iteration: int, step: int,
         row: StageTime) -> dict[str, Any]:
    return {
        "run_id": run_id, "pipeline": label, "label": label, "dataset": dataset, "chain": combo.label,
        "iteration": iteration, "batch": iteration, "step": step, "stage": row.stage, "operator": row.operator,
        "params": json.dumps(row.params, default=str), "records": row.records, "rejected": 0,
        "bytes_in": row.bytes_in, "bytes_out": row.bytes_out, "start_ns": row.start_ns, "end_ns": row.end_ns,
        "projected": 0, "payload_digest": None,
    }


def run_bench(plan: BenchPlan, on_step: Callable[[str, float, float], None] | None = None, *,
              datas: list[BenchData] | None = None, estimate: Estimate | None = None) -> BenchRun:
    """Measure every dataset x combination; ``on_step(description, done, total)`` reports progress.

    Progress counts estimated seconds when an ``estimate`` is given (else one unit per step), so
    an ETA holds from the start. Ctrl-C (``KeyboardInterrupt``) ends the measuring, not the run:
    it comes back marked ``interrupted`` with what finished (codec iterations completed so far;
    over NATS, the combinations whose every iteration crossed the wire).
    """
    run = BenchRun(plan, uuid.uuid4().hex)
    datas = load_data(plan) if datas is None else datas
    run.samples = {data.name: data.sample for data in datas}
    combos = plan.combos()
    phases = ("codec",) if plan.transport == "none" else ("codec", "transport")

    def cost(name: str, combo: Combo, phase: str) -> float:
        return estimate.step(name, combo, phase) if estimate is not None else 1.0

    total = (estimate.seconds if estimate is not None
             else len(datas) * len(combos) * (plan.iterations + 1 + (plan.iterations if len(phases) > 1 else 0)))
    done = 0.0
    plan.out.mkdir(parents=True, exist_ok=True)
    journal = open(plan.out / JOURNAL, "w", encoding="utf-8")  # noqa: SIM115 - closed below

    interrupt = _Interrupt()

    def step(combo: Combo, data: BenchData, phase: str) -> None:
        nonlocal done
        interrupt.check()  # before the journal line: what the journal lists finished is what is kept
        done += cost(data.name, combo, phase)
        journal.write(json.dumps({"dataset": data.name, "combination": combo.label, "phase": phase}) + "\n")
        journal.flush()
        if on_step is not None:
            on_step(f"{data.name} {combo.label}", min(done, total), total)

    if on_step is not None:
        on_step("warm-up", 0.0, total)
    try:
        with interrupt:
            _measure(run, datas, combos, step)
        run.interrupted = run.interrupted or interrupt.seen  # Ctrl-C after the last step still says so
    finally:
        journal.close()
    return run


class _Interrupt:
    """Ctrl-C as a flag the measuring checks between steps.

    A ``KeyboardInterrupt`` raised wherever the signal lands can be swallowed (in a fork's
    at-fork hooks, "Exception ignored in _releaseLock") or land between a step's end and its
    record; a flag checked at step boundaries is never lost and keeps the journal and the kept
    results equal. A second Ctrl-C interrupts at once (the default handler is back).
    """

    def __init__(self) -> None:
        self.seen = False
        self._previous: Any = None

    def _on_sigint(self, _signum: int, _frame: Any) -> None:
        self.seen = True
        signal.signal(signal.SIGINT, self._previous)

    def check(self) -> None:
        if self.seen:
            raise KeyboardInterrupt

    def __enter__(self) -> _Interrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None and not self.seen:
            signal.signal(signal.SIGINT, self._previous)


def _measure(run: BenchRun, datas: list[BenchData], combos: list[Combo],
             step: Callable[[Combo, BenchData, str], None]) -> None:
    plan = run.plan
    for data in datas:
        n = data.repetitions
        results: dict[Combo, ComboResult] = {}
        try:
            dictionaries = (train_dictionaries(data, plan.formats, plan.out)
                            if plan.dictionary_for(data.name, data.raw_bytes) else {})
            usable = [c for c in combos if not c.dictionary or c.format in dictionaries]
            time_codecs(data, usable, n, plan.iterations, dictionaries,
                        progress=functools.partial(_progress, step, data, "codec"), into=results)
            if plan.transport != "none":
                from .transport import time_transport

                latency: dict[str, Any] = {}
                try:
                    time_transport(data, list(results.values()), n, plan, latency, dictionaries,
                                   progress=functools.partial(_progress, step, data, "transport"))
                finally:
                    run.latency.update({f"{data.name}: {label}": t for label, t in latency.items()})
        except KeyboardInterrupt:
            run.interrupted = True
        _keep(run, data, results, n)
        if run.interrupted:
            break


def _keep(run: BenchRun, data: BenchData, results: dict[Combo, ComboResult], n: int) -> None:
    """Add a dataset's results; after an interruption, only what finished (the rest is listed as not measured)."""
    wire = run.plan.transport != "none"
    kept = []
    for r in results.values():
        finished = bool(r.error) or (r.wire_done if wire else bool(r.iterations))
        if run.interrupted and not finished:
            run.not_measured.append(f"{data.name}: {r.combo.label}")
            continue
        kept.append(r)
    if not kept:
        return
    run.measured[data.name] = [measured_from(data, r, n, run.latency.get(f"{data.name}: {r.combo.label}"))
                               for r in kept]
    for r in kept:
        if not r.error:  # a failed combination's figures are of a chain that does not work: only its reason is kept
            run.raw_rows += raw_rows(run.run_id, data, r)


def rows_table(run: BenchRun) -> Any:
    """The raw rows as an Arrow table in the metrics schema (what ``summarize`` reads)."""
    import pyarrow as pa

    from ...metrics.columns import bench_schema

    schema = bench_schema()
    return pa.Table.from_pylist(run.raw_rows, schema=schema) if run.raw_rows else schema.empty_table()


def latency_table(run: BenchRun) -> Any:
    """The consumers' latency rows, labelled like the stage rows (None without a transport)."""
    import pyarrow as pa

    if not run.latency:
        return None
    return pa.concat_tables([t.append_column("label", pa.array([label] * t.num_rows, pa.string()))
                             for label, t in run.latency.items()], promote_options="default")


def write_results(run: BenchRun) -> Path:
    """``bench.parquet`` with the raw rows and the run metadata, and the latency file beside it.

    Each lives the one life of a Parquet file (``storage.lifecycle``): ``wirepipe report`` on the folder never
    reads half a file, and a bench killed while writing leaves the previous run's file whole.
    """
    from ...codecs.deflate import deflate_choice
    from ...metrics.run_metadata import run_metadata
    from ...storage.lifecycle import write_table

    out = run.plan.out
    out.mkdir(parents=True, exist_ok=True)
    path = out / "bench.parquet"
    meta = run_metadata("wirepipe bench", _plan_dict(run.plan), run.run_id)
    meta["wirepipe.bench.failures"] = json.dumps(run.errors)
    meta["wirepipe.bench.interrupted"] = json.dumps(run.interrupted)
    meta["wirepipe.bench.not_measured"] = json.dumps(run.not_measured)
    meta["wirepipe.bench.repetitions"] = json.dumps(
        {d: ms[0].repetitions for d, ms in run.measured.items() if ms})
    meta["wirepipe.bench.samples"] = json.dumps(run.samples)  # what was measured of each dataset, in words
    meta["wirepipe.bench.deflate"] = deflate_choice()  # which library ran zlib/gzip/deflate, by level and size
    table = rows_table(run)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    write_table(path, table)
    latency = latency_table(run)
    if latency is not None:
        from ...metrics.columns import TABLE_KEY
        from ...metrics.run_metadata import latency_path

        latency = latency.replace_schema_metadata({**meta, TABLE_KEY: "latency"})
        write_table(latency_path(path), latency)
    return path


def _plan_dict(plan: BenchPlan) -> dict[str, Any]:
    """The plan as the results' run metadata holds it: the server as ``public_params`` shows it (no secret)."""
    out = {k: (str(v) if isinstance(v, Path) else [str(x) for x in v] if k == "inputs" else v)
           for k, v in plan.__dict__.items()}
    out["nats"] = plan.nats.public_params() if plan.nats is not None else None
    return out


