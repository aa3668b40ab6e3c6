"""What ``serialize`` and ``deserialize`` share: the ``schema:`` option and the format-name check.

``schema`` is one of: a dataset name (its typed schema), a schema file (``.yaml``/``.yml``/
``.json`` in wirepipe's schema language, an Avro ``.avsc``, a protobuf ``.proto`` source or
``FileDescriptorSet`` ``.desc``/``.pb``, the message named by ``message:`` or ``FILE#Message``
when the file declares several), an inline mapping ``{field: type}``,
a list of field names (untyped: enough for ``msgpack-array``), or ``module:Class`` (a
generated protobuf class gives a typed schema; other classes give their field order and,
on decode, typed records). Without one, positional formats use the schema the source
attached to the batch.

Or a schema registered in a schema store (``core.stores.registry_ref``): ``registry/NAME`` (the latest version),
``registry/NAME@3``, or ``registry`` alone (deserialize: each record with the schema it was written with), where
``registry`` names a store under the pipeline's ``resources.schemas`` (undeclared, ``registry`` is the NATS KV
bucket ``WIREPIPE_SCHEMAS``); ``nats://BUCKET/NAME@3`` names the store by its bucket. The schema is fetched when
the pipeline starts (``pipelines/resources.py`` hands the operator its store).

>>> resolve_schema(["id", "x"])
('id', 'x')
>>> schema_param(["id", "x"])
['id', 'x']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, WrapValidator

from ..core.errors import Refusal
from ..core.limits import MAX_SCHEMA_FILE, read_at_most
from ..core.registry import load_ref
from ..core.stores import DESCRIPTOR_SETS, SCHEMA_FILES
from ..schema import RecordSchema, SchemaError, load_schema_file, parse_schema

SchemaSpec = str | Sequence[str] | Mapping[str, Any] | type | RecordSchema | None


def _python_schema_or(value: Any, as_yaml: Callable[[Any], Any]) -> Any:
    """A schema only Python can give (a ``RecordSchema``, a class, a tuple of names) as it is; anything
    else validated as one of YAML's spellings."""
    return value if isinstance(value, (RecordSchema, type, tuple)) else as_yaml(value)


# YAML's spellings of a SchemaSpec (see resolve_schema); in Python, what only Python can give passes too.
SchemaParam = Annotated[str | list[str] | dict[str, Any] | None, WrapValidator(_python_schema_or)]
# One of writer_schemas: a file, a dataset or module:Class, or an inline mapping (Python: what SchemaParam takes)
WriterSchemaParam = Annotated[str | dict[str, Any], WrapValidator(_python_schema_or)]


def resolve_schema(spec: SchemaSpec) -> RecordSchema | tuple[str, ...] | None:
    """The typed schema (or, for a list of names and plain classes, the field order) ``spec`` names."""
    if spec is None or isinstance(spec, RecordSchema):
        return spec
    if isinstance(spec, Mapping):
        return parse_schema(spec)
    if isinstance(spec, str):
        return _schema_from_text(spec)
    if isinstance(spec, type):
        return _protobuf_schema(spec) if hasattr(spec, "DESCRIPTOR") else _fields_of(spec)
    return tuple(spec)


def _schema_from_text(spec: str) -> RecordSchema | tuple[str, ...]:
    path, _, message = spec.partition("#")
    suffix = Path(path).suffix.lower()
    if suffix in SCHEMA_FILES:
        return load_schema_file(path)
    if suffix == ".avsc":
        import json

        from ..codecs.avro import schema_of_avsc

        try:
            return schema_of_avsc(json.loads(read_at_most(path, MAX_SCHEMA_FILE, "a schema file")))
        except OSError as exc:
            raise SchemaError("", f"cannot read {path}: {exc.strerror or exc}") from None
        except ValueError as exc:
            if isinstance(exc, SchemaError):
                raise
            raise SchemaError("", f"{path} is not valid JSON: {exc}") from None
    if suffix in DESCRIPTOR_SETS:
        from ..codecs.protobuf import load_descriptor_set

        try:
            return _protobuf_schema(load_descriptor_set(path, message or None))
        except OSError as exc:
            raise SchemaError("", f"cannot read {path}: {exc.strerror or exc}") from None
    if suffix == ".proto":
        from ..codecs.protoc import load_message

        return _protobuf_schema(load_message(path, message or None))
    if ":" in spec:
        obj = load_ref(spec)
        return _protobuf_schema(obj) if hasattr(obj, "DESCRIPTOR") else _fields_of(obj)
    from ..datasets import DATASETS

    if spec not in DATASETS:
        raise SchemaError("", f"{spec!r} is neither a dataset ({', '.join(DATASETS)}) nor a schema file "
                              f"(.yaml, .yml, .json, .avsc, .proto, {', '.join(DESCRIPTOR_SETS)}) nor module:Class")
    return DATASETS[spec].schema


