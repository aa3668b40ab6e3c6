"""What a results file says about its run (Parquet key-value metadata): its id, the pipeline and its config
(secrets masked), the library versions and host, the pool it belongs to and one reading of both clocks; what a
reader needs to trust and reproduce it. The recorder, the study's bench and the Beam replay write it alike."""

from __future__ import annotations

import functools
import json
import os
import platform
import secrets
import time
from pathlib import Path
from typing import Any

from .columns import METRICS_VERSION, METRICS_VERSION_KEY

_LIBRARIES = ("nats-py", "msgpack", "zstandard", "pyarrow", "orjson", "cbor2", "brotli", "lz4", "zlib-ng", "isal",
              "cramjam", "msgspec", "fastavro", "protobuf", "pymongo")


def new_run_id() -> str:
    """Sortable by start time, unique across workers: ``20260115T101500Z-3f9a1c``."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)


def latency_path(path: str | Path) -> Path:
    """The latency folder beside a stage-rows folder: ``results/x.parquet`` -> ``results/x.latency.parquet``."""
    p = Path(path)
    return p.with_name(f"{p.stem}.latency{p.suffix}") if p.suffix else p.with_name(f"{p.name}.latency")


@functools.lru_cache(maxsize=1)
def _environment() -> tuple[str, dict[str, Any]]:
    """Library versions (as JSON) and host: looked up once per process (it takes milliseconds)."""
    from importlib.metadata import PackageNotFoundError, version

    def v(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    versions = {"wirepipe": v("wirepipe"), **{lib: v(lib) for lib in _LIBRARIES}}
    host = {"hostname": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "implementation": platform.python_implementation(), "platform": platform.platform()}
    return json.dumps(versions), host


def run_metadata(pipeline: str, config: dict[str, Any] | None, run_id: str) -> dict[str, str]:
    """What a reader of a results file needs to trust and reproduce it; a worker's names its group, so a report
    merges a pool's runs into one pipeline."""
    from ..core.allocator import policy
    from ..core.redact import redact_tree
    from ..core.workers import POOL_ENV, WORKER_ENV, WORKERS_ENV

    versions, host = _environment()
    pool = {}
    if os.environ.get(POOL_ENV):
        pool = {"wirepipe.worker": json.dumps({"pool": os.environ[POOL_ENV], "index": int(os.environ[WORKER_ENV]),
                                               "workers": int(os.environ[WORKERS_ENV])})}
    return {**pool,
        "wirepipe.run_id": run_id,
        METRICS_VERSION_KEY: str(METRICS_VERSION),  # what the columns mean (metrics/columns.py); report reads each
        "wirepipe.pipeline": pipeline,
        "wirepipe.config": json.dumps(redact_tree(config or {}), default=str),
        "wirepipe.versions": versions,
        # the allocator policy is read per run, not cached: it changes what large payloads cost and is applied
        # when the process builds its first pipeline, which may come after the first run's metadata (Beam)
        "wirepipe.host": json.dumps({**host, "allocator": policy()}),
        "wirepipe.started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        # One reading of both clocks: unix_ns = start_ns - monotonic_ns + unix_ns.
        "wirepipe.clock": json.dumps({"unix_ns": time.time_ns(), "monotonic_ns": time.monotonic_ns()}),
    }
