"""A schema registry: names, each name's versions and its compatibility rule, kept in a small key-value backend.

Publishers and consumers that share a server share their schemas through it. ``wirepipe schema push`` registers a
schema under a name as the name's next version when it keeps the name's rule (``schema.evolution``:
``incompatibilities``); ``serialize: {schema: registry/points@3}`` publishes with version 3; ``deserialize:
{schema: registry/points}`` reads each record with the schema its ``Wirepipe-Schema`` header names, fetched from the
registry, as the latest version of ``points``.

What is kept is Confluent's subjects, versions and ids, with the fingerprint as the id (any publisher computes it,
none has to ask the registry for it):

- each schema once, under its fingerprint, never replaced: a consumer looks a header's value up directly;
- each name's entry: its rule and its versions in order, each a fingerprint and the time it was registered.

A push is idempotent (a schema the name already has is that version, not a new one) and safe against another
pusher: it reads the name's entry, checks the rule, stores the schema, then writes the entry only if it is still
the one it read (the backend's revision check); otherwise it reads again and starts over, so two pushers never
take one version number.

The backends: ``MemoryBackend`` here (unit tests: ``wirepipe.testing.memory_schema_registry``), a folder of
schema files (``connectors/schema_folder.py``: ``wirepipe test`` and replays without a server) and a NATS KV bucket
(``connectors/nats/schema_registry.py``).

>>> import asyncio
>>> from wirepipe.schema import parse_schema
>>> registry = SchemaRegistry(MemoryBackend())
>>> v1 = asyncio.run(registry.push("points", parse_schema({"x": "int32"})))
>>> str(v1.registered), v1.new, asyncio.run(registry.push("points", parse_schema({"x": "int32"}))).new
('points version 1', True, False)
>>> asyncio.run(registry.push("points", parse_schema({"x": "int32", "y": "int32"})))
Traceback (most recent call last):
...
wirepipe.connectors.schema_registry.Incompatible: points keeps the rule backward (a consumer with the new version reads what the latest one wrote: upgrade consumers first), which the new schema breaks: a consumer with the new schema cannot read what version 1 wrote: y: required in the new schema, absent from version 1
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..core.errors import WirepipeError
from ..core.stores import SCHEMA_NAME, SCHEMA_NAME_RULE, NotRegistered, Registered
from ..schema import RecordSchema, canonical_form, parse_schema, schema_fingerprint
from ..schema.evolution import BACKWARD, RULE_MEANINGS, RULES, AnySchema, Incompatibility, incompatibilities

DEFAULT_RULE = BACKWARD
_PUSH_ATTEMPTS = 50  # reads of a name's entry before a push gives up (each lost race is another pusher's version)
# fingerprints remembered as missing: a header is the publisher's, and a stream of made-up values must not grow it
MISSING_KEPT = 1024


def check_name(name: str) -> str:
    """``name`` when a registry can keep it; ``ValueError`` saying what a name is."""
    if not SCHEMA_NAME.match(name):
        raise ValueError(f"{name!r} is not a schema name: {SCHEMA_NAME_RULE}")
    return name


def check_rule(rule: str) -> str:
    if rule not in RULES:
        raise ValueError(f"unknown compatibility rule {rule!r}: allowed {', '.join(RULES)}")
    return rule


# --- what is kept ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Version:
    version: int
    fingerprint: str
    registered: str  # ISO 8601, UTC, to the second


@dataclass(frozen=True)
class NameEntry:
    """A name's rule and its versions, oldest first (version numbers 1, 2, 3 ...)."""

    name: str
    compatibility: str = DEFAULT_RULE
    versions: tuple[Version, ...] = ()

    def find(self, fingerprint: str) -> Version | None:
        return next((v for v in self.versions if v.fingerprint == fingerprint), None)

    def version(self, number: int | None, where: str) -> Version:
        """Version ``number`` (None: the latest); ``NotRegistered`` saying which there are."""
        if not self.versions:
            raise NotRegistered(f"{self.name} has no version in {where} yet")
        if number is None:
            return self.versions[-1]
        if 1 <= number <= len(self.versions):
            return self.versions[number - 1]
        held = "version 1" if len(self.versions) == 1 else f"versions 1 to {len(self.versions)}"
        raise NotRegistered(f"{self.name} has {held} in {where}: no version {number}")

    def with_version(self, fingerprint: str) -> NameEntry:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return replace(self, versions=(*self.versions, Version(len(self.versions) + 1, fingerprint, stamp)))

    def to_json(self) -> bytes:
        return json.dumps({"name": self.name, "compatibility": self.compatibility,
                           "versions": [v.__dict__ for v in self.versions]}, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> NameEntry:
        doc = json.loads(data)
        return cls(doc["name"], doc.get("compatibility", DEFAULT_RULE),
                   tuple(Version(int(v["version"]), v["fingerprint"], v.get("registered", "")) for v in doc["versions"]))


def schema_document(schema: AnySchema) -> Any:
    """A schema as the registry keeps it: its document in wirepipe's schema language, or its field names."""
    return schema.to_document() if isinstance(schema, RecordSchema) else list(schema or ())


def schema_of_document(document: Any) -> AnySchema:
    """The schema a kept document holds (``SchemaError`` when it holds none)."""
    if isinstance(document, list) and all(isinstance(n, str) for n in document):
        return tuple(document)
    return parse_schema(document)


def stored_schema(schema: AnySchema) -> bytes:
    """What is kept under a schema's fingerprint: the fingerprint, the canonical form it is the hash of (a peer
    checks it) and the document."""
    assert schema is not None
    return json.dumps({"fingerprint": schema_fingerprint(schema), "canonical": canonical_form(schema),
                       "schema": schema_document(schema)}, separators=(",", ":")).encode()


class Incompatible(WirepipeError):
    """A push refused by the name's rule, naming each version it breaks and the fields at fault."""

    def __init__(self, name: str, rule: str, found: Sequence[Incompatibility]) -> None:
        self.name, self.rule, self.found = name, rule, tuple(found)
        super().__init__(f"{name} keeps the rule {rule} ({RULE_MEANINGS[rule]}), which the new schema breaks: "
                         + "; ".join(map(str, found)))


@dataclass(frozen=True)
class Pushed:
    """What a push did: the version the schema is (``new``: registered now, else it already was)."""

    registered: Registered
    new: bool
    compatibility: str


# --- the backends ----------------------------------------------------------------------------------------


class Backend(Protocol):
    """Where a registry keeps its entries and schemas. ``read_entry`` returns a token with the entry (a revision);
    ``write_entry`` writes only when the entry is still at that token, and says whether it did."""

    where: str

    async def open(self, create: bool = False) -> None: ...

    async def close(self) -> None: ...

    async def read_entry(self, name: str) -> tuple[NameEntry | None, Any]: ...

    async def write_entry(self, entry: NameEntry, token: Any) -> bool: ...

    async def read_schema(self, fingerprint: str) -> bytes | None: ...

    async def write_schema(self, fingerprint: str, stored: bytes) -> None: ...

    async def names(self) -> list[str]: ...


class MemoryBackend:
    """Entries and schemas in this process, with revisions as a KV bucket keeps them (for tests). ``pause`` makes
    every read yield to the event loop first, so two pushers gathered together interleave as two processes do."""

    where = "memory"

    def __init__(self, *, pause: bool = False) -> None:
        self._entries: dict[str, tuple[bytes, int]] = {}
        self._schemas: dict[str, bytes] = {}
        self._pause = pause

    async def open(self, create: bool = False) -> None:
        return None

    async def close(self) -> None:
        return None

    async def read_entry(self, name: str) -> tuple[NameEntry | None, Any]:
        if self._pause:
            await asyncio.sleep(0)
        data, revision = self._entries.get(name, (b"", 0))
        return (NameEntry.from_json(data) if data else None), revision

    async def write_entry(self, entry: NameEntry, token: Any) -> bool:
        if self._entries.get(entry.name, (b"", 0))[1] != token:
            return False
        self._entries[entry.name] = (entry.to_json(), token + 1)
        return True

    async def read_schema(self, fingerprint: str) -> bytes | None:
        return self._schemas.get(fingerprint)

    async def write_schema(self, fingerprint: str, stored: bytes) -> None:
        self._schemas.setdefault(fingerprint, stored)

    async def names(self) -> list[str]:
        return sorted(self._entries)


# --- the registry ------------------------------------------------------------------------------------------


class SchemaRegistry:
    """Names, versions and rules over a ``Backend``: a ``core.stores.SchemaStore`` for the pipeline's operators
    (``by_fingerprint``, ``version``) and what ``wirepipe schema`` does with it (``push``, ``entry``, ``names``).

    A schema found by its fingerprint is kept for the run (a fingerprint names one schema for ever); one not
    found is asked for again after ``retry_after`` seconds (it may be pushed meanwhile).
    """

    def __init__(self, backend: Backend, *, retry_after: float = 30.0) -> None:
        self.backend = backend
        self.retry_after = retry_after
        self._schemas: dict[str, AnySchema] = {}
        self._missing: dict[str, float] = {}  # fingerprint -> when it may be asked for again

    def __repr__(self) -> str:
        return f"SchemaRegistry({self.where})"

    @property
    def where(self) -> str:
        return self.backend.where

    async def open(self, create: bool = False) -> None:
        await self.backend.open(create)

    async def close(self) -> None:
        await self.backend.close()

    # --- what operators read -------------------------------------------------------------------------------

    async def by_fingerprint(self, fingerprint: str) -> AnySchema | None:
        schema = self._schemas.get(fingerprint)
        if schema is not None:
            return schema
        if self._missing.get(fingerprint, 0.0) > time.monotonic():
            return None
        stored = await self.backend.read_schema(fingerprint)
        if stored is None:
            if len(self._missing) >= MISSING_KEPT:
                del self._missing[next(iter(self._missing))]  # the oldest: asked for again sooner
            self._missing[fingerprint] = time.monotonic() + self.retry_after
            return None
        schema = self._checked(fingerprint, stored)
        self._missing.pop(fingerprint, None)
        self._schemas[fingerprint] = schema
        return schema

    def _checked(self, fingerprint: str, stored: bytes) -> AnySchema:
        """The schema kept under ``fingerprint``, checked to be the one that fingerprint names."""
        try:
            schema = schema_of_document(json.loads(stored)["schema"])
        except (ValueError, KeyError, TypeError) as exc:
            raise NotRegistered(f"{self.where}: the schema kept as {fingerprint} is damaged ({exc})") from None
        if schema_fingerprint(schema) != fingerprint:
            raise NotRegistered(f"{self.where}: the schema kept as {fingerprint} is damaged (its fingerprint is "
                                f"{schema_fingerprint(schema)})")
        return schema

    async def version(self, name: str, version: int | None = None) -> Registered:
        entry = await self.entry(name)
        if entry is None:
            known = await self.backend.names()
            listed = f"it has {', '.join(known)}" if known else "it has none yet"
            raise NotRegistered(f"no schema is registered as {name!r} in {self.where} ({listed})")
        v = entry.version(version, self.where)
        schema = await self.by_fingerprint(v.fingerprint)
        if schema is None:
            raise NotRegistered(f"{self.where}: {name} version {v.version} names schema {v.fingerprint}, which it does not "
                                "hold (damaged)")
        return Registered(name, v.version, v.fingerprint, schema)

    # --- what wirepipe schema does -------------------------------------------------------------------------

    async def entry(self, name: str) -> NameEntry | None:
        return (await self.backend.read_entry(name))[0]

    async def names(self) -> list[str]:
        return await self.backend.names()

    async def push(self, name: str, schema: AnySchema, compatibility: str | None = None) -> Pushed:
        """Register ``schema`` as ``name``'s next version, unless it already is one of them; ``Incompatible`` when
        it breaks the name's rule. ``compatibility`` sets the rule of a new name; for a name that has one, it must
        be that one (``set_compatibility`` changes it)."""
        check_name(name)
        if compatibility is not None:
            check_rule(compatibility)
        fingerprint = schema_fingerprint(schema)
        for _ in range(_PUSH_ATTEMPTS):
            entry, token = await self.backend.read_entry(name)
            entry = entry or NameEntry(name, compatibility or DEFAULT_RULE)
            if compatibility is not None and compatibility != entry.compatibility:
                raise WirepipeError(f"the rule of {name} is {entry.compatibility}, not {compatibility}: change it "
                                    f"first (wirepipe schema compatibility {name} {compatibility})")
            found = entry.find(fingerprint)
            if found is not None:
                return Pushed(Registered(name, found.version, fingerprint, schema), False, entry.compatibility)
            await self._check(entry, schema)
            await self.backend.write_schema(fingerprint, stored_schema(schema))
            entry = entry.with_version(fingerprint)
            if await self.backend.write_entry(entry, token):
                self._schemas[fingerprint] = schema
                return Pushed(Registered(name, len(entry.versions), fingerprint, schema), True, entry.compatibility)
        raise WirepipeError(f"{name}: {_PUSH_ATTEMPTS} other pushes changed it while this one tried: try again")

    async def _check(self, entry: NameEntry, schema: AnySchema) -> None:
        earlier = []
        for v in entry.versions:
            old = await self.by_fingerprint(v.fingerprint)
            if old is None:
                raise NotRegistered(f"{self.where}: {entry.name} version {v.version} names schema {v.fingerprint}, which it "
                                    "does not hold (damaged)")
            earlier.append((v.version, old))
        found = incompatibilities(entry.compatibility, schema, earlier)
        if found:
            raise Incompatible(entry.name, entry.compatibility, found)

    async def set_compatibility(self, name: str, rule: str) -> NameEntry:
        """Give ``name`` the rule ``rule`` from its next push on (a name without versions yet is created)."""
        check_name(name)
        check_rule(rule)
        for _ in range(_PUSH_ATTEMPTS):
            entry, token = await self.backend.read_entry(name)
            entry = replace(entry or NameEntry(name), compatibility=rule)
            if await self.backend.write_entry(entry, token):
                return entry
        raise WirepipeError(f"{name}: {_PUSH_ATTEMPTS} other pushes changed it while this one tried: try again")