def _protobuf_schema(cls: Any) -> RecordSchema:
    from ..codecs.protobuf import schema_of_message

    return schema_of_message(cls.DESCRIPTOR)


def _fields_of(cls: Any) -> tuple[str, ...]:
    """Field order of a dataclass, a faust.Record, a pydantic model or an annotated class."""
    import dataclasses

    if dataclasses.is_dataclass(cls):
        return tuple(f.name for f in dataclasses.fields(cls))
    options = getattr(cls, "_options", None)
    if options is not None and getattr(options, "fields", None):
        # faust.Record: declaration order (inherited fields first), under the names its
        # records carry on the wire (a field's output_name, as asdict() writes them).
        descriptors = getattr(options, "descriptors", None) or {}
        return tuple(getattr(descriptors.get(f), "output_name", None) or f for f in options.fields)
    model_fields = getattr(cls, "model_fields", None)
    if isinstance(model_fields, dict):
        return tuple(model_fields)
    annotations = getattr(cls, "__annotations__", None)
    if annotations:
        return tuple(k for k in annotations if not k.startswith("_"))
    raise ValueError(f"{cls!r} has no fields to use as a schema")


def schema_param(schema: SchemaSpec) -> Any:
    """The schema as its ``params`` entry records it (what a metrics row and a YAML file can hold)."""
    if isinstance(schema, type):
        return f"{schema.__module__}:{schema.__qualname__}"
    if isinstance(schema, RecordSchema):
        return schema.to_document()
    if isinstance(schema, Mapping):
        return dict(schema)
    return schema if isinstance(schema, str) else list(schema or ())


def source_schema_refusal(fmt: Any, schema: Any, options: dict[str, Any]) -> Refusal | None:
    """Why ``fmt`` (a ``Format`` that needs a schema and was given none) cannot take the schema its source
    attaches (``schema``, None when the source attaches none), or None."""
    try:
        fmt._check_schema(schema)
    except ValueError as exc:
        got = "the source attaches none" if schema is None else "the source's has no types"
        return Refusal("schema", f"{exc} ({got})")
    return None


def known_format(extra: tuple[str, ...] = ()) -> Callable[[str], str]:
    """A params validator: a registered format name (or one of ``extra``), else the allowed ones."""
    def check(v: str) -> str:
        from ..codecs.formats import FORMATS
        from ..core.models import unknown_message

        if v not in FORMATS and v not in extra:
            raise ValueError(unknown_message("format", v, [*FORMATS, *extra]))
        return v

    return check


def with_message(schema: SchemaSpec, message: str | None) -> SchemaSpec:
    """``schema: x.proto`` and ``message: Point`` as the one spelling ``x.proto#Point``."""
    if message is None:
        return schema
    suffixes = (".proto", *DESCRIPTOR_SETS)
    if not isinstance(schema, str) or Path(schema.partition("#")[0]).suffix.lower() not in suffixes:
        raise SchemaError("", f"message: {message!r} names a message of a protobuf schema file; schema: must then be "
                              f"a {', '.join(suffixes)} file, got {schema_param(schema)!r}")
    if "#" in schema:
        raise SchemaError("", f"message: {message!r} and {schema!r} both name the message: give one of them")
    return f"{schema}#{message}"


MESSAGE_FIELD = Field(default=None, description="protobuf: the message of a .proto/.desc schema that declares several")
WRITER_SCHEMAS_FIELD: Any = Field(
    default_factory=list, description="the schemas publishers may write with besides `schema:` (files, dataset "
    "names, module:Class or inline mappings): a record whose Wirepipe-Schema header names one is decoded with it and "
    "read by field name as `schema:`, where the two are compatible; a positional format's record written with any "
    "other schema is dead-lettered")
SCHEMA_HEADER_FIELD: Any = Field(
    default=None, description="a record without a Wirepipe-Schema header (a publisher that does not "
    "stamp its schema): decoded with `schema:` (optional) or dead-lettered (required); default: optional, and "
    "required with a schema from a registry")
SCHEMA_FIELD: Any = Field(
    default=None, alias="schema", description="a dataset name, a schema file (.yaml, .json, .avsc, .proto, .desc), "
    "an inline mapping {field: type}, a list of field names, module:Class, or a registered schema: registry/NAME "
    "(its latest version when the pipeline starts), registry/NAME@VERSION, nats://BUCKET/NAME@VERSION (see "
    "resources.schemas)")
