"""The deserialize operator: payload bytes back to records, by one format or by ``Content-Type``.

``Deserialize`` decodes every payload with one format or, with ``format: auto``, by each
record's ``Content-Type`` (``Header.CONTENT_TYPE``, which ``serialize`` sets); given one format, it
rejects a record whose ``Content-Type`` names another (none, or one no format has, decodes as before). A payload
that does not decode is rejected per record with the reason. With a ``module:Class`` schema the
records are instances of that class (``typed: false`` keeps dicts). The ``schema`` option is
described in ``operators/schema_options.py``. Given a schema, each record's ``Wirepipe-Schema`` header is
compared with it first (``operators/schema_identity.py``): a record written with another schema is never
decoded positionally with this one; ``writer_schemas`` lists the publishers' schemas whose records are read by
field name, and ``schema_header: required`` refuses records that carry no header.

With a schema registry (``schema: registry/points``, ``nats://BUCKET/points``: ``core.stores.registry_ref``)
the operator is handed its store by the pipeline (``core/stores.py``): when the pipeline starts it takes the
name's latest version (or the one pinned, ``@3``) as its own schema, fixed for the run, and before each pass it
asks the store for the fingerprints of the batch it does not know yet, once each; the records of a version the
reader can read by field name are read so, the others and those of a fingerprint the registry does not hold are
dead-lettered with the reason. ``schema: registry`` alone reads each record as it was written. Records without
the header are refused unless ``schema_header: optional``. The fetch is the run loop's (``prepare``, awaited before
the batch's pass): it sees the headers the batch came with, so a deserialize behind a serialize of the same
pipeline knows the schemas it fetched before and its ``writer_schemas``.

In YAML ``- deserialize: {format: auto}``; in Python ``wirepipe.deserialize("auto")``:

>>> from wirepipe.core.batch import Batch
>>> Deserialize("json")(Batch([b'{"x":1}', b'oops'])).values
[{'x': 1}]
>>> Deserialize("auto")(Batch([b'{"x":1}'], headers={"Content-Type": "application/json"})).values
[{'x': 1}]
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import Field, field_validator

from ..codecs.compression import codec_for_encoding
from ..codecs.formats import Decoder, Schema, format_for_content_type, get_format
from ..core.batch import Batch
from ..core.errors import ConfigError, Refusal, RefusedError, StageError, WirepipeError
from ..core.models import Strict
from ..core.registry import load_ref
from ..core.stages import Stage
from ..core.stores import NotRegistered, RegistryRef, SchemaFromStore, registered_schema, registry_ref
from ..schema import SchemaError
from ..wire import Header
from .operator import PAYLOADS, RECORDS, BuildContext, Configured, Operator, failing, given, refuse_by_header
from .schema_identity import REQUIRED, SchemaIdentity
from .schema_options import (
    MESSAGE_FIELD,
    SCHEMA_FIELD,
    SCHEMA_HEADER_FIELD,
    WRITER_SCHEMAS_FIELD,
    SchemaParam,
    SchemaSpec,
    WriterSchemaParam,
    known_format,
    resolve_schema,
    schema_param,
    source_schema_refusal,
    with_message,
)

log = logging.getLogger("wirepipe.schemas")


class Deserialize(SchemaFromStore, Configured, Operator):
    """Decode every payload with one format, or by ``Content-Type`` with ``format: auto``."""

    stage = Stage.DESERIALIZE
    entry = "deserialize"
    takes, gives = PAYLOADS, RECORDS

    def __init__(self, format: str = "auto", schema: SchemaSpec = None, *, allow_pickle: bool = False,
                 typed: bool | None = None, framed: bool = False, schema_id: int | None = None,
                 writer_schemas: Sequence[SchemaSpec] = (), schema_header: str | None = None) -> None:
        """The arguments are ``DeserializeParams``'s fields, checked as the YAML entry is; ``allow_pickle`` is the
        pipeline-wide setting (``BuildContext``)."""
        self._init(DeserializeParams, BuildContext(allow_pickle=allow_pickle), format=format, framed=framed,
                   writer_schemas=list(writer_schemas),
                   **given(schema=schema, typed=typed, schema_id=schema_id, schema_header=schema_header))

    def _configure(self, params: DeserializeParams, ctx: BuildContext) -> None:
        format, schema, typed = params.format, with_message(params.schema_, params.message), params.typed
        framed, schema_id = params.framed, params.schema_id
        self.auto = format == "auto"
        self.allow_pickle = ctx.allow_pickle
        self.name = format if self.auto else get_format(format).name
        self.params = {"format": self.name} | ({"schema": schema_param(schema)} if schema else {})
        self.params |= {k: v for k, v in (("framed", framed), ("schema_id", schema_id)) if v}
        self._options: dict[str, Any] = {"framed": framed, "schema_id": schema_id}
        self._column: Callable[[list[bytes]], list[Any]] | None = None
        self._ref: RegistryRef | None = registry_ref(schema)
        self._store = None
        self._schema: Schema = resolve_schema(schema) if self._ref is None else None
        record_class = _record_class(schema) if self._ref is None else None
        # A record class in the schema gives typed records unless typed: false says otherwise.
        self._record_class = record_class if (typed is None or typed) else None
        if typed and record_class is None:
            raise ValueError("typed: true needs schema: module:RecordClass")
        self._writers = [_writer_schema(i, w) for i, w in enumerate(params.writer_schemas)]
        # without the header, a record of a registry's schemas cannot be told: refused unless asked otherwise
        header = params.schema_header or (REQUIRED if self._ref is not None else "optional")
        self._required = header == REQUIRED
        if self._writers:
            self.params["writer_schemas"] = [schema_param(w) for w in params.writer_schemas]
        if params.schema_header is not None:
            self.params["schema_header"] = header
        self._identity: SchemaIdentity | None = None
        self._by_type: dict[str | None, Decoder] = {}
        self._by_schema: dict[tuple[str | None, str | None], Decoder] = {}
        self._fixed: Decoder | None = None
        self._names_on_wire = not self.auto and not get_format(format).needs_schema
        self._content_type = None if self.auto else get_format(format).content_type  # records of another: refused
        self._compressed_refused = False  # in a pipeline with no decompress before it (``follows``)
        if self._ref is not None:
            self._check_registry(self._ref)
        elif not self.auto:
            fmt = get_format(format)
            if not fmt.needs_schema or self._schema is not None:
                self._build(fmt)
        elif self._schema is not None:
            self._identity = SchemaIdentity(self._schema, self._writers, required=self._required)
        if (self._writers or self._required) and self._schema is None and self._ref is None and \
                (self.auto or self._names_on_wire):
            raise ValueError("writer_schemas and schema_header: required compare records with the schema they are "
                             "read with: set `schema:` too")

    # --- a schema registry: the store, the reader's schema at start, the writers' before each pass --------------

    def _check_registry(self, ref: RegistryRef) -> None:
        if ref.name is None and self._names_on_wire:
            raise ValueError(f"schema: {ref} reads each record with the schema it was written with, and {self.name} "
                             "names its fields on the wire, needing none: name the schema records are read as "
                             f"({ref}/NAME), or give no schema")
        if ref.name is None and not self._required and not self.auto:
            raise ValueError(f"schema: {ref} reads each record with the schema it was written with: a record without "
                             "the Wirepipe-Schema header has none (schema_header: optional needs the schema records "
                             f"are read as: {ref}/NAME)")
        self.io = self.prepares = True

    async def open(self, parts: Sequence[Any]) -> None:
        """The reader's schema from the registry (its latest version, or the one pinned), fixed for the run."""
        ref = self._ref
        if ref is None:
            return
        store, label = self._handed("deserialize"), None
        if ref.name is not None:
            registered = await registered_schema(store, ref, "deserialize")
            self._schema, label = registered.schema, str(registered)
            log.info("deserialize: reading records as %s (%s) from %s", registered, registered.fingerprint, store.where)
        if not self.auto and self._schema is not None:
            self._fixed = None
            self._build(get_format(self.name))
        self._identity = SchemaIdentity(self._schema, self._writers, required=self._required, registry=store.where,
                                        reader_label=label)
        self._by_schema.clear()

    async def prepare(self, batch: Batch) -> None:
        """The schemas of the batch's fingerprints this operator does not know yet, from the registry: once each
        (a fingerprint it does not hold is asked for again after the store's ``retry_after``). ``NotConnected``
        when the registry does not answer: the run loop holds the batch and asks again."""
        identity, store = self._identity, self._store
        if identity is None or store is None or self._names_on_wire:
            return
        for fingerprint in sorted(identity.unknown(batch.headers)):
            try:
                schema = await store.by_fingerprint(fingerprint)
            except NotRegistered as exc:  # a damaged entry: its records are dead-lettered with the reason
                identity.learn(fingerprint, None, str(exc))
                continue
            if schema is None and fingerprint in identity.unusable:
                continue
            identity.learn(fingerprint, schema)
            if schema is not None:
                log.info("deserialize: schema %s from %s", fingerprint, store.where)
            self._by_schema = {k: fn for k, fn in self._by_schema.items() if k[1] != fingerprint}

    def refuse_schema(self, schema: Any) -> Refusal | None:
        """A positional format given no ``schema:`` takes the one its source attaches: refused when the pipeline
        is built when there is none (a NATS source attaches none)."""
        if self.auto or self._fixed is not None or self._ref is not None:
            return None
        return source_schema_refusal(get_format(self.name), schema, self._options)

    def _build(self, fmt: Any) -> None:
        self._fixed = self._typed(fmt.decoder(self._schema, allow_pickle=self.allow_pickle, **self._options))
        if self._record_class is None:
            self._column = fmt.column_decoder(self._schema, **self._options)
        if self._schema is not None and self._ref is None:
            self._identity = SchemaIdentity(self._schema, self._writers, required=self._required)

    def _typed(self, decode: Decoder) -> Decoder:
        cls = self._record_class
        if cls is None:
            return decode
        build = _builder(cls)
        return lambda data: build(decode(data))

    def _for_type(self, content_type: str | None) -> Decoder:
        fn = self._by_type.get(content_type)
        if fn is None:
            try:
                fmt = format_for_content_type(content_type)
                fn = self._typed(fmt.decoder(self._schema, allow_pickle=self.allow_pickle, **self._options))
            except (KeyError, ValueError, RefusedError) as exc:
                fn = failing(exc if isinstance(exc, StageError) else
                              StageError("deserialize", "auto", str(exc.args[0]) if exc.args else str(exc)))
            self._by_type[content_type] = fn
        return fn

    def __call__(self, batch: Batch) -> Batch:
        if self._ref is not None and self._identity is None:
            raise WirepipeError(f"deserialize: schema {self._ref} comes from a schema registry when the pipeline "
                                "starts: run the operator in a Pipeline (or await its open() first)")
        if self._fixed is None and not self.auto and self._ref is None:  # a positional format: the source's schema
            self._schema = self._schema or batch.schema
            self._build(get_format(self.name))
        if not self.auto:
            refuse_by_header(batch, Header.CONTENT_TYPE, {None, self._content_type}, self._other_format, self.stage,
                             self.name)
        if self._compressed_refused:
            refuse_by_header(batch, Header.CONTENT_ENCODING, _PLAIN, _still_compressed, self.stage, self.name)
        identity = self._identity
        if identity is not None and not identity.all_own(batch.headers, self._names_on_wire):
            return self._by_writer(batch)
        fn = self._fixed
        if fn is not None:
            column = self._column
            if column is not None and batch.values:
                values = batch.values
                try:  # a batch of fixed-size records at once
                    batch.values = column(values)
                    return batch
                except Exception:  # redo record by record: each bad payload rejected with its reason
                    batch.values = values
            batch.map_values(fn, self.stage, self.name)
            return batch
        return batch.map_by_header(Header.CONTENT_TYPE, self._for_type, self.stage, "auto")

    def follows(self, stages: Sequence[str]) -> None:
        """With no decompress before it in its pipeline, a record that says it is compressed (``Content-Encoding``
        names a codec) is refused: its bytes read as a format may give records of other values."""
        self._compressed_refused = Stage.DECOMPRESS not in stages

    def _other_format(self, content_type: str | None) -> Decoder | None:
        own = self._content_type
        try:
            fmt = format_for_content_type(content_type)
        except KeyError:
            return None
        if fmt.content_type == own:
            return None
        return failing(StageError("deserialize", self.name, (
            f"written as {fmt.name} (Content-Type {content_type}), and this deserialize reads {self.name} ({own}): "
            "the bytes of one format decoded as another give other values; format: auto decodes each message by its "
            "Content-Type")))

    def _by_writer(self, batch: Batch) -> Batch:
        """A batch with records written with another schema (or none, refused): each record's decoder picked by
        its ``Wirepipe-Schema`` (and with ``auto``, its ``Content-Type``): one pick per distinct value."""
        if not self.auto:
            return batch.map_by_header(Header.SCHEMA, self._for_schema, self.stage, self.name)
        return batch.map_values(self._by_headers, self.stage, "auto", with_column=batch.headers_column())

    def _for_schema(self, fingerprint: str | None) -> Decoder:
        return self._decoder(None, fingerprint)

    def _by_headers(self, data: bytes, headers: dict[str, str] | None) -> Any:
        if not headers:
            return self._decoder(None, None)(data)
        return self._decoder(headers.get(Header.CONTENT_TYPE), headers.get(Header.SCHEMA))(data)

    def _decoder(self, content_type: str | None, fingerprint: str | None) -> Decoder:
        key = (content_type, fingerprint)
        fn = self._by_schema.get(key)
        if fn is None:
            fn = self._pick(content_type, fingerprint)
            if len(self._by_schema) < _PICKS_KEPT:  # the header is the publisher's: its values are not ours to count
                self._by_schema[key] = fn
        return fn

    def _pick(self, content_type: str | None, fingerprint: str | None) -> Decoder:
        identity = self._identity
        assert identity is not None
        if self.auto:
            own = self._for_type(content_type)
            try:
                fmt = format_for_content_type(content_type)
            except KeyError:
                return own  # it says why
        else:
            fmt, own = get_format(self.name), self._fixed  # type: ignore[assignment]
        options = self._options

        def build(writer: Schema, convert: Callable[[Any], Any]) -> Decoder:
            decode = fmt.decoder(writer, allow_pickle=self.allow_pickle, **options)
            return self._typed(lambda data: convert(decode(data)))

        return identity.decoder(fmt, fingerprint, own, build)


