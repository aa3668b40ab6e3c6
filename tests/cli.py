"""Driving the ``wirepipe`` command line in tests: one module, three forms.

- ``wirepipe(*args, ...)``: the CLI in a subprocess, run to its end; a ``CompletedProcess`` whose stdout and
  stderr are text. What a user runs: its own process, its exit code, signals, the allocator policy.
- ``start_wirepipe(*args, ...)``: the same in the background; a ``Popen`` (a worker to signal or kill, a
  server to stop), stdout and stderr piped unless given.
- ``invoke(*args, ...)``: in this process, through typer's ``CliRunner``; an ``Invoked``, the same
  ``returncode``, ``stdout`` and ``stderr`` plus ``output`` (both streams as a user sees them) and
  ``exception``. No interpreter to start and nothing to import again: for commands that need no terminal,
  no signal and no process of their own.

Each runs in the test's environment less ``NATS_URL`` (a test names the server it started), with the
repository on ``PYTHONPATH`` (configs name functions in ``tests/``), then ``env`` over it (``None`` removes a
variable). ``columns`` is the terminal width rich lays tables out for (``COLUMNS``); None: rich's default, 80.
A subprocess reads no input unless ``input`` is given.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
WIREPIPE = [sys.executable, "-m", "wirepipe.cli"]

Env = Mapping[str, "str | None"]


def cli_env(env: Env | None = None, *, columns: int | None = None) -> dict[str, str]:
    """The environment of a ``wirepipe`` subprocess (see the module docstring)."""
    full = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "COLUMNS")}
    full["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    if columns is not None:
        full["COLUMNS"] = str(columns)
    for key, value in (env or {}).items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    return full


def wirepipe(*args: str | Path, env: Env | None = None, cwd: str | Path | None = None, timeout: float = 120,
             columns: int | None = None, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """``wirepipe ARGS`` in a subprocess, to its end (``timeout`` seconds at most)."""
    return subprocess.run([*WIREPIPE, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=cli_env(env, columns=columns), cwd=cwd, input=input,
                          stdin=subprocess.DEVNULL if input is None else None)


def start_wirepipe(*args: str | Path, env: Env | None = None, cwd: str | Path | None = None,
                   columns: int | None = None, stdin: int | IO[Any] | None = subprocess.DEVNULL,
                   stdout: int | IO[Any] | None = subprocess.PIPE, stderr: int | IO[Any] | None = subprocess.PIPE,
                   **popen: Any) -> subprocess.Popen[str]:
    """``wirepipe ARGS`` in the background (text streams: a pty's file descriptor for a terminal); ``popen`` goes
    to ``subprocess.Popen`` (``start_new_session``...)."""
    return subprocess.Popen([*WIREPIPE, *map(str, args)], stdin=stdin, stdout=stdout, stderr=stderr, text=True,
                            env=cli_env(env, columns=columns), cwd=cwd, **popen)


class Invoked(subprocess.CompletedProcess[str]):
    """What ``invoke`` returns: what ``wirepipe`` returns, plus ``output`` (stdout and stderr interleaved) and
    ``exception`` (what the command raised, ``SystemExit`` included; None when it returned)."""

    def __init__(self, args: list[str], returncode: int, stdout: str, stderr: str, output: str,
                 exception: BaseException | None) -> None:
        super().__init__(args, returncode, stdout, stderr)
        self.output = output
        self.exception = exception


def invoke(*args: str | Path, env: Env | None = None, columns: int | None = None) -> Invoked:
    """``wirepipe ARGS`` in this process (typer's ``CliRunner``)."""
    from typer.testing import CliRunner

    from wirepipe.cli import app

    overrides: dict[str, str | None] = {"NATS_URL": None, "COLUMNS": None if columns is None else str(columns)}
    overrides.update(env or {})
    argv = [str(a) for a in args]
    result = CliRunner().invoke(app, argv, env=overrides)
    return Invoked(argv, result.exit_code, result.stdout, result.stderr, result.output, result.exception)
