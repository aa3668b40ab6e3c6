"""A pipeline's resources: the stores its operators read from, declared once and handed to each operator that
names one (as Benthos declares cache resources for its processors), so no operator opens a connection.

```yaml
resources:
  schemas:
    registry: {type: nats, bucket: WIREPIPE_SCHEMAS}   # nats: {url: ...} to reach another server
    archive: {type: folder, path: schemas/}
  dictionaries:
    DICTS: {type: nats}                                # the Object Store bucket DICTS (bucket: to name another)
operators:
  - decompress: {codec: auto, dictionaries: nats://DICTS}
  - deserialize: {format: avro, schema: registry/points}
```

An operator names a store (``core.stores.StoreUse``: ``schema: registry/points``, ``schema: archive/points@2``,
``dictionary: nats://DICTS/tx``); ``Resources.bind`` hands it the store when the pipeline is put together (a name
that is not declared is a configuration error at the operator's field), the pipeline opens the stores before its
operators and closes them after. Some names need no declaration: ``registry``, the NATS KV registry in bucket
``WIREPIPE_SCHEMAS``, and the bucket of a ``nats://BUCKET/...`` reference (a NATS KV registry for a schema, an
Object Store bucket for zstd dictionaries); they reach the server as the pipeline's NATS source or sink does
(``nats_connection``), or as the operator's own ``nats:`` says. Declared, a resource of that name stands in for
them: a test or a replay swaps the registry for a folder (``resources.schemas.registry: {type: folder, path:
schemas}``) and a bucket of dictionaries for a folder of ``.zdict`` files (``resources.dictionaries.DICTS: {type:
folder, path: dicts}``), and the operators read the same schemas and dictionaries from files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Union

from pydantic import Field, StringConstraints, model_validator

from ..connectors.connector import Source
from ..connectors.dictionary_stores import FolderDictionariesConfig
from ..connectors.nats.connection import NatsConnectionConfig
from ..connectors.nats.dictionary_bucket import NatsDictionariesConfig
from ..connectors.nats.schema_registry import DEFAULT_BUCKET, NatsRegistryConfig
from ..connectors.schema_folder import FolderRegistryConfig
from ..core.errors import ConfigError
from ..core.models import Strict, validate
from ..core.stores import DICTIONARIES, REGISTRY, RESOURCE_NAME, SCHEMAS, StoreUse, UsesStores
from .parts import close_each

KINDS = (SCHEMAS, DICTIONARIES)
STORE_TYPES = ("nats", "folder")
SchemaStoreConfig = Annotated[Union[NatsRegistryConfig, FolderRegistryConfig],  # noqa: UP007
                              Field(discriminator="type")]
DictionaryStoreConfig = Annotated[Union[NatsDictionariesConfig, FolderDictionariesConfig],  # noqa: UP007
                                  Field(discriminator="type")]
ResourceName = Annotated[str, StringConstraints(pattern=RESOURCE_NAME)]


class ResourcesConfig(Strict):
    """The stores operators name, each under a name of its own (letters, digits, - and _)."""

    schemas: dict[ResourceName, SchemaStoreConfig] = Field(
        default_factory=dict, description="schema registries, by the name `schema: NAME/SCHEMA@VERSION` gives them "
        "(`registry` undeclared: the NATS KV bucket WIREPIPE_SCHEMAS; nats://BUCKET/...: that bucket)")
    dictionaries: dict[ResourceName, DictionaryStoreConfig] = Field(
        default_factory=dict, description="zstd dictionary stores, by the name `dictionary: nats://NAME/DICT` and "
        "`dictionaries: nats://NAME` give them (undeclared: the NATS Object Store bucket NAME)")

    @model_validator(mode="after")
    def _buckets_named(self) -> ResourcesConfig:
        """A NATS dictionary store's bucket is its resource's name unless it says another."""
        for name, config in self.dictionaries.items():
            if isinstance(config, NatsDictionariesConfig) and config.bucket is None:
                config.bucket = name
        return self

    def named(self) -> dict[str, dict[str, Any]]:
        """The declared stores by kind and name."""
        return {SCHEMAS: dict(self.schemas), DICTIONARIES: dict(self.dictionaries)}


def nats_connection(parts: Sequence[Any]) -> NatsConnectionConfig | None:
    """The connection settings of the first of a pipeline's parts (source, sink) that is a NATS connector: how a
    store given no ``nats:`` of its own reaches the server."""
    for part in parts:
        config = getattr(part, "config", None)
        if isinstance(config, NatsConnectionConfig):
            return config
    return None


@dataclass
class Bound:
    """A store the pipeline handed to its operators: the first use that named it and where (the operator's field,
    or ``resources.<kind>.<name>`` when declared), the config it was built from (None: an object given in
    Python) and the store."""

    use: StoreUse
    at: str
    config: Any
    store: Any

    @property
    def reached_through_nats(self) -> bool:
        """True when the store is a NATS bucket (it needs a server)."""
        return getattr(self.config, "type", None) == "nats"


class Resources:
    """The stores of one pipeline: built from their configs (or given as objects, in Python) the first time an
    operator names them, opened and closed with the pipeline.

    ``declared`` is a ``ResourcesConfig``, its mapping (``{"schemas": {"registry": {...}}}``) or, in Python, a
    mapping of store objects by kind and name (``{"dictionaries": {"DICTS": memory_dictionaries(...)}}``).
    """

    name = "resources"

    def __init__(self, declared: ResourcesConfig | Mapping[str, Mapping[str, Any]] | None = None, *,
                 nats: NatsConnectionConfig | None = None) -> None:
        """``nats``: how a store given no ``nats:`` of its own reaches the server when no part of the pipeline is
        a NATS connector (a command's ``--url`` over a file of records); stores are built with it, never opened
        before ``open``."""
        self.nats = nats
        self._declared: dict[tuple[str, str], Any] = {}
        if isinstance(declared, ResourcesConfig):
            declared = declared.named()
        for kind, named in (declared or {}).items():
            if kind not in KINDS:
                raise ConfigError(f"unknown kind of resource {kind!r}: allowed {', '.join(KINDS)}", path="resources")
            for name, value in named.items():
                if isinstance(value, Mapping):
                    value = ResourcesConfig.model_validate({kind: {name: value}}).named()[kind][name]
                self._declared[(kind, name)] = value
        self._bound: dict[tuple[str, str], Bound] = {}
        self._opened: list[Any] = []
        self._operators: list[Any] = []  # opened by open_operators

    def __repr__(self) -> str:
        return f"Resources({', '.join(f'{k}.{n}' for k, n in self._declared) or 'none declared'})"

    def bind(self, operators: Sequence[Any], parts: Sequence[Any], where: Sequence[str] | None = None) -> None:
        """Hand every operator that names stores (``core.stores.UsesStores``) each one, and every part that does
        (a ``csv`` source's registered schema); ``ConfigError`` at the operator's field (``where[i]``: its YAML
        entry) or the part's for a store that is not declared or cannot be built."""
        named = [(op, where[i] if where else f"operators[{i}].{getattr(op, 'stage', 'operator')}")
                 for i, op in enumerate(operators)]
        named += [(part, "source" if isinstance(part, Source) else "sink") for part in parts]
        for user, at in named:
            if isinstance(user, UsesStores):
                for use in user.store_uses():
                    user.use_store(use, self._store(use, parts, at))

    def _store(self, use: StoreUse, parts: Sequence[Any], at: str) -> Any:
        key = (use.kind, use.resource)
        bound = self._bound.get(key)
        if bound is not None:
            if key not in self._declared and use.connection != bound.use.connection:
                raise ConfigError(f"{use.bucket} is named with other `nats:` settings at {bound.at}: declare "
                                  f"resources.{use.kind}.{use.resource} once, with its nats:", path=f"{at}.nats")
            return bound.store
        config = self._declared.get(key)
        path = f"resources.{use.kind}.{use.resource}"
        if config is None:
            config, path = _implied(use, self._declared, at), f"{at}.{use.field}"
        if hasattr(config, "build"):
            try:
                store = config.build(nats_connection(parts) or self.nats)
            except ConfigError as exc:
                raise ConfigError(exc.detail, path=path) from None
        else:
            store, config = config, None  # a store object given in Python
        self._bound[key] = Bound(use, path, config, store)
        return store

    def store(self, use: StoreUse) -> Any:
        """The store handed to the operators that name ``use`` (``bind`` built it)."""
        return self._bound[(use.kind, use.resource)].store

    def bound(self) -> list[Bound]:
        """The stores handed to operators, in the order they were first named."""
        return list(self._bound.values())

    async def open(self) -> None:
        """Open every store an operator was handed, in the order they were named."""
        for bound in self._bound.values():
            if bound.store not in self._opened:
                await bound.store.open()
                self._opened.append(bound.store)

    async def open_operators(self, operators: Sequence[Any], parts: Sequence[Any]) -> None:
        """Open the stores, then each of ``operators`` (handed its stores by ``bind``) as a run opens it: the
        registered schema ``schema: registry/NAME`` reads or writes as, a publisher's zstd dictionary, fetched.
        For whatever runs operators outside a run loop (``wirepipe test``'s ``encode`` and ``decode``, ``tap``, a
        Beam worker), so a schema reference means the same wherever a deserialize would take it;
        ``close_operators`` after."""
        await self.open()
        for op in operators:
            self._operators.append(op)  # closed even when its open fails half-way
            await op.open(parts)

    async def close_operators(self) -> None:
        """Close what ``open_operators`` opened, last first, then the stores."""
        operators, self._operators = self._operators, []
        await close_each(operators)
        await self.close()

    async def close(self) -> None:
        """Close the stores opened, last first; one that fails to close is logged, the others close."""
        stores, self._opened = self._opened, []
        await close_each(stores)


def _implied(use: StoreUse, declared: Mapping[tuple[str, str], Any], at: str) -> Any:
    """The store a reference implies without a declaration (``registry``, ``nats://BUCKET``): a NATS bucket;
    ``ConfigError`` at the operator's field for a name that must be declared."""
    if use.kind == DICTIONARIES and use.bucket is not None:
        settings = {"type": "nats", "bucket": use.bucket} | ({"nats": use.connection} if use.connection else {})
        return validate(NatsDictionariesConfig, settings, at)
    bucket = use.bucket or (DEFAULT_BUCKET if use.resource == REGISTRY else None)
    if bucket is None:
        names = ", ".join(n for k, n in declared if k == use.kind) or "none"
        raise ConfigError(f"no {use.kind} resource {use.resource!r} (declared: {names}): declare it under "
                          f"resources.{use.kind}, or name the registry `{REGISTRY}` (a schema file needs its "
                          "suffix: .yaml, .json, .avsc, .proto ...)", path=f"{at}.{use.field}")
    return NatsRegistryConfig(type="nats", bucket=bucket)
