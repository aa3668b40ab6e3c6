"""What ``serialize`` and ``deserialize`` share: the ``schema:`` option and the format-name check.

``schema`` is one of: a dataset name (its typed schema), a schema file (``.yaml``/``.yml``/
``.json`` in wirepipe's schema language, an Avro ``.avsc``, a protobuf ``.proto`` source or
``FileDescriptorSet`` ``.desc``/``.pb``, the message named by ``message:`` or ``FILE#Message``
when the file declares several), an inline mapping ``{field: type}``,
a list of field names (untyped: enough for ``msgpack-array``), or ``module:Class`` (a
generated protobuf class gives a typed schema; other classes give their field order and,
on decode, typed records). Without one, positional formats use the schema the source
attached to the batch.

Or a schema registered in a schema store (``registry_ref``): ``registry/NAME`` (the latest version),
``registry/NAME@3``, or ``registry`` alone (deserialize: each record with the schema it was written with), where
``registry`` names a store under the pipeline's ``resources.schemas`` (undeclared, ``registry`` is the NATS KV
bucket ``WIREPIPE_SCHEMAS``); ``nats://BUCKET/NAME@3`` names the store by its bucket. The schema is fetched when
the pipeline starts (``pipelines/resources.py`` hands the operator its store).

>>> resolve_schema(["id", "x"])
('id', 'x')
>>> str(registry_ref("registry/points@3")), registry_ref("nats://SCHEMAS/points").use.bucket
('registry/points version 3', 'SCHEMAS')
>>> schema_param(["id", "x"])
['id', 'x']
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, WrapValidator

from ..core.errors import ConfigError, Refusal, WirepipeError
from ..core.registry import load_ref
from ..core.stores import (
    SCHEMA_NAME,
    SCHEMA_NAME_RULE,
    SCHEMAS,
    NotRegistered,
    Registered,
    SchemaStore,
    StoreUse,
)
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
_SCHEMA_FILES = (".yaml", ".yml", ".json")
_DESCRIPTOR_SETS = (".desc", ".pb", ".binpb", ".protoset")
SCHEMA_FILE_SUFFIXES = (*_SCHEMA_FILES, ".avsc", ".proto", *_DESCRIPTOR_SETS)  # a schema: that names a file


# --- a schema in a store: registry/NAME@VERSION, nats://BUCKET/NAME@VERSION -------------------------------------

REGISTRY = "registry"  # the store ``schema: registry/...`` names when ``resources.schemas`` declares no other
_NATS = "nats://"
_STORE = r"[A-Za-z0-9_-]+"
_REF = re.compile(rf"^(?P<store>{_STORE})(?:/(?P<name>[-_=.a-zA-Z0-9]+?)(?:@(?P<version>[^@/]*))?)?$")
# (no NAME@VERSION in a message: redaction would take NAME for a URL's user info; " @VERSION" stays as it is)
_REF_SHAPE = "registry/NAME, registry/NAME @VERSION (1, 2 ... or latest), or nats://BUCKET in place of registry"


@dataclass(frozen=True)
class RegistryRef:
    """A schema in a schema store: the store (``use``), a name (None: each record's own writer schema) and a
    version (None: the latest when the pipeline starts)."""

    use: StoreUse
    name: str | None = None
    version: int | None = None
    spelled: str = ""

    def __str__(self) -> str:
        """The reference in a message (``registry/points version 3``: see ``_REF_SHAPE``)."""
        head = self.spelled.partition("@")[0]
        if self.name is None:
            return head
        return f"{head} version {self.version}" if self.version is not None else f"{head} (its latest version)"


def registry_ref(spec: Any) -> RegistryRef | None:
    """The registered schema ``spec`` names, or None when it names a schema some other way (a file, a dataset,
    module:Class, a mapping); ``ValueError`` for a reference that is not well formed."""
    if not isinstance(spec, str):
        return None
    text, bucket = spec, None
    if spec.startswith(_NATS):
        text = spec[len(_NATS):]
        bucket = text.partition("/")[0]
    elif "/" not in spec and spec != REGISTRY:
        return None
    elif ":" in spec or "#" in spec or Path(spec).suffix.lower() in SCHEMA_FILE_SUFFIXES:
        return None  # module:Class, FILE#Message, a schema file in a folder
    m = _REF.match(text)
    if m is None:
        raise ValueError(f"a registered schema is {_REF_SHAPE} (the store letters, digits, - and _, the name letters, "
                         f"digits, - _ = and single dots), got {spec.partition('@')[0]!r}")
    version, name = m.group("version"), m.group("name")
    if name is not None and not SCHEMA_NAME.match(name):
        raise ValueError(f"{name!r} is not a schema name: {SCHEMA_NAME_RULE}")
    if version is not None and not (version == "latest" or (version.isdigit() and int(version) > 0)):
        raise ValueError(f"{spec.partition('@')[0]!r}: the version is 1, 2, 3 ... or latest, got {version!r}")
    return RegistryRef(StoreUse(SCHEMAS, m.group("store"), bucket), name,
                       int(version) if version and version != "latest" else None, spec)


class SchemaFromStore:
    """What ``serialize`` and ``deserialize`` share when ``schema:`` names a registered schema: the reference and the
    store the pipeline hands them (``core.stores.UsesStores``)."""

    _ref: RegistryRef | None = None
    _store: SchemaStore | None = None

    @property
    def schema_ref(self) -> RegistryRef | None:
        """The registered schema ``schema:`` names (None: a schema given another way)."""
        return self._ref

    def store_uses(self) -> Sequence[StoreUse]:
        """The schema store ``schema:`` names, if it names one."""
        return (self._ref.use,) if self._ref is not None else ()

    def use_store(self, use: StoreUse, store: Any) -> None:
        self._store = store

    def _handed(self, entry: str) -> SchemaStore:
        """The store the pipeline handed the operator (``entry``: its name in messages)."""
        if self._store is None:
            raise WirepipeError(f"{entry}: schema {self._ref} comes from a schema store the pipeline hands the "
                                "operator: run it in a Pipeline (its resources give it the store)")
        return self._store


async def registered_schema(store: SchemaStore, ref: RegistryRef, entry: str) -> Registered:
    """The version of a registered schema ``ref`` names, from the store the pipeline handed ``entry``'s operator;
    a ``ConfigError`` at ``entry.schema`` saying what the store holds when it does not hold that one."""
    assert ref.name is not None
    try:
        return await store.version(ref.name, ref.version)
    except NotRegistered as exc:
        raise ConfigError(f"{ref}: {exc}", path=f"{entry}.schema") from None


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
    if suffix in _SCHEMA_FILES:
        return load_schema_file(path)
    if suffix == ".avsc":
        import json

        from ..codecs.avro import schema_of_avsc

        try:
            return schema_of_avsc(json.loads(Path(path).read_text(encoding="utf-8")))
        except OSError as exc:
            raise SchemaError("", f"cannot read {path}: {exc.strerror or exc}") from None
        except ValueError as exc:
            if isinstance(exc, SchemaError):
                raise
            raise SchemaError("", f"{path} is not valid JSON: {exc}") from None
    if suffix in _DESCRIPTOR_SETS:
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
                              f"(.yaml, .yml, .json, .avsc, .proto, {', '.join(_DESCRIPTOR_SETS)}) nor module:Class")
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
    suffixes = (".proto", *_DESCRIPTOR_SETS)
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
