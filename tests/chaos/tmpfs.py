"""Real small or read-only file systems for the chaos tests: a tmpfs mount (CI runs as root).

A test that cannot mount fails with the reason: it never skips.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def tmpfs(folder: Path, options: str) -> Iterator[Path]:
    """``folder`` (created) with a tmpfs mounted on it (``options``: e.g. ``size=2m`` or ``ro,size=1m``)."""
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True, text=True)
    assert done.returncode == 0, f"cannot mount a tmpfs on {folder} (these tests need root): {done.stderr}"
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def resize(folder: Path, size: str) -> None:
    """Grow (or shrink) a mounted tmpfs in place: the files stay."""
    done = subprocess.run(["mount", "-o", f"remount,size={size}", str(folder)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
