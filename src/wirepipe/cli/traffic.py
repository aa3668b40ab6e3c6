"""``wirepipe capture``, ``replay`` and ``tap``: what flows on NATS, kept, replayed and watched."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..core.exit_codes import ExitCode, exit_code
from .app import (
    MAX_LOST_HELP,
    MAX_REJECTED_HELP,
    command,
    fail,
    finish,
    limits,
    owned_process,
    run_as_worker,
    setup_logging,
)


@command()
def capture(
    out: Annotated[str, typer.Option("--out", "-o", help="folder of the capture files", metavar="OUT")],
    subject: Annotated[str | None, typer.Option(help="subject to capture, wildcards allowed ('blocks.>')", metavar="SUBJECT")] = None,
    stream: Annotated[str | None, typer.Option(help="JetStream stream to capture (an ordered consumer by default)", metavar="STREAM")] = None,
    durable: Annotated[str | None, typer.Option(help="JetStream durable consumer: acknowledged per completed file, resumable", metavar="DURABLE")] = None,
    from_seq: Annotated[int | None, typer.Option(help="JetStream: start at this stream sequence", metavar="FROM-SEQ")] = None,
    from_time: Annotated[str | None, typer.Option(help="JetStream: start at this time (ISO 8601) or this long ago (10m)", metavar="FROM-TIME")] = None,
    follow: Annotated[bool, typer.Option("--follow", help=(
        "JetStream with --from-seq/--from-time: keep capturing new records after reaching the end of the "
        "stream (default: stop there)"))] = False,
    stop_at_end: Annotated[bool, typer.Option(help="JetStream: stop once the stream has been read "
                                                   "(the default with --from-seq/--from-time)")] = False,
    url: Annotated[str | None, typer.Option(envvar="NATS_URL", help="NATS server URL (default $NATS_URL)", metavar="URL")] = None,
    queue: Annotated[str | None, typer.Option(help="core NATS: queue group shared by several capture workers", metavar="QUEUE")] = None,
    max_file_size: Annotated[str | None, typer.Option(help="complete a file at about this size (default 256MiB)", metavar="MAX-FILE-SIZE")] = None,
    max_file_age: Annotated[str, typer.Option(help="complete a file this long after its first record", metavar="MAX-FILE-AGE")] = "60s",
    row_group_rows: Annotated[int | None, typer.Option(help="rows per row group (default 65536)", metavar="ROW-GROUP-ROWS")] = None,
    count: Annotated[int | None, typer.Option(help="stop after N records", metavar="COUNT")] = None,
    duration: Annotated[str | None, typer.Option(help="stop after a time, e.g. 10m", metavar="DURATION")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", metavar="PATH=VALUE", help="override a field of the generated pipeline: path=value")] = None,
    max_lost: Annotated[str | None, typer.Option(metavar="N|P%", help=MAX_LOST_HELP)] = None,
    print_config: Annotated[bool, typer.Option(help="print the pipeline this command runs (YAML) and exit")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Capture what flows on NATS into Parquet files.

    Until stopped, or to the end of a stream (see the docs: Capture and replay)."""
    from ..core.errors import ConfigError
    from ..core.units import parse_duration, parse_size
    from ..pipelines.capture_worker import capture_config
    from ..pipelines.config import apply_override, build_pipeline, validate_config

    setup_logging(verbose)
    owned_process()
    rejected, lost = limits(None, max_lost)
    if follow and stop_at_end:
        fail("--follow and --stop-at-end: give one", ExitCode.CONFIG)
    # A one-off read from a position is a copy of the stream so far: it ends at the end, like `nats stream view`.
    one_off = (from_seq is not None or from_time is not None) and not durable
    try:
        data = capture_config(
            out=out, subject=subject, stream=stream, durable=durable, from_seq=from_seq, from_time=from_time,
            stop_at_end=stop_at_end or (one_off and not follow), url=url, queue=queue, count=count,
            duration=parse_duration(duration) if duration is not None else None,
            max_file_size=parse_size(max_file_size) if max_file_size is not None else None,
            max_file_age=parse_duration(max_file_age), row_group_rows=row_group_rows)
        for assignment in set_ or []:
            apply_override(data, assignment)
        if print_config:
            import yaml

            from ..core.redact import redact_tree

            typer.echo(yaml.safe_dump(redact_tree(data), sort_keys=False), nl=False)
            return
        pipe = build_pipeline(validate_config(data, file="wirepipe capture"), file="wirepipe capture")
    except ValueError as exc:
        fail(str(exc), ExitCode.CONFIG)
    except ConfigError as exc:
        fail(str(exc), ExitCode.CONFIG)
    # A JetStream source makes the run loop commit, and so complete a file, every `ack_pressure` records too:
    # the log says so, since on a backlog that is what sets the files' size.
    from ..connectors.capture_sink import CaptureSink
    from ..connectors.connector import Commits

    source, sink = pipe.source, pipe.sink
    assert isinstance(sink, CaptureSink)  # the config above names it
    sink.commit_records = source.ack_pressure if isinstance(source, Commits) else None
    stats = run_as_worker(pipe)
    from ..pipelines.monitor import ending_lines, run_figures

    files = sink.files
    rejects = f", {stats.rejected} rejected" if stats.rejected else ""
    typer.echo("\n  ".join([f"{pipe.name}: {stats.records_out} records captured into {len(files)} file(s) in {out} "
                            f"in {stats.elapsed:.2f}s{rejects}{run_figures(pipe, stats)}", *ending_lines(stats)]),
               err=True)
    finish(stats.outcome(), rejected, lost)



