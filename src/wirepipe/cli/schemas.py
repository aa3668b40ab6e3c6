"""``wirepipe schema``: typed schemas from your records; the JSON Schema of a pipeline file for editors."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ..core.exit_codes import ExitCode, exit_code
from .app import WordsHelp, app, fail

schema_app = typer.Typer(help="Typed schemas; the JSON Schema of configs.", no_args_is_help=True,
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


CONFIG_KINDS = ("pipeline", "test")


def config_json_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of a pipeline file (``pipeline``) or of a ``wirepipe test`` file (``test``)."""
    from ..pipelines.config_schema import json_schema, pipeline_json_schema

    if kind == "pipeline":
        return pipeline_json_schema()
    from ..pipetest.model import TestFile

    return json_schema(TestFile, "wirepipe test file", "A wirepipe test file (wirepipe test)")


@schema_app.command("config", cls=WordsHelp)
def schema_config(
    kind: Annotated[str, typer.Option("--kind", help="pipeline (a pipeline file) or test (a wirepipe test file)",
                                      metavar="KIND")] = "pipeline",
    out: Annotated[Path | None, typer.Option("--out", help="write it to FILE (default: standard output)",
                                             metavar="FILE")] = None,
) -> None:
    """Print the JSON Schema of a pipeline file (or of a test file: --kind test), for editors.

    Generated from the models that validate the YAML, with every operator, source and sink installed
    (plugins included). Point an editor at it with a first line such as
    `# yaml-language-server: $schema=pipeline.schema.json`: fields complete while typing and a typo is
    flagged. wirepipe ships a copy of each kind in the installed package: wirepipe/schemas/pipeline.schema.json
    and wirepipe/schemas/test.schema.json."""
    from ..pipelines.config_schema import schema_text
    from ..storage.files import write_bytes_atomic

    if kind not in CONFIG_KINDS:
        fail(f"--kind {kind!r}: allowed {', '.join(CONFIG_KINDS)}", ExitCode.CONFIG)
    text = schema_text(config_json_schema(kind))
    if out is None:
        typer.echo(text, nl=False)
        return
    try:
        write_bytes_atomic(out, text.encode())
    except OSError as exc:
        fail(f"{out}: cannot write the schema ({exc.strerror or exc})", ExitCode.CONFIG)
    typer.echo(f"wrote {out}")
