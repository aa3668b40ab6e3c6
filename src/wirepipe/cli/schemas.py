"""``wirepipe schema``: typed schemas from your records."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..core.exit_codes import ExitCode, exit_code
from .app import WordsHelp, app, fail

schema_app = typer.Typer(help="Typed schemas: infer one from your records.", no_args_is_help=True,
                         rich_markup_mode=None)



app.add_typer(schema_app, name="schema")



INFER_LIMIT = 100_000  # records read by `schema infer` (a field absent only later than this is not seen)



@schema_app.command("infer", cls=WordsHelp)
def schema_infer(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="records: FILE.jsonl or FILE.parquet")],
    name: Annotated[str | None, typer.Option(help="the record's name (default: from the file name)", metavar="NAME")] = None,
) -> None:
    """Print the typed schema of FILE's records.

    YAML, with `?` where a field is absent or null in some records: what serialize and deserialize take as
    `schema:`, as it is."""
    import yaml

    from ..bench.data import read_records, schema_name
    from ..core.errors import WirepipeError
    from ..schema import SchemaError, infer_schema

    try:
        records = read_records(file, INFER_LIMIT)
        if not all(isinstance(r, dict) for r in records):
            raise WirepipeError(f"{file}: the records are not all objects (mappings): no fields to type")
        schema = infer_schema(records, name or schema_name(file.stem))
    except SchemaError as exc:
        fail(f"{file}: {exc}", ExitCode.CONFIG)
    except WirepipeError as exc:
        fail(str(exc), exit_code(exc))
    more = "" if len(records) < INFER_LIMIT else f" (the first {INFER_LIMIT:,})"
    typer.echo(f"# inferred by `wirepipe schema infer` from {len(records):,} records{more} of {file}")
    typer.echo(yaml.safe_dump(schema.to_document(), sort_keys=False, allow_unicode=True), nl=False)
