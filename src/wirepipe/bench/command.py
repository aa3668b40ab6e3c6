"""``wirepipe bench``: options to a plan, the run with a progress bar, tables and files out."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..codecs.compression import CODECS, get_codec
from ..codecs.formats import FORMATS
from ..core.errors import ConfigError
from ..core.registry import install_hint
from ..datasets import DATASETS
from .combos import ALL_LEVELS, QUICK, BenchPlan
from .estimate import Estimate
from .runner import BenchRun, latency_table, load_data, rows_table, run_bench, write_results
from .study_tables import chain_table, failures, format_table

TRANSPORTS = ("none", "nats", "jetstream")


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


def _codec_name(name: str) -> str:
    """The registry name of a codec or alias (``br`` -> ``brotli``); unknown names pass through to ``_check``."""
    try:
        return get_codec(name).name
    except KeyError:
        return name


def _check(kind: str, values: list[str], allowed: list[str]) -> None:
    bad = [v for v in values if v not in allowed]
    if bad:
        raise ConfigError(f"unknown {kind} {', '.join(map(repr, bad))}: allowed {', '.join(allowed)}",
                          path=f"--{kind}")


def make_plan(*, dataset: str | None, inputs: list[Path], format: str | None, codec: str | None,
              level: str | None, transport: str, url: str | None, iterations: int | None,
              repetitions: int | None, out: Path, quick: bool, zstd_dict: str | None,
              records_per_message: str | None, seed: int) -> BenchPlan:
    """Validate the command's options into a plan (``ConfigError`` naming the option)."""
    plan = BenchPlan(out=out, seed=seed, quick=quick, url=url)
    if quick:
        plan.datasets, plan.formats, plan.codecs = list(QUICK["datasets"]), list(QUICK["formats"]), list(QUICK["codecs"])
        plan.levels, plan.iterations, plan.scale = list(QUICK["levels"]), int(QUICK["iterations"]), float(QUICK["scale"])
    if dataset:
        plan.datasets = _split(dataset)
        _check("dataset", plan.datasets, list(DATASETS))
    if inputs:
        plan.inputs = list(inputs)
        if not dataset:
            plan.datasets = []
    if format:
        plan.formats = _split(format)
        _check("format", plan.formats, list(FORMATS))
    if codec:
        plan.codecs = [_codec_name(c) for c in _split(codec)]
        _check("codec", plan.codecs, list(CODECS))
    if level:
        levels: list[str | int] = [int(v) if v.lstrip("-").isdigit() else v for v in _split(level)]
        for lv in levels:
            if isinstance(lv, str) and lv not in ALL_LEVELS:
                raise ConfigError(f"unknown level {lv!r}: allowed fastest, default, best or an integer", path="--level")
        for c in plan.codecs:
            for lv in levels:
                if c != "none":
                    try:
                        get_codec(c).resolve_level(lv)
                    except ValueError as exc:
                        raise ConfigError(str(exc), path="--level") from None
        plan.levels = levels
    if transport not in TRANSPORTS:
        raise ConfigError(f"unknown transport {transport!r}: allowed {', '.join(TRANSPORTS)}", path="--transport")
    plan.transport = transport
    if iterations is not None:
        if iterations < 1:
            raise ConfigError(f"{iterations} iterations: need at least 1", path="--iterations")
        plan.iterations = iterations
    if repetitions is not None:
        if repetitions < 1:
            raise ConfigError(f"{repetitions} repetitions: need at least 1", path="--repetitions")
        plan.repetitions = repetitions
    if zstd_dict not in (None, "train"):
        raise ConfigError(f"{zstd_dict!r}: the only value is `train`", path="--zstd-dict")
    plan.zstd_dict = zstd_dict == "train"
    if plan.zstd_dict and "zstd" not in plan.codecs:
        plan.codecs.append("zstd")
    plan.small_dict = quick and bool(inputs) and not plan.zstd_dict and "zstd" in plan.codecs
    if records_per_message:
        try:
            plan.records_per_message = [int(v) for v in _split(records_per_message)]
        except ValueError:
            raise ConfigError(f"{records_per_message!r}: expected integers, e.g. 1,10,100",
                              path="--records-per-message") from None
        if any(k < 1 for k in plan.records_per_message):
            raise ConfigError("records per message must be >= 1", path="--records-per-message")
    if not plan.datasets and not plan.inputs:
        raise ConfigError("nothing to measure: give --dataset or --input", path="--dataset")
    plan.formats = _installed_only("format", plan.formats, FORMATS, named=bool(format), plan=plan)
    plan.codecs = _installed_only("codec", plan.codecs, CODECS, named=bool(codec), plan=plan)
    return plan


