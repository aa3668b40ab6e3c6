"""Finding and reading results: files, part folders and folders of them, into two Arrow tables.

``load_results`` accepts what ``MetricsRecorder`` writes (a folder of parts per table,
the latency folder beside the stage folder) and plain Parquet files with the same
columns (an older single-file result, or rows a benchmark wrote itself). A file's
table is told by its ``wirepipe.table`` metadata, else by its columns. Parts that a
merge already covers are skipped (``parts.list_parts``), so no row counts twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.errors import MissingInput, WirepipeError


@dataclass
class RunInfo:
    """The run metadata one results file carries (see ``metrics.run_metadata.run_metadata``)."""

    run_id: str
    pipeline: str = ""
    started_at: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=dict)
    started_ns: int = 0  # Unix ns when the recorder opened (from ``wirepipe.clock``), 0 when unknown
    clock_offset: int = 0  # Unix ns minus monotonic ns of the run's process: its rows' times on one clock
    worker: dict[str, Any] = field(default_factory=dict)  # a pool worker's run: {pool, index, workers}
    failures: dict[str, str] = field(default_factory=dict)  # a bench's failed combinations and why
    samples: dict[str, str] = field(default_factory=dict)  # a bench's datasets: what was measured, in words
    opened: bool = False  # its pipeline's parts opened (a run without batches was idle, not a failed start)

    @classmethod
    def from_metadata(cls, meta: dict[bytes, bytes]) -> RunInfo | None:
        def get(key: str) -> str | None:
            value = meta.get(f"wirepipe.{key}".encode())
            return value.decode() if value is not None else None

        def obj(key: str) -> Any:
            text = get(key)
            try:
                return json.loads(text) if text else {}
            except ValueError:
                return {}

        run_id = get("run_id")
        if run_id is None:
            return None
        clock = obj("clock")
        offset = int(clock["unix_ns"]) - int(clock["monotonic_ns"]) if "monotonic_ns" in clock else 0
        return cls(run_id, get("pipeline") or "", get("started_at") or "", obj("config"), obj("versions"),
                   obj("host"), int(clock.get("unix_ns", 0)), offset, obj("worker"), obj("bench.failures"),
                   obj("bench.samples"), get("opened_at") is not None)


@dataclass
class Results:
    """Stage rows, latency rows (possibly empty) and the metadata of every run seen."""

    stages: Any
    latency: Any
    runs: dict[str, RunInfo]
    files: list[Path]
    skipped: list[Path] = field(default_factory=list)


def load_results(paths: Iterable[str | Path] | str | Path) -> Results:
    """Read every results file named by ``paths`` (files, part folders, folders of those)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ...metrics.columns import TABLES, arrow_schema

    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    files: list[Path] = []
    for path in paths:
        files += _discover(Path(path))
    tables: dict[str, list[Any]] = {"stages": [], "latency": []}
    runs: dict[str, RunInfo] = {}
    used: list[Path] = []
    skipped: list[Path] = []
    for f in dict.fromkeys(files):  # de-duplicated, in order
        try:
            schema = pq.read_schema(f)
        except (pa.ArrowInvalid, OSError) as exc:
            raise WirepipeError(f"{f}: not a readable Parquet file ({exc})") from None
        kind = _kind(schema)
        if kind is None:
            skipped.append(f)
            continue
        meta = schema.metadata or {}
        info = RunInfo.from_metadata(meta)
        if info is not None:
            runs.setdefault(info.run_id, info).opened |= info.opened  # any of its files may say it opened
        table = pq.read_table(f)
        if kind == "stages" and "messages" not in table.column_names:  # version 1: `records` counted the values
            table = table.append_column("messages", table.column("records"))
        if kind == "latency" and "records" not in table.column_names:  # before version 3: a row per record
            table = table.append_column("records", pa.repeat(pa.scalar(1, pa.int64()), table.num_rows))
        tables[kind].append(table.replace_schema_metadata(None))
        used.append(f)
    if not tables["stages"]:
        raise WirepipeError(f"no wirepipe results (stage rows) in {', '.join(map(str, paths))}")

    def concat(kind: str) -> Any:
        parts = tables[kind] or [arrow_schema(TABLES[kind]).empty_table()]
        return pa.concat_tables(parts, promote_options="default")

    stages = concat("stages")
    for run_id in stages.column("run_id").unique().to_pylist():
        runs.setdefault(run_id, RunInfo(run_id))
    return Results(stages, concat("latency"), runs, used, skipped)


def _kind(schema: Any) -> str | None:
    from ...metrics.columns import TABLE_KEY, TABLES

    declared = (schema.metadata or {}).get(TABLE_KEY.encode(), b"").decode()
    if declared in TABLES:
        return declared
    names = set(schema.names)
    if {"stage", "start_ns", "end_ns", "records"} <= names:
        return "stages"
    if {"sent_ns", "received_ns"} <= names:
        return "latency"
    return None


def _discover(path: Path) -> list[Path]:
    """Parquet files under ``path``, and the latency folder beside a stage folder named directly."""
    from ...metrics.run_metadata import latency_path
    from ...storage.files import sub_folders
    from ...storage.parts import list_parts

    if not path.exists():
        raise MissingInput(f"{path}: no such file or folder")
    if path.is_file():
        return [path]
    out: list[Path] = []
    folders = [path, *sub_folders(path)]  # storage's rule: hidden folders and what is under them skipped
    for folder in folders:
        out += list_parts(folder)
    beside = latency_path(path)
    if beside.is_dir() and beside not in folders:
        out += list_parts(beside)
    return out
