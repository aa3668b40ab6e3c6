"""``wirepipe ps`` and ``top``: the pipelines running on a NATS system, from their NATS services.

Every running pipeline answers the services protocol (``pipelines/service.py``); these commands ask
``$SRV.STATS`` once (``ps``) or every ``--interval`` (``top``) and show the answers in one table, drawn by
``core/table.py`` like every table wirepipe prints. They connect as any NATS client does (``--url``,
``--creds``, ``--set`` for the other connection fields), never to an embedded server: there is no pipeline
on a server of one's own.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..core.exit_codes import ExitCode, exit_code
from .app import command, fail, setup_logging
from .connection import Creds, Sets, server_or_fail

if TYPE_CHECKING:
    from ..connectors.nats.connection import NatsConnectionConfig
    from ..core.table import Table
    from ..pipelines.service import Process

CONNECT_TIMEOUT = 5.0  # an observer at a terminal: a server that does not answer is said sooner than a worker's 10s
# The figures shown, each a key of the stats endpoint's answer (monitor.snapshot) and its header.
FIGURES = (("records_in", "in"), ("records_out", "out"), ("rejected", "rejected"), ("lost", "lost"),
           ("lag", "lag"), ("redelivered", "redelivered"))

Url = Annotated[str | None, typer.Option(envvar="NATS_URL", metavar="URL", help=(
    "the NATS server (or comma-separated cluster) the pipelines use (default $NATS_URL)"))]
Window = Annotated[str, typer.Option("--timeout", metavar="DURATION", help=(
    "how long to collect the answers (a process that answers later is not listed)"))]
Only = Annotated[str | None, typer.Argument(metavar="PIPELINE", help=(
    "only this pipeline (its name, or its service's name)"))]


REACHES = "asks the pipelines on the NATS server they use"


async def _connected(config: NatsConnectionConfig) -> Any:
    from ..connectors.nats.connection import NatsConnection

    conn = NatsConnection(config, role="observer")
    await conn.connect()
    return conn


def _window(text: str, flag: str = "--timeout") -> float:
    from ..core.units import parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        fail(f"{flag} {text!r}: {exc}", ExitCode.CONFIG)
    if seconds <= 0:
        fail(f"{flag} {text!r}: give a duration > 0, e.g. 1s", ExitCode.CONFIG)
    return seconds


def _quiet(verbose: bool) -> None:
    import logging

    setup_logging(verbose)
    if not verbose:
        logging.getLogger("wirepipe").setLevel(logging.WARNING)  # the table is the output


def _config_or_fail(url: str | None, creds: str | None, overrides: list[str] | None, command: str) -> Any:
    return server_or_fail(url, creds, overrides, command=command, reaches=REACHES, connect_timeout=CONNECT_TIMEOUT)


# --- the table ------------------------------------------------------------------------------------------


def process_table(processes: list[Process], *, title: str, caption: str,
                  rates: dict[str, float | None] | None = None) -> Table:
    """One row per process, and a total row for a pipeline of several processes (counters summed, lag the
    largest, as the pool's status line counts them); ``rates`` (``top``): records out per second by service id."""
    from ..core.table import Table
    from ..pipelines.pool import combine

    headers = ["pipeline", "worker", "state", *(h for _, h in FIGURES), "up", "host", "pid", "service id"]
    if rates is not None:
        headers.insert(headers.index("out") + 1, "out/s")
    rows: list[list[str]] = []
    pipelines: dict[str, list[Process]] = {}
    for p in processes:
        pipelines.setdefault(p.pipeline, []).append(p)
    for name, group in pipelines.items():
        for p in group:
            rows.append(_row(p, headers, rates))
        if len(group) > 1:
            total = combine([{k: v for k, v in p.stats.items() if k in dict(FIGURES)} for p in group])
            cells = {"pipeline": name, "worker": "all",
                     **{h: _count(total.get(k)) for k, h in FIGURES}}
            if rates is not None:
                known = [rates.get(p.id) for p in group if rates.get(p.id) is not None]
                cells["out/s"] = _rate(sum(r for r in known if r is not None) if known else None)
            rows.append([cells.get(h, "") for h in headers])
    numeric = [h not in ("pipeline", "worker", "state", "host", "service id") for h in headers]
    ranks = {"pipeline": 0, "worker": 0, "in": 0, "out": 0, "out/s": 0, "rejected": 0, "lost": 0, "state": 1,
             "lag": 1, "redelivered": 1, "up": 2, "host": 2, "pid": 2, "service id": 3}
    return Table(title=title, headers=headers, rows=rows, numeric=numeric, caption=caption,
                 priority=[ranks[h] for h in headers])


def _row(p: Process, headers: list[str], rates: dict[str, float | None] | None) -> list[str]:
    cells = {"pipeline": p.pipeline, "worker": f"w{p.worker}" if p.workers > 1 else "-", "state": p.state(),
             **{h: _count(p.stats.get(k)) for k, h in FIGURES}, "up": _uptime(p),
             "host": p.host, "pid": str(p.pid or "-"), "service id": p.id}
    if rates is not None:
        cells["out/s"] = _rate(rates.get(p.id))
    return [cells[h] for h in headers]


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else "-"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _uptime(p: Process) -> str:
    """How long ago its service started (by this machine's clock): ``45s``, ``12m03s``, ``3h04m``, ``2d03h``."""
    from datetime import datetime, timezone

    if p.started is None:
        return "-"
    s = max(0, int((datetime.now(timezone.utc) - p.started).total_seconds()))
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if s >= size:
            return f"{s // size}{unit}{(s % size) // sub_size:02d}{sub}"
    return f"{s}s"


def _caption(processes: list[Process], url: str, window: float) -> str:
    if not processes:
        return f"No wirepipe pipeline answered $SRV.STATS on {url} within {window:g}s."
    pipelines = len({p.pipeline for p in processes})
    return (f"{_plural(len(processes), 'process', 'processes')} of {_plural(pipelines, 'pipeline')} answered "
            f"$SRV.STATS on {url} within {window:g}s; each counts since it started (in: read, out: written, lag: "
            "waiting upstream, for a shared durable the same for each of its workers).")


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _only(processes: list[Process], pipeline: str | None) -> list[Process]:
    return [p for p in processes if pipeline is None or pipeline in (p.pipeline, p.name)]


# --- the commands -----------------------------------------------------------------------------------------


@command()
def ps(
    pipeline: Only = None,
    url: Url = None,
    creds: Creds = None,
    set_: Sets = None,
    timeout: Window = "1s",
    json_: Annotated[bool, typer.Option("--json", help=(
        "print the services' answers ($SRV.STATS, the protocol's JSON) instead of the table"))] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """List the pipelines running on a NATS system.

    Every process of every pipeline, on any machine, with its counts: from the answers of their NATS
    services to one $SRV.STATS request."""
    import asyncio
    import json

    from ..core.errors import WirepipeError
    from ..pipelines.service import discover

    _quiet(verbose)
    window = _window(timeout)
    config = _config_or_fail(url, creds, set_, "ps")

    async def ask() -> tuple[list[Process], str]:
        conn = await _connected(config)
        try:
            return _only(await discover(conn.nc, window), pipeline), conn.public_url
        finally:
            await conn.close()

    try:
        processes, where = asyncio.run(ask())
    except KeyboardInterrupt:
        fail("interrupted", ExitCode.INTERRUPTED)
    except WirepipeError as exc:
        fail(str(exc), exit_code(exc))
    if json_:
        typer.echo(json.dumps([p.answer for p in processes], indent=2))
        return
    typer.echo(process_table(processes, title="wirepipe ps", caption=_caption(processes, where, window))
               .text(elsewhere="`wirepipe ps --json`"), nl=False)


@command()
def top(
    pipeline: Only = None,
    url: Url = None,
    creds: Creds = None,
    set_: Sets = None,
    interval: Annotated[str, typer.Option(metavar="DURATION", help="how often to ask again and redraw")] = "2s",
    timeout: Window = "1s",
    count: Annotated[int | None, typer.Option(metavar="N", help="stop after N tables (default: until Ctrl-C)")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Watch the pipelines running on a NATS system, live.

    The table of `wirepipe ps`, asked again every --interval, with each process's records out per second.
    Redrawn in place on a terminal, printed one after another elsewhere; Ctrl-C stops (exit 0)."""
    import asyncio

    from ..core.errors import WirepipeError

    _quiet(verbose)
    every = _window(interval, "--interval")
    window = min(_window(timeout), every)
    if count is not None and count < 1:
        fail(f"--count {count}: give a number >= 1", ExitCode.CONFIG)
    config = _config_or_fail(url, creds, set_, "top")
    try:
        asyncio.run(_watch(config, pipeline, every, window, count))
    except WirepipeError as exc:
        fail(str(exc), exit_code(exc))


async def _watch(config: NatsConnectionConfig, pipeline: str | None, every: float, window: float,
                 count: int | None) -> None:
    """Ask, draw, wait; until ``count`` tables or SIGINT/SIGTERM (an observer's stop: exit 0)."""
    import asyncio
    import contextlib
    import signal
    import sys

    from ..pipelines.service import discover

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    conn = await _connected(config)
    draw = _Screen(sys.stdout)
    seen: dict[str, tuple[float, int]] = {}  # service id -> (when, records out) at the previous table
    shown = 0
    try:
        while not stop.is_set():
            began = time.monotonic()
            processes = _only(await discover(conn.nc, window), pipeline)
            now = time.monotonic()
            rates = {p.id: _per_second(seen.get(p.id), now, p.stats.get("records_out")) for p in processes}
            seen = {p.id: (now, p.stats["records_out"]) for p in processes
                    if isinstance(p.stats.get("records_out"), int)}
            caption = _caption(processes, conn.public_url, window) + f" Every {every:g}s; Ctrl-C stops."
            draw(process_table(processes, title=f"wirepipe top  {time.strftime('%H:%M:%S')}", caption=caption,
                               rates=rates))
            shown += 1
            if count is not None and shown >= count:
                break
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, every - (time.monotonic() - began)))
    finally:
        draw.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)
        await conn.close()


def _per_second(before: tuple[float, int] | None, now: float, records_out: Any) -> float | None:
    if before is None or not isinstance(records_out, int) or now <= before[0]:
        return None
    return max(0, records_out - before[1]) / (now - before[0])


class _Screen:
    """Where ``top`` draws: one table redrawn in place on a terminal (rich's ``Live``), else each table printed
    after the one before."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.live: Any = None
        if out.isatty():
            from rich.console import Console
            from rich.live import Live

            self.console = Console(file=out)
            self.live = Live(console=self.console, auto_refresh=False, transient=False)
            self.live.start()

    def __call__(self, table: Table) -> None:
        if self.live is not None:
            from rich.text import Text

            self.live.update(Text(table.text(self.console.width, elsewhere="`wirepipe ps --json`")), refresh=True)
        else:
            print(table.text(elsewhere="`wirepipe ps --json`"), file=self.out, flush=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
