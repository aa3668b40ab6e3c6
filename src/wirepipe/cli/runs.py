"""``wirepipe run``, ``validate`` and ``server``: running pipelines and the embedded server."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

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
def run(
    pipeline: Annotated[Path, typer.Argument(metavar="PIPELINE", help="pipeline YAML file")],
    set_: Annotated[list[str] | None, typer.Option("--set", metavar="PATH=VALUE",
                                                   help="override a field: path=value (repeatable)")] = None,
    count: Annotated[int | None, typer.Option(help="stop after N records (overrides source.count)", metavar="COUNT")] = None,
    duration: Annotated[str | None, typer.Option(help="stop after a time, e.g. 30s (overrides source.duration)", metavar="DURATION")] = None,
    workers: Annotated[str, typer.Option(help="N worker processes sharing the source (a JetStream durable or a "
                                              "core NATS queue group), or auto (one per CPU); --count and "
                                              "--duration apply to each", metavar="WORKERS")] = "1",
    max_rejected: Annotated[str | None, typer.Option(metavar="N|P%", help=MAX_REJECTED_HELP)] = None,
    max_lost: Annotated[str | None, typer.Option(metavar="N|P%", help=MAX_LOST_HELP)] = None,
    status: Annotated[bool | None, typer.Option("--status/--no-status", help=(
        "a live status line on stderr (default: on a terminal)"))] = None,
    watch: Annotated[bool, typer.Option("--watch", "-w", help=(
        "hot reload: when the file (or a schema or dictionary file it names) changes, validate it and go on with "
        "it between two batches, after a commit, on the same source; operators, dead_letter, metrics, "
        "flush_interval and shutdown_timeout reload in place, a change of anything else is refused with the "
        "reason and the running config stays; a pool reloads worker by worker"))] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Validate and run a pipeline."""
    from ..core.units import parse_duration
    from ..pipelines.pool import resolve_workers

    setup_logging(verbose)
    owned_process()
    overrides = list(set_ or [])
    rejected, lost = limits(max_rejected, max_lost)
    try:
        n_workers = resolve_workers(workers)
    except ValueError as exc:
        fail(str(exc), ExitCode.CONFIG)
    if count is not None:
        overrides.append(f"source.count={count}")
    if duration is not None:
        try:
            overrides.append(f"source.duration={parse_duration(duration)}")
        except ValueError as exc:
            fail(f"--duration: {exc}", ExitCode.CONFIG)
    pool, pipe = _prepare(pipeline, overrides, n_workers)
    from ..pipelines.reload import follow

    follow(pool if pool is not None else pipe, str(pipeline), overrides, watch)
    if pool is not None:
        import asyncio

        if status is False:  # the pool's line is on by default, as a single run's is on a terminal
            pool.monitor = pool.monitor.model_copy(update={"status_interval": 0})
        asyncio.run(pool.run())
        typer.echo(pool.summary(), err=True)
        finish(pool.outcome(), rejected, lost)
        return
    _show_status(pipe, status)
    stats = run_as_worker(pipe, str(pipeline))
    from ..pipelines.monitor import run_summary

    assert pipe.last_run is not None  # the run that just ended
    typer.echo(run_summary(pipe.last_run, stats), err=True)
    finish(stats.outcome(), rejected, lost)


def _prepare(path: Path, overrides: list[str], workers: int) -> tuple[Any, Any]:
    """``_checked``, a refusal one line and exit 2."""
    from ..core.errors import ConfigError

    try:
        return _checked(path, overrides, workers)
    except ConfigError as exc:
        fail(str(exc), ExitCode.CONFIG)


def _checked(path: Path, overrides: list[str], workers: int) -> tuple[Any, Any]:
    """Everything ``run`` checks before its first record, and all ``validate`` does: the file read, validated and
    built (what flows between the parts checked too), the input there, and with N workers what they cannot share
    and each worker's pipeline. (pool, None) or (None, pipeline); a refusal is a ``ConfigError``, and nothing
    has been opened or written."""
    from ..connectors.connector import ReadsFiles
    from ..core.errors import ConfigError, WirepipeError
    from ..core.workers import Worker
    from ..pipelines.config import build_pipeline, read_config, validate_config
    from ..pipelines.pool import Pool

    file = str(path)
    try:
        data = read_config(path, overrides)
        if workers > 1:
            pool = Pool(data, workers, file=file)
            build_pipeline(validate_config(pool.worker_config(), file=file), file=file, worker=Worker(0, workers))
            return pool, None
        pipe = build_pipeline(validate_config(data, file=file), file=file)  # one process: ``{worker}`` is 0
        try:
            if isinstance(pipe.source, ReadsFiles):
                pipe.source.check_input()
        except ConfigError as exc:  # the source names the field at fault (a CSV header against its schema)
            raise ConfigError(exc.detail, file=file, path=exc.path) from None
        except WirepipeError as exc:  # a missing input file or capture is a usage error too
            raise ConfigError(str(exc), file=file, path="source.path" if "path" in pipe.source.params else "source") \
                from None
    except ConfigError:
        raise
    except WirepipeError as exc:
        raise ConfigError(str(exc)) from None
    return None, pipe


