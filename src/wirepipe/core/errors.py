"""The errors wirepipe raises on purpose.

Each one carries enough context (stage, codec, field, value) for a message a user can
act on without a traceback; the CLI prints ``str(error)`` and exits non-zero.
"""

from __future__ import annotations

from typing import NamedTuple


class WirepipeError(Exception):
    """Base of every error wirepipe raises deliberately."""


class ConfigError(WirepipeError):
    """A pipeline definition is invalid: names the file, field path, bad value and what is allowed."""

    def __init__(self, message: str, *, file: str | None = None, path: str | None = None) -> None:
        from .redact import redact_secrets

        message = redact_secrets(message)  # a bad value may be a URL with credentials
        self.file = file
        self.path = path
        self.detail = message
        where = ": ".join(p for p in (file, path) if p)
        super().__init__(f"{where}: {message}" if where else message)


class MissingInput(WirepipeError):
    """An input a command was given is not there (a file, a folder, a pattern that matches nothing, a capture):
    a usage error, the same exit code for every command (``exit_codes.exit_code``)."""


class StageError(WirepipeError):
    """A record failed a stage (bad frame, bad encoding, schema mismatch).

    The pipeline catches it per record and routes the record to the dead-letter
    destination; it never stops the pipeline on its own.
    """

    def __init__(self, stage: str, operator: str, reason: str) -> None:
        self.stage = stage
        self.operator = operator
        self.reason = reason
        super().__init__(f"{stage} ({operator}): {reason}")


class RefusedError(StageError):
    """Input refused by policy: oversized payload, decompression bomb, pickle from the network."""


class SinkUnavailable(WirepipeError):
    """A sink cannot make data durable right now (disk full, I/O error, connection down).

    It says nothing about the records: the pipeline keeps them (unacknowledged), backs
    off and retries; they never count toward ``max_deliver`` and never go to the dead letter.
    """


class NotConnected(SinkUnavailable):
    """A part's connection is down (closed, or reconnecting past its buffer): the loop holds the
    records, keeps them alive upstream and retries with its bounded backoff until the client is back."""


class BackOff(SinkUnavailable):
    """A part asks to be retried no sooner than ``wait`` seconds (the server said when, e.g. a full
    stream or a rate limit): the loop waits that long instead of its own backoff."""

    def __init__(self, message: str, wait: float) -> None:
        self.wait = wait
        super().__init__(message)


def is_sink_failure(exc: BaseException) -> bool:
    """True when ``exc`` from a sink is about the sink (retry later), not about a record (dead-letter it).

    I/O and connection errors, timeouts and wirepipe's own runtime errors are the sink's;
    ``TypeError``/``ValueError``/``RecursionError`` (a value the sink cannot represent) and
    ``StageError`` are the record's.
    """
    if isinstance(exc, (StageError, ConfigError)):
        return False
    return isinstance(exc, (OSError, TimeoutError, WirepipeError))


class Refusal(NamedTuple):
    """Why a connector cannot be used as configured: the config field at fault and the message (the bad
    value, why, the fix). The pipelines layer raises it as a ``ConfigError`` at ``<part>.<field>``."""

    field: str
    message: str


class CannotShare(ConfigError):
    """Several workers cannot share a connector as configured (what its ``for_worker`` raises): ``refusal`` names
    the connector's own field; the pipelines layer raises it again at ``<part>.<field>`` (``sink.path``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message, path=field)
        self.refusal = Refusal(field, message)
