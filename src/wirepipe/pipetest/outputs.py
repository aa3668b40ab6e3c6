"""What a case's pipeline wrote, as its own sink would have written it: each record's value (payloads decoded by
their headers when the case says ``decode``), the subject a NATS sink would publish it to (its subject template
rendered), the headers it would carry (before the publish-time stamps). Read from what a recording sink kept
(``outputs``, ``--update``) or a batch at a time as the pipeline writes (``BatchOutputs``, a checked case)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core.batch import Batch
from ..core.errors import WirepipeError
from ..wire import Header


@dataclass
class Output:
    """One record the sink would have written."""

    value: Any
    subject: str | None
    headers: dict[str, str] | None
    payload_size: int | None = None  # bytes of the payload when the value was decoded from one


def outputs(pipe: Any, sink: Any, decoder: Decoder | None = None) -> list[Output]:
    """What the pipeline's own sink would have written, from what the testing sink kept; payloads decoded by
    ``decoder`` (``_decoder``) when given."""
    subjects, headers = _as_written(pipe, sink.records, sink.subjects, sink.headers, sink.meta)
    values = list(sink.records)
    sizes: list[int | None] = [None] * len(values)
    payloads = _payloads(values, headers)
    if decoder is not None and payloads is not None:
        values, sizes = _decoded(values, decoder(payloads))
    return _outputs(values, subjects, headers, sizes)


@dataclass
class BatchOutputs:
    """What the pipeline's own sink would have written of one batch (``outputs``, a batch at a time), for a sink
    that checks as the pipeline writes (``CheckingSink``): ``decoder`` is opened with the sink, and closed with it."""

    pipe: Any
    decoder: Decoder | None = None
    opened: bool = False

    async def open(self) -> None:
        if self.decoder is not None and not self.opened:  # a case's sink is its dead letter too: opened twice
            self.opened = True
            await self.decoder.open()

    async def close(self) -> None:
        if self.opened and self.decoder is not None:
            self.opened = False
            await self.decoder.close()

    async def __call__(self, batch: Batch, first: int) -> list[Output]:
        """``batch``'s outputs; ``first``: the position of its first (what an undecodable output is named by)."""
        n = len(batch.values)
        values = list(batch.values)
        subjects, headers = _as_written(self.pipe, values, [batch.subject_at(i) for i in range(n)],
                                        [batch.headers_at(i) for i in range(n)], batch.meta)
        sizes: list[int | None] = [None] * n
        payloads = _payloads(values, headers, first)
        if self.decoder is not None and payloads is not None:
            values, sizes = _decoded(values, await self.decoder.decode(payloads), first)
        return _outputs(values, subjects, headers, sizes)


def _as_written(pipe: Any, records: list[Any], subjects: list[str | None], headers: list[dict[str, str] | None],
                meta: dict[str, Sequence[Any]]) -> tuple[list[str | None], list[dict[str, str] | None]]:
    """The subjects (a NATS sink's template rendered) and headers (none: a NATS sink's ``headers: none``) the
    pipeline's own sink would have written ``records`` with."""
    from ..wire import SubjectTemplate

    subjects = list(subjects)
    template = getattr(pipe.sink, "subject_template", None)  # a NATS sink's
    if isinstance(template, SubjectTemplate) and records:
        column: Any = subjects if any(subjects) else None  # None where a record had no subject
        rendered = template.render(Batch(list(records), subjects=column, meta=meta))
        subjects = [rendered] * len(records) if isinstance(rendered, str) else list(rendered)
    if getattr(getattr(pipe.sink, "config", None), "headers", None) == "none":  # a NATS sink's payloads alone
        return subjects, [None] * len(records)
    return subjects, list(headers)


def _outputs(values: list[Any], subjects: list[str | None], headers: list[dict[str, str] | None],
             sizes: list[int | None]) -> list[Output]:
    return [Output(v, s, dict(h) if h else None, n) for v, s, h, n in zip(values, subjects, headers, sizes,
                                                                             strict=True)]


class UndecodableOutput(WirepipeError):
    """``decode: true`` and an output that does not decode by its headers."""


@dataclass
class Decoder:
    """A ``HeaderDecoder`` as a case decodes its outputs with: handed the dictionary stores the pipeline's operators
    read (or the ones ``decode`` names), which it opens around each use (``open``, ``decode``, ``close`` inside a
    running loop)."""

    decoder: Any
    resources: Any

    def __call__(self, batch: Batch) -> Batch:
        import asyncio

        async def decode() -> Batch:
            await self.open()
            try:
                return await self.decode(batch)
            finally:
                await self.close()

        return asyncio.run(decode())

    async def open(self) -> None:
        await self.resources.open_operators([self.decoder], ())

    async def close(self) -> None:
        await self.resources.close_operators()

    async def decode(self, batch: Batch) -> Batch:
        await self.decoder.prepare(batch)
        return self.decoder(batch)


def _payloads(values: list[Any], headers: list[dict[str, str] | None], first: int = 0) -> Batch | None:
    """The payloads among ``values`` as a batch to decode (``i``: each one's position, counted from ``first``), or
    None when there are none."""
    index = [i for i, v in enumerate(values) if isinstance(v, (bytes, bytearray, memoryview))]
    if not index:
        return None
    return Batch([values[i] for i in index], headers=[headers[i] for i in index], meta={"i": [first + i for i in index]})


def _decoded(values: list[Any], batch: Batch, first: int = 0) -> tuple[list[Any], list[int | None]]:
    """``values`` with their payloads replaced by what ``batch`` (``_payloads``, decoded) made of them, and each
    decoded one's payload size; ``UndecodableOutput`` for the first that does not decode."""
    if batch.rejected:
        r = batch.rejected[0]
        raise UndecodableOutput(f"outputs[{r.meta['i']}] does not decode by its headers "
                                f"({r.stage}: {r.error}); compare it as bytes (decode: false)")
    out = list(values)
    sizes: list[int | None] = [None] * len(values)
    for i, v in zip(batch.meta["i"], batch.values, strict=True):
        sizes[i - first] = len(values[i - first])
        out[i - first] = v
    return out, sizes


def redecode(outs: list[Output], decoder: Decoder) -> list[Output] | None:
    """Payload outputs decoded by their headers, for ``--update`` to record; None when there are none, or one does
    not decode (then they stay bytes)."""
    if not any(isinstance(o.value, (bytes, bytearray)) and (o.headers or {}).get(Header.CONTENT_TYPE) for o in outs):
        return None
    values = [o.value for o in outs]
    payloads = _payloads(values, [o.headers for o in outs])
    if payloads is None:
        return None
    try:
        values, sizes = _decoded(values, decoder(payloads))
    except UndecodableOutput:
        return None
    return [Output(v, o.subject, o.headers, n) for v, o, n in zip(values, outs, sizes, strict=True)]
