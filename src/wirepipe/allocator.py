"""The C allocator's policy for a process that runs pipelines: keep what a batch frees for the next one.

Why: glibc hands the top of its heap back to the kernel as soon as 128 KiB of it is free
(``M_TRIM_THRESHOLD``). A pipeline frees one batch and then allocates the next of about
the same size, so every batch's payloads land on pages the kernel has to map and zero
again: a page fault per 4 KiB, ~1-2 µs each on a VM. Encoding 10 KB ``block`` records on
their own, those faults were most of the cost: msgspec 5.9 µs a record against 0.9 with
the policy, msgpack 7.3 against 2.1; whole ``block`` pipelines run 1.06-1.17x
(``benchmarks/bench_allocator.py``). Small payloads (under 512 bytes, CPython's own
allocator) are not affected.

``keep_freed_memory`` raises the trim threshold to ``TRIM_THRESHOLD`` and fixes the mmap
threshold at ``MMAP_THRESHOLD`` (setting either stops glibc's own adjustment of the mmap
threshold, which otherwise grows to the largest block freed, up to 32 MiB: fixing it at
that maximum keeps what the adjustment gave large payloads). The cost is memory: up to
``TRIM_THRESHOLD`` that the process keeps mapped after it freed it, reused by the next
batch and never returned while the process lives.

It is applied once per process, when the first ``Pipeline`` is built (the run loop, the
Beam DoFn and the measuring harnesses all build one), and left alone where the user chose: ``WIREPIPE_MALLOC=default`` skips it, and so does any
``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_`` or ``MALLOC_MMAP_THRESHOLD_`` in the
environment (glibc read those at start). Off glibc (musl, macOS) it does nothing.
"""

from __future__ import annotations

import functools
import os

TRIM_THRESHOLD = 64 << 20
MMAP_THRESHOLD = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # malloc.h
_GLIBC_ENV = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_THRESHOLD_")


@functools.cache
def keep_freed_memory() -> str:
    """Apply the policy (once per process); returns what was done (``policy()`` after)."""
    if os.environ.get("WIREPIPE_MALLOC", "").lower() == "default":
        return "glibc default (WIREPIPE_MALLOC=default)"
    chosen = [name for name in _GLIBC_ENV if name in os.environ]
    if chosen:
        return f"glibc as the environment set it ({', '.join(chosen)})"
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError, AttributeError):  # not a GNU system
        libc = ""
    if not libc.startswith("glibc"):
        return "the platform's default (not glibc)"
    import ctypes

    mallopt = ctypes.CDLL(None).mallopt  # the process's own libc: no library search
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    if not (mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) and mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)):
        return "glibc default (mallopt refused)"
    return f"glibc keeping up to {TRIM_THRESHOLD >> 20} MiB freed (trim threshold), mmap from {MMAP_THRESHOLD >> 20} MiB"


def policy() -> str:
    """What this process runs with, without applying anything (the metrics' run metadata records it)."""
    if keep_freed_memory.cache_info().currsize:
        return keep_freed_memory()
    return "the C library's default (no pipeline built in this process)"
