"""``wirepipe schema``: typed schemas from your records, two schemas compared, a schema registry (push, list, show,
compatibility; in a NATS KV bucket or a folder); the JSON Schema of a pipeline file for editors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..core.exit_codes import ExitCode, exit_code
from .app import WordsHelp, app, fail
from .connection import Creds, Sets, server_or_fail

if TYPE_CHECKING:
    from ..connectors.nats.connection import NatsConnectionConfig

schema_app = typer.Typer(help="Typed schemas, the schema registry; the JSON Schema of configs.", no_args_is_help=True,
                         rich_markup_mode=None)



app.add_typer(schema_app, name="schema")



INFER_LIMIT = 100_000  # records read by `schema infer` (a field absent only later than this is not seen)

DEFAULT_REGISTRY = "nats://WIREPIPE_SCHEMAS"
REGISTRY_OPTION: dict[str, Any] = dict(
    envvar="WIREPIPE_SCHEMA_REGISTRY", metavar="nats://BUCKET|FOLDER",
    help="the registry: a NATS KV bucket, or a folder of schema files (NAME/1.yaml ...; for tests and replays "
         "without a server); default $WIREPIPE_SCHEMA_REGISTRY, else nats://WIREPIPE_SCHEMAS")
URL_OPTION: dict[str, Any] = dict(envvar="NATS_URL", metavar="URL",
                                  help="the NATS server of a nats:// registry (default $NATS_URL)")


@dataclass(frozen=True)
class Server:
    """The server of a ``nats://`` registry as the command line gives it (``--url``, ``--creds``, ``--set``),
    checked only when a NATS registry is reached: a folder registry needs none."""

    command: str
    url: str | None = None
    creds: str | None = None
    sets: tuple[str, ...] = ()

    def connection(self, where: str) -> NatsConnectionConfig:
        return server_or_fail(self.url, self.creds, list(self.sets), command=self.command,
                              reaches=f"reads the registry {where} on the NATS server your pipelines use")


def _server(command: str, url: str | None, creds: str | None, sets: list[str] | None) -> Server:
    return Server(f"schema {command}", url, creds, tuple(sets or ()))



@schema_app.command("infer", cls=WordsHelp)
def schema_infer(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="records: FILE.jsonl, FILE.parquet or FILE.csv (.tsv, .csv.gz ...)")],
    name: Annotated[str | None, typer.Option(help="the record's name (default: from the file name)", metavar="NAME")] = None,
) -> None:
    """Print the typed schema of FILE's records.

    YAML, with `?` where a field is absent or null in some records: what serialize and deserialize take as
    `schema:`, as it is, and the csv source too. A CSV file's columns are typed as the csv source types them
    without a schema (int64, float64, bool, string; dates and timestamps stay text), inferred from up to 16 MiB
    of the file: give the result to the source as `schema:` so that every row is typed the same."""
    import yaml

    from ..connectors.files import file_stem
    from ..core.errors import WirepipeError
    from ..schema import SchemaError, infer_schema
    from ..study.bench.data import read_records, schema_name

    try:
        records = read_records(file, INFER_LIMIT)
        if not all(isinstance(r, dict) for r in records):
            raise WirepipeError(f"{file}: the records are not all objects (mappings): no fields to type")
        schema = infer_schema(records, name or schema_name(file_stem(file)))
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
    registry: Annotated[str, typer.Option(**REGISTRY_OPTION)] = DEFAULT_REGISTRY,
    url: Annotated[str | None, typer.Option(**URL_OPTION)] = None,
    creds: Creds = None,
    set_: Sets = None,
) -> None:
    """Say what differs between two schemas, and whether records of one read as the other by field name.

    A and B are each a schema file (.yaml, .yml, .json, .avsc, .proto, .desc; FILE#Message for a .proto or .desc
    that declares several), a dataset name, or a pipeline file: the schema its serialize, encode, deserialize or
    decode is given (FILE#serialize or FILE#deserialize picks the side when it has both; a registered one is looked
    up in --registry), or a registered version:
    NAME@VERSION, NAME@latest (in --registry), or as a pipeline names one, registry/NAME@VERSION or
    nats://BUCKET/NAME@VERSION. Prints each schema with
    its fingerprint (the Wirepipe-Schema header of its messages), the fields added, removed, moved and retyped
    from A to B, and whether a consumer with B reads records written with A by field name (deserialize's
    writer_schemas), and A those of B. Exits 0 when the two are identical (one fingerprint), 1 when they
    differ, 2 when one cannot be read."""
    from ..schema import schema_fingerprint
    from ..schema.evolution import compare_schemas

    server = _server("diff", url, creds, set_)
    (label_a, first), (label_b, second) = _schema_named(a, registry, server), _schema_named(b, registry, server)
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
    from ..core.table import Table

    rows = [[c.path, c.kind, c.writer or "", c.reader or ""] for c in changes]
    return Table("from A to B", ["field", "change", "A", "B"], rows, [False] * 4)


def _spelled(schema: Any) -> str:
    from ..schema import RecordSchema

    return str(schema) if isinstance(schema, RecordSchema) else f"field names only [{', '.join(schema)}]"


def _schema_named(arg: str, registry: str, server: Server) -> tuple[str, Any]:
    """(how to call it, the schema) for a command-line argument: a schema file, a dataset, a pipeline file, a
    registered version (NAME@VERSION in ``registry``, registry/NAME@VERSION, nats://BUCKET/NAME@VERSION)."""
    from ..core.errors import ConfigError
    from ..operators.schema_options import resolve_schema
    from ..pipelines.config import read_yaml_mapping
    from ..schema import SchemaError

    registered = _registered_arg(arg, registry)
    if registered is not None:
        where, name, version = registered
        found = _with_registry(where, server, lambda r: r.version(name, version))
        return f"{found} in {where}", found.schema
    path, _, part = arg.partition("#")
    try:
        if Path(path).suffix.lower() in (".yaml", ".yml") and Path(path).is_file():
            data = read_yaml_mapping(path, "a schema file is a mapping of field: type")
            if isinstance(data.get("operators"), list) and "source" in data:
                return _pipeline_schema(path, part, data["operators"], lambda ref: _registered(ref, registry, server))
        schema = resolve_schema(arg)
    except (SchemaError, ConfigError) as exc:
        fail(f"{arg}: {exc}" if isinstance(exc, SchemaError) else str(exc), ExitCode.CONFIG)
    except (ValueError, ImportError) as exc:  # module:Class that does not load, a class without fields
        fail(f"{arg}: {exc}", ExitCode.CONFIG)
    return arg, schema


def _registered(ref: Any, registry: str, server: Server) -> Any:
    """The schema of a registered version a pipeline names (in its bucket, or in ``registry``)."""
    where = f"nats://{ref.use.bucket}" if ref.use.bucket else registry
    return _with_registry(where, server, lambda r: r.version(ref.name, ref.version)).schema


def _pipeline_schema(path: str, side: str, operators: list[Any], registered: Any) -> tuple[str, Any]:
    """The one schema a pipeline file's serialize / deserialize side is given (``side``: either, when empty);
    ``registered(ref)`` looks up a registered one (``schema: registry/NAME@VERSION``)."""
    import os

    from ..core.errors import ConfigError
    from ..core.stores import registry_ref
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
        ref = registry_ref(params.schema_)
        if ref is not None and ref.name is None:
            continue  # each record read as it was written: no one schema
        schema = registered(ref) if ref is not None else \
            resolve_schema(with_message(params.schema_, getattr(params, "message", None)))
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


# --- the schema registry: push, list, show, compatibility -----------------------------------------------------

def _registry(where: str, server: Server) -> Any:
    """The registry ``--registry`` names: a NATS KV bucket (on ``server``) or a folder."""
    from ..connectors.nats.schema_registry import SCHEME, nats_registry
    from ..connectors.schema_folder import FolderBackend
    from ..connectors.schema_registry import SchemaRegistry

    if not where.startswith(SCHEME):
        return SchemaRegistry(FolderBackend(where))
    bucket = where[len(SCHEME):]
    if not bucket or not all(c.isalnum() or c in "-_" for c in bucket):
        fail(f"--registry {where!r}: a NATS registry is nats://BUCKET (letters, digits, - and _)", ExitCode.CONFIG)
    return nats_registry(server.connection(where), bucket)


def _with_registry(where: str | Any, server: Server, action: Any, *, create: bool = False) -> Any:
    """``await action(registry)`` on the registry ``where`` names (or is), opened and closed around it; its errors
    as exit codes (a name or a version it does not hold: 2; a server that does not answer: 1)."""
    import asyncio

    from ..core.errors import WirepipeError

    registry = _registry(where, server) if isinstance(where, str) else where

    async def run() -> Any:
        await registry.open(create)
        try:
            return await action(registry)
        finally:
            await registry.close()

    try:
        return asyncio.run(run())
    except ValueError as exc:
        fail(str(exc), ExitCode.CONFIG)
    except WirepipeError as exc:
        fail(str(exc), exit_code(exc))


def _registered_arg(arg: str, registry: str) -> tuple[str, str, int | None] | None:
    """(the registry, the name, the version: None for the latest) an argument names, or None when it names no
    registered schema: ``NAME@VERSION``, ``NAME@latest``, ``registry/NAME@VERSION``, ``nats://BUCKET/NAME@...``."""
    from ..core.stores import registry_ref

    text = arg
    if "@" in arg and "/" not in arg and not Path(arg).exists():
        text = f"registry/{arg}"
    try:
        ref = registry_ref(text)
    except ValueError as exc:
        fail(str(exc), ExitCode.CONFIG)
    if ref is None or ref.name is None:
        return None
    where = f"nats://{ref.use.bucket}" if ref.use.bucket else registry
    return where, ref.name, ref.version


def _name_version(arg: str) -> tuple[str, int | None]:
    """``NAME`` or ``NAME@VERSION`` (``@latest``) as (name, version: None for the latest)."""
    name, _, version = arg.partition("@")
    if version and version != "latest" and not (version.isdigit() and int(version) > 0):
        fail(f"{name}: the version is 1, 2, 3 ... or latest, got {version!r}", ExitCode.CONFIG)
    return name, int(version) if version and version != "latest" else None


@schema_app.command("push", cls=WordsHelp)
def schema_push(
    file: Annotated[str, typer.Argument(metavar="FILE", help=(
        "the schema: a schema file (.yaml, .json, .avsc, .proto, .desc; FILE#Message), a dataset, module:Class, or "
        "a pipeline file (the schema its serialize or deserialize is given)"))],
    name: Annotated[str | None, typer.Option("--name", metavar="NAME", help=(
        "the name to register it under (letters, digits, - _ =, dot-separated tokens)"))] = None,
    subject_of: Annotated[Path | None, typer.Option("--subject-of", metavar="PIPELINE", help=(
        "take the name (and the registry) from a pipeline file: the name its serialize or deserialize reads "
        "from a registry (registry/NAME), else the NATS subject it publishes to or reads"))] = None,
    compatibility: Annotated[str | None, typer.Option(metavar="RULE", help=(
        "a new name's rule: backward (the default), forward, full, none, or backward_transitive, "
        "forward_transitive, full_transitive; a name that has one keeps it (wirepipe schema compatibility)"))] = None,
    registry: Annotated[str | None, typer.Option(**{**REGISTRY_OPTION, "help": REGISTRY_OPTION["help"] + (
        "; with --subject-of, the pipeline's")})] = None,
    url: Annotated[str | None, typer.Option(**URL_OPTION)] = None,
    creds: Creds = None,
    set_: Sets = None,
) -> None:
    """Register a schema under a name, as the name's next version.

    The schema must keep the name's compatibility rule against the versions before it (checked here, by field
    name, as a consumer reads: the fields at fault are named, and nothing is registered). A schema the name
    already has is that version again: pushing twice registers once. Two pushes at the same time never take one
    version number (the registry's revision check). A NATS bucket is created when missing. Exits 0 when the
    schema is registered (now or before), 2 when the rule refuses it or an argument is wrong, 1 when the server
    does not answer."""
    from ..connectors.schema_registry import check_rule

    if (name is None) == (subject_of is None):
        fail("name the schema: --name NAME, or --subject-of PIPELINE", ExitCode.CONFIG)
    if compatibility is not None:
        try:
            check_rule(compatibility)
        except ValueError as exc:
            fail(f"--compatibility: {exc}", ExitCode.CONFIG)
    target: Any = registry
    server = _server("push", url, creds, set_)
    if subject_of is not None:
        name, target = _subject_of(subject_of, registry, url)
    assert name is not None
    label, schema = _schema_named(file, registry or DEFAULT_REGISTRY, server)
    done, where = _with_registry(target or DEFAULT_REGISTRY, server, _push(name, schema, compatibility, label),
                                 create=True)
    r = done.registered
    if done.new:
        typer.echo(f"{r.name}@{r.version}: registered in {where} (fingerprint {r.fingerprint}, rule {done.compatibility})")
    else:
        typer.echo(f"{r.name}@{r.version}: already this schema (fingerprint {r.fingerprint}) in {where}: nothing "
                   "registered")


def _push(name: str, schema: Any, compatibility: str | None, label: str) -> Any:
    from ..connectors.schema_registry import Incompatible

    async def push(registry: Any) -> tuple[Any, str]:
        try:
            return await registry.push(name, schema, compatibility), registry.where
        except Incompatible as exc:
            fail(f"{label}: refused by {registry.where}: {exc}", ExitCode.CONFIG)

    return push


def _subject_of(path: Path, registry: str | None, url: str | None) -> tuple[str, Any]:
    """(the name, the registry) a pipeline gives its schema: the name its serialize/deserialize reads from a
    registry, and that registry as the pipeline reaches it; else the NATS subject it publishes to or reads, and
    the registry --registry names (a NATS one reached as the pipeline reaches its server, without --url)."""
    from ..connectors.nats.schema_registry import SCHEME, KvBackend
    from ..connectors.schema_registry import SchemaRegistry
    from ..core.errors import ConfigError, WirepipeError
    from ..core.stores import SCHEMA_NAME
    from ..pipelines.config import load_pipeline
    from ..pipelines.resources import nats_connection

    try:
        pipe = load_pipeline(path)
    except (ConfigError, WirepipeError) as exc:
        fail(str(exc), exit_code(exc))
    named: dict[str, Any] = {}
    for op in pipe.operators:
        ref = getattr(op, "schema_ref", None)
        if ref is not None and ref.name is not None:
            named.setdefault(ref.name, pipe.resources.store(ref.use))
    if len(named) > 1:
        fail(f"--subject-of {path}: its operators read {', '.join(named)} from a registry: give --name", ExitCode.CONFIG)
    if named:
        name, store = next(iter(named.items()))
        return name, registry or store
    subject = _subject(pipe.sink) or _subject(pipe.source)
    if subject is None:
        fail(f"--subject-of {path}: its sink and source name no NATS subject and it reads no schema from a "
             "registry: give --name", ExitCode.CONFIG)
    if not SCHEMA_NAME.match(subject):
        fail(f"--subject-of {path}: its subject {subject!r} is a pattern or a template, not one name: give --name",
             ExitCode.CONFIG)
    where = registry or DEFAULT_REGISTRY
    connection = nats_connection((pipe.source, pipe.sink))
    if where.startswith(SCHEME) and url is None and connection is not None:
        return subject, SchemaRegistry(KvBackend(connection, where[len(SCHEME):]))
    return subject, where


def _subject(part: Any) -> str | None:
    """The one NATS subject a NATS source reads or a NATS sink publishes to (its config's ``subject``)."""
    subject = getattr(getattr(part, "config", None), "subject", None)
    return subject if isinstance(subject, str) and subject else None


@schema_app.command("list", cls=WordsHelp)
def schema_list(
    registry: Annotated[str, typer.Option(**REGISTRY_OPTION)] = DEFAULT_REGISTRY,
    url: Annotated[str | None, typer.Option(**URL_OPTION)] = None,
    creds: Creds = None,
    set_: Sets = None,
) -> None:
    """List the registered names: their versions, the latest one's fingerprint and date, their rule."""

    async def entries(r: Any) -> list[Any]:
        return [e for e in [await r.entry(n) for n in await r.names()] if e is not None]

    found = _with_registry(registry, _server("list", url, creds, set_), entries)
    if not found:
        typer.echo(f"no schema is registered in {registry} yet (wirepipe schema push FILE --name NAME)")
        return
    from ..core.table import Table

    rows = [[e.name, str(len(e.versions)), e.versions[-1].fingerprint if e.versions else "",
             e.versions[-1].registered if e.versions else "", e.compatibility] for e in found]
    typer.echo(Table(f"schemas in {registry}", ["name", "versions", "latest", "registered", "rule"], rows,
                     [False, True, False, False, False]).text(), nl=False)


@schema_app.command("show", cls=WordsHelp)
def schema_show(
    name: Annotated[str, typer.Argument(metavar="NAME[@VERSION]", help="a registered name (its latest version), "
                                        "NAME@2, or NAME@latest")],
    registry: Annotated[str, typer.Option(**REGISTRY_OPTION)] = DEFAULT_REGISTRY,
    url: Annotated[str | None, typer.Option(**URL_OPTION)] = None,
    creds: Creds = None,
    set_: Sets = None,
) -> None:
    """Print a registered version: the schema as YAML (what `schema:` takes as a file), after comment lines with its
    fingerprint, its date, the name's versions and rule."""
    import yaml

    from ..connectors.schema_registry import schema_document

    base, version = _name_version(name)

    async def show(r: Any) -> tuple[Any, Any]:
        return await r.version(base, version), await r.entry(base)

    found, entry = _with_registry(registry, _server("show", url, creds, set_), show)
    registered = entry.version(found.version, registry).registered
    typer.echo(f"# {found} in {registry}: fingerprint {found.fingerprint}, registered {registered}")
    typer.echo(f"# {entry.name}: versions 1 to {len(entry.versions)}, rule {entry.compatibility}")
    typer.echo(yaml.safe_dump(schema_document(found.schema), sort_keys=False, allow_unicode=True), nl=False)


@schema_app.command("compatibility", cls=WordsHelp)
def schema_compatibility(
    name: Annotated[str, typer.Argument(metavar="NAME", help="a registered name (or one to be)")],
    rule: Annotated[str | None, typer.Argument(metavar="RULE", help=(
        "the new rule: backward, forward, full, none, backward_transitive, forward_transitive, full_transitive "
        "(without it: print the name's rule)"))] = None,
    registry: Annotated[str, typer.Option(**REGISTRY_OPTION)] = DEFAULT_REGISTRY,
    url: Annotated[str | None, typer.Option(**URL_OPTION)] = None,
    creds: Creds = None,
    set_: Sets = None,
) -> None:
    """Print a name's compatibility rule, or set it (checked from its next push on).

    backward: a consumer with the new version reads what the latest one wrote (upgrade consumers first); forward:
    a consumer with the latest version reads what the new one writes (upgrade publishers first); full: both;
    _transitive: against every earlier version, not only the latest; none: no check."""
    from ..connectors.schema_registry import DEFAULT_RULE
    from ..schema.evolution import RULE_MEANINGS

    server = _server("compatibility", url, creds, set_)
    if rule is None:
        entry = _with_registry(registry, server, lambda r: r.entry(name))
        current = entry.compatibility if entry is not None else DEFAULT_RULE
        typer.echo(f"{name}: {current} ({RULE_MEANINGS[current]})" + ("" if entry else " (no version yet)"))
        return
    entry = _with_registry(registry, server, lambda r: r.set_compatibility(name, rule), create=True)
    typer.echo(f"{name}: {entry.compatibility} ({RULE_MEANINGS[entry.compatibility]})")


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
