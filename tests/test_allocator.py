"""The allocator policy, seen from outside: what a process gives back to the kernel after freeing a batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli import wirepipe

# In a fresh process: opt in (as wirepipe's own commands and workers do) and run a pipeline, then allocate
# and free 30 MB of 10 KB payloads (large enough to come from glibc's heap, not CPython's small-object
# arenas) and measure resident memory; then run it. OPT_IN False: a program that only builds and runs one.
_CHILD = """
import json, os
from wirepipe.connectors.null import NullSink
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.testing import TestingSource
from wirepipe.core.allocator import arena_reserve, keep_freed_memory, policy

if OPT_IN:
    keep_freed_memory()
pipeline = Pipeline(TestingSource([1]), [], NullSink())

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

before = rss()
batch = [bytes(10_000) for _ in range(3000)]
held = rss()
del batch
returned = held - rss()  # read before anything else allocates: an import's objects on the heap's top keep it
from wirepipe.metrics.run_metadata import run_metadata
recorded = json.loads(run_metadata("p", None, "r")["wirepipe.host"])["allocator"]
pipeline.run()  # after the measurement: what a run leaves on the heap's top would keep glibc from trimming
print(json.dumps({"grew": held - before, "returned": returned, "policy": policy(),
                  "recorded": recorded, "reserve": arena_reserve() is not None}))
"""

# What glibc's own trim gives back of the ~30 MB is 20 or 29 MB, by where the heap's top lies when the batch
# is freed (the size of the environment alone moves it); wirepipe's policy keeps all of it (under 5 MB given back).
_GIVEN_BACK = 15_000_000


def _libc() -> str:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError, AttributeError):
        return ""


glibc = pytest.mark.skipif(not _libc().startswith("glibc"), reason="the policy is glibc's mallopt (elsewhere a no-op)")


def _child(code: str = _CHILD.replace("OPT_IN", "True"), **env: str) -> dict[str, Any]:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith("MALLOC_") and k not in ("WIREPIPE_MALLOC", "PYTHONMALLOC")}
    out = subprocess.run([sys.executable, "-c", code], env={**environ, **env}, check=True,
                         capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)


@glibc
def test_a_process_running_a_pipeline_keeps_what_a_batch_freed() -> None:
    result = _child()
    assert result["grew"] > 25_000_000
    assert result["returned"] < 5_000_000, result  # kept for the next batch, not faulted in again
    assert "64 MiB" in str(result["policy"])
    assert result["recorded"] == result["policy"]  # results files say what they were measured with


@glibc
def test_a_program_that_builds_and_runs_a_pipeline_keeps_its_allocator_settings() -> None:
    """A service or a Faust app that runs a pipeline did not ask for wirepipe's policy: nothing changes."""
    result = _child(_CHILD.replace("OPT_IN", "False"))
    assert result["returned"] > _GIVEN_BACK, result  # glibc's own trim, as before the pipeline
    assert result["policy"] == result["recorded"] == "the C library's default (not applied in this process)"
    assert result["reserve"] is False


@glibc
def test_wirepipe_run_applies_it_and_its_metrics_say_so(tmp_path: Path) -> None:
    config = tmp_path / "p.yaml"
    config.write_text(f"name: p\nsource: {{type: generate, dataset: point, count: 10}}\nsink: {{type: 'null'}}\n"
                      f"metrics: {{path: '{tmp_path / 'm.parquet'}'}}\n")
    unset = {k: None for k in os.environ if k.startswith("MALLOC_") or k == "WIREPIPE_MALLOC"}
    done = wirepipe("run", config, env=unset, timeout=60)
    assert done.returncode == 0, done.stderr
    import pyarrow.parquet as pq

    files = sorted(p for p in (tmp_path / "m.parquet").rglob("*.parquet")) or [tmp_path / "m.parquet"]
    host = json.loads(pq.read_schema(files[0]).metadata[b"wirepipe.host"])
    assert "64 MiB" in host["allocator"], host


