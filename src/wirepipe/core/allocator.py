"""The allocators' policy for a process that runs pipelines: keep what a batch frees for the next one.

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

It changes the whole process, so it is applied only where wirepipe owns the process: the
``wirepipe`` commands that run pipelines (``run``, ``replay``, ``capture``, ``bench``) and the
worker processes they start. Building or running a ``Pipeline`` inside another program (a
service, a Faust app) changes nothing; that program opts in with one call,
``wirepipe.core.allocator.keep_freed_memory()``. A Beam worker belongs to its runner: the replay DoFn
applies it there only when asked (``WIREPIPE_MALLOC=keep`` or ``glibc`` in the workers' environment).
It is left alone where the user chose: ``WIREPIPE_MALLOC=default`` skips it (and the arenas below), and so does any
``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_`` or ``MALLOC_MMAP_THRESHOLD_`` in the
environment (glibc read those at start). Off glibc (musl, macOS) it does nothing.

CPython's own allocator (pymalloc: objects up to 512 bytes, so most of what decoding makes:
strings, small lists, dicts) has the same habit one level up. It carves objects out of 1 MiB
arenas it maps itself and unmaps an arena as soon as its last object is freed. A batch of
large records decodes into megabytes of small objects, all freed before the next batch makes
as many again: measured on 1,000 ``block`` records a batch (~12 MB decoded), 2.8 page faults a
record in a bare decode loop, 0.6 in a pipeline's run, and the bare decode took 24.5 µs a
record against 9.7 once the arenas stayed. ``ArenaReserve`` keeps them: after a batch whose
pages were faulted in and given back (faults counted by ``getrusage``, resident memory read
from ``/proc/self/statm``: what a batch keeps is not given back, and is left alone), it maps
that much more in arenas and pins each with one small object, so pymalloc never empties them
and the next batch finds them mapped. A growth that does not take the churn away (as much of
it comes back: another allocator's, such as pyarrow's at each metrics flush) ends the growing
for good; it stops anyway at ``ARENA_RESERVE`` (64 MiB), kept
resident for the life of the process (``WIREPIPE_MALLOC=glibc`` keeps none; nor does a
``PYTHONMALLOC`` other than pymalloc). The run loop and the Beam DoFn call ``between_batches``
before each batch; it reads the counters at most every 5 ms (~3 µs a reading). Whole
``block`` decode pipelines ran ~1.1x with the arenas kept (``benchmarks/bench_allocator.py``).
"""

from __future__ import annotations

import functools
import os
import time

TRIM_THRESHOLD = 64 << 20
MMAP_THRESHOLD = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # malloc.h
_GLIBC_ENV = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_THRESHOLD_")


@functools.cache
def keep_freed_memory() -> str:
    """Apply the policy (once per process); returns what was done (``policy()`` after).

    ``WIREPIPE_MALLOC=default`` leaves both allocators alone, ``WIREPIPE_MALLOC=glibc`` applies the
    glibc part only (CPython's arenas as CPython manages them); unset or ``keep``, both parts.
    """
    global _ARENAS
    choice = os.environ.get("WIREPIPE_MALLOC", "").lower()
    if choice == "default":
        return "glibc default (WIREPIPE_MALLOC=default)"
    glibc = _glibc_policy()
    if choice == "glibc":
        return f"{glibc}; CPython's arenas as it manages them (WIREPIPE_MALLOC=glibc)"
    _ARENAS = ArenaReserve.for_this_process()
    if _ARENAS is None:
        return glibc
    return f"{glibc}; pymalloc arenas kept up to {ARENA_RESERVE >> 20} MiB"


def _glibc_policy() -> str:
    """glibc's thresholds, unless the environment set them or the C library is another."""
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
    return "the C library's default (not applied in this process)"


# --- CPython's small-object arenas ----------------------------------------------------------------

