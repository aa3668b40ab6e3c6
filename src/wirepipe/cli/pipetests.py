"""``wirepipe test``: a pipeline's test files, run in process."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..core.exit_codes import ExitCode
from .app import command, fail


@command("test")
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
    from ..core.errors import ConfigError
    from ..pipetest import collect, report, run_files

    try:
        files = collect(list(paths or []))  # every file valid before any case runs (exit 2, as a config error)
    except ConfigError as exc:
        fail(str(exc), ExitCode.CONFIG)
    session = run_files(files, update=update, echo=typer.echo)
    for block in report.failure_blocks(session.results):
        typer.echo(block)
    for path in session.rewritten:
        typer.echo(f"updated {path}: review the change (git diff) before committing it", err=True)
    typer.echo(report.summary_line(session.results, session.elapsed))
    if junit is not None:
        report.write_junit(session.results, junit, session.elapsed)
    if session.interrupted:
        fail("interrupted (Ctrl-C): the cases after it did not run", ExitCode.INTERRUPTED)
    if session.failed:
        raise typer.Exit(ExitCode.RUNTIME)
