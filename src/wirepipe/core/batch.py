"""The columnar micro-batch that flows through every operator, source and sink.

Python pays for every attribute access and call, so wirepipe never moves one object
per record through a pipeline: a ``Batch`` holds the payload column and a few
per-record side columns, and each operator rewrites whole columns with one
comprehension. Records that fail a stage leave the batch as ``Rejected`` entries and
go to the dead-letter destination; the rest carry on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import Any, TypeVar

T = TypeVar("T")

# The kinds of values a batch carries, as operators and connectors declare what they take and give:
# decoded values (a record, a list) or payloads (bytes); SAME: what an operator was given.
RECORDS, PAYLOADS, SAME = "records", "payloads", "same"
# The meta column of a batch whose values each carry several records (``pack``): how many each one does.
PACKED = "packed"


def repeat_each(column: Sequence[Any], counts: Sequence[int]) -> list[Any]:
    """Each value of ``column`` ``counts[i]`` times."""
    out: list[Any] = []
    extend_repeated(out, column, counts)
    return out


def extend_repeated(out: list[Any], column: Sequence[Any], counts: Sequence[int]) -> None:
    """``out`` extended by each value of ``column`` ``counts[i]`` times. Long runs (``pack``'s messages of 100
    records) are one list multiplied per run, its items copied in C (~2x faster than a chain of
    ``itertools.repeat``, which hands over one item at a time); short ones, the chain."""
    if len(counts) * _LONG_RUN <= sum(counts):
        for value, n in zip(column, counts, strict=False):  # as map() stops: at the shorter
            out += [value] * n
    else:
        out += chain.from_iterable(map(repeat, column, counts))


_LONG_RUN = 16  # records a run on average, from which a list multiply per run beats the chain


class Repeated(list):  # type: ignore[type-arg]
    """A per-record column made by repeating each value of a shorter one (``Batch.repeat``): a plain list, that
    also keeps what it was made of, ``runs`` (the shorter column) and ``counts`` (each one's repeats), so a
    reader that wants a row per run (the metrics' latency rows) reads the runs instead of every record.
    Meta columns are read-only; ``keep``, ``slice`` and ``join`` make plain lists."""

    __slots__ = ("counts", "runs")

    def __init__(self, runs: Sequence[Any], counts: list[int]) -> None:
        super().__init__()
        extend_repeated(self, runs, counts)
        self.runs = runs
        self.counts = counts


@dataclass(slots=True)
class Rejected:
    """One record that failed a stage: what failed, why, and the value as it was before the stage."""

    stage: str
    operator: str
    error: str
    value: Any
    subject: str | None = None
    headers: dict[str, str] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Batch:
    """A columnar micro-batch.

    values    the payload column: Python objects before ``serialize``, bytes after it.
    subjects  one subject for the whole batch (``str``), one per record (``list``), or ``None``.
    headers   headers shared by every record (``dict``), one dict per record (``list``), or ``None``.
    meta      per-record side columns keyed by name: ``seq``, ``sent_ns``, ``received_ns``,
              ``stream_seq``, ``ack`` (handles the source acknowledges after the sink wrote) ...;
              any sequence (a ``range`` costs nothing to build), read-only: ``keep`` makes lists, ``repeat``
              ``Repeated`` lists (which keep the runs they were made of).
    schema    field order of the records, when the source knows it (used by ``msgpack-array``).
    raw_nbytes declared raw size of the records, as the FlatMessage tables count it, when the source knows it.
    rejected  records that failed a stage of this batch, in the order they failed.
    projected records of this batch that lost fields their schema does not declare (``serialize``'s
              ``extra_fields: drop``): counted, as rejects are, so a projection is never silent.
    """

    values: list[Any]
    subjects: list[str] | str | None = None
    headers: list[dict[str, str] | None] | dict[str, str] | None = None
    meta: dict[str, Sequence[Any]] = field(default_factory=dict)
    schema: Sequence[str] | None = None  # a tuple of names, or a RecordSchema (a sequence of its names)
    raw_nbytes: int | None = None
    rejected: list[Rejected] = field(default_factory=list)
    projected: int = 0

    def __len__(self) -> int:
        return len(self.values)

    def record_count(self) -> int:
        """The records the batch carries: one per value, or as many as ``pack`` put in each (its ``packed``
        meta column), so a run counts records, not messages, after it.

        >>> Batch([[1, 2], [3]], meta={PACKED: [2, 1]}).record_count(), Batch([1, 2, 3]).record_count()
        (3, 3)
        """
        packed = self.meta.get(PACKED)
        return len(self.values) if packed is None else sum(packed)

    def redelivered(self) -> int | None:
        """Records delivered more than once (a redelivering source's ``delivered`` meta column above 1: a
        JetStream message whose ack did not reach the server in time, or whose earlier reader died); None
        when the source does not say."""
        delivered = self.meta.get("delivered")
        return None if delivered is None else len(delivered) - delivered.count(1)

    def nbytes(self) -> int | None:
        """Total payload bytes when the values are bytes-like, else ``None`` (objects have no wire size)."""
        return payload_nbytes(self.values)

    def subject_at(self, i: int) -> str | None:
        s = self.subjects
        return s if s is None or isinstance(s, str) else s[i]

    def headers_at(self, i: int) -> dict[str, str] | None:
        h = self.headers
        return h if h is None or isinstance(h, dict) else h[i]

    def subjects_column(self) -> list[str | None]:
        """One subject per record (a shared one repeated; None each when the records have none)."""
        return one_per_record(self.subjects, len(self.values))  # type: ignore[arg-type]  # list is invariant

    def headers_column(self) -> list[dict[str, str] | None]:
        """One header dict (or None) per record, a shared one repeated."""
        return one_per_record(self.headers, len(self.values))

    def map_by_header(self, name: str, pick: Callable[[str | None], Callable[[Any], Any]], stage: str,
                      operator: str) -> Batch:
        """``map_values`` with the function ``pick`` returns for each record's header ``name`` (None where it
        is absent): ``Content-Type`` picks a format, ``Content-Encoding`` a codec. Records that share their
        headers are one pick and one comprehension; per-record headers, a pick per record.

        >>> b = Batch([1, 2], headers=[{"op": "neg"}, None])
        >>> b.map_by_header("op", lambda op: (lambda v: -v) if op == "neg" else (lambda v: v), "map", "x").values
        [-1, 2]
        """
        h = self.headers
        if not isinstance(h, list):
            return self.map_values(pick(h.get(name) if h else None), stage, operator)
        return self.map_values(lambda v, hd: pick(hd.get(name) if hd else None)(v), stage, operator, with_column=h)

    def keep(self, indices: list[int]) -> None:
        """Keep only the records at ``indices`` (in order) in every per-record column."""
        self.values = [self.values[i] for i in indices]
        if isinstance(self.subjects, list):
            self.subjects = [self.subjects[i] for i in indices]
        if isinstance(self.headers, list):
            self.headers = [self.headers[i] for i in indices]
        self.meta = {k: [col[i] for i in indices] for k, col in self.meta.items()}

    def repeat(self, counts: list[int]) -> None:
        """Each record ``counts[i]`` times in every per-record column but ``values`` (the caller sets them):
        ``keep`` with repeated indices, without the index list (``repeat_each``); the meta columns as ``Repeated``,
        which keep their runs; subjects all alike as the one subject of the batch (``Batch.subjects``' shared form)."""
        subjects = self.subjects
        if isinstance(subjects, list):  # one subject for them all (a plain subscription's): the shared form
            self.subjects = subjects[0] if subjects and subjects.count(subjects[0]) == len(subjects) else \
                repeat_each(subjects, counts)
        if isinstance(self.headers, list):
            self.headers = repeat_each(self.headers, counts)
        self.meta = {k: Repeated(col, counts) for k, col in self.meta.items()}

    def slice(self, start: int, stop: int) -> Batch:
        """A new batch of records ``start:stop`` (every per-record column cut alike)."""
        cut = slice(start, stop)
        n = len(self.values)
        return Batch(
            self.values[cut],
            subjects=self.subjects[cut] if isinstance(self.subjects, list) else self.subjects,
            headers=self.headers[cut] if isinstance(self.headers, list) else self.headers,
            meta={k: list(col[cut]) for k, col in self.meta.items()},
            schema=self.schema,
            raw_nbytes=self.raw_nbytes * (min(stop, n) - start) // n if self.raw_nbytes and n else None,
        )

    @staticmethod
    def join(parts: Sequence[Batch]) -> Batch:
        """Consecutive slices of one batch back as one (columns concatenated, rejected records kept)."""
        if len(parts) == 1:
            return parts[0]
        first = parts[0]
        values = [v for p in parts for v in p.values]
        subjects: Any = first.subjects
        if not (subjects is None or (isinstance(subjects, str) and all(p.subjects == subjects for p in parts))):
            subjects = [s for p in parts for s in p.subjects_column()]
        headers: Any = first.headers
        if not (headers is None or (isinstance(headers, dict) and all(p.headers is headers for p in parts))):
            headers = [h for p in parts for h in p.headers_column()]
        meta: dict[str, Sequence[Any]] = {k: [x for p in parts for x in p.meta[k]] for k in first.meta}
        raw = [p.raw_nbytes for p in parts]
        return Batch(values, subjects, headers, meta, first.schema,
                     None if None in raw else sum(raw),  # type: ignore[arg-type]
                     [r for p in parts for r in p.rejected], sum(p.projected for p in parts))

    def reject(self, i: int, stage: str, operator: str, error: str) -> Rejected:
        """Describe record ``i`` as rejected (the caller removes it from the columns)."""
        return Rejected(
            stage=stage,
            operator=operator,
            error=error,
            value=self.values[i],
            subject=self.subject_at(i),
            headers=self.headers_at(i),
            meta={k: col[i] for k, col in self.meta.items()},
        )

    def map_values(
        self, fn: Callable[..., Any], stage: str, operator: str, with_column: list[Any] | None = None
    ) -> Batch:
        """Apply ``fn`` to every value (and the matching item of ``with_column``, if given).

        The hot path is one comprehension. If any record raises, the column is redone
        record by record so the good records keep their results and each bad one
        becomes a ``Rejected`` entry; the fast path pays nothing for this safety net.
        """
        values = self.values
        try:
            if with_column is None:
                self.values = [fn(v) for v in values]
            else:
                self.values = [fn(v, c) for v, c in zip(values, with_column, strict=False)]
            return self
        except Exception:  # any failure of a codec call is a per-record failure
            pass
        out: list[Any] = []
        good: list[int] = []
        for i, v in enumerate(values):
            try:
                out.append(fn(v) if with_column is None else fn(v, with_column[i]))
                good.append(i)
            except Exception as exc:
                self.rejected.append(self.reject(i, stage, operator, describe_error(exc)))
        self.keep(good)
        self.values = out
        return self



def header_values(headers: dict[str, str] | list[dict[str, str] | None] | None, name: str) -> set[str | None]:
    """The distinct values of header ``name`` in a batch's headers (None, one dict, or one per record); None for a
    record without it: what a decoder picks by (``Wirepipe-Schema``, ``Content-Type``), one dict lookup a record.

    >>> sorted(header_values([{"k": "a"}, None, {"k": "a"}, {}], "k"), key=str)
    [None, 'a']
    """
    if headers is None:
        return {None}
    if isinstance(headers, dict):
        return {headers.get(name)}
    try:  # in C: half the time of a comprehension
        return set(map(dict.get, headers, repeat(name)))  # type: ignore[arg-type]
    except TypeError:  # a record without headers (None)
        return {h.get(name) if h else None for h in headers}


def one_per_record(value: T | list[T], n: int) -> list[T]:
    """A column that is one value for every record or one per record (``Batch.subjects``, ``headers``, a
    rendered subject template), as one per record: the one place the shared form is broadcast.

    >>> one_per_record("points", 3), one_per_record(["a", "b"], 2)
    (['points', 'points', 'points'], ['a', 'b'])
    """
    return value if isinstance(value, list) else [value] * n


def describe_error(exc: BaseException) -> str:
    """A one-line reason for a per-record failure, without a traceback."""
    from .errors import StageError

    if isinstance(exc, StageError):
        return exc.reason
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if type(exc).__name__ not in text else text


try:
    from .._sizes import payload_nbytes as _sizes
except ImportError:  # built without a compiler (the extension is optional): the Python sum
    _sizes = None  # type: ignore[assignment]


def payload_nbytes(values: Sequence[Any]) -> int | None:
    """Total bytes of a payload column when it holds bytes, else ``None`` (objects have no wire size).

    Metrics size every stage's output with it, so its cost is theirs: the C loop of
    ``wirepipe._sizes`` reads each payload's length (~1 ns a payload); without it (built at
    install, optional) the Python sum below costs ~8 ns, ~1.7% of a run of small payloads.
    """
    if _sizes is not None and type(values) is list:
        return _sizes(values)
    return _python_nbytes(values)


def _python_nbytes(values: Sequence[Any]) -> int | None:
    """``payload_nbytes`` without the C loop: the same answers, at ~8x the cost."""
    if not values or not isinstance(values[0], (bytes, bytearray, memoryview)):
        return None
    try:
        if len(values[0]) <= 256:  # small payloads: one C-level join beats a call per record 4x
            return len(b"".join(values))
        return sum([memoryview(v).nbytes for v in values])
    except TypeError:  # an item that is not bytes-like: the column is not payloads
        return None
