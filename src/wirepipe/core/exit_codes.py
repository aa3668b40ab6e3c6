"""The exit codes of every ``wirepipe`` command, in one place so scripts can trust them.

| code | meaning |
|---|---|
| 0 | success |
| 1 | runtime failure: a server unreachable, a sink that failed, a bench that measured nothing; `test`: a case failed |
| 2 | usage or config error: a bad flag or field, a missing input file or capture, for every command (nothing was started) |
| 3 | records were rejected beyond ``--max-rejected`` (every record rejected is never a success) |
| 4 | ``wirepipe bench``: some combinations failed (the others are measured and written) |
| 5 | records lost (core NATS gaps, records discarded at a drain) beyond ``--max-lost`` |
| 6 | incomplete: a bounded run ended with records still awaiting acknowledgement or redelivery |
| 130 | interrupted (Ctrl-C / SIGINT); what finished is kept |

docs/reference/exit-codes.md is this table; ``exit_code`` maps wirepipe's errors onto it, so a
missing input file is 2 for ``run``, ``replay``, ``bench`` and ``report`` alike.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    RUNTIME = 1
    CONFIG = 2
    REJECTED = 3
    BENCH_FAILURES = 4
    LOST = 5  # records lost (core NATS gaps, a drain's discards) beyond --max-lost
    INCOMPLETE = 6  # a bounded run ended with records still awaiting acknowledgement or redelivery
    INTERRUPTED = 130


def exit_code(exc: BaseException) -> ExitCode:
    """The code a command exits with for an error: a usage error for a bad config or an input that is not
    there, a runtime failure for the rest of wirepipe's errors, 130 for an interruption.

    >>> from wirepipe.core.errors import MissingInput, WirepipeError
    >>> exit_code(MissingInput("events.jsonl: no such file")), exit_code(WirepipeError("sink failed"))
    (<ExitCode.CONFIG: 2>, <ExitCode.RUNTIME: 1>)
    """
    from .errors import ConfigError, MissingInput

    if isinstance(exc, (ConfigError, MissingInput)):
        return ExitCode.CONFIG
    if isinstance(exc, KeyboardInterrupt):
        return ExitCode.INTERRUPTED
    return ExitCode.RUNTIME


class RejectLimit:
    """``--max-rejected N|P%``: how many rejected records a run may have and still exit 0.

    Without a limit, rejections are reported (the summary line counts them) and only a run
    whose every record was rejected fails: a 100%-rejected run is never a success.
    """

    def __init__(self, count: int | None = None, percent: float | None = None) -> None:
        self.count = count
        self.percent = percent

    @classmethod
    def parse(cls, text: str | None) -> RejectLimit:
        """``None``, ``"10"`` or ``"0.5%"``; ``ValueError`` naming the option otherwise."""
        if text is None:
            return cls()
        value = text.strip()
        try:
            if value.endswith("%"):
                pct = float(value[:-1])
                if not 0 <= pct <= 100:
                    raise ValueError
                return cls(percent=pct)
            n = int(value)
            if n < 0:
                raise ValueError
            return cls(count=n)
        except ValueError:
            raise ValueError(f"--max-rejected {text!r}: give a count (10) or a percentage (0.5%) >= 0") from None

    def verdict(self, rejected: int, records: int) -> str | None:
        """Why the run fails (exit 3), or None when it passes."""
        if rejected <= 0:
            return None
        share = rejected / records * 100 if records else 100.0
        what = f"{rejected:,} of {records:,} records rejected ({share:.3g}%)"
        if records and rejected >= records:
            return f"{what}: every record was rejected"
        if self.count is not None and rejected > self.count:
            return f"{what}, more than --max-rejected {self.count}"
        if self.percent is not None and share > self.percent:
            return f"{what}, more than --max-rejected {self.percent:g}%"
        return None
