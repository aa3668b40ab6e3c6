"""The connector contracts: a source is an async iterator of batches, a sink writes batches; what a connector can
do beyond that it declares by the capabilities it subclasses, small classes the pipelines layer asks with
``isinstance``, never by a connector's type name (the run loop asks once, when the run starts: a batch costs
nothing more).

A source writes one method, ``batches()``: the batches in order, ending when its input ends, when ``count``
records or ``duration`` seconds are reached, or once ``stopping`` is set. ``open`` and ``close`` take and
release what it reads from. A sink writes one method, ``write(batch)``; ``flush`` makes everything written so
far durable (or sent), ``close`` flushes and releases. A sink that cannot work right now raises ``NotConnected``
or ``BackOff(wait)`` (core/errors.py): runtime signals the loop dispatches on, never reasons to reject a record.
Both have ``for_worker(index, count)``: the copy worker ``index`` of ``count`` processes running one pipeline
uses (a file of its own), or ``CannotShare`` (the field at fault) when several workers cannot share it.

A minimal source and sink, and how a package registers them, are in ``docs/architecture.md``.

What a source can declare, and what the pipelines layer does with it:

- ``Bounded``: a finite input every reader reads whole (a file, a dataset): the run ends at its end, and
  ``--workers N`` is refused (each worker would read all of it). ``ReadsFiles``: missing input is a usage
  error before anything opens (``check_input``); what could not be read is reported (``unreadable``).
- ``SharedByWorkers``: ``shared_by`` names the field (a queue group, a durable) through which N workers
  share the input; the pool sets it to the pipeline's name when unset.
- ``AtLeastOnce``: records come back until acknowledged (JetStream): the loop acks after the sink's flush,
  keeps held records ``in_progress`` while the sink is down and settles dead letters; it builds on
  ``Commits`` (a commit cadence of its own: ``ack_pressure``, ``wants_commit``), which a source that
  acknowledges nothing may declare alone (an ordered consumer: where a capture completes its files).
- ``CountsLoss``: at most once (core NATS): what it loses is counted (``losses``, stamped per batch), and
  what the pipeline took and could not finish is handed back (``discard``). ``Drains``: once ``stopping``
  is set it still yields what it holds, then ends on its own.
- ``ReadsWhileBusy``: a socket to serve while the operators run: long passes run off the event loop,
  ``let_read`` between slices. ``ReadsSubjects``: the NATS subjects it reads (a dead letter published
  there would come back forever).

What a sink can declare: ``WritesFiles`` (its ``files``, and a file ``beside`` them: the default dead-letter
file), ``PublishesToSubjects`` (the NATS subject template it publishes on), ``RefusesLate`` (records refused
after ``write`` returned: dead-lettered at the commit) and ``ConfirmsWrites`` (the destination confirms each
record later: ``unconfirmed`` at a drain, ``deduplicated``).

A ``Refusal`` names the field at fault (under the part's own path: ``path`` is reported as
``sink.path``) and the message, which is the ``ConfigError`` the user sees.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple, TypeVar, get_args

from ..core.batch import Batch, Rejected
from ..core.errors import Refusal
from ..wire import dead_letter_batch

if TYPE_CHECKING:
    from ..core.models import Strict
    from ..operators.operator import Operator, Operators
    from ..pipelines.pipeline import Pipeline  # what ``source | ...`` builds: typed, never imported here

_C = TypeVar("_C", bound="Configured")  # ``from_config`` returns the class it is called on (typing.Self is 3.11+)
_S = TypeVar("_S", bound="Source")
_K = TypeVar("_K", bound="Sink")


class Unreadable(NamedTuple):
    """Input a source could not read and went past (a damaged file): the file, the part of it (a Parquet row group;
    None: the whole file), the records it held that were not read (None: unknown) and why."""

    path: str
    part: int | None
    records: int | None
    reason: str

    def describe(self) -> str:
        where = f"{self.path} row group {self.part}" if self.part is not None else f"{self.path} (the whole file)"
        held = f", {self.records:,} records" if self.records is not None else ""
        return f"{where}{held}: {self.reason}"


def describe_unreadable(unreadable: list[Unreadable], what: str = "input") -> str:
    """One line for what a run could not read: how many parts, how many records, then each part."""
    known = sum(u.records or 0 for u in unreadable)
    whole = sum(1 for u in unreadable if u.records is None)
    records = f"{known:,} records" + (f" and {whole} whole file(s) of unknown size" if whole else "")
    return (f"{len(unreadable)} part(s) of the {what} could not be read ({records} not read): "
            + "; ".join(u.describe() for u in unreadable))


# --- sources ---------------------------------------------------------------------------------------------


class Source(ABC):
    """Base class of sources: ``batches`` is the one method every source writes (see the module doc)."""

    type: ClassVar[str] = "source"
    stage: ClassVar[str] = "source"
    # ``params`` that say how much or how the source reads, not what: left out of ``identity``.
    identity_ignores: ClassVar[frozenset[str]] = frozenset({"count", "duration", "batch_size", "batch_timeout"})
    # The kind of values it gives (``batch.RECORDS``, ``batch.PAYLOADS``; None: either, as a JSONL file may hold
    # records or payloads): a pipeline whose operators or sink cannot take it is refused when built.
    gives: ClassVar[str | None] = None

    def __init__(self, *, count: int | None = None, duration: float | None = None) -> None:
        self.count = count
        self.duration = duration
        self.stopping = asyncio.Event()
        self.schema: Any = None  # field names, or a typed schema (positional and schema'd formats read it)
        # What ``open`` waits for before the source can read ("stream EVENTS": a consumer started before
        # its publisher), for the status line; None once it reads.
        self.waiting: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _check_declared(cls, SOURCE_CAPABILITIES, _RETIRED_SOURCE)

    @property
    def name(self) -> str:
        return self.type

    @property
    def params(self) -> dict[str, Any]:
        return {"count": self.count, "duration": self.duration}

    @property
    def identity(self) -> str:
        """What this source reads, independent of how much and how (type and parameters without limits,
        batching or connection): the same input gives the same identity, so the default JetStream
        ``Nats-Msg-Id`` deduplicates a re-run of it."""
        import json

        params = {k: v for k, v in self.params.items() if k not in self.identity_ignores}
        return f"{self.type}:{json.dumps(params, sort_keys=True, default=str)}"

    @property
    def ends(self) -> bool:
        """The run has an end of its own (a count, a duration, the end of a ``Bounded`` input): a SIGINT before it
        interrupts the run (exit 130), where it is a long-lived worker's normal stop otherwise."""
        return self.count is not None or self.duration is not None or isinstance(self, Bounded)

    def for_worker(self: _S, index: int, count: int) -> _S:
        """What worker ``index`` of ``count`` processes running one pipeline reads (``CannotShare`` when they
        cannot share this source as configured): itself by default, as a queue group is shared."""
        return self

    async def open(self) -> None:  # noqa: B027 - optional hook
        """Connect or open files; called once before ``batches``."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release what ``open`` took; called once, also after errors."""

    @abstractmethod
    def batches(self) -> AsyncIterator[Batch]:
        """The batches, in order; an async generator that ends when the source is done or ``stopping``."""

    def lag(self) -> int | None:
        """Records waiting upstream of this source (stream pending, buffered), when it knows."""
        return None

    # The pipelines layer (above this one) registers how ``source | ...`` becomes a ``Pipeline``:
    # sources do not import the pipelines. ``wirepipe.pipelines.pipeline`` sets it at import.
    compose: ClassVar[Callable[[Source], Pipeline] | None] = None

    def __or__(self, other: Operator | Operators | Sink) -> Pipeline:
        """``source | op | ... | sink`` builds a ``Pipeline``."""
        if Source.compose is None:
            raise TypeError("source | ... builds a wirepipe Pipeline: import wirepipe.pipelines.pipeline first "
                            "(wirepipe.Pipeline and the wirepipe factories do)")
        return Source.compose(self) | other


