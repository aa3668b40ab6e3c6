"""Importing Apache Beam quietly: its import-time logging is held and replayed at DEBUG.

Its own module so both the runner (``beam.py``) and the DoFn (``beam_fn.py``, imported
by Beam workers) can import Beam the same way without importing each other.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from ..core.errors import WirepipeError
from ..core.registry import install_hint

log = logging.getLogger("wirepipe.replay.beam")


class _Held(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def quiet_import() -> Iterator[None]:
    """Hold what the root logger receives while a library is imported, and replay it at DEBUG.

    ``apache_beam`` logs "apitools not found" with ``logging.warning`` at import; on a root
    logger without handlers that also installs a stderr handler for the whole process.
    With a handler of ours in place nothing is installed and nothing leaks.
    """
    root = logging.getLogger()
    saved = root.handlers[:]
    held = _Held()
    root.handlers = [held]
    try:
        yield
    finally:
        root.handlers = saved
        for record in held.records:
            log.debug("at import: %s: %s", record.name, record.getMessage())



def import_beam() -> Any:
    """``apache_beam``, imported quietly; a clear error when the extra is not installed."""
    import sys

    if "apache_beam" in sys.modules:
        return sys.modules["apache_beam"]
    try:
        with quiet_import():
            import apache_beam
            import apache_beam.io.parquetio
    except ImportError as exc:
        raise WirepipeError(f"the Beam runner needs Apache Beam: {install_hint('beam')} ({exc})") from None
    # Beam reports its progress at INFO; wirepipe's output keeps its warnings and errors only.
    if not log.isEnabledFor(logging.DEBUG):
        logging.getLogger("apache_beam").setLevel(logging.WARNING)
        # It relays what worker processes log, start-up warnings included; their errors still show.
        logging.getLogger("apache_beam.runners.portability.local_job_service").setLevel(logging.ERROR)
    return apache_beam
