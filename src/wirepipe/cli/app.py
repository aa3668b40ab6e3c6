"""The ``wirepipe`` command line.

Every command imports what it needs inside its body, so ``wirepipe --help`` answers
without loading pyarrow, nats or pydantic. Errors wirepipe raises on purpose are
printed as one clear message, never as a traceback, and every command exits with a
code from the one table in ``exit_codes`` (0 ok, 1 runtime, 2 usage/config, 3 rejected
records, 4 failed bench combinations, 5 records lost, 6 records awaiting redelivery, 130
interrupted); ``exit_codes.exit_code`` says which code an error gets, so the same mistake exits
alike in every command, and ``finish`` ends every command that runs records by ``exit_codes.verdict``.

``app`` is the typer application; each command group registers on it from its own module
(``runs``, ``traffic``, ``pipetests``, ``study``, ``schemas``), imported by the package."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from typer.core import TyperCommand, TyperGroup

from ..core.exit_codes import ExitCode, exit_code

if TYPE_CHECKING:
    from ..core.exit_codes import LossLimit, Outcome, RejectLimit
    from ..pipelines.pipeline import Pipeline
    from ..pipelines.stats import RunStats

MAX_REJECTED_HELP = ("exit 3 when more records than this are rejected (a count or a percentage of the records read); "
                     "default: rejections are reported, and every record rejected exits 3")
MAX_LOST_HELP = ("exit 5 when more records than this are lost (core NATS: sequence gaps, client drops, a lost tail, "
                 "records discarded at a drain; a count or a percentage of the records the source knew of); "
                 "default 0")


class WordsHelp(TyperCommand):
    """Help that names an argument by its word (``PIPELINE``), as it names an option's value (``--count N``).

    typer prints an argument's Python type after it (``CAPTURE <list[str]>``), which reads as code; the
    options get words from their ``metavar``. click's ``cls=`` is how a command chooses its help."""

    def format_options(self, ctx: Any, formatter: Any) -> None:  # click's Context, HelpFormatter
        params = [p for p in self.get_params(ctx) if not getattr(p, "hidden", False)]
        arguments = [(p.metavar or (p.name or "").upper(), f"{getattr(p, 'help', None) or ''}"
                      f"{'  [required]' if p.required else ''}".strip())
                     for p in params if p.param_type_name == "argument"]
        options = [r for p in params if p.param_type_name == "option" and (r := p.get_help_record(ctx))]
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


class Commands(TyperGroup):
    """The application's commands: a Ctrl-C that a command does not make an outcome of its own (a drain, a bench
    that keeps what finished) ends it with one line and exit 130, as the exit-code table says; click alone
    would print "Aborted!" and exit 1."""

    def invoke(self, ctx: Any) -> Any:  # click's Context
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            fail("interrupted", ExitCode.INTERRUPTED)


app = typer.Typer(
    cls=Commands,
    name="wirepipe",
    help="Stream-processing pipelines for the payload path on NATS: serialize, compress, publish, consume, measure.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: wraps at the terminal's width, never cuts an option's name
)


def command(name: str | None = None) -> Any:
    """``@command()``: a command of ``app`` with the help above."""
    return app.command(name, cls=WordsHelp)



def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"wirepipe {version('wirepipe')}")
        raise typer.Exit()



@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="print the version and exit")] = False) -> None:
    """Stream-processing pipelines for the payload path on NATS."""



def fail(message: str, code: ExitCode) -> NoReturn:
    from ..core.redact import redact_secrets

    typer.echo(f"error: {redact_secrets(message)}", err=True)
    raise typer.Exit(code)



def limits(max_rejected: str | None, max_lost: str | None = None) -> tuple[RejectLimit, LossLimit]:
    """``--max-rejected`` and ``--max-lost``, parsed; a bad value is a usage error (exit 2)."""
    from ..core.exit_codes import LossLimit, RejectLimit

    try:
        return RejectLimit.parse(max_rejected), LossLimit.parse(max_lost)
    except ValueError as exc:
        fail(str(exc), ExitCode.CONFIG)


def finish(outcome: Outcome, rejected: RejectLimit | None = None, lost: LossLimit | None = None) -> None:
    """End a command that ran records as ``exit_codes.verdict`` says: each reason it is not a success on its own
    line, the exit code of the first; nothing (exit 0) when there is none."""
    from ..core.exit_codes import verdict
    from ..core.redact import redact_secrets

    reasons = verdict(outcome, rejected, lost)
    for _, why in reasons:
        typer.echo(f"error: {redact_secrets(why)}", err=True)
    if reasons:
        raise typer.Exit(reasons[0][0])



def owned_process() -> None:
    """This process runs pipelines for wirepipe's own command: apply the allocator policy (see wirepipe.core.allocator)."""
    from ..core.allocator import keep_freed_memory

    keep_freed_memory()



def setup_logging(verbose: bool = False) -> None:
    import logging

    from ..core.redact import log_redacted

    log_redacted(logging.DEBUG if verbose else logging.INFO, "%(asctime)s %(levelname)s %(name)s: %(message)s")



def run_as_worker(pipe: Pipeline, file: str | None = None, *, ends: bool | None = None) -> RunStats:
    """Run a pipeline as a long-lived worker (signals, drain; ``ends``: see ``worker.run_worker_async``); its
    errors become exit codes (a config error found only once the parts run names ``file``, as validation
    would)."""
    from ..core.errors import ConfigError, WirepipeError
    from ..pipelines.worker import run_worker

    try:
        return run_worker(pipe, ends=ends)
    except KeyboardInterrupt:
        fail("interrupted", ExitCode.INTERRUPTED)
    except ConfigError as exc:  # a rule only the running parts could check (a JetStream stream's subjects)
        fail(str(ConfigError(exc.detail, file=exc.file or file, path=exc.path)), ExitCode.CONFIG)
    except WirepipeError as exc:
        fail(str(exc), exit_code(exc))
    except OSError as exc:  # an I/O error no part of wirepipe described: still one line, not a traceback
        fail(f"{exc.filename or pipe.name}: {exc.strerror or exc}", ExitCode.RUNTIME)



def main() -> None:
    app()