def _installed_only(kind: str, names: list[str], registry: Any, *, named: bool, plan: BenchPlan) -> list[str]:
    """The entries whose library is installed. One the user named and cannot run is a ``ConfigError`` naming
    the extra; the defaults' missing ones are left out and listed in ``plan.left_out`` (the run says so)."""
    missing = [n for n in names if not registry[n].available()]
    if missing and named:
        hints = ", ".join(f"{n} ({install_hint(registry[n].extra)})" for n in missing)
        raise ConfigError(f"not installed: {hints}", path=f"--{kind}")
    plan.left_out += [f"{kind} {n} ({install_hint(registry[n].extra)})" for n in missing]
    return [n for n in names if n not in missing]


def prepare(plan: BenchPlan, console: Any, *, yes: bool, interactive: bool) -> tuple[list[Any], Estimate]:
    """Everything before the first measurement: the server answers, the data loads, the plan and its cost
    are printed; a plan over ``CONFIRM_ABOVE_SECONDS`` asks first (``interactive``) or needs ``yes``.

    ``ConfigError`` (exit 2) when a long plan is refused, ``WirepipeError`` (exit 1) when the server is not there.
    """
    from .estimate import CONFIRM_ABOVE_SECONDS, calibrate, describe, duration, narrower

    if plan.transport != "none" and plan.url:
        from .transport import check_server

        check_server(plan.url)
    datas = load_data(plan)
    combos = plan.combos()
    estimate = calibrate(plan, datas, combos)
    console.print(describe(plan, datas, combos, estimate, console.width), markup=False, highlight=False,
                  soft_wrap=True)
    if plan.left_out:
        console.print(f"left out, not installed: {'; '.join(plan.left_out)}", markup=False, highlight=False,
                      soft_wrap=True)
    if estimate.seconds > CONFIRM_ABOVE_SECONDS and not yes:
        if not interactive:
            raise ConfigError(f"this plan should take about {duration(estimate.seconds)}, more than "
                              f"{duration(CONFIRM_ABOVE_SECONDS)}: {narrower(plan)}", path="--yes")
        from rich.prompt import Confirm

        if not Confirm.ask(f"run it (about {duration(estimate.seconds)})?", console=console, default=False):
            raise ConfigError(f"not started: {narrower(plan)}", path="--yes")
    return datas, estimate


