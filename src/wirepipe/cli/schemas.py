"""``wirepipe schema``: typed schemas from your records, two schemas compared; the JSON Schema of a pipeline file
for editors."""

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


# A pipeline's operator entries that take a schema, by the side of the wire they are on
SIDES = {"serialize": "serialize", "encode": "serialize", "deserialize": "deserialize", "decode": "deserialize"}


@schema_app.command("diff", cls=WordsHelp)
def schema_diff(
    a: Annotated[str, typer.Argument(metavar="A", help="the schema records are written with")],
    b: Annotated[str, typer.Argument(metavar="B", help="the schema they are read with")],
) -> None:
    """Say what differs between two schemas, and whether records of one read as the other by field name.

    A and B are each a schema file (.yaml, .yml, .json, .avsc, .proto, .desc; FILE#Message for a .proto or .desc
    that declares several), a dataset name, or a pipeline file: the schema its serialize, encode, deserialize or
    decode is given (FILE#serialize or FILE#deserialize picks the side when it has both). Prints each schema with
    its fingerprint (the Wirepipe-Schema header of its messages), the fields added, removed, moved and retyped
    from A to B, and whether a consumer with B reads records written with A by field name (deserialize's
    writer_schemas), and A those of B. Exits 0 when the two are identical (one fingerprint), 1 when they
    differ, 2 when one cannot be read."""
    from ..schema import schema_fingerprint
    from ..schema_evolution import compare_schemas

    (label_a, first), (label_b, second) = _schema_named(a), _schema_named(b)
    forward, backward = compare_schemas(first, second), compare_schemas(second, first)
    for letter, label, schema in (("A", label_a, first), ("B", label_b, second)):
        typer.echo(f"{letter}: {label}: {_spelled(schema)}  (fingerprint {schema_fingerprint(schema)})")
    if forward.identical:
        typer.echo("identical: the same fields in the same order, of the same types")
        return
    typer.echo(_changes_table(forward.changes).text(), nl=False)
    for reader, writer, diff in (("B", "A", forward), ("A", "B", backward)):
        verdict = "yes" if diff.readable else "no: " + "; ".join(diff.problems)
        typer.echo(f"{reader} reads records written with {writer} by field name: {verdict}")
    raise typer.Exit(ExitCode.RUNTIME)  # they differ: 1, as for diff(1) and a failed `wirepipe test` case


def _changes_table(changes: Any) -> Any:
    from ..report.table import Table

    rows = [[c.path, c.kind, c.writer or "", c.reader or ""] for c in changes]
    return Table("from A to B", ["field", "change", "A", "B"], rows, [False] * 4)


def _spelled(schema: Any) -> str:
    from ..schema import RecordSchema

    return str(schema) if isinstance(schema, RecordSchema) else f"field names only [{', '.join(schema)}]"


def _schema_named(arg: str) -> tuple[str, Any]:
    """(how to call it, the schema) for a command-line argument: a schema file, a dataset, a pipeline file."""
    from ..core.errors import ConfigError
    from ..operators.schema_options import resolve_schema
    from ..pipelines.config import read_yaml_mapping
    from ..schema import SchemaError

    path, _, part = arg.partition("#")
    try:
        if Path(path).suffix.lower() in (".yaml", ".yml") and Path(path).is_file():
            data = read_yaml_mapping(path, "a schema file is a mapping of field: type")
            if isinstance(data.get("operators"), list) and "source" in data:
                return _pipeline_schema(path, part, data["operators"])
        schema = resolve_schema(arg)
    except (SchemaError, ConfigError) as exc:
        fail(f"{arg}: {exc}" if isinstance(exc, SchemaError) else str(exc), ExitCode.CONFIG)
    except (ValueError, ImportError) as exc:  # module:Class that does not load, a class without fields
        fail(f"{arg}: {exc}", ExitCode.CONFIG)
    return arg, schema


def _pipeline_schema(path: str, side: str, operators: list[Any]) -> tuple[str, Any]:
    """The one schema a pipeline file's serialize / deserialize side is given (``side``: either, when empty)."""
    import os

    from ..core.errors import ConfigError
    from ..operators import OPERATORS
    from ..operators.schema_options import resolve_schema, with_message
    from ..pipelines.config import interpolate, validate_entry
    from ..schema import schema_fingerprint

    if side and side not in ("serialize", "deserialize"):
        raise ConfigError(f"#{side}: name the side whose schema to take, #serialize or #deserialize", file=path)
    found: dict[str, tuple[str, Any]] = {}  # fingerprint -> (the first entry given it, the schema)
    for i, entry in enumerate(operators):
        kind = next(iter(entry)) if isinstance(entry, dict) and len(entry) == 1 else None
        value = entry[kind] if kind else None
        if kind not in SIDES or (side and SIDES[kind] != side) or not isinstance(value, dict) or "schema" not in value:
            continue
        where = f"operators[{i}].{kind}"
        try:
            params = validate_entry(OPERATORS[kind], interpolate(value, os.environ, where), where)
        except ConfigError as exc:
            raise ConfigError(exc.detail, file=path, path=exc.path) from None
        schema = resolve_schema(with_message(params.schema_, getattr(params, "message", None)))
        if schema is None:
            continue
        found.setdefault(schema_fingerprint(schema), (where, schema))
    if len(found) == 1:
        where, schema = next(iter(found.values()))
        return f"{path} ({where})", schema
    sides = f"{side} or {'encode' if side == 'serialize' else 'decode'}" if side else \
        "serialize, encode, deserialize or decode"
    if not found:
        raise ConfigError(f"no {sides} in this pipeline is given a schema", file=path)
    listed = ", ".join(f"{where} ({fingerprint})" for fingerprint, (where, _) in found.items())
    raise ConfigError(f"its {sides} entries are given {len(found)} different schemas ({listed}): name the side with "
                      f"{path}#serialize or {path}#deserialize", file=path)


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
