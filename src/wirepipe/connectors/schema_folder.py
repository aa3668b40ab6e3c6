"""The schema registry in a folder of schema files, for ``wirepipe test`` and replays without a server.

```text
schemas/
  points/
    1.yaml          # version 1: a schema in wirepipe's schema language (.yml and .json are read too)
    2.yaml
    compatibility   # the name's rule, when it is not backward
```

``wirepipe schema push FILE --name points --registry schemas/`` writes it with the registry's checks (the rule, the
same schema twice is one version); a file written by hand is read as it is. A pipeline names the folder as a
resource (``resources: {schemas: {registry: {type: folder, path: schemas}}}``), which stands in for the NATS
registry of that name (``pipelines/resources.py``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ..core.limits import MAX_SCHEMA_FILE, read_at_most
from ..core.models import Duration, Strict
from ..core.stores import SCHEMA_NAME, NotRegistered
from ..schema import SchemaError, schema_fingerprint
from ..schema.evolution import AnySchema
from .schema_registry import (
    DEFAULT_RULE,
    NameEntry,
    SchemaRegistry,
    Version,
    schema_of_document,
    stored_schema,
)


class FolderBackend:
    """A folder of schema files: ``NAME/1.yaml``, ``NAME/2.yaml`` ... (wirepipe's schema language; ``.yml`` and
    ``.json`` read too), and ``NAME/compatibility`` holding the name's rule when it is not backward. Written by
    ``wirepipe schema push --registry FOLDER`` or by hand; a new version file is created whole or not at all, and
    never over another one (two pushers race for a number: one wins, the other reads again)."""

    SUFFIXES = (".yaml", ".yml", ".json")

    def __init__(self, path: str | Path, where: str | None = None) -> None:
        """``where``: the store the folder is a copy of, named in messages (default: the folder)."""
        self.path = Path(path)
        self.where = where or f"folder {self.path}"
        self._index: dict[str, Path] = {}  # fingerprint -> the first file that holds it
        self._pending: dict[str, bytes] = {}  # stored schemas a push is about to write as a version file

    async def open(self, create: bool = False) -> None:
        if create:
            self.path.mkdir(parents=True, exist_ok=True)
        elif not self.path.is_dir():
            raise NotRegistered(f"{self.where}: no such folder (create it with wirepipe schema push FILE --name NAME "
                                f"--registry {self.path})")

    async def close(self) -> None:
        return None

    def _version_files(self, name: str) -> dict[int, Path]:
        folder = self.path / name
        if not folder.is_dir():
            return {}
        found: dict[int, Path] = {}
        for f in sorted(folder.iterdir()):
            if f.suffix in self.SUFFIXES and f.stem.isdigit() and int(f.stem) > 0:
                found.setdefault(int(f.stem), f)
        return dict(sorted(found.items()))

    def _schema_in(self, path: Path) -> AnySchema:
        import yaml

        try:
            document = yaml.safe_load(read_at_most(path, MAX_SCHEMA_FILE, "a schema file").decode("utf-8"))
            return schema_of_document(document)
        except (OSError, SchemaError, yaml.YAMLError) as exc:
            raise NotRegistered(f"{self.where}: {path.relative_to(self.path)} is not a schema: {exc}") from None

    async def read_entry(self, name: str) -> tuple[NameEntry | None, Any]:
        files = self._version_files(name)
        rule_file = self.path / name / "compatibility"
        rule = rule_file.read_text(encoding="utf-8").strip() if rule_file.is_file() else DEFAULT_RULE
        if not files and not rule_file.is_file():
            return None, ((), rule)
        if list(files) != list(range(1, len(files) + 1)):
            raise NotRegistered(f"{self.where}: {name}'s versions are {', '.join(map(str, files))}: they must run "
                                "1, 2, 3 ... without a gap")
        versions = []
        for number, f in files.items():
            fingerprint = schema_fingerprint(self._schema_in(f))
            self._index.setdefault(fingerprint, f)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(f.stat().st_mtime))
            versions.append(Version(number, fingerprint, stamp))
        return NameEntry(name, rule, tuple(versions)), (tuple(files), rule)

    async def write_entry(self, entry: NameEntry, token: Any) -> bool:
        import yaml

        from ..storage.files import create_atomic, write_bytes_atomic

        numbers, rule = token
        for v in entry.versions[len(numbers):]:
            document = json.loads(self._pending[v.fingerprint])["schema"]
            text = (f"# {entry.name} version {v.version} (fingerprint {v.fingerprint})\n"
                    + yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
            if not create_atomic(self.path / entry.name / f"{v.version}.yaml", text.encode()):
                return False
        if entry.compatibility != rule:
            write_bytes_atomic(self.path / entry.name / "compatibility", f"{entry.compatibility}\n".encode())
        return True

    async def read_schema(self, fingerprint: str) -> bytes | None:
        if fingerprint in self._pending:
            return self._pending[fingerprint]
        if fingerprint not in self._index:
            for name in await self.names():
                await self.read_entry(name)
        path = self._index.get(fingerprint)
        return stored_schema(self._schema_in(path)) if path is not None else None

    async def write_schema(self, fingerprint: str, stored: bytes) -> None:
        self._pending[fingerprint] = stored

    async def names(self) -> list[str]:
        if not self.path.is_dir():
            return []
        return sorted(d.name for d in self.path.iterdir() if d.is_dir() and SCHEMA_NAME.match(d.name)
                      and (self._version_files(d.name) or (d / "compatibility").is_file()))


class FolderRegistryConfig(Strict):
    """A folder of schema files as the schema registry (``NAME/1.yaml``, ``NAME/2.yaml`` ...): what ``wirepipe test``
    and a replay without a server read instead of the NATS bucket. ``wirepipe schema push FILE --name NAME
    --registry FOLDER`` fills it."""

    type: Literal["folder"]
    path: str = Field(description="the folder: one sub-folder per name, one file per version (1.yaml, 2.yaml ...)")
    retry_after: Duration = Field(default=30.0, gt=0, description="a fingerprint the folder does not hold is looked "
                                  "for again after this long (its records are dead-lettered meanwhile)")
    copy_of: str | None = Field(default=None, description="the store these files were fetched from (a Beam job's "
                                "copy of it): what messages name in place of the folder")

    def build(self, connection: Any = None) -> SchemaRegistry:
        return SchemaRegistry(FolderBackend(self.path, self.copy_of), retry_after=self.retry_after)
