"""A pipeline's resources: the stores its operators read from, declared once and handed to each operator that
names one (as Benthos declares cache resources for its processors), so no operator opens a connection.

```yaml
resources:
  schemas:
    registry: {type: nats, bucket: WIREPIPE_SCHEMAS}   # nats: {url: ...} to reach another server
    archive: {type: folder, path: schemas/}
operators:
  - deserialize: {format: avro, schema: registry/points}
```

An operator names a store (``core.stores.StoreUse``: ``schema: registry/points``, ``schema: archive/points@2``);
``Resources.bind`` hands it the store when the pipeline is put together (a name that is not declared is a
configuration error at the operator's field), the pipeline opens the stores before its operators and closes them
after. Two names need no declaration: ``registry``, the NATS KV registry in bucket ``WIREPIPE_SCHEMAS``, and the
bucket of a ``nats://BUCKET/NAME`` reference, a NATS KV registry in that bucket; both reach the server as the
pipeline's NATS source or sink does. Declared, a resource of that name stands in for them: a test or a replay
swaps the registry for a folder (``--set 'resources.schemas.registry={type: folder, path: schemas}'``) and the
operators read the same schemas from files.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Union

from pydantic import Field, StringConstraints

from ..connectors.nats.schema_registry import BUCKET_PATTERN, DEFAULT_BUCKET, NatsRegistryConfig
from ..connectors.schema_folder import FolderRegistryConfig
from ..core.errors import ConfigError
from ..core.models import Strict
from ..core.stores import SCHEMAS, StoreUse, UsesStores

log = logging.getLogger("wirepipe")

REGISTRY = "registry"  # the schema store ``schema: registry/...`` names without a declaration
STORE_TYPES = ("nats", "folder")
SchemaStoreConfig = Annotated[Union[NatsRegistryConfig, FolderRegistryConfig],  # noqa: UP007
                              Field(discriminator="type")]
ResourceName = Annotated[str, StringConstraints(pattern=BUCKET_PATTERN)]


class ResourcesConfig(Strict):
    """The stores operators name, each under a name of its own (letters, digits, - and _)."""

    schemas: dict[ResourceName, SchemaStoreConfig] = Field(
        default_factory=dict, description="schema registries, by the name `schema: NAME/SCHEMA@VERSION` gives them "
        "(`registry` undeclared: the NATS KV bucket WIREPIPE_SCHEMAS; nats://BUCKET/...: that bucket)")


class Resources:
    """The stores of one pipeline: built from their configs (or given as objects, in Python) the first time an
    operator names them, opened and closed with the pipeline.

    ``declared`` is a ``ResourcesConfig``, its mapping (``{"schemas": {"registry": {...}}}``) or, in Python, a
    mapping of store objects by kind and name (``{"schemas": {"registry": memory_schema_registry()}}``).
    """

    name = "resources"

    def __init__(self, declared: ResourcesConfig | Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self._declared: dict[tuple[str, str], Any] = {}
        if isinstance(declared, ResourcesConfig):
            declared = {SCHEMAS: declared.schemas}
        for kind, named in (declared or {}).items():
            if kind != SCHEMAS:
                raise ConfigError(f"unknown kind of resource {kind!r}: allowed {SCHEMAS}", path="resources")
            for name, value in named.items():
                if isinstance(value, Mapping):
                    value = ResourcesConfig.model_validate({kind: {name: value}}).schemas[name]
                self._declared[(kind, name)] = value
        self._stores: dict[tuple[str, str], Any] = {}
        self._opened: list[Any] = []

    def __repr__(self) -> str:
        return f"Resources({', '.join(f'{k}.{n}' for k, n in self._declared) or 'none declared'})"

    def bind(self, operators: Sequence[Any], parts: Sequence[Any], where: Sequence[str] | None = None) -> None:
        """Hand every operator that names stores (``core.stores.UsesStores``) each one; ``ConfigError`` at the
        operator's field (``where[i]``: its YAML entry) for a store that is not declared."""
        for i, op in enumerate(operators):
            if not isinstance(op, UsesStores):
                continue
            at = where[i] if where else f"operators[{i}].{getattr(op, 'stage', 'operator')}"
            for use in op.store_uses():
                op.use_store(use, self._store(use, parts, at))

    def _store(self, use: StoreUse, parts: Sequence[Any], at: str) -> Any:
        key = (use.kind, use.resource)
        store = self._stores.get(key)
        if store is not None:
            return store
        config = self._declared.get(key)
        path = f"resources.{use.kind}.{use.resource}"
        if config is None:
            bucket = use.bucket or (DEFAULT_BUCKET if use.resource == REGISTRY else None)
            if bucket is None:
                declared = ", ".join(n for k, n in self._declared if k == use.kind) or "none"
                raise ConfigError(f"no {use.kind} resource {use.resource!r} (declared: {declared}): declare it under "
                                  f"resources.{use.kind}, or name the registry `{REGISTRY}` (a schema file needs its "
                                  "suffix: .yaml, .json, .avsc, .proto ...)", path=f"{at}.{use.field}")
            config, path = NatsRegistryConfig(type="nats", bucket=bucket), f"{at}.{use.field}"
        if hasattr(config, "build"):
            try:
                store = config.build(parts)
            except ConfigError as exc:
                raise ConfigError(exc.detail, path=path) from None
        else:
            store = config  # a store object given in Python
        self._stores[key] = store
        return store

    def store(self, use: StoreUse) -> Any:
        """The store handed to the operators that name ``use`` (``bind`` built it)."""
        return self._stores[(use.kind, use.resource)]

    async def open(self) -> None:
        """Open every store an operator was handed, in the order they were named."""
        for store in self._stores.values():
            if store not in self._opened:
                await store.open()
                self._opened.append(store)

    async def close(self) -> None:
        """Close the stores opened, last first; one that fails to close is logged, the others close."""
        while self._opened:
            store = self._opened.pop()
            try:
                await store.close()
            except Exception as exc:
                log.error("closing the store %s failed: %s", getattr(store, "where", store), exc)
