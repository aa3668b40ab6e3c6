"""``wirepipe bench``, ``report``, ``plan``, ``codecs`` and ``datasets``: the study and what it reads."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ..core.exit_codes import ExitCode, exit_code
from .app import command, fail, owned_process
from .connection import OwnCreds, Sets, own_server


@command()
def bench(
    dataset: Annotated[str | None, typer.Option(help="datasets, comma-separated: point,large_vectors,transaction,"
                                                    "block,feed", metavar="DATASET")] = None,
    input: Annotated[list[Path] | None, typer.Option("--input", help="your records: FILE.jsonl, FILE.parquet or FILE.csv (.tsv, .csv.gz ...)", metavar="INPUT")] = None,
    format: Annotated[str | None, typer.Option(help="formats, comma-separated (default: all)", metavar="FORMAT")] = None,
    codec: Annotated[str | None, typer.Option(help="codecs, comma-separated (default: all)", metavar="CODEC")] = None,
    level: Annotated[str | None, typer.Option(help="levels: fastest,default,best or integers", metavar="LEVEL")] = None,
    transport: Annotated[str, typer.Option(help="nats (default, embedded server unless --url), jetstream or none (in-process codecs only)", metavar="TRANSPORT")] = "nats",
    url: Annotated[str | None, typer.Option(help="NATS url (default: an embedded server)", metavar="URL")] = None,
    creds: OwnCreds = None,
    set_: Sets = None,
    iterations: Annotated[int | None, typer.Option("--iterations", "-k", help="K iterations", metavar="ITERATIONS")] = None,
    repetitions: Annotated[int | None, typer.Option("--repetitions", "-n",
                                                    help="N repetitions per iteration (default scales with size)", metavar="REPETITIONS")] = None,
    out: Annotated[Path, typer.Option(help="folder for bench.parquet, bench.md and reports", metavar="OUT")] = Path("results/bench"),
    quick: Annotated[bool, typer.Option(help=(
        "a subset that finishes in about a minute: 4 formats, 3 codecs, 2 levels, K = 3, smaller N; "
        "composes with every other flag (--input, --dataset, --format ...)"))] = False,
    zstd_dict: Annotated[str | None, typer.Option(help="`train`: add zstd rows with a dictionary trained on the data", metavar="ZSTD-DICT")] = None,
    records_per_message: Annotated[str | None, typer.Option(help="records framed per message, e.g. 1,10,100", metavar="RECORDS-PER-MESSAGE")] = None,
    bandwidth: Annotated[str, typer.Option(help="link speed for the balanced pick, e.g. 100Mbit, 1Gbit", metavar="BANDWIDTH")] = "100Mbit",
    seed: Annotated[int, typer.Option(help="random seed of the built-in datasets' records and of the sample drawn from each --input", metavar="SEED")] = 0,
    reference_tables: Annotated[bool, typer.Option("--reference-tables", help=(
        "print published benchmarks' tables (FlatMessage's Point and Large Vectors, a Rust transaction serde "
        "benchmark, a feed JSON benchmark) with wirepipe's formats; --dataset picks tables, -k/-n override"))] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="run a plan estimated over 10 minutes without asking")] = False,
) -> None:
    """The study: every format x codec x level, every stage timed.

    On the built-in datasets or your own records; tables and a recommendation."""
    from rich.console import Console

    owned_process()
    if reference_tables:
        from ..study.bench.reference_tables import REFERENCE_TABLES, print_reference_tables

        tables = [d.strip() for d in dataset.split(",")] if dataset else None
        bad = [t for t in tables or [] if t not in REFERENCE_TABLES]
        if bad:
            fail(f"--dataset with --reference-tables: unknown table {', '.join(bad)}: allowed "
                 f"{', '.join(REFERENCE_TABLES)}", ExitCode.CONFIG)
        print_reference_tables(Console(stderr=False), iterations, repetitions, seed, tables=tables)
        return

    from ..core.errors import ConfigError, WirepipeError
    from ..core.units import parse_bandwidth
    from ..study.bench.command import execute, make_plan

    try:
        plan = make_plan(dataset=dataset, inputs=list(input or []), format=format, codec=codec, level=level,
                         transport=transport, iterations=iterations, repetitions=repetitions, out=out,
                         quick=quick, zstd_dict=zstd_dict, records_per_message=records_per_message, seed=seed,
                         nats=own_server(url, creds, set_, "bench"))
        bits = parse_bandwidth(bandwidth)
    except ValueError as exc:
        fail(f"--bandwidth: {exc}", ExitCode.CONFIG)
    except ConfigError as exc:
        fail(str(exc), ExitCode.CONFIG)
    console = Console(stderr=False)
    try:
        run = execute(plan, bits, console, yes=yes, interactive=sys.stdin.isatty() and sys.stdout.isatty())
    except ConfigError as exc:
        fail(str(exc), ExitCode.CONFIG)
    except WirepipeError as exc:
        fail(str(exc), exit_code(exc))
    except KeyboardInterrupt:  # before the first measurement (calibration, confirmation)
        fail("interrupted before anything was measured", ExitCode.INTERRUPTED)
    if run.interrupted:
        fail("interrupted: the files hold what finished", ExitCode.INTERRUPTED)
    if not run.raw_rows:
        fail("nothing was measured: every combination failed (see above)", ExitCode.RUNTIME)
    if run.failed:
        fail(f"{len(run.failed)} combination(s) failed (see above); the others are in the files",
             ExitCode.BENCH_FAILURES)



@command()
def report(
    results: Annotated[list[Path], typer.Argument(metavar="RESULTS", help="results: metrics folders, Parquet files, or folders of them")],
    markdown: Annotated[Path | None, typer.Option("--markdown", help="write the report as Markdown to FILE", metavar="MARKDOWN")] = None,
    html: Annotated[Path | None, typer.Option("--html", help="write one self-contained HTML file with plots", metavar="HTML")] = None,
    png: Annotated[Path | None, typer.Option("--png", help="write each plot as a PNG into DIR", metavar="PNG")] = None,
    csv: Annotated[str | None, typer.Option("--csv", help="write tidy CSV rows to FILE (- for stdout)", metavar="CSV")] = None,
    bandwidth: Annotated[str, typer.Option(help="link for the recommendation, e.g. 100Mbit, 1Gbit, 12.5MB/s", metavar="BANDWIDTH")] = "100Mbit",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no terminal tables")] = False,
) -> None:
    """Tables, plots and recommendations from results.

    Per stage and per pipeline: timing, sizes, latency; a flow's publisher and consumer joined."""
    from ..core.errors import WirepipeError
    from ..core.units import parse_bandwidth

    try:
        bps = parse_bandwidth(bandwidth)
    except ValueError as exc:
        fail(f"--bandwidth: {exc}", ExitCode.CONFIG)
    missing = [str(p) for p in results if not p.exists()]
    if missing:
        fail(f"no such file or folder: {', '.join(missing)}", ExitCode.CONFIG)
    from ..study.report import load_results, summarize
    from ..study.report.render import print_terminal, write_csv, write_markdown

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
        from ..study.report.plots import write_html, write_pngs

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