_PLAIN: set[str | None] = {None, "identity"}  # Content-Encoding values of bytes as the format wrote them


def _still_compressed(encoding: str | None) -> Decoder | None:
    """A decoder that refuses records of ``encoding``, a codec's ``Content-Encoding``; None for one no codec has
    (another client's: decoded as before) and for ``identity``."""
    try:
        codec = codec_for_encoding(encoding).name
    except (KeyError, ValueError):
        return None
    if codec == "none":  # Content-Encoding: identity
        return None
    return failing(StageError("deserialize", "encoding", (
        f"compressed with {codec} (Content-Encoding {encoding}) and not decompressed: no decompress runs before "
        "this deserialize; put `decompress: {codec: auto}` before it (or decode: {chain: ...} with the codec)")))


_PICKS_KEPT = 1024  # decoders kept by (Content-Type, Wirepipe-Schema): a few in any real stream


def _writer_schema(i: int, spec: SchemaSpec) -> Schema:
    """One of ``writer_schemas``, resolved as ``schema:`` is; a schema error names its place in the list."""
    try:
        return resolve_schema(spec)
    except SchemaError as exc:
        where = f"deserialize.writer_schemas[{i}]" + (f".{exc.path}" if exc.path else "")
        raise ConfigError(exc.message, path=where) from None


