"""``wirepipe bench``: options to a plan, the run with a progress bar, tables and files out."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator

from ...codecs.compression import CODECS, get_codec
from ...codecs.formats import FORMATS
from ...connectors.nats.connection import NatsConnectionConfig
from ...core.errors import ConfigError
from ...core.models import Strict, config_error, did_you_mean, problem_message
from ...core.registry import install_hint
from ...datasets import DATASETS
from .combos import ALL_LEVELS, QUICK, BenchPlan
from .estimate import Estimate
from .measure import BenchRun, latency_table, load_data, rows_table, run_bench, write_results
from .study_tables import chain_table, failures, format_table


def _listed(value: Any) -> Any:
    """A comma-separated option (``json,msgpack``) as its list; None and lists pass."""
    if value is None or isinstance(value, list):
        return value
    return [v.strip() for v in str(value).split(",") if v.strip()]


def _levels(value: Any) -> Any:
    """``fastest,3`` -> ``["fastest", 3]``: integers as integers, names as they are (checked after)."""
    listed = _listed(value)
    return [int(v) if isinstance(v, str) and v.lstrip("-").isdigit() else v for v in listed or []] or None


def _one_of(kind: str, values: list[str] | None, allowed: Any) -> list[str] | None:
    bad = [v for v in values or [] if v not in allowed]
    if bad:
        raise ValueError(f"unknown {kind} {', '.join(map(repr, bad))}: allowed {', '.join(allowed)}"
                         f"{did_you_mean(bad, allowed)}")
    return values


Listed = Annotated[list[str] | None, BeforeValidator(_listed)]


class BenchOptions(Strict):
    """``wirepipe bench``'s options, checked as a YAML entry is: a bad one is a ``ConfigError`` naming the
    option, the bad value and what is allowed (exit 2)."""

    dataset: Listed = Field(default=None, description="built-in datasets, comma-separated")
    inputs: list[Path] = Field(default_factory=list, description="files of one's own records (JSONL, Parquet, CSV: "
                               "what a file source reads, by the file's name)")
    format: Listed = Field(default=None, description="formats, comma-separated (default: all)")
    codec: Listed = Field(default=None, description="codecs or their aliases, comma-separated (default: all)")
    level: Annotated[list[str | int] | None, BeforeValidator(_levels)] = Field(
        default=None, description="fastest, default, best or integers, each valid for every codec named")
    transport: Literal["none", "nats", "jetstream"] = "nats"
    nats: NatsConnectionConfig | None = Field(default=None, description="the server to bench against (--url, "
                                              "--creds, --set); None: an embedded one")
    iterations: int | None = Field(default=None, ge=1)
    repetitions: int | None = Field(default=None, ge=1)
    out: Path = Path("results/bench")
    quick: bool = False
    zstd_dict: Literal["train"] | None = None
    records_per_message: Annotated[list[Annotated[int, Field(ge=1)]] | None, BeforeValidator(_listed)] = None
    seed: int = Field(default=0, description="the random seed of the built-in datasets' records and of the sample drawn from each --input")

    @field_validator("dataset")
    @classmethod
    def _known_datasets(cls, v: list[str] | None) -> list[str] | None:
        return _one_of("dataset", v, list(DATASETS))

    @field_validator("format")
    @classmethod
    def _known_formats(cls, v: list[str] | None) -> list[str] | None:
        return _one_of("format", v, list(FORMATS))

    @field_validator("codec", mode="before")
    @classmethod
    def _known_codecs(cls, v: Any) -> list[str] | None:
        names = _listed(v)
        return _one_of("codec", [_codec_name(c) for c in names] if names is not None else None, list(CODECS))

    @field_validator("level")
    @classmethod
    def _known_levels(cls, v: list[str | int] | None) -> list[str | int] | None:
        names = [lv for lv in v or [] if isinstance(lv, str) and lv not in ALL_LEVELS]
        if names:
            raise ValueError(f"unknown level {', '.join(map(repr, names))}: allowed fastest, default, best or an "
                             f"integer{did_you_mean(names, ALL_LEVELS)}")
        return v

    @model_validator(mode="after")
    def _levels_fit_the_codecs(self) -> BenchOptions:
        """Every level named is one every codec measured takes (``zstd`` at 99 is refused before anything runs):
        the codecs named, else ``--quick``'s, else all of them."""
        codecs = self.codec or (QUICK["codecs"] if self.quick else BenchPlan().codecs)
        for c in codecs:
            for lv in self.level or []:
                if c != "none":
                    try:
                        get_codec(c).resolve_level(lv)
                    except ValueError as exc:
                        raise ValueError(str(exc)) from None
        return self


_OPTION = {"inputs": "--input"}


def _describe(err: Any) -> tuple[str, str]:
    """(option, message) for one problem: ``--records-per-message``, not the field path. The one check across
    options (a level against the codecs) is the level's."""
    field = str(err["loc"][0]) if err["loc"] else "level"
    return _OPTION.get(field, f"--{field.replace('_', '-')}"), problem_message(err)


