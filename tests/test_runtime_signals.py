"""The run loop dispatches on typed runtime signals: ``NotConnected`` and ``BackOff(wait)`` from a sink are the
sink's (records held and retried, never dead-lettered), and ``BackOff`` sets the wait instead of the loop's own."""

from __future__ import annotations

import pytest

from wirepipe.connectors.connector import AtLeastOnce, Configured, ConfirmsWrites, Sink, Source
from wirepipe.connectors.generate import GenerateSource
from wirepipe.connectors.nats.jetstream_source import JetStreamSource
from wirepipe.core.batch import Batch
from wirepipe.core.errors import BackOff, NotConnected, SinkUnavailable, is_sink_failure
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.testing import TestingSink


class FlakySink(TestingSink):
    """Raises each of ``signals`` on successive writes, then works."""

    def __init__(self, signals: list[Exception]) -> None:
        super().__init__()
        self.signals = signals

    async def write(self, batch: Batch) -> None:
        if self.signals:
            raise self.signals.pop(0)
        await super().write(batch)


@pytest.mark.timeout(60)
def test_signals_from_a_sink_hold_the_records_and_retry() -> None:
    sink = FlakySink([NotConnected("connection closed"), BackOff("stream full", 0.01), NotConnected("again")])
    stats = Pipeline(GenerateSource("point", count=50, batch_size=10), [], sink).run()
    assert len(sink.records) == 50 and stats.rejected == 0
    assert stats.sink_errors == 3 and not sink.signals


def test_backoff_wait_is_what_the_part_asked_for_within_the_ack_keep_alive() -> None:
    plain = Pipeline(GenerateSource("point", count=1), [], TestingSink()).new_run()._retry.backoff  # the run loop's
    assert plain.next(BackOff("x", 0.2)) == 0.2
    assert plain.next(BackOff("x", 60.0)) == 5.0  # bounded
    plain.failures = 3
    assert plain.next(NotConnected("down")) == 0.1 * 2 ** 3 and plain.next(OSError("disk")) == 0.1 * 2 ** 4
    acked = Pipeline(JetStreamSource(stream="S", durable="d", ack_wait=0.9), [], TestingSink()).new_run()._retry.backoff
    assert acked.next(BackOff("x", 60.0)) == pytest.approx(0.3)  # in-progress acks keep arriving in time


def test_the_interfaces_are_abstract_and_the_signals_typed() -> None:
    for abstract in (Source, Sink, AtLeastOnce):
        with pytest.raises(TypeError, match="abstract"):
            abstract()
    assert issubclass(JetStreamSource, AtLeastOnce) and not issubclass(GenerateSource, AtLeastOnce)
    assert issubclass(JetStreamSource, Configured)
    for signal in (NotConnected("x"), BackOff("x", 1.0)):
        assert isinstance(signal, SinkUnavailable) and is_sink_failure(signal)
    assert BackOff("x", 2.5).wait == 2.5


def test_the_run_loop_calls_the_sink_hooks_the_abc_declares() -> None:
    """``bind`` (name and source, before ``open``), ``refuse_source`` and ``for_worker`` are ``Sink``'s, with
    defaults: the loop calls them plainly on any sink, and a sink that overrides ``bind`` gets the pipeline's name
    and its source. ``unconfirmed`` belongs to the sinks that declare ``ConfirmsWrites``."""

    class Bound(TestingSink):
        def __init__(self) -> None:
            super().__init__()
            self.bound: list[tuple[str, str]] = []

        def bind(self, pipeline: str, source: Source) -> None:
            self.bound.append((pipeline, source.identity))

    sink, dead = Bound(), Bound()
    source = GenerateSource("point", count=5)
    pipe = Pipeline(source, [], sink, name="named", dead_letter=dead)
    pipe.run()
    assert sink.bound == dead.bound == [("named", source.identity)]
    for name in ("bind", "refuse_source", "for_worker"):
        assert name in vars(Sink)
    assert "unconfirmed" in vars(ConfirmsWrites) and not isinstance(TestingSink(), ConfirmsWrites)
    run = pipe.last_run
    assert run is not None and run.unacked_records == 0
    with pytest.raises(AttributeError):
        run.unacked_records = 3  # type: ignore[misc]  # read-only


def test_the_module_doc_says_what_a_sink_failure_does() -> None:
    import wirepipe.pipelines.run as module

    doc = " ".join((module.__doc__ or "").split())
    assert "nak-ed back" not in doc and "nothing is ``nak``-ed" in doc


class DownSink(TestingSink):
    """A sink whose every write fails (a full disk): the run holds the records and retries until cut."""

    async def write(self, batch: Batch) -> None:
        raise OSError(28, "No space left on device")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_second_signal_cuts_the_drain_and_says_which_signal(signame: str) -> None:
    """A bounded run whose sink never recovers, stopped by two signals: the drain is cut. Two SIGTERMs are a
    worker's normal stop, cut: the summary said "interrupted (SIGINT)" and "what was read was drained and is
    kept" for both."""
    import asyncio
    import os
    import signal

    from wirepipe.core.exit_codes import ExitCode, verdict
    from wirepipe.pipelines.worker import run_worker_async

    sink = DownSink()
    pipe = Pipeline(GenerateSource("point", count=50, batch_size=10), [], sink, shutdown_timeout=30)

    async def stopped_twice() -> object:
        task = asyncio.ensure_future(run_worker_async(pipe))
        while pipe.last_run is None or not pipe.last_run.sink_error:
            await asyncio.sleep(0.01)
        for _ in range(2):
            os.kill(os.getpid(), getattr(signal, signame))
            await asyncio.sleep(0.05)
        return await task

    stats = asyncio.run(stopped_twice())
    assert sink.records == [] and stats.cut is not None and f"a second {signame}" in stats.cut
    assert stats.interrupted is (signame == "SIGINT")
    reasons = verdict(stats.outcome())
    assert reasons[0] == (ExitCode.RUNTIME, "the sink still failed when the drain was cut (testing: OSError: [Errno "
                                            "28] No space left on device): what it held was not written (a stream's "
                                            "records are delivered again: not acknowledged)")
    interrupted = [text for code, text in reasons if code == ExitCode.INTERRUPTED]
    assert interrupted == (["interrupted before the end of the run (SIGINT): its drain was cut (see above)"]
                           if signame == "SIGINT" else [])
