"""Files a config names (a schema, a ``.proto``, a zstd dictionary, a registry folder's entry) read within a
bound: ``/dev/zero`` or a 10 GB file by mistake is refused after the bound, never read to the end.

``FileTooLarge`` is an ``OSError``, so a reader that says "cannot read FILE: why" says this too.

>>> import tempfile, os
>>> with tempfile.NamedTemporaryFile(delete=False) as f:
...     _ = f.write(b"12345")
>>> read_at_most(f.name, 5, "a schema file")
b'12345'
>>> read_at_most(f.name, 4, "a schema file")
Traceback (most recent call last):
...
wirepipe.core.limits.FileTooLarge: larger than 4 bytes, the most a schema file may be
>>> os.unlink(f.name)
"""

from __future__ import annotations

import os
from pathlib import Path

MAX_SCHEMA_FILE = 16 * 1024 * 1024  # a schema (.yaml, .json, .avsc, .proto, a descriptor set): far past any real one


class FileTooLarge(OSError):
    """A file past the bound its reader sets."""


def size_text(limit: int) -> str:
    """``64 MiB``, or ``100 bytes`` for a bound that is no whole number of MiB."""
    return f"{limit >> 20} MiB" if limit >= 1 << 20 and not limit % (1 << 20) else f"{limit} bytes"


def read_at_most(path: str | os.PathLike[str], limit: int, what: str) -> bytes:
    """The bytes of ``path``, at most ``limit`` of them read; ``FileTooLarge`` past it, ``OSError`` when it cannot
    be read (``what`` names the kind of file in the message: ``a schema file``)."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge(f"larger than {size_text(limit)}, the most {what} may be")
    return data


def check_regular_file(path: str | os.PathLike[str], limit: int, what: str) -> None:
    """``path`` is a regular file of at most ``limit`` bytes (what another program, protoc, will read whole);
    ``OSError`` otherwise."""
    p = Path(path)
    if not p.is_file():  # a device (/dev/zero), a fifo: no size to check, endless to read
        raise (FileNotFoundError(2, "No such file") if not p.exists()
               else FileTooLarge(f"not a regular file (a device or a pipe has no end to read): {what} must be one"))
    if p.stat().st_size > limit:
        raise FileTooLarge(f"larger than {size_text(limit)}, the most {what} may be")