def _record_class(spec: SchemaSpec) -> type | None:
    """The class a ``module:Class`` schema names, when it can build typed records."""
    cls = load_ref(spec) if isinstance(spec, str) and ":" in spec and "#" not in spec else spec
    if not isinstance(cls, type) or hasattr(cls, "DESCRIPTOR"):  # protobuf classes give typed dicts
        return None
    return cls


def _builder(cls: type) -> Callable[[Any], Any]:
    """dict -> instance of ``cls``: ``from_data`` where the class has it, else ``cls(**d)``."""
    from_data = getattr(cls, "from_data", None)
    if from_data is None:
        return lambda d: cls(**d)
    if getattr(cls, "__is_model__", False):
        # faust.Record: without preferred_type a "__faust" key in the payload picks the
        # class (another one, or a KeyError when that one is not imported here).
        return functools.partial(from_data, preferred_type=cls)
    return from_data


# --- config: ``- deserialize: {...}`` -------------------------------------------------------------


class DeserializeParams(Strict):
    format: str = Field(default="auto", description="the format payloads are decoded with; auto: by each "
                        "message's Content-Type")
    schema_: SchemaParam = SCHEMA_FIELD
    message: str | None = MESSAGE_FIELD
    typed: bool | None = Field(default=None, description="decode into typed records (the schema's class) "
                               "instead of dicts; default: when the schema is a class")
    framed: bool = Field(default=False, description="a message is a list of records (pack before serialize)")
    schema_id: int | None = Field(default=None, ge=0, lt=2**32, description="avro: Confluent framing")
    writer_schemas: list[WriterSchemaParam] = WRITER_SCHEMAS_FIELD
    schema_header: Literal["optional", "required"] | None = SCHEMA_HEADER_FIELD

    _format = field_validator("format")(known_format(("auto",)))

    def build(self, ctx: BuildContext) -> list[Operator]:
        return [Deserialize.from_params(self, ctx)]


RANK = 11  # where it comes in "allowed operators" lists (see operators/__init__.py)
OPERATORS = {"deserialize": DeserializeParams}
