"""The ``wirepipe`` command line.

Every command imports what it needs inside its body, so ``wirepipe --help`` answers
without loading pyarrow, nats or pydantic. Errors wirepipe raises on purpose are
printed as one clear message, never as a traceback, and every command exits with a
code from the one table in ``exit_codes`` (0 ok, 1 runtime, 2 usage/config, 3 rejected
records, 4 failed bench combinations, 130 interrupted); ``exit_codes.exit_code`` says which
code an error gets, so the same mistake exits alike in every command.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from .core.exit_codes import ExitCode, exit_code

if TYPE_CHECKING:
    from .pipelines.pipeline import Pipeline, RunStats


def _words_for_placeholders() -> None:
    """Help shows a word for an option's value (``COUNT``, ``FILE``) and nothing after a flag.

    typer >= 0.20 prints the Python type instead (``<bool>``, ``<list[str]>``), which reads as code.
    """
    from typer import core

    def option_type(self: Any, ctx: Any) -> str | None:
        if getattr(self, "is_flag", False) or getattr(self, "count", False):
            return None
        return self.metavar or self.name.upper().replace("_", "-")

    def argument_type(self: Any, ctx: Any) -> str | None:
        return None

    if hasattr(core.TyperOption, "display_type_rich"):
        core.TyperOption.display_type_rich = option_type  # type: ignore[method-assign]
    if hasattr(core.TyperArgument, "display_type_rich"):
        core.TyperArgument.display_type_rich = argument_type  # type: ignore[method-assign]


_words_for_placeholders()

app = typer.Typer(
    name="wirepipe",
    help="Stream-processing pipelines for the payload path on NATS: serialize, compress, publish, consume, measure.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: wraps at the terminal's width, never cuts an option's name
)

EXIT_CONFIG = ExitCode.CONFIG
EXIT_RUNTIME = ExitCode.RUNTIME


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"wirepipe {version('wirepipe')}")
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="print the version and exit")] = False) -> None:
    """Stream-processing pipelines for the payload path on NATS."""


def fail(message: str, code: int) -> NoReturn:
    from .core.redact import redact_secrets

    typer.echo(f"error: {redact_secrets(message)}", err=True)
    raise typer.Exit(code)


def owned_process() -> None:
    """This process runs pipelines for wirepipe's own command: apply the allocator policy (see wirepipe.core.allocator)."""
    from .core.allocator import keep_freed_memory

    keep_freed_memory()


