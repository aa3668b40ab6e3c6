"""``wirepipe dict``: zstd dictionaries shared through NATS (train, list, show)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ..core.exit_codes import ExitCode, exit_code
from .app import WordsHelp, app, fail, setup_logging
from .connection import Creds, Sets, server_or_fail

dict_app = typer.Typer(name="dict", no_args_is_help=True, help="zstd dictionaries shared through NATS.")
app.add_typer(dict_app)
REACHES = "reads the bucket on the NATS server your pipelines use"


@dict_app.command("train", cls=WordsHelp)
def dict_train(
    from_: Annotated[str, typer.Option("--from", metavar="CAPTURE|FILE", help=(
        "a capture folder (or file), or a file of records: .jsonl, .parquet, .csv (.tsv, .csv.gz ...)"))],
    to: Annotated[str, typer.Option("--to", metavar="nats://BUCKET/NAME", help=(
        "where to publish it: the bucket (created if missing) and the name publishers give"))],
    url: Annotated[str | None, typer.Option(envvar="NATS_URL", metavar="URL", help=(
        "the NATS server your pipelines use (default $NATS_URL)"))] = None,
    creds: Creds = None,
    set_: Sets = None,
    format: Annotated[str, typer.Option(help="records from a file: the format they are serialized in, as your "
                                             "publisher's serialize does")] = "msgpack",
    schema: Annotated[str | None, typer.Option(help=(
        "records from a file: the schema a schema'd format needs, as serialize takes it (a file, a dataset, "
        "module:Class, or a registered schema, registry/NAME[@VERSION], read from the registry on --url)"))] = None,
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

    from ..core.errors import ConfigError, WirepipeError
    from ..core.stores import parse_dictionary_ref as parse_ref
    from ..core.units import parse_size
    from ..dictionaries import publish, read_samples, train

    setup_logging(verbose)
    if not verbose:
        logging.getLogger("wirepipe").setLevel(logging.WARNING)
    try:
        ref = parse_ref(to, name=True)
        nbytes = parse_size(size) if size is not None else None
    except ValueError as exc:
        fail(f"--to/--size: {exc}", ExitCode.CONFIG)
    # --dry-run publishes nothing: a server is needed only for what is read from one (a capture's dictionaries,
    # a registered --schema), and then --url names it
    nats = None if dry_run and not url else server_or_fail(
        url, creds, set_, command="dict train", reaches=f"publishes to {ref.bucket} on the NATS server your "
        "pipelines use (--dry-run publishes nothing)")
    try:
        samples, rejects = asyncio.run(read_samples(from_, count=count, fmt=format, schema=schema, ref=ref,
                                                    nats=nats))
        if rejects:
            typer.echo(f"{len(rejects)} record(s) could not be read and were left out, e.g. at {rejects[0].stage}: "
                       f"{rejects[0].error}", err=True)
        training = train(samples, level=level, size=nbytes, holdout=holdout)
    except ConfigError as exc:
        fail(str(exc), ExitCode.CONFIG)
    except ValueError as exc:
        fail(f"--level: {exc}", ExitCode.CONFIG)
    except WirepipeError as exc:
        fail(str(exc), ExitCode.RUNTIME)
    from ..core.table import terminal_width

    for line in training.lines(terminal_width()):
        typer.echo(line)
    if out is not None:
        from ..storage.files import write_bytes_atomic

        write_bytes_atomic(out, training.dictionary)
        typer.echo(f"wrote {out}")
    if dry_run or nats is None:
        return
    try:
        dict_id = asyncio.run(publish(nats, ref, training, origin=from_))
    except WirepipeError as exc:
        fail(str(exc), exit_code(exc))
    typer.echo(f"published {ref} (id {dict_id}; also as nats://{ref.bucket}/id/{dict_id})")


@dict_app.command("list", cls=WordsHelp)
def dict_list(
    bucket: Annotated[str, typer.Argument(metavar="nats://BUCKET", help="the dictionary bucket")],
    url: Annotated[str | None, typer.Option(envvar="NATS_URL", metavar="URL", help=(
        "the NATS server your pipelines use (default $NATS_URL)"))] = None,
    creds: Creds = None,
    set_: Sets = None,
) -> None:
    """List a bucket's dictionaries: id, size, date, gain."""
    import asyncio
    import json

    from ..core.errors import WirepipeError
    from ..core.stores import parse_dictionary_ref as parse_ref
    from ..dictionaries import gain_words, with_bucket

    try:
        ref = parse_ref(bucket, name=False)
    except ValueError as exc:
        fail(str(exc), ExitCode.CONFIG)
    try:
        entries = asyncio.run(with_bucket(server_or_fail(url, creds, set_, command="dict list", reaches=REACHES),
                                          ref.bucket, lambda b: b.entries()))
    except WirepipeError as exc:
        fail(str(exc), exit_code(exc))
    for e in entries:
        try:
            gain = gain_words(float(json.loads(e.description)["gain"]))
        except (ValueError, KeyError, TypeError):
            gain = ""
        typer.echo(f"{e.name}\tid {e.dict_id}\t{e.size:,} B\t{e.modified[:19]}\t{gain}".rstrip())


@dict_app.command("show", cls=WordsHelp)
def dict_show(
    dictionary: Annotated[str, typer.Argument(metavar="nats://BUCKET/NAME", help=(
        "a dictionary by name, or by id: nats://BUCKET/id/ID"))],
    url: Annotated[str | None, typer.Option(envvar="NATS_URL", metavar="URL", help=(
        "the NATS server your pipelines use (default $NATS_URL)"))] = None,
    creds: Creds = None,
    set_: Sets = None,
    out: Annotated[Path | None, typer.Option(metavar="FILE", help="write the dictionary to FILE (zstd -D FILE reads it)")] = None,
) -> None:
    """Show a dictionary's id, size and training report."""
    import asyncio
    import json

    from ..codecs.compression import DEFAULT_MAX_OUTPUT
    from ..connectors.nats.dictionary_bucket import ID_PREFIX
    from ..core.errors import WirepipeError
    from ..core.stores import parse_dictionary_ref as parse_ref
    from ..dictionaries import with_bucket

    by_id = dictionary.rsplit("/", 2)
    try:
        if len(by_id) == 3 and by_id[1] == ID_PREFIX.rstrip("/") and by_id[2].isdigit():
            ref = parse_ref(by_id[0], name=False)
            name = f"{ID_PREFIX}{by_id[2]}"
        else:
            ref = parse_ref(dictionary, name=True)
            name = str(ref.name)
    except ValueError as exc:
        fail(str(exc), ExitCode.CONFIG)

    async def show(b: Any) -> tuple[Any, bytes]:
        return await b.info(name), await b.by_name(name, DEFAULT_MAX_OUTPUT)

    try:
        entry, data = asyncio.run(with_bucket(server_or_fail(url, creds, set_, command="dict show", reaches=REACHES),
                                              ref.bucket, show))
    except WirepipeError as exc:
        fail(str(exc), exit_code(exc))
    typer.echo(f"nats://{ref.bucket}/{name}: id {entry.dict_id}, {entry.size:,} bytes, {entry.modified} "
               "(digest checked)")
    try:
        for key, value in json.loads(entry.description).items():
            typer.echo(f"  {key}: {value}")
    except (ValueError, AttributeError):
        if entry.description:
            typer.echo(f"  {entry.description}")
    if out is not None:
        from ..storage.files import write_bytes_atomic

        write_bytes_atomic(out, data)
        typer.echo(f"wrote {out}")