@command()
def plan(
    rate: Annotated[str, typer.Option(help="target records/s, e.g. 2M/s, 500k", metavar="RATE")],
    bench: Annotated[list[str] | None, typer.Option("--bench", help="wirepipe bench results to take the costs "
                                                                    "from (default: measure in-process now)", metavar="BENCH")] = None,
    dataset: Annotated[str | None, typer.Option(help=(
        "dataset whose records are planned for (default: with --bench, each dataset of the results, your own "
        "from bench --input too; without, block)"), metavar="DATASET")] = None,
    chain: Annotated[str | None, typer.Option(help="codec chain, e.g. msgpack|zstd:best (with --bench: default "
                                                   "the fastest measured)", metavar="CHAIN")] = None,
    transport: Annotated[str, typer.Option(help="jetstream or nats", metavar="TRANSPORT")] = "jetstream",
    sink: Annotated[str, typer.Option(help="consumer sink whose cost counts: null or parquet", metavar="SINK")] = "null",
    replicas: Annotated[int, typer.Option(help="JetStream replicas (1..5)", metavar="REPLICAS")] = 3,
    retention: Annotated[str, typer.Option(help="how long the stream keeps records, e.g. 7d, 24h", metavar="RETENTION")] = "7d",
    nodes: Annotated[int, typer.Option(help="machines (each runs a nats-server and workers)", metavar="NODES")] = 3,
    cores_per_node: Annotated[int | None, typer.Option(help="cores per machine (default: this one's)", metavar="CORES-PER-NODE")] = None,
    link: Annotated[str, typer.Option(help="network link per machine, e.g. 10Gbit", metavar="LINK")] = "10Gbit",
    disk: Annotated[str, typer.Option(help="JetStream disk per machine, e.g. 2TB", metavar="DISK")] = "1TB",
    consumers: Annotated[int, typer.Option(help="pipelines consuming the stream", metavar="CONSUMERS")] = 1,
    utilization: Annotated[float, typer.Option(help="plan cores to be at most this busy (0..1)", metavar="UTILIZATION")] = 0.7,
    calibrate: Annotated[bool, typer.Option(help="over JetStream, run the consume pipeline in a worker process for a "
                                                 "few seconds on a local nats-server and plan with what it spent "
                                                 "(the default)")] = True,
    url: Annotated[str | None, typer.Option(help="calibrate on this NATS server (default: a local one of its own)",
                                            metavar="URL")] = None,
    creds: OwnCreds = None,
    set_: Sets = None,
) -> None:
    """Turn per-record costs into a deployment plan.

    Cores, workers, wire bytes/s, JetStream storage, and the first limit."""
    from ..core.errors import ConfigError, WirepipeError
    from ..core.units import parse_bandwidth, parse_duration, parse_rate, parse_size
    from ..pipelines.pool import usable_cores
    from ..study.plan.capacity import Deployment, costs_from_bench, measure_costs
    from ..study.plan.capacity import plan as make_plan

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
        nats = own_server(url, creds, set_, "plan")
    except ValueError as exc:
        fail(str(exc), ExitCode.CONFIG)
    except ConfigError as exc:
        fail(str(exc), ExitCode.CONFIG)
    from ..core.models import did_you_mean
    from ..datasets import DATASETS

    if sink not in ("null", "parquet"):
        fail(f"--sink {sink!r}: allowed null, parquet{did_you_mean(sink, ('null', 'parquet'))}", ExitCode.CONFIG)
    if not bench and dataset is not None and dataset not in DATASETS:
        fail(f"--dataset {dataset!r}: not a built-in dataset ({', '.join(DATASETS)}); for records of your own, "
             f"give --bench RESULTS of `wirepipe bench --input FILE`{did_you_mean(dataset, DATASETS)}", ExitCode.CONFIG)
    try:
        if bench:
            costs = costs_from_bench(list(bench), dataset, chain, transport=transport, sink=sink,
                                     calibrate=calibrate, nats=nats)
        else:
            costs = [measure_costs(dataset or "block", chain or "msgpack|zstd:fastest", transport=transport,
                                   sink=sink, calibrate=calibrate, nats=nats)]
    except (ValueError, KeyError) as exc:
        fail(str(exc.args[0] if exc.args else exc), ExitCode.CONFIG)
    except WirepipeError as exc:
        fail(str(exc), exit_code(exc))
    typer.echo("\n\n".join("\n".join(make_plan(c, dep).lines()) for c in costs))



