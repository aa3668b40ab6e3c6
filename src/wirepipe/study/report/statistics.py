"""The statistics of a report: a time's distribution over records, the median's interval, empirical CDFs.

Time per record of a stage comes from per-batch rows: each batch row gives one value,
``(end_ns - start_ns) / records entering the stage``, which stands for every record of
that batch. Mean and standard deviation weigh each batch by its records (the mean is
exactly total stage time / records); percentiles are taken over the records, each
record carrying its batch's value, with the "inverted CDF" rule (the smallest value
that at least q of the records do not exceed, DuckDB's ``quantile_disc``). So they
describe how batches vary, not how records inside one batch vary: a per-batch stamp
cannot see that. Latency percentiles are exact: latency rows are per record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

QUANTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999))


@dataclass(frozen=True)
class TimeStats:
    """Distribution of a time (ns) over ``count`` records."""

    count: int
    mean: float
    std: float
    min: float
    p50: float
    p90: float
    p99: float
    p999: float
    max: float

    def get(self, name: str) -> float:
        return getattr(self, name.replace("p99.9", "p999"))


def time_stats(values: Any, weights: Any = None) -> TimeStats | None:
    """Weighted mean, population std, min, max and inverted-CDF percentiles (None when empty)."""
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    w = np.ones(len(v), dtype=np.int64) if weights is None else np.asarray(weights, dtype=np.int64)
    keep = (w > 0) & np.isfinite(v)
    v, w = v[keep], w[keep]
    if not len(v):
        return None
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    cum = np.cumsum(w)
    total = int(cum[-1])
    mean = float(np.dot(v, w) / total)
    std = float(math.sqrt(max(float(np.dot(w, (v - mean) ** 2)) / total, 0.0)))

    def quantile(q: float) -> float:
        k = max(math.ceil(total * Fraction(str(q))), 1)  # exact: 0.9 * 10 is 9, not 9.000000000000002
        return float(v[int(np.searchsorted(cum, k, side="left"))])

    p50, p90, p99, p999 = (quantile(q) for _, q in QUANTILES)
    return TimeStats(total, mean, std, float(v[0]), p50, p90, p99, p999, float(v[-1]))


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(median, low, high): the order statistics that hold the median with ``confidence``, distribution-free.

    With n values the interval is [x(j), x(n-j+1)] for the largest j whose binomial tail
    P(B(n, 1/2) < j) <= (1 - confidence) / 2; with fewer than 6 values that is the whole range
    (the most a handful of iterations can say).
    """
    v = sorted(values)
    n = len(v)
    mid = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    tail, j, cumulative = (1 - confidence) / 2, 0, 0.0
    while j < n // 2:
        cumulative += math.comb(n, j) / 2 ** n
        if cumulative > tail:
            break
        j += 1
    j = max(j, 1)  # 1-based rank of the low end
    return mid, v[j - 1], v[n - j]


def overlaps(a: tuple[float, float] | None, b: tuple[float, float] | None) -> bool:
    return a is not None and b is not None and a[0] <= b[1] and b[0] <= a[1]


def cdf_points(values: Any, points: int = 2000) -> tuple[list[float], list[float]]:
    """At most ``points`` (value, fraction of values <= it) pairs of an empirical CDF, ends included."""
    import numpy as np

    v = np.sort(np.asarray(values, dtype=np.float64))
    n = len(v)
    idx = np.unique(np.linspace(0, n - 1, min(points, n)).round().astype(np.int64))
    return v[idx].tolist(), ((idx + 1) / n).tolist()