ARENA_RESERVE = 64 << 20
_PIN = 1 << 18  # one pinned object per 256 KiB: at least one in every arena (1 MiB; 256 KiB on some builds)
_BLOCK = 400  # bytes(400) is a 433-byte object: pymalloc's 448-byte size class, under its 512-byte limit
_SIZE_CLASS = 448
_GROW_FROM = 1 << 20  # faulted in and given back between two readings, before the reserve grows
_READ_EVERY_NS = 5_000_000  # a reading is ~3 µs: at most 0.06% of a busy loop


class ArenaReserve:
    """pymalloc arenas kept mapped across batches, grown to what batches fault in and give back."""

    def __init__(self, limit: int = ARENA_RESERVE) -> None:
        import resource

        self.limit = limit
        self.reserved = 0
        self._pinned: list[bytes] = []
        self._rusage = resource.getrusage
        self._self = resource.RUSAGE_SELF
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._statm = os.open("/proc/self/statm", os.O_RDONLY)
        self._next_read = 0
        self._grew_for = 0  # the churn the last growth answered
        self.stopped = False  # a growth did not take the churn away: it is not CPython's arenas
        self._faults, self._resident = self._read()
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        """A forked worker: its own statm (the descriptor opened here reads the parent's), its own counts."""
        os.close(self._statm)
        self._statm = os.open("/proc/self/statm", os.O_RDONLY)
        self._faults, self._resident = self._read()

    @classmethod
    def for_this_process(cls) -> ArenaReserve | None:
        """A reserve where CPython allocates with pymalloc and the kernel counts resident pages (Linux)."""
        if os.environ.get("PYTHONMALLOC", "pymalloc") not in ("pymalloc", "pymalloc_debug", ""):
            return None
        try:
            return cls()
        except (OSError, ImportError):  # no /proc (macOS), no resource module (Windows)
            return None

    def _read(self) -> tuple[int, int]:
        """(page faults of the process so far, its resident pages now)."""
        return self._rusage(self._self).ru_minflt, int(os.pread(self._statm, 64, 0).split()[1])

    def between_batches(self) -> None:
        """Grow the reserve by what the process faulted in and gave back since the last reading."""
        now = time.monotonic_ns()
        if now < self._next_read:
            return
        self._next_read = now + _READ_EVERY_NS
        faults, resident = self._read()
        churned = (faults - self._faults - max(resident - self._resident, 0)) * self._page
        self._faults, self._resident = faults, resident
        if churned < _GROW_FROM or self.reserved >= self.limit or self.stopped:
            return
        if churned * 2 >= self._grew_for > 0:
            # As much churn as before the last growth: it is not CPython's arenas that churn (a library's
            # own allocator, pyarrow's at a metrics flush; mappings past glibc's threshold). Grow no more.
            self.stopped = True
            return
        self.grow(min(churned, self.limit - self.reserved))
        self._grew_for = churned
        self._faults, self._resident = self._read()  # the reserve's own pages are not a batch's

    def grow(self, nbytes: int) -> None:
        """Map about ``nbytes`` more of arenas and pin each (four 433-byte objects pinned per MiB)."""
        count = nbytes // _SIZE_CLASS
        objects = [bytes(_BLOCK) for _ in range(count)]
        self._pinned += {id(o) // _PIN: o for o in objects}.values()  # CPython: id() is the address
        del objects
        self.reserved += count * _SIZE_CLASS


_ARENAS: ArenaReserve | None = None


def between_batches() -> None:
    """The run loop's call before each batch: grows the arena reserve where the policy keeps one."""
    if _ARENAS is not None:
        _ARENAS.between_batches()


def asked_in_environment() -> bool:
    """Whether this process's environment asks for the policy (``WIREPIPE_MALLOC=keep`` or ``glibc``): how a
    process wirepipe does not own (a Beam worker) is told to apply it."""
    return os.environ.get("WIREPIPE_MALLOC", "").lower() in ("keep", "glibc")


def arena_reserve() -> ArenaReserve | None:
    """The process's ``ArenaReserve`` (``None`` where the policy keeps none): for tests and benchmarks."""
    return _ARENAS
