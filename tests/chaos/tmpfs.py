"""Real small or read-only file systems for the chaos tests: a tmpfs mount, which needs root.

Where it cannot mount (another user, a container without the right), the test is skipped with the reason, as
the README says; `.ci/run` runs as root and sets ``WIREPIPE_REQUIRE_SYSTEM_TOOLS=1``, with which it fails instead.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.system_tools import unavailable


@contextlib.contextmanager
def tmpfs(folder: Path, options: str) -> Iterator[Path]:
    """``folder`` (created) with a tmpfs mounted on it (``options``: e.g. ``size=2m`` or ``ro,size=1m``)."""
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True, text=True)
    if done.returncode != 0:
        why = done.stderr.strip().splitlines()[0] if done.stderr.strip() else f"mount exited {done.returncode}"
        unavailable(f"cannot mount a tmpfs (-o {options}): this test needs root, as the README says ({why})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def resize(folder: Path, size: str) -> None:
    """Grow (or shrink) a mounted tmpfs in place: the files stay."""
    done = subprocess.run(["mount", "-o", f"remount,size={size}", str(folder)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