@command()
def codecs() -> None:
    """List every format and codec, its levels, if installed."""
    from ..codecs.compression import CODECS, LEVEL_NAMES
    from ..codecs.deflate import deflate_choice
    from ..codecs.formats import FORMATS
    from ..core.table import Table, terminal_width, wrap
    from ..wire import Header

    # A name or a content type is what a reader copies into a config or a peer: the table never cuts one;
    # the notes wrap beneath their row when they do not fit beside it.
    width = terminal_width()
    formats = Table("formats (serialize / deserialize)", ["format", Header.CONTENT_TYPE, "installed"],
                    [[f.name, f.content_type, _installed(f)] for f in FORMATS.values()], [False] * 3,
                    notes=[f.note for f in FORMATS.values()], notes_header="notes")
    codecs = Table("codecs (compress / decompress)",
                   ["codec", Header.CONTENT_ENCODING, *LEVEL_NAMES, "range", "installed"],
                   [[c.name, c.content_encoding, *(str(c.resolve_level(name)) for name in LEVEL_NAMES),
                     f"{c.min_level}..{c.max_level}", _installed(c)] for c in CODECS.values()], [False] * 7,
                   notes=[c.note for c in CODECS.values()], notes_header="notes")
    tail = [f"zlib, gzip, deflate run on: {deflate_choice()} (standard bytes)",
            "chain syntax: format|codec[:level]|..., e.g. msgpack|zstd:3 or json|gzip:best"]
    typer.echo("\n".join([formats.text(width), codecs.text(width), *(line for text in tail
                                                                     for line in wrap(text, width))]))



def _installed(entry: Any) -> str:
    """``yes``, or the extra that installs the entry's library."""
    return "yes" if entry.available() else f"no: the {entry.extra} extra" if entry.extra else "no"



@command()
def datasets() -> None:
    """List the built-in datasets of the generate source."""
    from ..core.table import Table
    from ..datasets import DATASETS

    rows = [[d.name, ", ".join(d.fields),
             str(d.fixed_raw_size) if d.fixed_raw_size else f"~{d.raw_size(d.sample(100)) // 100} (varies)"]
            for d in DATASETS.values()]
    table = Table("datasets (source: {type: generate, dataset: NAME})", ["dataset", "fields", "raw size (bytes)"],
                  rows, [False, False, True], notes=[d.description for d in DATASETS.values()],
                  notes_header="description")
    typer.echo(table.text(), nl=False)
