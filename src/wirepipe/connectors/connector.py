"""The connector shapes: sources are async iterators of batches, sinks write batches.

A source produces ``Batch`` objects from ``batches()`` and stops on its own when it
is exhausted, when ``count`` records or ``duration`` seconds are reached, or when the
pipeline sets ``stopping``. Sources that need acknowledgements (JetStream) also implement
``AtLeastOnce`` (ack, in_progress, settle_rejected, ack_pressure, ack_wait); the pipeline
calls ``ack`` only after the sink has flushed the batch (made it durable), and
``in_progress`` while the sink is unavailable (a sink failure is never a reason to
redeliver a record). The loop asks ``isinstance(source, AtLeastOnce)`` once, not each hook.

A sink has ``write(batch)``, ``flush()`` and ``close()``; ``flush`` makes everything
written so far durable (or sent), ``close`` flushes and releases the resource. A sink
that cannot work right now raises ``NotConnected`` or ``BackOff(wait)`` (core/errors.py):
runtime signals the loop dispatches on, never reasons to reject a record.

What the pipelines layer needs to know about a connector, the connector declares (a plugin's
as well as wirepipe's own; nothing above this layer knows connector types by name):

- sources: ``gives`` (records or payloads, when it knows), ``bounded`` (a finite input every reader
  reads whole: refused with ``--workers N``),
  ``shared_by`` (the config field naming what N workers share, e.g. a queue group),
  ``identity_ignores`` (parameters that do not say what is read), ``refuse_workers``,
  ``subjects`` (the NATS subjects it reads, once known) and ``discard`` (records the pipeline
  took and could not finish);
- sinks: ``bind`` (the pipeline's name and source, before ``open``), ``refuse_source`` (a
  source this sink cannot follow safely), ``worker_fields`` (the fields a worker of N sets so that
  its copy of the output is its own) and ``refuse_workers`` (what N writers cannot share), ``takes`` (payloads only: a NATS or capture sink), ``unconfirmed`` and
  ``batch_results`` (Beam replay may stand in), ``publishes_to`` (the NATS subject template it
  publishes on: a dead letter that its own source reads would come back forever), ``beside``
  (where a file next to its output goes: the default dead-letter file).

A ``Refusal`` names the field at fault (under the part's own path: ``path`` is reported as
``sink.path``) and the message, which is the ``ConfigError`` the user sees.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple, TypeVar, get_args

from ..core.batch import Batch, Rejected
from ..core.errors import Refusal
from ..wire import dead_letter_batch

if TYPE_CHECKING:
    from ..core.models import Strict
    from ..core.workers import Worker
    from ..operators.operator import Operator, Operators
    from ..pipelines.pipeline import Pipeline  # what ``source | ...`` builds: typed, never imported here

_C = TypeVar("_C", bound="Configured")  # ``from_config`` returns the class it is called on (typing.Self is 3.11+)


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


class Source(ABC):
    """Base class of sources: ``batches`` is the one method every source writes."""

    type: ClassVar[str] = "source"
    stage: ClassVar[str] = "source"
    redelivers: bool = False  # True: an unacknowledged record comes back (the pipeline may let go of it)
    # True: messages are lost when the source is not read for a while (core NATS): losses are counted per batch.
    drops_when_unread: ClassVar[bool] = False
    # True: once ``stopping`` is set the source still yields what it already holds (a core NATS client's received
    # messages, which nobody can send again), then ends on its own: the run loop takes batches until it ends.
    drains: ClassVar[bool] = False
    # True: the source has a socket to keep serving while the operators run (reading what arrives, pulls, acks,
    # heartbeats), so the pipeline runs long operator passes off the event loop (``PipelineRun._run_operators``).
    reads_while_busy: ClassVar[bool] = False
    # True: a finite input that every reader reads whole (a file, a generated dataset): N worker
    # processes (``wirepipe run --workers N``) would each process all of it, so N > 1 is refused.
    bounded: ClassVar[bool] = False
    # The config field naming what N worker processes share so that each record goes to one of them
    # (a core NATS queue group, a JetStream durable): the pool sets it to the pipeline's name when unset.
    shared_by: ClassVar[str | None] = None
    # ``params`` that say how much or how the source reads, not what: left out of ``identity``.
    identity_ignores: ClassVar[frozenset[str]] = frozenset({"count", "duration", "batch_size", "batch_timeout"})
    # The kind of values it gives (``batch.RECORDS``, ``batch.PAYLOADS``; None: either, as a JSONL file may hold
    # records or payloads): a pipeline whose operators or sink cannot take it is refused when built.
    gives: ClassVar[str | None] = None

    def __init__(self, *, count: int | None = None, duration: float | None = None) -> None:
        self.count = count
        self.duration = duration
        self.stopping = asyncio.Event()
        # A read-only observer (``wirepipe tap``): it takes nothing from anyone (no queue group, no acks), so what
        # it leaves unread at its own stop is no loss: a source counts none for it.
        self.observer = False
        self.schema: Any = None  # field names, or a typed schema (positional and schema'd formats read it)
        # What ``open`` waits for before the source can read ("stream EVENTS": a consumer started before
        # its publisher), for the status line; None once it reads.
        self.waiting: str | None = None

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
        """The run has an end of its own (a count, a duration, the end of its input): a SIGINT before it
        interrupts the run (exit 130), where it is a long-lived worker's normal stop otherwise."""
        return self.count is not None or self.duration is not None or self.bounded

    def refuse_workers(self, workers: int) -> Refusal | None:
        """Why ``workers`` (> 1) processes of one pipeline cannot share this source as configured, or None
        (``bounded`` and ``shared_by`` cover the common cases; this hook is for a setting such as an
        ordered consumer, which hands each reader the whole stream)."""
        return None

    def check_input(self) -> None:  # noqa: B027 - optional hook
        """Raise ``WirepipeError`` if the input is not there (a missing file or capture).

        ``wirepipe run`` calls it before anything opens, so a run that cannot read leaves no empty
        output file or metrics behind and exits as a usage error. Sources that read files override it.
        """

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

    @property
    def subjects(self) -> list[str] | None:
        """The NATS subjects (patterns) this source reads, or None: not NATS, or not known yet (a JetStream
        stream's subjects are known once it is open)."""
        return None

    def discard(self, records: int) -> None:  # noqa: B027 - optional hook
        """The pipeline took ``records`` from this source and could not finish them (it stopped past its
        ``shutdown_timeout``). A source that cannot give them back counts them lost; one that redelivers
        gets them again and ignores this."""

    async def let_read(self) -> None:
        """Yield to the event loop between slices of a long operator pass so the client reads the socket."""
        await asyncio.sleep(0)

    def losses(self) -> dict[str, int] | None:
        """What the source knows it lost (``lost`` is the total), or None for a source that cannot lose."""
        return None

    @property
    def lost(self) -> int:
        """Records known lost so far (the ``lost`` of ``losses()``; 0 for a source that cannot lose)."""
        return 0

    def unreadable(self) -> list[Unreadable]:
        """What the source could not read and went past (a damaged file), for the run to report and end non-zero;
        ``[]`` for a source that stops at the first such error (or never meets one)."""
        return []

    @property
    def redelivered(self) -> int:
        """Records read so far that had been delivered before (``Batch.redelivered``): every duplicate a sink
        writes after a lost ack or a dead worker is among them. 0 for a source that never redelivers."""
        return 0

    @property
    def outstanding(self) -> int:
        """Records still awaiting acknowledgement or redelivery upstream when a bounded read ended (a JetStream
        durable read to its end, or to its ``count``): the run did not get everything its bound covers. 0 for a
        source without acks, and for a read that was stopped or has no bound."""
        return 0

    def wants_commit(self) -> bool:
        """True when the source waits for acks to go on (it read its ``count``): commit without delay."""
        return False

    # The pipelines layer (above this one) registers how ``source | ...`` becomes a ``Pipeline``:
    # sources do not import the pipelines. ``wirepipe.pipelines.pipeline`` sets it at import.
    compose: ClassVar[Callable[[Source], Pipeline] | None] = None

    def __or__(self, other: Operator | Operators | Sink) -> Pipeline:
        """``source | op | ... | sink`` builds a ``Pipeline``."""
        if Source.compose is None:
            raise TypeError("source | ... builds a wirepipe Pipeline: import wirepipe.pipelines.pipeline first "
                            "(wirepipe.Pipeline and the wirepipe factories do)")
        return Source.compose(self) | other


