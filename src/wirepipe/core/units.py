"""Human units in config and on the command line: durations (``30s``) and sizes (``64MiB``), and a duration
written for a reader (``format_duration``); and the time a set of spans covers (a pool's workers, a flow's two
sides, working at once)."""

from __future__ import annotations

import re
from collections.abc import Iterable

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s|m|h|d)?\s*$")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]i?[bB]?|[bB])?\s*$")
_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4,
               "ki": 1024, "mi": 1024**2, "gi": 1024**3, "ti": 1024**4}


def parse_duration(value: str | float | int) -> float:
    """Seconds from ``1.5``, ``"30s"``, ``"500ms"``, ``"5m"``, ``"2h"`` (a bare number is seconds).

    >>> parse_duration("500ms"), parse_duration("5m"), parse_duration(2)
    (0.5, 300.0, 2.0)
    >>> parse_duration("5 minutes")
    Traceback (most recent call last):
    ...
    ValueError: '5 minutes' is not a duration: use a number of seconds or e.g. 30s, 500ms, 5m, 2h
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration: use a number of seconds or e.g. 30s, 500ms, 5m, 2h")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"{value!r} is negative: a duration must be >= 0")
        return float(value)
    m = _DURATION.match(str(value))
    if not m:
        raise ValueError(f"{value!r} is not a duration: use a number of seconds or e.g. 30s, 500ms, 5m, 2h")
    return float(m.group(1)) * _DURATION_UNITS[m.group(2) or "s"]


def format_duration(seconds: float) -> str:
    """A duration for a reader, with the digits it deserves: what ``wirepipe bench`` estimates, ``wirepipe plan``'s
    retention.

    >>> [format_duration(s) for s in (4.5, 45, 720, 12_240, 86_400, 604_800, 181_440)]
    ['4.5s', '45s', '12 min', '3.4 h', '24 h', '7 days', '2.1 days']
    """
    for unit, size, above in (("days", 86400, 2 * 86400), ("h", 3600, 5400), ("min", 60, 90)):
        if seconds >= above:
            return f"{_digits(seconds / size)} {unit}"
    return f"{_digits(seconds) if seconds < 10 else f'{seconds:.0f}'}s"


def _digits(x: float) -> str:
    """One decimal under 10 (none when it is 0), none above: ``4.5``, ``7``, ``24``."""
    return f"{x:.1f}".removesuffix(".0") if x < 10 else f"{x:.0f}"


def parse_size(value: str | int) -> int:
    """Bytes from ``1048576``, ``"64MiB"``, ``"1MB"``, ``"512k"`` (k/M/G are 1000s, Ki/Mi/Gi 1024s).

    >>> parse_size("64MiB"), parse_size("1MB"), parse_size("512k"), parse_size(4096)
    (67108864, 1000000, 512000, 4096)
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a size: use bytes or e.g. 64MiB, 1MB, 512KiB")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value!r} is negative: a size must be >= 0")
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError(f"{value!r} is not a size: use bytes or e.g. 64MiB, 1MB, 512KiB")
    unit = (m.group(2) or "").lower().rstrip("b")
    return int(float(m.group(1)) * _SIZE_UNITS[unit])


_BANDWIDTH = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?i?)(bit/s|bit|bps|b/s|B/s|Bps|B)?\s*$")
_PREFIX = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "ki": 1024, "mi": 1024**2, "gi": 1024**3, "ti": 1024**4}


def parse_bandwidth(value: str | float | int) -> float:
    """Bits per second from ``100Mbit``, ``1Gbps``, ``12.5MB/s`` (bytes), ``1e8`` (a bare number is bit/s).

    >>> parse_bandwidth("100Mbit"), parse_bandwidth("12.5MB/s"), parse_bandwidth("1Gbps")
    (100000000.0, 100000000.0, 1000000000.0)
    """
    m = _positive(value, _BANDWIDTH, "bandwidth", "100Mbit, 1Gbit, 10Mbps or 12.5MB/s")
    if isinstance(m, float):
        return m
    unit = m.group(3) or "bit"
    bits = 8 if unit in ("B/s", "Bps", "B") else 1
    return float(m.group(1)) * _PREFIX[m.group(2).lower()] * bits


_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)\s*(?:/s|/sec|rps|msg/s|records/s)?\s*$")


def parse_rate(value: str | float | int) -> float:
    """Records per second from ``2M/s``, ``500k``, ``120000`` (k, M, G are 1000s).

    >>> parse_rate("2M/s"), parse_rate("500k"), parse_rate(120000)
    (2000000.0, 500000.0, 120000.0)
    """
    m = _positive(value, _RATE, "rate", "2M/s, 500k/s or 120000")
    return m if isinstance(m, float) else float(m.group(1)) * _PREFIX[m.group(2).lower()]


def _positive(value: str | float | int, pattern: re.Pattern[str], what: str, examples: str) -> float | re.Match[str]:
    """A bare positive number as a float, or the match of a positive ``pattern`` (group 1 the number)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value <= 0:
            raise ValueError(f"{value!r}: a {what} must be > 0")
        return float(value)
    m = pattern.match(str(value))
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"{value!r} is not a {what}: use e.g. {examples}")
    return m


def covered(spans: Iterable[tuple[float, float]]) -> float:
    """The length covered by at least one of the ``(start, end)`` spans: overlaps count once, gaps not at all.

    >>> covered([(0, 2), (1, 3), (5, 6)])
    4
    """
    total: float = 0
    reach: float | None = None
    for lo, hi in sorted(spans):
        lo = lo if reach is None else max(lo, reach)
        total += max(hi - lo, 0)
        reach = hi if reach is None else max(reach, hi)
    return total