class Bounded:
    """A finite input that every reader reads whole (a file, a generated dataset): the run ends at its end
    (``Source.ends``), and N worker processes (``wirepipe run --workers N``) would each process all of it, so
    N > 1 is refused."""


class ReadsFiles(ABC):
    """A source of files: a missing input is a usage error before anything opens, and what it went past is
    reported (the run ends non-zero)."""

    @abstractmethod
    def check_input(self) -> None:
        """Raise ``WirepipeError`` if the input is not there (a missing file or capture): ``wirepipe run`` calls it
        before anything opens, so a run that cannot read leaves no empty output file or metrics behind."""

    def unreadable(self) -> list[Unreadable]:
        """What the source could not read and went past (a damaged file); ``[]`` for a source that stops at the
        first such error (or never meets one)."""
        return []


class SharedByWorkers:
    """N worker processes share this source through a field of its config so that each record goes to one of
    them (a core NATS queue group, a JetStream durable): the pool sets it to the pipeline's name when unset."""

    shared_by: ClassVar[str]


class ReadsSubjects(ABC):
    """A source of NATS subjects: a dead letter published on one of them would come back through it."""

    @property
    @abstractmethod
    def subjects(self) -> list[str] | None:
        """The subjects (patterns) it reads, or None while not known (a stream's, until the source is open)."""


