"""The exit codes of every ``wirepipe`` command, in one place so scripts can trust them.

| code | meaning |
|---|---|
| 0 | success |
| 1 | runtime failure: a server unreachable, a sink that failed, input read past damaged parts, a bench that measured nothing; `test`: a case failed; `schema diff`: the schemas differ |
| 2 | usage or config error: a bad flag or field, a missing input file or capture, for every command (nothing was started) |
| 3 | records were rejected beyond ``--max-rejected`` (every record rejected is never a success) |
| 4 | ``wirepipe bench``: some combinations failed (the others are measured and written) |
| 5 | records lost (core NATS gaps, slow-consumer drops, a lost tail, records discarded at a drain) beyond ``--max-lost`` (default 0) |
| 6 | incomplete: a bounded run ended with records still awaiting acknowledgement or redelivery (JetStream) |
| 130 | interrupted: a bounded run (a count, a duration, ``stop_at_end``, a file) stopped by SIGINT before its end, after a clean drain; what finished is kept |

docs/reference/exit-codes.md is this table. ``exit_code`` maps wirepipe's errors onto it, so a
missing input file is 2 for ``run``, ``replay``, ``bench`` and ``report`` alike; ``verdict`` maps what a
run did (an ``Outcome``) onto it, so ``run``, a pool, ``replay`` (local and Beam), ``capture`` and ``tap``
end alike. When several hold, the first of 1, 5, 6, 3, 130 wins. SIGTERM is the normal stop of a
long-lived worker: 0 after a clean drain (systemd and Kubernetes read anything else as a failure).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar, TypeVar

_L = TypeVar("_L", bound="Limit")  # ``parse`` returns the class it is called on (typing.Self is 3.11+)


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


class Limit:
    """``--max-rejected N|P%`` and ``--max-lost N|P%``: how many records a run may have so and still exit 0, as a
    count or as a percentage of the records it knew of. ``None`` (no option given) is the class's ``default``."""

    option: ClassVar[str] = "--max"
    default: ClassVar[int | None] = None  # the count a run may have without the option (None: no limit)

    def __init__(self, count: int | None = None, percent: float | None = None) -> None:
        self.count = count
        self.percent = percent

    @classmethod
    def parse(cls: type[_L], text: str | None) -> _L:
        """``None``, ``"10"`` or ``"0.5%"``; ``ValueError`` naming the option otherwise."""
        if text is None:
            return cls(count=cls.default)
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
            raise ValueError(f"{cls.option} {text!r}: give a count (10) or a percentage (0.5%) >= 0") from None

    @property
    def accepts_all(self) -> bool:
        return self.percent == 100

    def beyond(self, n: int, share: float) -> str | None:
        """``, more than --max-x 10`` when ``n`` records (``share`` percent) pass the limit, else None."""
        if self.count is not None and n > self.count:
            return f", more than {self.option} {self.count}"
        if self.percent is not None and share > self.percent:
            return f", more than {self.option} {self.percent:g}%"
        return None


class RejectLimit(Limit):
    """``--max-rejected N|P%``. Without it, rejections are reported (the summary counts them) and only a run
    whose every record was rejected fails: a 100%-rejected run is never a success."""

    option = "--max-rejected"

    def verdict(self, rejected: int, records: int) -> str | None:
        """Why the run fails (exit 3), or None when it passes."""
        if rejected <= 0:
            return None
        share = rejected / records * 100 if records else 100.0
        what = f"{rejected:,} of {records:,} records rejected ({share:.3g}%)"
        if records and rejected >= records:
            return f"{what}: every record was rejected"
        beyond = self.beyond(rejected, share)
        return what + beyond if beyond else None


class LossLimit(Limit):
    """``--max-lost N|P%``, default 0: any record known lost fails the run (exit 5). The percentage is of the
    records the source knew of (read + lost). A loss nobody can count fails too, unless the limit is ``100%``:
    core NATS publishers not heard from since a disconnect (``unsure``), and publishers a source stopped keeping
    count of before their final stamp (``forgotten``: past the 10,000 it keeps, their later gaps go uncounted)."""

    option = "--max-lost"
    default = 0

    def verdict(self, lost: int, records: int, unsure: int = 0, forgotten: int = 0) -> str | None:
        """Why the run fails (exit 5), or None when it passes."""
        seen = records + lost
        share = lost / seen * 100 if seen else 0.0
        if lost > 0:
            beyond = self.beyond(lost, share)
            if beyond:
                return f"{lost:,} of {seen:,} records lost ({share:.3g}%){beyond}"
        if (unsure or forgotten) and not self.accepts_all:
            why = []
            if unsure:
                why.append(f"{unsure:,} publisher(s) not heard from since a disconnect (what they published "
                           "meanwhile was never received)")
            if forgotten:
                why.append(f"{forgotten:,} publisher(s) forgotten before their final stamp (past the 10,000 a core "
                           "NATS source keeps count of: their later gaps were not counted)")
            return f"an unknown number of records lost: {'; '.join(why)}; {self.option} 100% accepts it"
        return None


@dataclass(frozen=True)
class Outcome:
    """What a run did, as far as its exit code is concerned (``RunStats.outcome``, a pool's totals, a replay's
    result)."""

    records: int = 0  # records read: the base of --max-rejected's percentage
    rejected: int = 0
    lost: int = 0  # records known lost (core NATS)
    unsure: int = 0  # publishers not heard from since a disconnect: an unknown number more lost
    forgotten: int = 0  # publishers forgotten before their final stamp (core NATS): their later losses uncounted
    outstanding: int = 0  # records still awaiting acknowledgement or redelivery when a bounded run ended
    interrupted: bool = False  # a bounded run stopped by SIGINT before its end
    drained: bool = True  # its drain finished (a second signal or shutdown_timeout cuts it)
    failures: Sequence[str] = ()  # runtime failures the run met and went past (input it could not read...)


def verdict(outcome: Outcome, rejected: RejectLimit | None = None, lost: LossLimit | None = None
            ) -> list[tuple[ExitCode, str]]:
    """Every reason ``outcome`` is not a success, first the one whose code the command exits with (1, 5, 6, 3,
    130 in that order); ``[]``: exit 0. The one function that picks a run's exit code.

    >>> verdict(Outcome(records=100, rejected=100, lost=3))
    [(<ExitCode.LOST: 5>, '3 of 103 records lost (2.91%), more than --max-lost 0'), (<ExitCode.REJECTED: 3>, '100 of 100 records rejected (100%): every record was rejected')]
    """
    reasons = [(ExitCode.RUNTIME, failure) for failure in outcome.failures]
    why_lost = (lost or LossLimit(count=LossLimit.default)).verdict(outcome.lost, outcome.records, outcome.unsure,
                                                                  outcome.forgotten)
    if why_lost is not None:
        reasons.append((ExitCode.LOST, why_lost))
    if outcome.outstanding > 0:
        reasons.append((ExitCode.INCOMPLETE, f"{outcome.outstanding:,} records awaiting redelivery when the run "
                                             "ended (not acknowledged: the stream delivers them again to the next "
                                             "reader)"))
    why_rejected = (rejected or RejectLimit()).verdict(outcome.rejected, outcome.records)
    if why_rejected is not None:
        reasons.append((ExitCode.REJECTED, why_rejected))
    if outcome.interrupted:
        reasons.append((ExitCode.INTERRUPTED, "interrupted before the end of the run (SIGINT): " + (
            "what was read was drained and is kept" if outcome.drained else "its drain was cut (see above)")))
    return reasons
