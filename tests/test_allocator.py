"""The allocator policy, seen from outside: what a process gives back to the kernel after freeing a batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# In a fresh process: build a pipeline (as any run does), then allocate and free 30 MB of 10 KB payloads
# (large enough to come from glibc's heap, not CPython's small-object arenas) and measure resident memory.
_CHILD = """
import json, os
from wirepipe.connectors.files import NullSink
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.testing import TestingSource
from wirepipe.allocator import keep_freed_memory

Pipeline(TestingSource([1]), [], NullSink())

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

before = rss()
batch = [bytes(10_000) for _ in range(3000)]
held = rss()
del batch
from wirepipe.operators.metrics import run_metadata
recorded = json.loads(run_metadata("p", None, "r")["wirepipe.host"])["allocator"]
print(json.dumps({"grew": held - before, "returned": held - rss(), "policy": keep_freed_memory(),
                  "recorded": recorded}))
"""

def _libc() -> str:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError, AttributeError):
        return ""


glibc = pytest.mark.skipif(not _libc().startswith("glibc"), reason="the policy is glibc's mallopt (elsewhere a no-op)")


def _child(**env: str) -> dict[str, object]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "WIREPIPE_MALLOC"}
    out = subprocess.run([sys.executable, "-c", _CHILD], env={**environ, **env}, check=True,
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
def test_glibc_default_gives_it_back_when_asked() -> None:
    result = _child(WIREPIPE_MALLOC="default")
    assert result["returned"] > 25_000_000, result
    assert result["policy"] == "glibc default (WIREPIPE_MALLOC=default)"


@glibc
def test_the_users_own_glibc_settings_win() -> None:
    result = _child(MALLOC_TRIM_THRESHOLD_="131072")
    assert result["returned"] > 25_000_000, result  # glibc's 128 KiB, as the user set it
    assert result["policy"] == "glibc as the environment set it (MALLOC_TRIM_THRESHOLD_)"