class ReadsWhileBusy:
    """A source with a socket to keep serving while the operators run (reading what arrives, pulls, acks,
    heartbeats): the run loop runs long operator passes off the event loop, in slices or a thread."""

    async def let_read(self) -> None:
        """Yield to the event loop between slices of a long operator pass so the client reads the socket."""
        await asyncio.sleep(0)


class CountsLoss(ABC):
    """An at-most-once source (core NATS): messages it is not read in time for, or took and could not finish, are
    gone, and it counts them (stamped on every batch's metrics, in the run summary, in the exit code)."""

    # A read-only observer (``wirepipe tap``): it takes nothing from anyone (no queue group, no acks), so what it
    # leaves unread at its own stop is no loss.
    observer: bool = False

    @property
    @abstractmethod
    def lost(self) -> int:
        """Records known lost so far (the ``lost`` of ``losses()``)."""

    @abstractmethod
    def losses(self) -> dict[str, int]:
        """What the source knows it lost, by kind; ``lost`` is the total."""

    @abstractmethod
    def discard(self, records: int) -> None:
        """The pipeline took ``records`` and could not finish them (it stopped past its ``shutdown_timeout``):
        nobody can send them again, so they count as lost."""


class Drains:
    """Once ``stopping`` is set the source still yields what it already holds (a core NATS client's received
    messages, which nobody can send again), then ends on its own: the run loop takes batches until it ends."""


class Commits(ABC):
    """A source with a commit cadence of its own: the run loop commits (flushes the sink, then acknowledges)
    every ``ack_pressure`` records and whenever the source asks, not only every ``flush_interval``. An ordered
    JetStream consumer declares it alone (a capture of a backlog completes its files there); ``AtLeastOnce``
    builds on it."""

    @property
    @abstractmethod
    def ack_pressure(self) -> int:
        """Unacknowledged records at which the loop commits without waiting for ``flush_interval``."""

    def wants_commit(self) -> bool:
        """True when the source waits for a commit to go on (it read its ``count``): commit without delay."""
        return False


class AtLeastOnce(Commits):
    """The at-least-once protocol of a source whose records come back until acknowledged (JetStream).

    The loop keeps every record it read unacknowledged until the sink made it durable, then
    ``ack``-s it; while the sink is down it calls ``in_progress`` (no record is ``nak``-ed for a
    sink's failure); records that went to the dead letter are ``settle_rejected`` (terminated)
    once the dead letter is flushed. ``ack_pressure`` bounds what the loop holds unacknowledged
    before it commits early; ``ack_wait`` is how long the server waits before it redelivers (the
    loop's backoff stays under a third of it, so in-progress acks arrive in time). What a stopped
    run read and did not write comes back: nothing is counted lost.
    """

    @property
    @abstractmethod
    def ack_wait(self) -> float:
        """Seconds after which a record not acknowledged is delivered again."""

    @property
    @abstractmethod
    def redelivered(self) -> int:
        """Records read so far that had been delivered before (``Batch.redelivered``): every duplicate a sink
        writes after a lost ack or a dead worker is among them."""

    @property
    def outstanding(self) -> int:
        """Records still awaiting acknowledgement or redelivery upstream when a bounded read ended (a JetStream
        durable read to its end, or to its ``count``): the run did not get everything its bound covers. 0 for a
        read that was stopped or has no bound."""
        return 0

    @abstractmethod
    async def ack(self, batch: Batch) -> None:
        """Acknowledge the records of a batch the sink has written and flushed."""

    @abstractmethod
    async def in_progress(self, batches: list[Batch]) -> None:
        """The sink is unavailable and these records wait for it: keep them from being redelivered."""

    @abstractmethod
    async def settle_rejected(self, rejected: list[Rejected]) -> None:
        """Settle records that went to the dead-letter destination (terminate them: never redelivered)."""