class Configured:
    """A connector whose fields are declared once, in its config model (``type: Literal[...]``, the
    fields with their defaults and constraints, ``build()``).

    ``from_config`` takes a validated model (what ``build()`` and YAML use); ``__init__`` takes the
    same fields as keyword arguments and checks them with the model through ``_init``, which raises
    the ``ConfigError`` the YAML entry gets. Either way ``_configure`` sets the connector up from the
    model, kept as ``self.config``.
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


class AtLeastOnce(ABC):
    """The at-least-once protocol of a source whose records come back until acknowledged (JetStream).

    The loop keeps every record it read unacknowledged until the sink made it durable, then
    ``ack``-s it; while the sink is down it calls ``in_progress`` (no record is ``nak``-ed for a
    sink's failure); records that went to the dead letter are ``settle_rejected`` (terminated)
    once the dead letter is flushed. ``ack_pressure`` bounds what the loop holds unacknowledged
    before it commits early; ``ack_wait`` is how long the server waits before it redelivers (the
    loop's backoff stays under a third of it, so in-progress acks arrive in time).
    """

    ack_wait: float

    @property
    @abstractmethod
    def ack_pressure(self) -> int:
        """Unacknowledged records at which the loop commits without waiting for ``flush_interval``."""

    @abstractmethod
    async def ack(self, batch: Batch) -> None:
        """Acknowledge the records of a batch the sink has written and flushed."""

    @abstractmethod
    async def in_progress(self, batches: list[Batch]) -> None:
        """The sink is unavailable and these records wait for it: keep them from being redelivered."""

    @abstractmethod
    async def settle_rejected(self, rejected: list[Rejected]) -> None:
        """Settle records that went to the dead-letter destination (terminate them: never redelivered)."""


class Sink(ABC):
    """Base class of sinks: ``write`` is the one method every sink writes."""

    type: ClassVar[str] = "sink"
    stage: ClassVar[str] = "sink"
    # What batch replay on Beam writes in this sink's place: "files" (the records, as its own Parquet result
    # files: a file sink), "nothing" (a sink that keeps nothing: null), or None: the sink talks to a system
    # (NATS), so a replay into it needs the local runner.
    batch_results: ClassVar[Literal["files", "nothing"] | None] = None
    # The kind of values it writes (``batch.PAYLOADS`` for a NATS or capture sink; None: any value).
    takes: ClassVar[str | None] = None

    @property
    def name(self) -> str:
        return self.type

    @property
    def params(self) -> dict[str, Any]:
        return {}

    def bind(self, pipeline: str, source: Source) -> None:  # noqa: B027 - optional hook
        """Called by the run loop before ``open`` with the pipeline's name and its source (the JetStream
        sink's default ``Nats-Msg-Id`` names both, so a re-run of the same input is deduplicated)."""

    def refuse_source(self, source: Source) -> Refusal | None:
        """Why this sink cannot follow ``source`` safely (checked for every pipeline, YAML or Python, when it
        is built), or None. E.g. one Parquet file, complete only when closed, behind a source acknowledged
        at every flush: a killed worker would lose acknowledged records."""
        return None

    def refuse_workers(self, workers: int) -> Refusal | None:
        """Why ``workers`` (> 1) processes of one pipeline cannot each write this sink as configured (standard
        output), or None."""
        return None

    @property
    def publishes_to(self) -> str | None:
        """The NATS subject template this sink publishes on (``dlq.{subject}``), or None: not NATS."""
        return None

    def worker_fields(self, worker: Worker) -> dict[str, Any]:
        """The config fields ``worker`` sets so that its copy of the output is its own (a file's path, a
        capture's file prefix), named by ``worker`` (``core/workers.py``: ``worker.path(self.path)``); ``{}``
        when workers share the destination on purpose (a NATS subject). A pool and a multi-process replay
        both ask it; a single process too (``Worker()``: ``{worker}`` in a path becomes 0)."""
        return {}

    def beside(self, suffix: str) -> str | None:
        """A file name next to this sink's output, ending in ``suffix`` (``out.jsonl`` -> ``out.dead.jsonl``):
        where a pipeline that names no ``dead_letter`` writes its rejected records. None for a sink that
        writes no file of its own (NATS, null): the pipeline then picks its results folder."""
        return None

    @property
    def deduplicated(self) -> int:
        """Records the destination already had and kept once (a JetStream stream that knew the
        ``Nats-Msg-Id``): what a redelivery upstream did not turn into a duplicate."""
        return 0

    @property
    def unconfirmed(self) -> int:
        """Records handed to the sink that the destination has not confirmed yet (published to JetStream,
        no ack yet); what a drain that times out reports as unsettled."""
        return 0

    async def open(self) -> None:  # noqa: B027 - optional hook
        """Connect or open files; called once before the first ``write``."""

    @abstractmethod
    async def write(self, batch: Batch) -> None:
        """Take a batch (buffer or send it); raise ``NotConnected``/``BackOff`` when the sink cannot now."""

    async def write_rejected(self, rejected: list[Rejected]) -> None:
        """Write dead letters (this sink is a ``dead_letter`` destination): envelopes by default,
        the original payloads with stage/error headers for NATS sinks."""
        await self.write(dead_letter_batch(rejected))

    def take_rejected(self) -> list[Rejected]:
        """Records the sink refused after ``write`` returned (e.g. JetStream refused them at ack time)."""
        return []

    async def flush(self) -> None:  # noqa: B027 - optional hook
        """Make everything written so far durable or sent."""

    async def close(self) -> None:
        """Flush and release; called once, also after errors."""
        await self.flush()