def execute(plan: BenchPlan, bandwidth: float, console: Any, *, yes: bool = False,
            interactive: bool = False) -> BenchRun:
    """Plan, run with a progress bar, print the tables, write the files (also after Ctrl-C, for what finished)."""
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    started = time.monotonic()
    datas, estimate = prepare(plan, console, yes=yes, interactive=interactive)
    columns = (TextColumn("{task.description}"), BarColumn(bar_width=20), TextColumn("{task.percentage:>3.0f}%"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("warm-up", total=estimate.seconds or 1.0)

        def on_step(description: str, done: float, total: float) -> None:
            progress.update(task, description=_fit(description, console.width - 50), completed=done, total=total)

        run = run_bench(plan, on_step, datas=datas, estimate=estimate)
    run.bandwidth = bandwidth
    write_outputs(run, console, time.monotonic() - started)
    return run


def _fit(text: str, width: int) -> str:
    """The progress description in a fixed width: cut at the end (it changes every step; the tables never cut)."""
    width = max(width, 12)
    return text if len(text) <= width else text[: width - 1] + "…"


def write_outputs(run: BenchRun, console: Any, seconds: float) -> None:
    """bench.parquet, bench.md, report.md and report.html, then the tables on the terminal."""
    from rich.markup import escape

    from ..report.plots import write_html
    from ..report.render import write_markdown
    from ..report.summary import summarize

    plan = run.plan
    path = write_results(run)
    report = summarize(rows_table(run), latency_table(run), bandwidth_bps=run.bandwidth)
    report.failures = run.errors
    (plan.out / "bench.md").write_text(render_markdown(run, report), encoding="utf-8")
    write_markdown(report, plan.out / "report.md")
    notes = write_html(report, plan.out / "report.html")
    print_tables(run, report, console)
    for note in dict.fromkeys(notes):
        console.print(f"note: {escape(note)}")
    if run.interrupted:
        console.print(f"interrupted: kept {sum(len(m) for m in run.measured.values())} measured combination(s); "
                      f"not measured: {len(run.not_measured)}", markup=False, highlight=False)
    console.print(f"\nresults: {path}\ntables: {plan.out / 'bench.md'}\nreport: {plan.out / 'report.md'}, "
                  f"{plan.out / 'report.html'}  ({seconds:.1f}s)", markup=False, highlight=False)


def _protocol(run: BenchRun, dataset: str) -> str:
    ms = run.measured[dataset]
    n = ms[0].repetitions if ms else 0
    raw = ms[0].raw_bytes if ms else 0
    note = "" if dataset in DATASETS else " (raw = the record's compact JSON size)"
    return (f"N = {n} repetitions per iteration, K = {run.plan.iterations} iterations after a warm-up; "
            f"times in ms per iteration, median [min-max]; sizes in bytes per record; "
            f"raw size {raw:.0f} B{note}; transport: {run.plan.transport}")


_KIND = {"fastest": "fastest end to end", "smallest": "smallest on the wire", "bandwidth": "best for the link",
         "only": "one configuration measured"}


def _picks(report: Any, dataset: str, width: int | None = None) -> list[tuple[str, str, str, str]]:
    """(what, configuration, figure and how sure, YAML) for each recommendation of a dataset."""
    prefix = f"{dataset}: "
    out = []
    for r in report.recommendations:
        if r.dataset != dataset:
            continue
        why = f"{r.why}; {r.sureness}" if r.sureness else r.why
        out.append((_KIND.get(r.kind, r.kind), r.group.label.removeprefix(prefix), why, r.group.snippet(width)))
    return out


def render_markdown(run: BenchRun, report: Any) -> str:
    """bench.md: per dataset, the recommendation first, then the tables in the published benchmarks' shape."""
    parts = ["# wirepipe bench", ""]
    if run.interrupted:
        parts += [f"**Interrupted**: {len(run.not_measured)} combination(s) not measured "
                  f"({', '.join(run.not_measured[:5])}{' ...' if len(run.not_measured) > 5 else ''}).", ""]
    for dataset, rows in run.measured.items():
        parts += [f"## {dataset}", "", "### Recommendation", ""]
        for what, config, why, yaml in _picks(report, dataset):
            parts += [f"**{what}**: `{config}`: {why}", "", "```yaml", yaml, "```", ""]
        parts += [_protocol(run, dataset), "", format_table(rows).markdown(), chain_table(rows).markdown()]
        failed = failures(rows)
        if failed:
            parts += ["### Failed combinations", ""] + [f"- `{label}`: {why}" for label, why in failed] + [""]
    return "\n".join(parts)


def print_tables(run: BenchRun, report: Any, console: Any) -> None:
    """The terminal: per dataset the tables, then the recommendation with its YAML (never cut), last so it
    stays on screen."""
    from ..report.table import terminal_width, wrap

    width = terminal_width()
    out: list[str] = []
    for dataset, rows in run.measured.items():
        out += ["", f"== {dataset} " + "=" * max(0, width - len(dataset) - 4), *wrap(_protocol(run, dataset), width), ""]
        out += [t.text(width, "bench.md") for t in (format_table(rows), chain_table(rows))]
        for label, why in failures(rows):
            out += wrap(f"failed {label}: {why}", width)
        out += ["", f"Recommendation for {dataset}"]
        for what, config, why, yaml in _picks(report, dataset, width):
            out += [f"{what}: {config}", *wrap(why, width, "  "), *yaml.splitlines()]
    console.print("\n".join(out), markup=False, highlight=False, soft_wrap=True)