SOURCE_CAPABILITIES = (Bounded, ReadsFiles, SharedByWorkers, ReadsSubjects, ReadsWhileBusy, CountsLoss, Drains,
                       Commits, AtLeastOnce)


# --- configured connectors ----------------------------------------------------------------------------------


class Configured:
    """A connector whose fields are declared once, in its config model (``type: Literal[...]``, the
    fields with their defaults and constraints, ``build()``).

    ``from_config`` takes a validated model (what ``build()`` and YAML use); ``__init__`` takes the
    same fields as keyword arguments and checks them with the model through ``_init``, which raises
    the ``ConfigError`` the YAML entry gets. Either way ``_configure`` sets the connector up from the
    model, kept as ``self.config``: the connector reads its settings there, and keeps as attributes only
    what it derives from them (a parsed template, a counter), under names that say so.
    """

    config: Any

    def _configure(self, config: Any) -> None:  # pragma: no cover - each connector has one
        raise NotImplementedError

    def _init(self, model: type[Strict], **fields: Any) -> None:
        """Set up from ``fields`` checked by ``model`` as the ``source:`` or ``sink:`` entry of a YAML file is."""
        from ..core.models import validate  # pydantic: not imported until a connector is built

        role = "source" if isinstance(self, Source) else "sink"
        (tag,) = get_args(model.model_fields["type"].annotation)
        self._configure(validate(model, {"type": tag, **fields}, role))

    @classmethod
    def from_config(cls: type[_C], config: Any) -> _C:
        """The connector a validated config describes (no second validation)."""
        part = cls.__new__(cls)
        part._configure(config)
        return part

    def reconfigured(self: _C, **changes: Any) -> _C:
        """A connector of this class from this one's config with ``changes`` (a worker's own file): a new one,
        this one as it was."""
        return self.from_config(self.config.model_copy(update=changes))


# --- sinks -------------------------------------------------------------------------------------------------


class Sink(ABC):
    """Base class of sinks: ``write`` is the one method every sink writes (see the module doc)."""

    type: ClassVar[str] = "sink"
    stage: ClassVar[str] = "sink"
    # What batch replay on Beam writes in this sink's place: "files" (the records, as its own Parquet result
    # files: a file sink), "nothing" (a sink that keeps nothing: null), or None: the sink talks to a system
    # (NATS), so a replay into it needs the local runner.
    batch_results: ClassVar[Literal["files", "nothing"] | None] = None
    # The kind of values it writes (``batch.PAYLOADS`` for a NATS or capture sink; None: any value).
    takes: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _check_declared(cls, SINK_CAPABILITIES, _RETIRED_SINK)

    @property
    def name(self) -> str:
        return self.type

    @property
    def params(self) -> dict[str, Any]:
        return {}

    def for_worker(self: _K, index: int, count: int) -> _K:
        """What worker ``index`` of ``count`` processes running one pipeline writes: a copy whose output is its own
        (a file's path, a capture's file prefix, named by ``core/workers.py``'s ``Worker``; ``{worker}`` in a path
        is 0 in a single process), or ``CannotShare`` when they cannot each write it (standard output). Itself
        by default: the workers share the destination on purpose (a NATS subject)."""
        return self

    def bind(self, pipeline: str, source: Source) -> None:  # noqa: B027 - optional hook
        """Called by the run loop before ``open`` with the pipeline's name and its source (the JetStream
        sink's default ``Nats-Msg-Id`` names both, so a re-run of the same input is deduplicated)."""

    def refuse_source(self, source: Source) -> Refusal | None:
        """Why this sink cannot follow ``source`` safely (checked for every pipeline, YAML or Python, when it
        is built), or None. E.g. one Parquet file, complete only when closed, behind a source acknowledged
        at every flush: a killed worker would lose acknowledged records."""
        return None

    async def open(self) -> None:  # noqa: B027 - optional hook
        """Connect or open files; called once before the first ``write``."""

    @abstractmethod
    async def write(self, batch: Batch) -> None:
        """Take a batch (buffer or send it); raise ``NotConnected``/``BackOff`` when the sink cannot now."""

    async def write_rejected(self, rejected: list[Rejected]) -> None:
        """Write dead letters (this sink is a ``dead_letter`` destination): envelopes by default,
        the original payloads with stage/error headers for NATS sinks."""
        await self.write(dead_letter_batch(rejected))

    async def flush(self) -> None:  # noqa: B027 - optional hook
        """Make everything written so far durable or sent."""

    async def close(self) -> None:
        """Flush and release; called once, also after errors."""
        await self.flush()