@glibc
def test_glibc_default_gives_it_back_when_asked() -> None:
    result = _child(WIREPIPE_MALLOC="default")
    assert result["returned"] > _GIVEN_BACK, result
    assert result["policy"] == "glibc default (WIREPIPE_MALLOC=default)"


@glibc
def test_the_users_own_glibc_settings_win() -> None:
    result = _child(MALLOC_TRIM_THRESHOLD_="131072")
    assert result["returned"] > _GIVEN_BACK, result  # glibc's 128 KiB, as the user set it
    assert result["policy"].startswith("glibc as the environment set it (MALLOC_TRIM_THRESHOLD_)")


# CPython's arenas: eight "batches" of ~12 MB of small strings (pymalloc's, under 512 bytes each), each
# freed before the next, as a pipeline frees the records it decoded; or kept, as a buffer that grows.
_BATCHES = """
import json, resource, time
from wirepipe.core.allocator import arena_reserve, between_batches, keep_freed_memory
from wirepipe.connectors.null import NullSink
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.testing import TestingSource

keep_freed_memory()
keep = KEEP
faults, held = [], []
for i in range(8):
    time.sleep(0.006)  # past between_batches' reading interval
    between_batches()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    batch = [("x" * 100) + str(i * 100_000 + j) for j in range(80_000)]
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    if keep:
        held.append(batch)
    del batch
reserve = arena_reserve()
print(json.dumps({"faults": faults, "reserved": reserve.reserved if reserve else None,
                  "policy": keep_freed_memory()}))
"""


def test_arenas_a_batch_gave_back_are_kept_for_the_next() -> None:
    result = _child(_BATCHES.replace("KEEP", "False"))
    first = result["faults"][0]
    assert first > 2000, result  # ~12 MB of fresh arenas: ~3,000 pages
    assert max(result["faults"][-4:]) < first // 10, result  # the next batches find them mapped
    assert 8 << 20 <= result["reserved"] <= 64 << 20, result
    assert "pymalloc arenas kept up to 64 MiB" in result["policy"]


def test_without_the_reserve_every_batch_maps_its_arenas_again() -> None:
    result = _child(_BATCHES.replace("KEEP", "False"), WIREPIPE_MALLOC="glibc")
    first = result["faults"][0]
    assert min(result["faults"][-4:]) > first // 2, result
    assert result["reserved"] is None
    assert result["policy"].endswith("(WIREPIPE_MALLOC=glibc)")


def test_memory_a_batch_keeps_grows_no_reserve() -> None:
    result = _child(_BATCHES.replace("KEEP", "True"))
    assert min(result["faults"]) > 2000, result  # every batch is new memory, kept
    assert result["reserved"] == 0, result


def test_pythons_own_allocator_choice_keeps_no_reserve() -> None:
    result = _child(_BATCHES.replace("KEEP", "False"), PYTHONMALLOC="malloc")
    assert result["reserved"] is None
    assert "pymalloc" not in result["policy"]


_OTHER_CHURN = """
import json, mmap, time
from wirepipe.core.allocator import arena_reserve, between_batches, keep_freed_memory
from wirepipe.connectors.null import NullSink
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.testing import TestingSource

keep_freed_memory()
for i in range(8):
    time.sleep(0.006)
    between_batches()
    m = mmap.mmap(-1, 6 << 20)  # memory of another allocator (as pyarrow's): faulted in, then unmapped
    m.write(b"x" * (6 << 20))
    m.close()
reserve = arena_reserve()
print(json.dumps({"reserved": reserve.reserved, "stopped": reserve.stopped}))
"""


def test_churn_the_reserve_cannot_take_away_stops_its_growth() -> None:
    result = _child(_OTHER_CHURN)
    assert result["stopped"] is True, result
    assert result["reserved"] <= 8 << 20, result  # one growth of ~6 MiB, not the 64 MiB cap