def setup_logging(verbose: bool = False) -> None:
    import logging

    from .core.redact import redact_secrets

    class Redacting(logging.Formatter):
        """No log line shows a URL's credentials, whoever logged it (wirepipe, nats-py, asyncio)."""

        def format(self, record: logging.LogRecord) -> str:
            return redact_secrets(super().format(record))

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(Redacting("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])


def run_as_worker(pipe: Pipeline) -> RunStats:
    """Run a pipeline as a long-lived worker (signals, drain); its errors become exit codes."""
    from .core.errors import WirepipeError
    from .pipelines.worker import run_worker

    try:
        return run_worker(pipe)
    except KeyboardInterrupt:
        fail("interrupted", ExitCode.INTERRUPTED)
    except WirepipeError as exc:
        fail(str(exc), exit_code(exc))
    except OSError as exc:  # an I/O error no part of wirepipe described: still one line, not a traceback
        fail(f"{exc.filename or pipe.name}: {exc.strerror or exc}", EXIT_RUNTIME)


@app.command()
def run(
    pipeline: Annotated[Path, typer.Argument(metavar="PIPELINE", help="pipeline YAML file")],
    set_: Annotated[list[str] | None, typer.Option("--set", metavar="PATH=VALUE",
                                                   help="override a field: path=value (repeatable)")] = None,
    count: Annotated[int | None, typer.Option(help="stop after N records (overrides source.count)")] = None,
    duration: Annotated[str | None, typer.Option(help="stop after a time, e.g. 30s (overrides source.duration)")] = None,
    workers: Annotated[str, typer.Option(help="N worker processes sharing the source (a JetStream durable or a "
                                              "core NATS queue group), or auto (one per CPU); --count and "
                                              "--duration apply to each")] = "1",
    max_rejected: Annotated[str | None, typer.Option(metavar="N|P%", help=(
        "exit 3 when more records than this are rejected (a count or a percentage of the records read); "
        "default: rejections are reported, and every record rejected exits 3"))] = None,
    status: Annotated[bool | None, typer.Option("--status/--no-status", help=(
        "a live status line on stderr (default: on a terminal)"))] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Validate and run a pipeline."""
    from .core.errors import ConfigError, WirepipeError
    from .core.exit_codes import RejectLimit
    from .core.units import parse_duration
    from .pipelines.config import read_config
    from .pipelines.pool import resolve_workers

    setup_logging(verbose)
    owned_process()
    overrides = list(set_ or [])
    try:
        n_workers = resolve_workers(workers)
        limit = RejectLimit.parse(max_rejected)
    except ValueError as exc:
        fail(str(exc), EXIT_CONFIG)
    try:
        if count is not None:
            overrides.append(f"source.count={count}")
        if duration is not None:
            overrides.append(f"source.duration={parse_duration(duration)}")
        if n_workers > 1:
            from .pipelines.pool import Pool

            pool = Pool(read_config(pipeline, overrides), n_workers, file=str(pipeline))
        else:
            from .pipelines.config import build_pipeline, validate_config
            from .pipelines.pool import expand_worker

            data = expand_worker(read_config(pipeline, overrides), 0)
            pipe = build_pipeline(validate_config(data, file=str(pipeline)), file=str(pipeline))
            pipe.source.check_input()
    except ValueError as exc:
        fail(f"--duration: {exc}", EXIT_CONFIG)
    except (ConfigError, WirepipeError) as exc:  # a missing input file or capture is a usage error too
        fail(str(exc), EXIT_CONFIG)
    if n_workers > 1:
        import asyncio

        code = asyncio.run(pool.run())
        typer.echo(pool.summary(), err=True)
        if pool.gave_up:
            fail(f"{pool.name}: {pool.gave_up}", EXIT_RUNTIME)
        raise typer.Exit(code)
    _show_status(pipe, status)
    stats = run_as_worker(pipe)
    from .pipelines.monitor import run_summary

    typer.echo(run_summary(pipe, stats), err=True)
    verdict = limit.verdict(stats.rejected, stats.records_in)
    if verdict is not None:
        fail(verdict, ExitCode.REJECTED)


def _show_status(pipe: Any, wanted: bool | None) -> None:
    """A live status line, rewritten in place, when stderr is a terminal (or ``--status``).

    A ``monitor:`` section in the pipeline keeps its own settings; ``--no-status`` turns the line off.
    """
    from .pipelines.monitor import MonitorConfig

    live = sys.stderr.isatty()
    if wanted is False:
        if pipe.monitor is not None:
            pipe.monitor = MonitorConfig.model_validate(pipe.monitor).model_copy(update={"status_interval": 0})
        return
    if pipe.monitor is None and (wanted or live):
        pipe.monitor = MonitorConfig(status_interval=1.0, live=live)


@app.command()
def server(
    port: Annotated[int, typer.Option(help="port on 127.0.0.1 (0: a free one)")] = 0,
    store: Annotated[Path | None, typer.Option(help="JetStream store directory (default: a temporary one)")] = None,
    cluster: Annotated[int, typer.Option(help="N > 1: a local N-node JetStream cluster on loopback (prints the URL "
                                              "list; each node its own store)")] = 1,
) -> None:
    """Run an embedded nats-server in the foreground.

    JetStream on; prints its URL; Ctrl-C stops it."""
    from .connectors.nats.server import EmbeddedServer, LocalCluster, serve_forever
    from .core.errors import WirepipeError

    if not 1 <= cluster <= 9 or (cluster > 1 and port):
        fail(f"--cluster {cluster}: give 1..9 nodes; --port is for one node (a cluster picks free ports)",
             EXIT_CONFIG)
    try:
        target = (LocalCluster(cluster, store_dir=store) if cluster > 1
                  else EmbeddedServer(port=port or None, store_dir=store))
        code = serve_forever(target, echo=lambda url: typer.echo(url))
    except WirepipeError as exc:
        fail(str(exc), exit_code(exc))
    raise typer.Exit(code)


@app.command()
def capture(
    out: Annotated[str, typer.Option("--out", "-o", help="folder of the capture files")],
    subject: Annotated[str | None, typer.Option(help="subject to capture, wildcards allowed ('blocks.>')")] = None,
    stream: Annotated[str | None, typer.Option(help="JetStream stream to capture (an ordered consumer by default)")] = None,
    durable: Annotated[str | None, typer.Option(help="JetStream durable consumer: acknowledged per completed file, resumable")] = None,
    from_seq: Annotated[int | None, typer.Option(help="JetStream: start at this stream sequence")] = None,
    from_time: Annotated[str | None, typer.Option(help="JetStream: start at this time (ISO 8601) or this long ago (10m)")] = None,
    follow: Annotated[bool, typer.Option("--follow", help=(
        "JetStream with --from-seq/--from-time: keep capturing new records after reaching the end of the "
        "stream (default: stop there)"))] = False,
    stop_at_end: Annotated[bool, typer.Option(help="JetStream: stop once the stream has been read "
                                                   "(the default with --from-seq/--from-time)")] = False,
    url: Annotated[str | None, typer.Option(envvar="NATS_URL", help="NATS server URL (default $NATS_URL)")] = None,
    queue: Annotated[str | None, typer.Option(help="core NATS: queue group shared by several capture workers")] = None,
    max_file_size: Annotated[str | None, typer.Option(help="complete a file at about this size (default 256MiB)")] = None,
    max_file_age: Annotated[str, typer.Option(help="complete a file this long after its first record")] = "60s",
    row_group_rows: Annotated[int | None, typer.Option(help="rows per row group (default 65536)")] = None,
    count: Annotated[int | None, typer.Option(help="stop after N records")] = None,
    duration: Annotated[str | None, typer.Option(help="stop after a time, e.g. 10m")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", metavar="PATH=VALUE", help="override a field of the generated pipeline: path=value")] = None,
    print_config: Annotated[bool, typer.Option(help="print the pipeline this command runs (YAML) and exit")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Capture what flows on NATS into Parquet files.

    Until stopped, or to the end of a stream (see README: Capture)."""
    from .core.errors import ConfigError
    from .core.units import parse_duration, parse_size
    from .pipelines.capture_worker import capture_config
    from .pipelines.config import apply_override, build_pipeline, validate_config

    setup_logging(verbose)
    owned_process()
    if follow and stop_at_end:
        fail("--follow and --stop-at-end: give one", EXIT_CONFIG)
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

            from .core.redact import redact_tree

            typer.echo(yaml.safe_dump(redact_tree(data), sort_keys=False), nl=False)
            return
        pipe = build_pipeline(validate_config(data, file="wirepipe capture"), file="wirepipe capture")
    except ValueError as exc:
        fail(str(exc), EXIT_CONFIG)
    except ConfigError as exc:
        fail(str(exc), EXIT_CONFIG)
    # A JetStream source makes the run loop commit, and so complete a file, every `ack_pressure` records too:
    # the log says so, since on a backlog that is what sets the files' size.
    from .connectors.base import AtLeastOnce

    source = pipe.source
    pipe.sink.commit_records = source.ack_pressure if isinstance(source, AtLeastOnce) else None
    stats = run_as_worker(pipe)
    files = pipe.sink.files
    typer.echo(f"{pipe.name}: {stats.records_out} records captured into {len(files)} file(s) in {out} "
               f"in {stats.elapsed:.2f}s", err=True)


@app.command()
def tap(
    subject: Annotated[str | None, typer.Argument(metavar="SUBJECT", help=(
        "subject to watch, wildcards allowed ('points.>'); with --stream, a filter within the stream"))] = None,
    stream: Annotated[str | None, typer.Option(help="JetStream stream to watch (an ephemeral ordered consumer: "
                                                    "no acks, no durable touched)")] = None,
    url: Annotated[str | None, typer.Option(envvar="NATS_URL", help="NATS server URL (default $NATS_URL)")] = None,
    deliver: Annotated[str, typer.Option(help="--stream: new (what arrives from now), all, or last")] = "new",
    from_seq: Annotated[int | None, typer.Option(help="--stream: start at this stream sequence")] = None,
    from_time: Annotated[str | None, typer.Option(help="--stream: start at this time (ISO 8601) or this long "
                                                       "ago (10m)")] = None,
    filter_: Annotated[list[str] | None, typer.Option("--filter", metavar="EXPR", help=(
        "show records where EXPR holds: field == value, !=, <, <=, >, >=, in \\[a, b], matches 'regex', "
        "field exists (repeatable: all must hold)"))] = None,
    sample: Annotated[int, typer.Option(help="show one message in N (the table counts them all)")] = 1,
    limit: Annotated[int | None, typer.Option(help="stop after showing N messages")] = None,
    raw: Annotated[bool, typer.Option("--raw", help="print messages that do not decode: the reason and the "
                                                    "payload in hex")] = False,
    envelope: Annotated[bool, typer.Option("--envelope", help=(
        "print {value, subject, headers} per message instead of the record alone"))] = False,
    table: Annotated[bool, typer.Option("--table", help=(
        "a live table per publisher instead of the records: rate, bytes per record on the wire and before "
        "compression, latency from Wirepipe-Sent-At, loss from Wirepipe-Seq gaps"))] = False,
    schema: Annotated[str | None, typer.Option(help=(
        "schema for the formats that carry none on the wire (protobuf, avro, bincode, postcard, msgpack-array): "
        "a dataset name, a schema file (x.proto#Message, x.avsc, x.yaml) or module:Class"))] = None,
    allow_pickle: Annotated[bool, typer.Option("--allow-pickle", help=(
        "decode pickle payloads (runs code from the payload: only for trusted publishers)"))] = False,
    set_: Annotated[list[str] | None, typer.Option("--set", metavar="PATH=VALUE",
                                                   help="override a field of the tap's source: path=value")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Watch a subject or stream, decoded, without consuming it.

    Each message is decoded from its headers alone (Content-Type, Content-Encoding)."""
    from .core.errors import ConfigError
    from .core.fields import parse_condition
    from .pipelines.config import apply_override

    if sample < 1 or (limit is not None and limit < 1):
        fail("--sample and --limit take a number >= 1", EXIT_CONFIG)
    try:
        filters = [parse_condition(text) for text in filter_ or []]
    except ValueError as exc:
        fail(f"--filter {exc}", EXIT_CONFIG)
    import logging

    setup_logging(verbose)
    if not verbose:
        logging.getLogger("wirepipe").setLevel(logging.WARNING)  # the records are the output
    from .tap import TapSink, TapStats, build, tap_config

    try:
        data = tap_config(subject=subject, stream=stream, url=url, deliver=deliver, from_seq=from_seq,
                          from_time=from_time)
        for assignment in set_ or []:
            apply_override(data, assignment)
        what = f"stream {stream}" + (f" ({subject})" if subject else "") if stream else f"subject {subject}"
        sink = TapSink(schema=schema, allow_pickle=allow_pickle, filters=filters, sample=sample, limit=limit, raw=raw,
                       envelope=envelope, stats=TapStats() if table else None, lines=not table,
                       announce=f"tap: watching {what} (Ctrl-C stops)")
        pipe = build(data, sink)
    except ConfigError as exc:
        fail(str(exc), EXIT_CONFIG)
    except ValueError as exc:  # a --schema that cannot be read
        fail(f"--schema: {exc}", EXIT_CONFIG)
    run_as_worker(pipe)
    typer.echo(sink.summary(), err=True)


dict_app = typer.Typer(name="dict", no_args_is_help=True, help="zstd dictionaries shared through NATS.")
app.add_typer(dict_app)


@dict_app.command("train")
def dict_train(
    from_: Annotated[str, typer.Option("--from", metavar="CAPTURE|FILE", help=(
        "a capture folder (or file), or a .jsonl / .parquet file of records"))],
    to: Annotated[str, typer.Option("--to", metavar="nats://BUCKET/NAME", help=(
        "where to publish it: the bucket (created if missing) and the name publishers give"))],
    url: Annotated[str | None, typer.Option(envvar="NATS_URL", help="NATS server URL (default $NATS_URL)")] = None,
    format: Annotated[str, typer.Option(help="records from a file: the format they are serialized in, as your "
                                             "publisher's serialize does")] = "msgpack",
    schema: Annotated[str | None, typer.Option(help="records from a file: the schema a schema'd format needs")] = None,
    level: Annotated[str, typer.Option(help="zstd level the publisher compresses at: fastest, default, best or "
                                            "an integer")] = "default",
    size: Annotated[str | None, typer.Option(help="dictionary size, e.g. 16KiB (default: a tenth of the "
                                                  "records' bytes, 1-16 KiB)")] = None,
    holdout: Annotated[float, typer.Option(help="the share of records held out to measure the gain on")] = 0.2,
    count: Annotated[int, typer.Option(help="read at most N records")] = 100_000,
    out: Annotated[Path | None, typer.Option(metavar="FILE", help="also write the dictionary to FILE")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="train and report; publish nothing")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Train a zstd dictionary on real records and publish it.

    Reports its gain against plain zstd on records it did not train on.
    """
    import asyncio
    import logging

    from .connectors.dictionary_bucket import parse_ref
    from .core.errors import ConfigError, WirepipeError
    from .core.units import parse_size
    from .dictionaries import publish, read_samples, train

    setup_logging(verbose)
    if not verbose:
        logging.getLogger("wirepipe").setLevel(logging.WARNING)
    try:
        ref = parse_ref(to, name=True)
        nbytes = parse_size(size) if size is not None else None
    except ValueError as exc:
        fail(f"--to/--size: {exc}", EXIT_CONFIG)
    try:
        samples, rejects = asyncio.run(read_samples(from_, count=count, fmt=format, schema=schema, ref=ref,
                                                    nats={"url": url}))
        if rejects:
            typer.echo(f"{len(rejects)} record(s) could not be read and were left out, e.g. at {rejects[0].stage}: "
                       f"{rejects[0].error}", err=True)
        training = train(samples, level=level, size=nbytes, holdout=holdout)
    except ConfigError as exc:
        fail(str(exc), EXIT_CONFIG)
    except ValueError as exc:
        fail(f"--level: {exc}", EXIT_CONFIG)
    except WirepipeError as exc:
        fail(str(exc), EXIT_RUNTIME)
    for line in training.lines():
        typer.echo(line)
    if out is not None:
        from .storage.files import write_bytes_atomic

        write_bytes_atomic(out, training.dictionary)
        typer.echo(f"wrote {out}")
    if dry_run:
        return
    try:
        dict_id = asyncio.run(publish(url, ref, training, origin=from_))
    except WirepipeError as exc:
        fail(str(exc), EXIT_RUNTIME)
    typer.echo(f"published {ref} (id {dict_id}; also as nats://{ref.bucket}/id/{dict_id})")


@dict_app.command("list")
def dict_list(
    bucket: Annotated[str, typer.Argument(metavar="nats://BUCKET", help="the dictionary bucket")],
    url: Annotated[str | None, typer.Option(envvar="NATS_URL", help="NATS server URL (default $NATS_URL)")] = None,
) -> None:
    """List a bucket's dictionaries: id, size, date, gain."""
    import asyncio
    import json

    from .connectors.dictionary_bucket import parse_ref
    from .core.errors import WirepipeError
    from .dictionaries import with_bucket

    try:
        ref = parse_ref(bucket, name=False)
    except ValueError as exc:
        fail(str(exc), EXIT_CONFIG)
    try:
        entries = asyncio.run(with_bucket(url, ref.bucket, lambda b: b.entries()))
    except WirepipeError as exc:
        fail(str(exc), EXIT_RUNTIME)
    for e in entries:
        try:
            gain = f"{json.loads(e.description)['gain']:+.1%} vs zstd"
        except (ValueError, KeyError, TypeError):
            gain = ""
        typer.echo(f"{e.name}\tid {e.dict_id}\t{e.size:,} B\t{e.modified[:19]}\t{gain}".rstrip())


@dict_app.command("show")
def dict_show(
    dictionary: Annotated[str, typer.Argument(metavar="nats://BUCKET/NAME", help=(
        "a dictionary by name, or by id: nats://BUCKET/id/ID"))],
    url: Annotated[str | None, typer.Option(envvar="NATS_URL", help="NATS server URL (default $NATS_URL)")] = None,
    out: Annotated[Path | None, typer.Option(metavar="FILE", help="write the dictionary to FILE (zstd -D FILE reads it)")] = None,
) -> None:
    """Show a dictionary's id, size and training report."""
    import asyncio
    import json

    from .codecs.compression import DEFAULT_MAX_OUTPUT
    from .connectors.dictionary_bucket import ID_PREFIX, parse_ref
    from .core.errors import WirepipeError
    from .dictionaries import with_bucket

    by_id = dictionary.rsplit("/", 2)
    try:
        if len(by_id) == 3 and by_id[1] == ID_PREFIX.rstrip("/") and by_id[2].isdigit():
            ref = parse_ref(by_id[0], name=False)
            name = f"{ID_PREFIX}{by_id[2]}"
        else:
            ref = parse_ref(dictionary, name=True)
            name = str(ref.name)
    except ValueError as exc:
        fail(str(exc), EXIT_CONFIG)

    async def show(b: Any) -> tuple[Any, bytes]:
        return await b.info(name), await b.by_name(name, DEFAULT_MAX_OUTPUT)

    try:
        entry, data = asyncio.run(with_bucket(url, ref.bucket, show))
    except WirepipeError as exc:
        fail(str(exc), EXIT_RUNTIME)
    typer.echo(f"nats://{ref.bucket}/{name}: id {entry.dict_id}, {entry.size:,} bytes, {entry.modified} "
               "(digest checked)")
    try:
        for key, value in json.loads(entry.description).items():
            typer.echo(f"  {key}: {value}")
    except (ValueError, AttributeError):
        if entry.description:
            typer.echo(f"  {entry.description}")
    if out is not None:
        from .storage.files import write_bytes_atomic

        write_bytes_atomic(out, data)
        typer.echo(f"wrote {out}")


@app.command()
def replay(
    captures: Annotated[list[str], typer.Argument(metavar="CAPTURE", help="capture files, folders or globs, in capture order")],
    pipeline: Annotated[Path, typer.Option("--pipeline", "-p", help="pipeline YAML: its source is replaced by the capture")],
    set_: Annotated[list[str] | None, typer.Option("--set", metavar="PATH=VALUE", help="override a field: path=value (repeatable)")] = None,
    pace: Annotated[str, typer.Option(help="max: as fast as possible; original: the recorded inter-arrival times")] = "max",
    speed: Annotated[float, typer.Option(help="with --pace original: how many times faster than recorded")] = 1.0,
    pace_by: Annotated[str, typer.Option(help="with --pace original: the times to follow, received or sent")] = "received",
    max_gap: Annotated[str | None, typer.Option(help="with --pace original: shorten longer pauses to this, e.g. 5s")] = None,
    count: Annotated[int | None, typer.Option(help="replay only the first N records")] = None,
    batch_size: Annotated[int, typer.Option(help="records per batch (local runner)")] = 8192,
    runner: Annotated[str, typer.Option(help="local, or beam (needs the beam extra of wirepipe)")] = "local",
    workers: Annotated[int, typer.Option(help="local runner: processes splitting the row groups")] = 1,
    output: Annotated[str | None, typer.Option(help="beam runner: a new folder for results and metrics "
                                                    "(default results/replay-NAME-RUN)")] = None,
    beam_option: Annotated[list[str] | None, typer.Option("--beam-option", help="beam runner: key=value pipeline option (repeatable)")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Replay a capture through a pipeline.

    Its operators and sink, locally or on Apache Beam."""
    from .core.errors import ConfigError, WirepipeError
    from .core.units import parse_duration
    from .replay import Replay

    setup_logging(verbose)
    owned_process()
    choices = {"--pace": (pace, ("max", "original")), "--pace-by": (pace_by, ("received", "sent")),
               "--runner": (runner, ("local", "beam"))}
    for flag, (value, allowed) in choices.items():
        if value not in allowed:
            fail(f"{flag} {value!r}: allowed {', '.join(allowed)}", EXIT_CONFIG)
    if speed <= 0 or workers < 1 or batch_size < 1 or (count is not None and count < 0):
        fail("--speed must be > 0, --workers and --batch-size >= 1, --count >= 0", EXIT_CONFIG)
    if runner == "beam" and workers != 1:
        fail("--workers is for the local runner; on Beam pass e.g. --beam-option direct_num_workers=2", EXIT_CONFIG)
    if runner == "local" and (output or beam_option):
        fail("--output and --beam-option are for --runner beam", EXIT_CONFIG)
    try:
        gap = parse_duration(max_gap) if max_gap is not None else None
    except ValueError as exc:
        fail(f"--max-gap: {exc}", EXIT_CONFIG)
    from .connectors.capture import capture_files

    try:
        capture_files(captures)  # before anything opens: no empty output file for a capture that is not there
    except WirepipeError as exc:
        fail(str(exc), EXIT_CONFIG)
    spec = Replay(str(pipeline), captures, list(set_ or []), pace=pace, speed=speed, pace_by=pace_by,
                  max_gap=gap, batch_size=batch_size, count=count)
    try:
        if runner == "beam":
            from .replay import beam

            result = beam.run(spec, output=output, options=list(beam_option or []))
        else:
            from .replay import local

            result = local.run(spec, workers=workers)
    except KeyboardInterrupt:
        fail("interrupted", ExitCode.INTERRUPTED)
    except ConfigError as exc:
        fail(str(exc), EXIT_CONFIG)
    except WirepipeError as exc:
        fail(str(exc), exit_code(exc))
    typer.echo(result.summary(), err=True)


@app.command("test")
def test_pipelines(
    paths: Annotated[list[str] | None, typer.Argument(metavar="PATH", help=(
        "test files (*.test.yaml), pipeline files (their test file beside them) or folders (searched "
        "recursively); default: the current folder"))] = None,
    update: Annotated[bool, typer.Option("--update", help=(
        "record what each failing (or unrecorded) case produces as its expect: (snapshot mode)"))] = False,
    junit: Annotated[Path | None, typer.Option("--junit", metavar="FILE", help="also write JUnit XML to FILE")] = None,
) -> None:
    """Run pipeline test files in process, with no server.

    Each case's input goes through the pipeline as written; exit 1 if a case fails."""
    from .core.errors import ConfigError
    from .pipetest import collect, report, run_files

    try:
        files = collect(list(paths or []))  # every file valid before any case runs (exit 2, as a config error)
    except ConfigError as exc:
        fail(str(exc), EXIT_CONFIG)
    session = run_files(files, update=update, echo=typer.echo)
    for block in report.failure_blocks(session.results):
        typer.echo(block)
    for path in session.rewritten:
        typer.echo(f"updated {path}: review the change (git diff) before committing it", err=True)
    typer.echo(report.summary_line(session.results, session.elapsed))
    if junit is not None:
        report.write_junit(session.results, junit, session.elapsed)
    if session.failed:
        raise typer.Exit(EXIT_RUNTIME)


@app.command()
def validate(pipelines: Annotated[list[Path], typer.Argument(metavar="PIPELINE", help="pipeline YAML files")]) -> None:
    """Validate pipeline and test files without running them.

    Exit 2 if any is invalid."""
    from .core.errors import ConfigError
    from .pipelines.config import load_pipeline

    bad = 0
    for path in pipelines:
        if path.name.endswith((".test.yaml", ".test.yml")):  # a test file beside its pipeline: `configs/*.yaml`
            from .pipetest import collect

            try:
                cases = sum(len(f.spec.tests) for f in collect([str(path)]))
            except ConfigError as exc:
                typer.echo(f"error: {exc}", err=True)
                bad += 1
                continue
            typer.echo(f"ok: {path}: {cases} test case(s) (run them: wirepipe test {path})")
            continue
        try:
            pipe = load_pipeline(path)
        except ConfigError as exc:
            typer.echo(f"error: {exc}", err=True)
            bad += 1
            continue
        typer.echo(f"ok: {path}: {pipe!r}")
    if bad:
        raise typer.Exit(EXIT_CONFIG)


@app.command()
def codecs() -> None:
    """List every format and codec, its levels, if installed."""
    from .codecs.compression import CODECS, deflate_choice
    from .codecs.formats import FORMATS
    from .report.text import noted, terminal_width, wrap
    from .wire import Header

    # Plain text that fits the terminal: a name or a content type is what a reader copies into a config or a
    # peer, so it is never cut; the notes wrap beneath their row when they do not fit beside it.
    width = terminal_width()
    formats = noted("formats (serialize / deserialize)", ["format", Header.CONTENT_TYPE.value, "installed"],
                    [[f.name, f.content_type, _installed(f)] for f in FORMATS.values()],
                    [f.note for f in FORMATS.values()], width)
    codecs = noted("codecs (compress / decompress)",
                   ["codec", Header.CONTENT_ENCODING.value, "fastest", "default", "best", "range", "installed"],
                   [[c.name, c.content_encoding, str(c.fastest), str(c.default), str(c.best),
                     f"{c.min_level}..{c.max_level}", _installed(c)] for c in CODECS.values()],
                   [c.note for c in CODECS.values()], width)
    tail = [f"zlib, gzip, deflate run on: {deflate_choice()} (standard bytes)",
            "chain syntax: format|codec[:level]|..., e.g. msgpack|zstd:3 or json|gzip:best"]
    typer.echo("\n".join([formats, codecs, *(line for text in tail for line in wrap(text, width))]))


def _installed(entry: Any) -> str:
    """``yes``, or the extra that installs the entry's library."""
    return "yes" if entry.available() else f"no: wirepipe[{entry.extra}]" if entry.extra else "no"


schema_app = typer.Typer(help="Typed schemas: infer one from your records.", no_args_is_help=True,
                         rich_markup_mode=None)
app.add_typer(schema_app, name="schema")
INFER_LIMIT = 100_000  # records read by `schema infer` (a field absent only later than this is not seen)


@schema_app.command("infer")
def schema_infer(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="records: FILE.jsonl or FILE.parquet")],
    name: Annotated[str | None, typer.Option(help="the record's name (default: from the file name)")] = None,
) -> None:
    """Print the typed schema of FILE's records.

    YAML, with `?` where a field is absent or null in some records: what serialize and deserialize take as
    `schema:`, as it is."""
    import yaml

    from .bench.data import read_records, schema_name
    from .core.errors import WirepipeError
    from .schema import SchemaError, infer_schema

    try:
        records = read_records(file, INFER_LIMIT)
        if not all(isinstance(r, dict) for r in records):
            raise WirepipeError(f"{file}: the records are not all objects (mappings): no fields to type")
        schema = infer_schema(records, name or schema_name(file.stem))
    except SchemaError as exc:
        fail(f"{file}: {exc}", EXIT_CONFIG)
    except WirepipeError as exc:
        fail(str(exc), exit_code(exc))
    more = "" if len(records) < INFER_LIMIT else f" (the first {INFER_LIMIT:,})"
    typer.echo(f"# inferred by `wirepipe schema infer` from {len(records):,} records{more} of {file}")
    typer.echo(yaml.safe_dump(schema.to_document(), sort_keys=False, allow_unicode=True), nl=False)


@app.command()
def datasets() -> None:
    """List the built-in datasets of the generate source."""
    from rich.console import Console
    from rich.table import Table

    from .datasets import DATASETS

    t = Table(title="datasets (source: {type: generate, dataset: NAME})")
    for col in ("dataset", "fields", "raw size (bytes)", "description"):
        t.add_column(col)
    for d in DATASETS.values():
        raw = str(d.fixed_raw_size) if d.fixed_raw_size else f"~{d.raw_size(d.sample(100)) // 100} (varies)"
        t.add_row(d.name, ", ".join(d.fields), raw, d.description)
    Console().print(t)


@app.command()
def report(
    results: Annotated[list[Path], typer.Argument(metavar="RESULTS", help="results: metrics folders, Parquet files, or folders of them")],
    markdown: Annotated[Path | None, typer.Option("--markdown", help="write the report as Markdown to FILE")] = None,
    html: Annotated[Path | None, typer.Option("--html", help="write one self-contained HTML file with plots")] = None,
    png: Annotated[Path | None, typer.Option("--png", help="write each plot as a PNG into DIR")] = None,
    csv: Annotated[str | None, typer.Option("--csv", help="write tidy CSV rows to FILE (- for stdout)")] = None,
    bandwidth: Annotated[str, typer.Option(help="link for the recommendation, e.g. 100Mbit, 1Gbit, 12.5MB/s")] = "100Mbit",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no terminal tables")] = False,
) -> None:
    """Tables, plots and recommendations from results.

    Per stage and per pipeline: timing, sizes, latency; a flow's publisher and consumer joined."""
    from .core.errors import WirepipeError
    from .core.units import parse_bandwidth

    try:
        bps = parse_bandwidth(bandwidth)
    except ValueError as exc:
        fail(f"--bandwidth: {exc}", EXIT_CONFIG)
    missing = [str(p) for p in results if not p.exists()]
    if missing:
        fail(f"no such file or folder: {', '.join(missing)}", EXIT_CONFIG)
    from .report import load_results, summarize
    from .report.render import print_terminal, write_csv, write_markdown

    try:
        res = load_results(results)
        rep = summarize(res.stages, res.latency, res.runs, bandwidth_bps=bps)
    except WirepipeError as exc:
        fail(str(exc), exit_code(exc))
    notes: list[str] = []
    if not quiet and csv != "-":
        print_terminal(rep)
    if csv is not None:
        write_csv(rep, csv)
    if markdown is not None:
        write_markdown(rep, markdown)
        notes.append(f"wrote {markdown}")
    if html is not None or png is not None:
        from .report.plots import write_html, write_pngs

        if html is not None:
            notes += write_html(rep, html)
            notes.append(f"wrote {html}")
        if png is not None:
            files, why = write_pngs(rep, png)
            notes += why
            notes.append(f"wrote {len(files)} PNG file(s) to {png}")
    if res.skipped:
        notes.append(f"skipped {len(res.skipped)} Parquet file(s) that are not wirepipe results")
    for note in dict.fromkeys(notes):
        typer.echo(note, err=True)


@app.command()
def bench(
    dataset: Annotated[str | None, typer.Option(help="datasets, comma-separated: point,large_vectors,transaction,"
                                                    "block,feed")] = None,
    input: Annotated[list[Path] | None, typer.Option("--input", help="your records: FILE.jsonl or FILE.parquet")] = None,
    format: Annotated[str | None, typer.Option(help="formats, comma-separated (default: all)")] = None,
    codec: Annotated[str | None, typer.Option(help="codecs, comma-separated (default: all)")] = None,
    level: Annotated[str | None, typer.Option(help="levels: fastest,default,best or integers")] = None,
    transport: Annotated[str, typer.Option(help="nats (default, embedded server unless --url), jetstream or none (in-process codecs only)")] = "nats",
    url: Annotated[str | None, typer.Option(help="NATS url (default: an embedded server)")] = None,
    iterations: Annotated[int | None, typer.Option("--iterations", "-k", help="K iterations")] = None,
    repetitions: Annotated[int | None, typer.Option("--repetitions", "-n",
                                                    help="N repetitions per iteration (default scales with size)")] = None,
    out: Annotated[Path, typer.Option(help="folder for bench.parquet, bench.md and reports")] = Path("results/bench"),
    quick: Annotated[bool, typer.Option(help=(
        "a subset that finishes in about a minute: 4 formats, 3 codecs, 2 levels, K = 3, smaller N; "
        "composes with every other flag (--input, --dataset, --format ...)"))] = False,
    zstd_dict: Annotated[str | None, typer.Option(help="`train`: add zstd rows with a dictionary trained on the data")] = None,
    records_per_message: Annotated[str | None, typer.Option(help="records framed per message, e.g. 1,10,100")] = None,
    bandwidth: Annotated[str, typer.Option(help="link speed for the balanced pick, e.g. 100Mbit, 1Gbit")] = "100Mbit",
    seed: Annotated[int, typer.Option(help="dataset seed")] = 0,
    seed_tables: Annotated[bool, typer.Option("--seed-tables", help="print seeds 001-004's tables with wirepipe's "
                                              "formats (k/n overridable with -k/-n)")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="run a plan estimated over 10 minutes without asking")] = False,
) -> None:
    """The study: every format x codec x level, every stage timed.

    On the built-in datasets or your own records; tables and a recommendation."""
    from rich.console import Console

    owned_process()
    if seed_tables:
        from .bench.seed_tables import print_seed_tables

        tables = [d.strip() for d in dataset.split(",")] if dataset else None
        from .bench.seed_tables import SEED_TABLES

        bad = [t for t in tables or [] if t not in SEED_TABLES]
        if bad:
            fail(f"--dataset with --seed-tables: unknown table {', '.join(bad)}: allowed {', '.join(SEED_TABLES)}",
                 EXIT_CONFIG)
        print_seed_tables(Console(stderr=False), iterations, repetitions, seed, tables=tables)
        return

    from .bench.command import execute, make_plan
    from .core.errors import ConfigError, WirepipeError
    from .core.units import parse_bandwidth

    try:
        plan = make_plan(dataset=dataset, inputs=list(input or []), format=format, codec=codec, level=level,
                         transport=transport, url=url, iterations=iterations, repetitions=repetitions, out=out,
                         quick=quick, zstd_dict=zstd_dict, records_per_message=records_per_message, seed=seed)
        bits = parse_bandwidth(bandwidth)
    except ValueError as exc:
        fail(f"--bandwidth: {exc}", EXIT_CONFIG)
    except ConfigError as exc:
        fail(str(exc), EXIT_CONFIG)
    console = Console(stderr=False)
    try:
        run = execute(plan, bits, console, yes=yes, interactive=sys.stdin.isatty() and sys.stdout.isatty())
    except ConfigError as exc:
        fail(str(exc), EXIT_CONFIG)
    except WirepipeError as exc:
        fail(str(exc), exit_code(exc))
    except KeyboardInterrupt:  # before the first measurement (calibration, confirmation)
        fail("interrupted before anything was measured", ExitCode.INTERRUPTED)
    if run.interrupted:
        fail("interrupted: the files hold what finished", ExitCode.INTERRUPTED)
    if not run.raw_rows:
        fail("nothing was measured: every combination failed (see above)", EXIT_RUNTIME)
    if run.failed:
        fail(f"{len(run.failed)} combination(s) failed (see above); the others are in the files",
             ExitCode.BENCH_FAILURES)


@app.command()
def plan(
    rate: Annotated[str, typer.Option(help="target records/s, e.g. 2M/s, 500k")],
    bench: Annotated[list[str] | None, typer.Option("--bench", help="wirepipe bench results to take the costs "
                                                                    "from (default: measure in-process now)")] = None,
    dataset: Annotated[str | None, typer.Option(help=(
        "dataset whose records are planned for (default: with --bench, each dataset of the results, your own "
        "from bench --input too; without, block)"))] = None,
    chain: Annotated[str | None, typer.Option(help="codec chain, e.g. msgpack|zstd:best (with --bench: default "
                                                   "the fastest measured)")] = None,
    transport: Annotated[str, typer.Option(help="jetstream or nats")] = "jetstream",
    sink: Annotated[str, typer.Option(help="consumer sink whose cost counts: null or parquet")] = "null",
    replicas: Annotated[int, typer.Option(help="JetStream replicas (1..5)")] = 3,
    retention: Annotated[str, typer.Option(help="how long the stream keeps records, e.g. 7d, 24h")] = "7d",
    nodes: Annotated[int, typer.Option(help="machines (each runs a nats-server and workers)")] = 3,
    cores_per_node: Annotated[int | None, typer.Option(help="cores per machine (default: this one's)")] = None,
    link: Annotated[str, typer.Option(help="network link per machine, e.g. 10Gbit")] = "10Gbit",
    disk: Annotated[str, typer.Option(help="JetStream disk per machine, e.g. 2TB")] = "1TB",
    consumers: Annotated[int, typer.Option(help="pipelines consuming the stream")] = 1,
    utilization: Annotated[float, typer.Option(help="plan cores to be at most this busy (0..1)")] = 0.7,
) -> None:
    """Turn per-record costs into a deployment plan.

    Cores, workers, wire bytes/s, JetStream storage, and the first limit."""
    from .core.errors import WirepipeError
    from .core.units import parse_bandwidth, parse_duration, parse_rate, parse_size
    from .pipelines.pool import usable_cores
    from .plan.capacity import Deployment, costs_from_bench, measure_costs
    from .plan.capacity import plan as make_plan

    try:
        if transport not in ("jetstream", "nats"):
            raise ValueError(f"--transport {transport!r}: allowed jetstream, nats")
        if not 1 <= replicas <= 5 or nodes < 1 or consumers < 1 or not 0 < utilization <= 1:
            raise ValueError("--replicas is 1..5, --nodes and --consumers >= 1, --utilization in (0, 1]")
        if replicas > nodes and transport == "jetstream":
            raise ValueError(f"--replicas {replicas} needs at least {replicas} nodes (--nodes {nodes})")
        dep = Deployment(rate=parse_rate(rate), transport=transport, replicas=replicas,
                         retention_s=parse_duration(retention), nodes=nodes,
                         cores_per_node=cores_per_node or usable_cores(), link_bps=parse_bandwidth(link),
                         disk_bytes=parse_size(disk), utilization=utilization, consumers=consumers)
    except ValueError as exc:
        fail(str(exc), EXIT_CONFIG)
    from .datasets import DATASETS

    if sink not in ("null", "parquet"):
        fail(f"--sink {sink!r}: allowed null, parquet", EXIT_CONFIG)
    if not bench and dataset is not None and dataset not in DATASETS:
        fail(f"--dataset {dataset!r}: not a built-in dataset ({', '.join(DATASETS)}); for records of your own, "
             "give --bench RESULTS of `wirepipe bench --input FILE`", EXIT_CONFIG)
    try:
        if bench:
            costs = costs_from_bench(list(bench), dataset, chain, transport=transport, sink=sink)
        else:
            costs = [measure_costs(dataset or "block", chain or "msgpack|zstd:fastest", transport=transport,
                                   sink=sink)]
    except (ValueError, KeyError) as exc:
        fail(str(exc.args[0] if exc.args else exc), EXIT_CONFIG)
    except WirepipeError as exc:
        fail(str(exc), exit_code(exc))
    typer.echo("\n\n".join("\n".join(make_plan(c, dep).lines()) for c in costs))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