class WritesFiles(ABC):
    """A sink of files: the run summary names and sizes them, and a pipeline without a ``dead_letter`` writes its
    rejected records beside them."""

    @property
    @abstractmethod
    def files(self) -> list[Path]:
        """The files of its output so far (what the run summary names and sizes)."""

    @abstractmethod
    def beside(self, suffix: str) -> str | None:
        """A file name next to the output, ending in ``suffix`` (``out.jsonl`` -> ``out.dead.jsonl``): where a
        pipeline that names no ``dead_letter`` writes its rejected records; None for no file (standard output)."""


class PublishesToSubjects(ABC):
    """A sink that publishes on NATS subjects: a source that reads them would get its dead letters back."""

    @property
    @abstractmethod
    def publishes_to(self) -> str:
        """The subject template it publishes on (``dlq.{subject}``)."""


class RefusesLate(ABC):
    """A sink that refuses records after ``write`` returned (JetStream at their publish ack; a dead letter no
    publish could carry): the run loop dead-letters them at the next commit."""

    @abstractmethod
    def take_rejected(self) -> list[Rejected]:
        """The records refused since the last call."""


class ConfirmsWrites(ABC):
    """A sink whose destination confirms each record after the write (a JetStream stream's publish acks): a drain
    that times out reports what is unconfirmed; what the stream already had is counted, not stored twice."""

    @property
    @abstractmethod
    def unconfirmed(self) -> int:
        """Records handed to the sink that the destination has not confirmed yet."""

    @property
    def deduplicated(self) -> int:
        """Records the destination already had and kept once (a ``Nats-Msg-Id`` it knew)."""
        return 0


SINK_CAPABILITIES = (WritesFiles, PublishesToSubjects, RefusesLate, ConfirmsWrites)

# Flags and hooks a connector of an earlier wirepipe set, and what says it now: a plugin that still sets one is
# told at import rather than run as if it had not (a bounded source read N times, a lossy one counting nothing).
_RETIRED_SOURCE = {"bounded": "Bounded", "redelivers": "AtLeastOnce", "drops_when_unread": "CountsLoss",
                   "drains": "Drains", "reads_while_busy": "ReadsWhileBusy", "refuse_workers": "for_worker"}
_RETIRED_SINK = {"worker_fields": "for_worker", "refuse_workers": "for_worker"}


def _check_declared(cls: type, capabilities: tuple[type, ...], retired: dict[str, str]) -> None:
    """``TypeError`` when ``cls`` defines a member of a capability it does not declare (the pipelines layer would
    never call it) or a retired flag."""
    for name in vars(cls):
        if name in retired:
            raise TypeError(f"{cls.__qualname__}.{name} is not read any more: declare {retired[name]} "
                            "(wirepipe.connectors.connector)")
        for capability in capabilities:
            if name in _members(capability) and not issubclass(cls, capability):
                raise TypeError(f"{cls.__qualname__}.{name} belongs to the {capability.__name__} capability, which "
                                f"{cls.__qualname__} does not declare: add it to its bases to be asked for it")


def _members(capability: type) -> set[str]:
    """The names a capability declares (its methods, properties and class attributes)."""
    own = {*vars(capability), *getattr(capability, "__annotations__", {})}
    return {n for n in own if not n.startswith("_")}
