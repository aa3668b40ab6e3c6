"""``map`` functions for overload tests: a fixed CPU cost per record that holds the GIL, as real operators do.

The cost in microseconds comes from ``WIREPIPE_TEST_SPIN_US`` (read once at import), so one
function serves every scenario and the worker's YAML names it as ``tests.chaos.busy:spin``.
"""

from __future__ import annotations

import os
import time
from typing import Any

_SPIN_NS = int(float(os.environ.get("WIREPIPE_TEST_SPIN_US", "2000")) * 1000)


def spin(value: Any) -> Any:
    """Busy-wait ``WIREPIPE_TEST_SPIN_US`` (no sleep: the GIL stays held, like decoding or maths)."""
    end = time.perf_counter_ns() + _SPIN_NS
    while time.perf_counter_ns() < end:
        pass
    return value