def _check_stored(path: Path, checked: Any, workers: int) -> str | None:
    """The registered schemas and dictionaries the pipeline (a pool: its first worker's) names, fetched from their
    stores as ``run`` fetches them when it opens; a refusal is the ``ConfigError`` run gives, a store that cannot
    be reached the sentence saying what was not checked (``parts.check_stored``)."""
    from ..pipelines.parts import check_stored

    pipe = checked
    if workers > 1:
        from ..core.workers import Worker
        from ..pipelines.config import build_pipeline, validate_config

        pipe = build_pipeline(validate_config(checked.worker_config(), file=str(path)), file=str(path),
                              worker=Worker(0, workers))
    return check_stored(pipe, str(path))


def _show_status(pipe: Any, wanted: bool | None) -> None:
    """A live status line, rewritten in place, when stderr is a terminal (or ``--status``).

    A ``monitor:`` section in the pipeline keeps its own settings; ``--no-status`` turns the line off.
    """
    from ..pipelines.monitor import MonitorConfig

    live = sys.stderr.isatty()
    if wanted is False:
        if pipe.monitor is not None:
            pipe.monitor = MonitorConfig.model_validate(pipe.monitor).model_copy(update={"status_interval": 0})
        return
    if pipe.monitor is None and (wanted or live):
        pipe.monitor = MonitorConfig(status_interval=1.0, live=live)



@command()
def validate(
    pipelines: Annotated[list[Path], typer.Argument(metavar="PIPELINE", help="pipeline YAML files")],
    set_: Annotated[list[str] | None, typer.Option("--set", metavar="PATH=VALUE",
                                                   help="override a field: path=value (repeatable)")] = None,
    workers: Annotated[str, typer.Option(help="check as `run --workers N` would (what N workers cannot share)",
                                         metavar="N")] = "1",
) -> None:
    """Check files as `run` does, without running them.

    Everything `run` refuses before its first record; exit 2 if any is refused, with the message `run` gives.
    The registered schemas and zstd dictionaries a pipeline names are fetched from their stores, as `run` fetches
    them (no source or sink is opened); when a store's server does not answer, a warning says what was not
    checked and why, and the file passes on the rest. Test files (*.test.yaml) are checked as `wirepipe test`
    reads them."""
    from ..core.errors import ConfigError
    from ..pipelines.pool import resolve_workers

    try:
        n_workers = resolve_workers(workers)
    except ValueError as exc:
        fail(str(exc), ExitCode.CONFIG)
    errors: set[str] = set()  # a pipeline and its test file refused for the same fault: said once
    for path in pipelines:
        try:
            if path.name.endswith((".test.yaml", ".test.yml")):  # a test file beside its pipeline: `configs/*.yaml`
                from ..pipetest import collect

                cases = sum(len(f.spec.tests) for f in collect([str(path)]))
                typer.echo(f"ok: {path}: {cases} test case(s) (run them: wirepipe test {path})")
                continue
            pool, pipe = _checked(path, list(set_ or []), n_workers)
            unchecked = _check_stored(path, pool or pipe, n_workers)
        except ConfigError as exc:
            if str(exc) not in errors:
                errors.add(str(exc))
                typer.echo(f"error: {exc}", err=True)
            continue
        typer.echo(f"ok: {path}: {pipe!r}" if pipe is not None else f"ok: {path}: {n_workers} workers of {pool.name}")
        if unchecked:
            typer.echo(f"warning: {path}: {unchecked}", err=True)
    if errors:
        raise typer.Exit(ExitCode.CONFIG)



@command()
def server(
    port: Annotated[int, typer.Option(help="port on 127.0.0.1 (0: a free one)", metavar="PORT")] = 0,
    store: Annotated[Path | None, typer.Option(help="JetStream store directory (default: a temporary one)", metavar="STORE")] = None,
    cluster: Annotated[int, typer.Option(help="N > 1: a local N-node JetStream cluster on loopback (prints the URL "
                                              "list; each node its own store)", metavar="CLUSTER")] = 1,
) -> None:
    """Run an embedded nats-server in the foreground.

    JetStream on; prints its URL; Ctrl-C stops it."""
    from ..connectors.nats.server import EmbeddedServer, LocalCluster, serve_forever
    from ..core.errors import WirepipeError

    if not 1 <= cluster <= 9 or (cluster > 1 and port):
        fail(f"--cluster {cluster}: give 1..9 nodes; --port is for one node (a cluster picks free ports)",
             ExitCode.CONFIG)
    try:
        target = (LocalCluster(cluster, store_dir=store) if cluster > 1
                  else EmbeddedServer(port=port or None, store_dir=store))
        code = serve_forever(target, echo=lambda url: typer.echo(url))
    except WirepipeError as exc:
        fail(str(exc), exit_code(exc))
    raise typer.Exit(code)