@command()
def replay(
    captures: Annotated[list[str], typer.Argument(metavar="CAPTURE", help="capture files, folders or globs, in capture order")],
    pipeline: Annotated[Path, typer.Option("--pipeline", "-p", help="pipeline YAML: its source is replaced by the capture", metavar="PIPELINE")],
    set_: Annotated[list[str] | None, typer.Option("--set", metavar="PATH=VALUE", help="override a field: path=value (repeatable)")] = None,
    pace: Annotated[str, typer.Option(help="max: as fast as possible; original: the recorded inter-arrival times", metavar="PACE")] = "max",
    speed: Annotated[float, typer.Option(help="with --pace original: how many times faster than recorded", metavar="SPEED")] = 1.0,
    pace_by: Annotated[str, typer.Option(help="with --pace original: the times to follow, received or sent", metavar="PACE-BY")] = "received",
    max_gap: Annotated[str | None, typer.Option(help="with --pace original: shorten longer pauses to this, e.g. 5s", metavar="MAX-GAP")] = None,
    count: Annotated[int | None, typer.Option(help="replay only the first N records", metavar="COUNT")] = None,
    batch_size: Annotated[int, typer.Option(help="records per batch (local runner)", metavar="BATCH-SIZE")] = 8192,
    runner: Annotated[str, typer.Option(help="local, or beam (needs the beam extra of wirepipe)", metavar="RUNNER")] = "local",
    workers: Annotated[int, typer.Option(help="local runner: processes splitting the row groups", metavar="WORKERS")] = 1,
    output: Annotated[str | None, typer.Option(help="beam runner: a new folder for results and metrics "
                                                    "(default results/replay-NAME-RUN)", metavar="OUTPUT")] = None,
    beam_option: Annotated[list[str] | None, typer.Option("--beam-option", help="beam runner: key=value pipeline option (repeatable)", metavar="BEAM-OPTION")] = None,
    stop_on_error: Annotated[bool, typer.Option("--stop-on-error", help=(
        "stop at the first capture file or row group that cannot be read (default: replay every readable one, "
        "list the others and exit 1)"))] = False,
    max_rejected: Annotated[str | None, typer.Option(metavar="N|P%", help=MAX_REJECTED_HELP)] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Replay a capture through a pipeline.

    Its operators and sink, locally or on Apache Beam."""
    from ..core.errors import ConfigError, WirepipeError
    from ..core.units import parse_duration
    from ..replay import Replay

    setup_logging(verbose)
    owned_process()
    rejected, _ = limits(max_rejected)
    choices = {"--pace": (pace, ("max", "original")), "--pace-by": (pace_by, ("received", "sent")),
               "--runner": (runner, ("local", "beam"))}
    for flag, (value, allowed) in choices.items():
        if value not in allowed:
            fail(f"{flag} {value!r}: allowed {', '.join(allowed)}", ExitCode.CONFIG)
    if speed <= 0 or workers < 1 or batch_size < 1 or (count is not None and count < 0):
        fail("--speed must be > 0, --workers and --batch-size >= 1, --count >= 0", ExitCode.CONFIG)
    if runner == "beam" and workers != 1:
        fail("--workers is for the local runner; on Beam pass e.g. --beam-option direct_num_workers=2", ExitCode.CONFIG)
    if runner == "local" and (output or beam_option):
        fail("--output and --beam-option are for --runner beam", ExitCode.CONFIG)
    try:
        gap = parse_duration(max_gap) if max_gap is not None else None
    except ValueError as exc:
        fail(f"--max-gap: {exc}", ExitCode.CONFIG)
    from ..connectors.capture_format import capture_files

    try:
        capture_files(captures)  # before anything opens: no empty output file for a capture that is not there
    except WirepipeError as exc:
        fail(str(exc), ExitCode.CONFIG)
    spec = Replay(str(pipeline), captures, list(set_ or []), pace=pace, speed=speed, pace_by=pace_by,
                  max_gap=gap, batch_size=batch_size, count=count, stop_on_error=stop_on_error)
    try:
        if runner == "beam":
            from ..replay import beam

            result = beam.run(spec, output=output, options=list(beam_option or []))
        else:
            from ..replay import local

            result = local.run(spec, workers=workers)
    except KeyboardInterrupt:
        fail("interrupted", ExitCode.INTERRUPTED)
    except ConfigError as exc:
        fail(str(exc), ExitCode.CONFIG)
    except WirepipeError as exc:
        fail(str(exc), exit_code(exc))
    typer.echo(result.summary(), err=True)
    finish(result.outcome(), rejected)



@command()
def tap(
    subject: Annotated[str | None, typer.Argument(metavar="SUBJECT", help=(
        "subject to watch, wildcards allowed ('points.>'); with --stream, a filter within the stream"))] = None,
    stream: Annotated[str | None, typer.Option(help="JetStream stream to watch (an ephemeral ordered consumer: "
                                                    "no acks, no durable touched)", metavar="STREAM")] = None,
    url: Annotated[str | None, typer.Option(envvar="NATS_URL", help="NATS server URL (default $NATS_URL)", metavar="URL")] = None,
    deliver: Annotated[str, typer.Option(help="--stream: new (what arrives from now), all, or last", metavar="DELIVER")] = "new",
    from_seq: Annotated[int | None, typer.Option(help="--stream: start at this stream sequence", metavar="FROM-SEQ")] = None,
    from_time: Annotated[str | None, typer.Option(help="--stream: start at this time (ISO 8601) or this long "
                                                       "ago (10m)", metavar="FROM-TIME")] = None,
    filter_: Annotated[list[str] | None, typer.Option("--filter", metavar="EXPR", help=(
        "show records where EXPR holds: field == value, !=, <, <=, >, >=, in [a, b], matches 'regex', "
        "field exists (repeatable: all must hold)"))] = None,
    sample: Annotated[int, typer.Option(help="show one message in N (the table counts them all)", metavar="SAMPLE")] = 1,
    limit: Annotated[int | None, typer.Option(help="stop after showing N messages", metavar="LIMIT")] = None,
    raw: Annotated[bool, typer.Option("--raw", help="print messages that do not decode: the reason and the "
                                                    "payload in hex")] = False,
    envelope: Annotated[bool, typer.Option("--envelope", help=(
        "print {value, subject, headers} per message instead of the record alone"))] = False,
    table: Annotated[bool, typer.Option("--table", help=(
        "a live table per publisher instead of the records: rate, bytes per record on the wire and before "
        "compression, latency from Wirepipe-Sent-At, loss from Wirepipe-Seq gaps"))] = False,
    schema: Annotated[str | None, typer.Option(help=(
        "schema for the formats that carry none on the wire (protobuf, avro, bincode, postcard, msgpack-array): "
        "a dataset name, a schema file (x.proto#Message, x.avsc, x.yaml), module:Class, or a registered schema: "
        "registry (each message read with the schema its Wirepipe-Schema header names), registry/NAME[@VERSION], "
        "nats://BUCKET/NAME"), metavar="SCHEMA")] = None,
    allow_pickle: Annotated[bool, typer.Option("--allow-pickle", help=(
        "decode pickle payloads (runs code from the payload: only for trusted publishers)"))] = False,
    dictionaries: Annotated[str | None, typer.Option(help=(
        "nats://BUCKET: fetch the zstd dictionaries that frames name by id from this Object Store bucket "
        "(wirepipe dict)"), metavar="BUCKET")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", metavar="PATH=VALUE",
                                                   help="override a field of the tap's source: path=value")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Watch a subject or stream, decoded, without consuming it.

    Each message is decoded from its headers alone (Content-Type, Content-Encoding)."""
    from ..core.errors import ConfigError
    from ..core.fields import parse_condition
    from ..pipelines.config import apply_override

    if sample < 1 or (limit is not None and limit < 1):
        fail("--sample and --limit take a number >= 1", ExitCode.CONFIG)
    try:
        filters = [parse_condition(text) for text in filter_ or []]
    except ValueError as exc:
        fail(f"--filter {exc}", ExitCode.CONFIG)
    import logging

    setup_logging(verbose)
    if not verbose:
        logging.getLogger("wirepipe").setLevel(logging.WARNING)  # the records are the output
    from ..tap import TapSink, TapStats, build, tap_config

    try:
        data = tap_config(subject=subject, stream=stream, url=url, deliver=deliver, from_seq=from_seq,
                          from_time=from_time)
        for assignment in set_ or []:
            apply_override(data, assignment)
        what = f"stream {stream}" + (f" ({subject})" if subject else "") if stream else f"subject {subject}"
        sink = TapSink(schema=schema, allow_pickle=allow_pickle, filters=filters, sample=sample, limit=limit, raw=raw,
                       envelope=envelope, stats=TapStats() if table else None, lines=not table,
                       announce=f"tap: watching {what} (Ctrl-C stops)", dictionaries=dictionaries)
        pipe = build(data, sink)
    except ConfigError as exc:
        fail(str(exc), ExitCode.CONFIG)
    except ValueError as exc:  # a --schema that cannot be read
        fail(f"--schema: {exc}", ExitCode.CONFIG)
    stats = run_as_worker(pipe, ends=limit is not None)  # --limit is the tap's end: a Ctrl-C before it interrupts
    from ..core.exit_codes import Outcome

    typer.echo(sink.summary() + (", interrupted (SIGINT) before --limit" if stats.interrupted else ""), err=True)
    # An observer: what it did not decode is not rejected (--raw shows it), and nothing it leaves unread is lost.
    finish(Outcome(interrupted=stats.interrupted, failures=stats.outcome().failures))