def _codec_name(name: str) -> str:
    """The registry name of a codec or alias (``br`` -> ``brotli``); unknown names pass through to the check."""
    try:
        return get_codec(name).name
    except KeyError:
        return name


def make_plan(*, dataset: str | None, inputs: list[Path], format: str | None, codec: str | None,
              level: str | None, transport: str, iterations: int | None,
              repetitions: int | None, out: Path, quick: bool, zstd_dict: str | None,
              records_per_message: str | None, seed: int, nats: NatsConnectionConfig | None = None) -> BenchPlan:
    """Validate the command's options (``BenchOptions``) into a plan; a bad one is a ``ConfigError`` naming it.
    ``nats`` is the server's connection, already checked (``cli/connection.py``)."""
    given = {"dataset": dataset, "inputs": inputs, "format": format, "codec": codec, "level": level,
             "transport": transport, "nats": nats, "iterations": iterations, "repetitions": repetitions, "out": out,
             "quick": quick, "zstd_dict": zstd_dict, "records_per_message": records_per_message, "seed": seed}
    try:
        opts = BenchOptions.model_validate(given)
    except ValidationError as exc:
        raise config_error(exc, None, (), _describe) from None
    return _plan(opts)


def _plan(opts: BenchOptions) -> BenchPlan:
    """The plan the options ask for: ``--quick``'s preset first, then what was named."""
    plan = BenchPlan(out=opts.out, seed=opts.seed, quick=opts.quick, nats=opts.nats, transport=opts.transport)
    if opts.quick:
        plan.datasets, plan.formats, plan.codecs = list(QUICK["datasets"]), list(QUICK["formats"]), list(QUICK["codecs"])
        plan.levels, plan.iterations, plan.scale = list(QUICK["levels"]), int(QUICK["iterations"]), float(QUICK["scale"])
    if opts.inputs:
        from ...connectors.files import file_type

        for path in opts.inputs:
            file_type(path, "--input")  # a type no source reads: refused before anything runs
        plan.inputs = list(opts.inputs)
        plan.datasets = []
    for name in ("dataset", "format", "codec", "level", "records_per_message"):
        value = getattr(opts, name)
        if value:
            setattr(plan, {"dataset": "datasets", "format": "formats", "codec": "codecs", "level": "levels"}
                    .get(name, name), list(value))
    plan.iterations = opts.iterations or plan.iterations
    plan.repetitions = opts.repetitions
    plan.zstd_dict = opts.zstd_dict == "train"
    if plan.zstd_dict and "zstd" not in plan.codecs:
        plan.codecs.append("zstd")
    plan.small_dict = opts.quick and bool(opts.inputs) and not plan.zstd_dict and "zstd" in plan.codecs
    if not plan.datasets and not plan.inputs:
        raise ConfigError("nothing to measure: give --dataset or --input", path="--dataset")
    plan.formats = _installed_only("format", plan.formats, FORMATS, named=bool(opts.format), plan=plan)
    plan.codecs = _installed_only("codec", plan.codecs, CODECS, named=bool(opts.codec), plan=plan)
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
    from ...core.units import format_duration
    from .estimate import CONFIRM_ABOVE_SECONDS, calibrate, describe, narrower

    if plan.transport != "none" and plan.nats is not None:
        from .transport import check_server

        check_server(plan.nats)
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
            raise ConfigError(f"this plan should take about {format_duration(estimate.seconds)}, more than "
                              f"{format_duration(CONFIRM_ABOVE_SECONDS)}: {narrower(plan)}", path="--yes")
        from rich.prompt import Confirm

        if not Confirm.ask(f"run it (about {format_duration(estimate.seconds)})?", console=console, default=False):
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
    from ..report.results import RunInfo
    from ..report.summary import summarize

    plan = run.plan
    path = write_results(run)
    report = summarize(rows_table(run), latency_table(run), {run.run_id: RunInfo(run.run_id, failures=run.errors, samples=run.samples)},
                       bandwidth_bps=run.bandwidth)
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
    sample = run.samples.get(dataset) or f"N = {n} repetitions per iteration"
    return (f"Measured on {sample}; K = {run.plan.iterations} iterations after a warm-up; "
            f"times in ms per iteration, median [min-max]; sizes in bytes per record; "
            f"raw size {raw:.0f} B{note}; transport: {run.plan.transport}")


def _picks(report: Any, dataset: str, width: int | None = None) -> list[tuple[str, str, str, str]]:
    """(what, configuration, figure and how sure, YAML) for each recommendation of a dataset."""
    prefix = f"{dataset}: "
    out = []
    for r in report.recommendations:
        if r.dataset != dataset:
            continue
        why = f"{r.why}; {r.sureness}" if r.sureness else r.why
        out.append((r.what, r.group.label.removeprefix(prefix), why, r.group.snippet(width)))
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
    from ...core.table import terminal_width, wrap

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
