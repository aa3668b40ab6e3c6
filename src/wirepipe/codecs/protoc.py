"""``.proto`` source files, compiled by protoc (the ``grpcio-tools`` wheel: ``pip install '.[proto]'``).

Why protoc and not a parser of our own: protoc *is* the language's definition (proto2, proto3,
editions, imports, options, scoping), it ships as a wheel, and its errors are the ones a protobuf
user already knows. wirepipe runs it once per file (``--include_imports --descriptor_set_out``),
then reads the ``FileDescriptorSet`` as it reads a ``.desc`` the user compiled: the official
runtime builds the class, so the bytes are the runtime's own. A ``.desc`` or a generated class
needs only the protobuf runtime, never protoc.

Naming, as protoc (``-I ROOT``) and buf name files: a file is named relative to the first
``include`` folder that holds it; else, when its folders spell its package
(``proto/shop/v1/order.proto`` declaring ``package shop.v1``), relative to the folder above them
(``shop/v1/order.proto``), so ``import "shop/v1/money.proto"`` works; else by its file name.
Imports are found in the ``include`` folders, then in that root folder; ``google/protobuf/*.proto``
come with protoc.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..core.limits import MAX_SCHEMA_FILE, check_regular_file, read_at_most
from ..core.registry import install_hint, library_installed
from ..schema import SchemaError

INSTALL_HINT = f"reading .proto files needs protoc: {install_hint('proto')} (or give a .desc protoc wrote)"
_PACKAGE = re.compile(r"^\s*package\s+([\w.]+)\s*;", re.MULTILINE)
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def protoc_available() -> bool:
    """Whether protoc (``grpcio-tools``) is installed."""
    return library_installed("grpc_tools")


def _root_and_name(path: Path, include: list[Path]) -> tuple[Path, str]:
    """The ``-I`` folder and the name protoc gives ``path`` (see the module docstring)."""
    resolved = path.resolve()
    for folder in include:
        if resolved.is_relative_to(folder.resolve()):
            return folder, resolved.relative_to(folder.resolve()).as_posix()
    try:
        found = _PACKAGE.search(_COMMENTS.sub("", read_at_most(path, MAX_SCHEMA_FILE, "a .proto file").decode("utf-8")))
    except (OSError, UnicodeDecodeError) as exc:
        raise SchemaError("", f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    parts = found.group(1).split(".") if found else []
    if parts and resolved.parent.parts[-len(parts):] == tuple(parts):
        return resolved.parents[len(parts)], "/".join([*parts, path.name])
    return resolved.parent, path.name


def descriptor_set(path: str | Path, include: Iterable[str | Path] = ()) -> bytes:
    """The serialized ``FileDescriptorSet`` protoc writes for ``path`` and everything it imports."""
    p = Path(path)
    try:
        check_regular_file(p, MAX_SCHEMA_FILE, "a .proto file")  # protoc reads it whole
    except OSError as exc:
        raise SchemaError("", f"cannot read {path}: {exc}") from None
    folders = [Path(d) for d in include]
    root, name = _root_and_name(p, folders)
    return _compile(str(root), name, tuple(str(f) for f in folders), p.stat().st_mtime_ns, str(path))


@functools.lru_cache(maxsize=64)
def _compile(root: str, name: str, include: tuple[str, ...], _mtime_ns: int, shown: str) -> bytes:
    """protoc in a child process (its errors come on stderr, one per line, ``file:line:column: why``)."""
    if not protoc_available():
        raise SchemaError("", f"{shown}: {INSTALL_HINT}")
    with tempfile.TemporaryDirectory(prefix="wirepipe-protoc-") as tmp:
        out = Path(tmp) / "set.desc"
        argv = [sys.executable, "-m", "grpc_tools.protoc", *(f"-I{d}" for d in include), f"-I{root}",
                "--include_imports", f"--descriptor_set_out={out}", name]
        done = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            why = "; ".join(_real_path(line, root, shown, name) for line in lines[:3]) or f"protoc exit {done.returncode}"
            raise SchemaError("", why)
        return out.read_bytes()


def _real_path(line: str, root: str, shown: str, name: str) -> str:
    """protoc names the file as given (relative to its root): show the path the user wrote."""
    if line.startswith(name + ":"):
        return shown + line[len(name):]
    if not line.startswith("/") and ":" in line:
        head, rest = line.split(":", 1)
        candidate = Path(root) / head
        if candidate.exists():
            return f"{candidate}:{rest}"
    return line


def load_message(path: str | Path, message: str | None = None, include: Iterable[str | Path] = ()) -> Any:
    """The runtime message class for ``message`` declared in the ``.proto`` file at ``path``."""
    from .protobuf import class_from_descriptor_set

    return class_from_descriptor_set(descriptor_set(path, include), message, str(path))
