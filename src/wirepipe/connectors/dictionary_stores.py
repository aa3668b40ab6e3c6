"""zstd dictionary stores without a server: in memory, and a folder of ``.zdict`` files.

What ``wirepipe test``, a replay and a Beam job hand ``compress`` and ``decompress`` instead of the NATS Object
Store bucket (``connectors/nats/dictionary_bucket.py``): the same two reads, by name and by the id every frame
carries, bounded by the caller's cap and checked to be a trained zstd dictionary of that id. Which bytes a
record was compressed with is checked where they are used (``operators/shared_dictionaries.py``).

```text
dicts/
  tx.zdict        # `nats://DICTS/tx`: the dictionary called tx (wirepipe dict show nats://DICTS/tx --out ...)
  tx-2025.zdict   # any other file: found by the id in its bytes, as a consumer's frames name it
```

A pipeline names the folder as a resource (``resources: {dictionaries: {DICTS: {type: folder, path: dicts}}}``),
which stands in for the bucket of that name (``pipelines/resources.py``).

>>> import asyncio, zstandard
>>> d = zstandard.train_dictionary(1024, [b"order %d shipped to customer %d" % (i, i * 7) for i in range(400)])
>>> store = MemoryDictionaries({"tx": d.as_bytes()})
>>> asyncio.run(store.by_id(d.dict_id(), 1 << 20)) == asyncio.run(store.by_name("tx", 1 << 20))
True
>>> asyncio.run(store.by_name("tx", 100))
Traceback (most recent call last):
...
wirepipe.core.stores.DictionaryUnusable: dictionary 'tx' in memory is 1024 bytes, over max_output_size (100 bytes): refused
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ..core.errors import MissingInput
from ..core.models import Duration, Strict
from ..core.stores import DICTIONARY_NAME, DictionaryMissing, DictionaryUnusable

SUFFIX = ".zdict"
MAGIC = b"\x37\xa4\x30\xec"  # a trained zstd dictionary's first 4 bytes; its id is the next 4 (little-endian)
RETRY_AFTER = 30.0


def dictionary_id_of(head: bytes) -> int:
    """The id a trained dictionary's first 8 bytes carry; 0 when they are not a dictionary's."""
    return int.from_bytes(head[4:8], "little") if len(head) >= 8 and head[:4] == MAGIC else 0


def checked(data: bytes, dict_id: int | None, what: str) -> bytes:
    """``data`` when it is a trained zstd dictionary (whose id is ``dict_id``, when given); ``DictionaryUnusable``
    saying what it is instead (``what`` names it: ``dictionary 'tx' in bucket DICTS``)."""
    got = dictionary_id_of(data)
    if not got or (dict_id is not None and got != dict_id):
        which = f"has id {got}" if got else "is not a trained zstd dictionary (no magic number and id)"
        raise DictionaryUnusable(f"{what} is damaged: it {which}")
    return data


def over_cap(size: int, cap: int, what: str) -> DictionaryUnusable:
    return DictionaryUnusable(f"{what} is {size} bytes, over max_output_size ({cap} bytes): refused")


class MemoryDictionaries:
    """Dictionaries held in this process, by name and by id (``wirepipe.testing.memory_dictionaries``; a folder's
    shape in a unit test). ``named`` maps names to bytes; ``add`` puts more."""

    def __init__(self, named: Mapping[str, bytes] | None = None, *, where: str = "memory",
                 retry_after: float = RETRY_AFTER) -> None:
        self.where = where
        self.retry_after = retry_after
        self._by_name: dict[str, bytes] = {}
        self._by_id: dict[int, bytes] = {}
        for name, data in (named or {}).items():
            self.add(data, name)

    def add(self, data: bytes, name: str | None = None) -> int:
        """Keep ``data`` (a trained zstd dictionary), under ``name`` too when given; its id."""
        dict_id = dictionary_id_of(checked(bytes(data), None, f"dictionary {name!r}" if name else "the dictionary"))
        if name is not None:
            self._by_name[name] = bytes(data)
        self._by_id[dict_id] = bytes(data)
        return dict_id

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def by_name(self, name: str, cap: int) -> bytes:
        return self._held(self._by_name.get(name), cap, f"{name!r}", f"{name!r}")

    async def by_id(self, dict_id: int, cap: int) -> bytes:
        return self._held(self._by_id.get(dict_id), cap, f"with id {dict_id}", str(dict_id))

    def _held(self, data: bytes | None, cap: int, missing: str, which: str) -> bytes:
        if data is None:
            raise DictionaryMissing(f"no dictionary {missing} in {self.where}")
        if len(data) > cap:
            raise over_cap(len(data), cap, f"dictionary {which} in {self.where}")
        return data

    async def ids(self) -> Sequence[int]:
        return sorted(self._by_id)


class FolderDictionaries:
    """A folder of ``.zdict`` files: ``NAME.zdict`` is the dictionary called ``NAME``, and every file is found by
    the id its bytes carry (read from its first 8 bytes, once; a file added while the pipeline runs is found
    when a frame first names its id)."""

    def __init__(self, path: str | Path, *, retry_after: float = RETRY_AFTER, where: str | None = None) -> None:
        """``where``: the store the folder is a copy of, named in messages (default: the folder)."""
        self.path = Path(path)
        self.where = where or f"folder {self.path}"
        self.retry_after = retry_after
        self._files: dict[int, Path] = {}  # id -> the first file (in name order) whose bytes carry it
        self._seen: set[Path] = set()

    async def open(self) -> None:
        if not self.path.is_dir():
            raise MissingInput(f"{self.where}: no such folder of zstd dictionaries (fill it with wirepipe dict show "
                               f"nats://BUCKET/NAME --out {self.path}/NAME{SUFFIX}, or dict train --out)")

    async def close(self) -> None:
        return None

    async def by_name(self, name: str, cap: int) -> bytes:
        if not DICTIONARY_NAME.match(name):
            raise DictionaryMissing(f"{name!r} is not a dictionary name (letters, digits, - _ = .)")
        path = self.path / f"{name}{SUFFIX}"
        if not path.is_file():
            raise DictionaryMissing(f"no dictionary {name!r} in {self.where} (no file {path.name})")
        return checked(self._read(path, cap), None, f"dictionary {path.name} in {self.where}")

    async def by_id(self, dict_id: int, cap: int) -> bytes:
        path = self._files.get(dict_id)
        if path is None:
            self._scan()
            path = self._files.get(dict_id)
        if path is None:
            raise DictionaryMissing(f"no dictionary with id {dict_id} in {self.where} (no {SUFFIX} file carries it)")
        return checked(self._read(path, cap), dict_id, f"dictionary {path.name} in {self.where}")

    async def ids(self) -> Sequence[int]:
        self._scan()
        return sorted(self._files)

    def _scan(self) -> None:
        """Index the files not seen yet by the id in their first bytes (a file that is no dictionary: none)."""
        if not self.path.is_dir():
            return
        for path in sorted(self.path.glob(f"*{SUFFIX}")):
            if path in self._seen or not path.is_file():
                continue
            self._seen.add(path)
            with path.open("rb") as f:
                dict_id = dictionary_id_of(f.read(8))
            if dict_id:
                self._files.setdefault(dict_id, path)

    def _read(self, path: Path, cap: int) -> bytes:
        """The file's bytes, refused from its size past ``cap`` (and never more than ``cap + 1`` read)."""
        size = path.stat().st_size
        if size > cap:
            raise over_cap(size, cap, f"dictionary {path.name} in {self.where}")
        with path.open("rb") as f:
            data = f.read(cap + 1)
        if len(data) > cap:
            raise over_cap(len(data), cap, f"dictionary {path.name} in {self.where}")
        return data


class FolderDictionariesConfig(Strict):
    """A folder of ``.zdict`` files as a dictionary store: what ``wirepipe test`` and a replay without a server
    read instead of the NATS bucket (``NAME.zdict`` for ``nats://BUCKET/NAME``; any file for the ids frames
    carry). ``wirepipe dict show nats://BUCKET/NAME --out FOLDER/NAME.zdict`` fills it."""

    type: Literal["folder"]
    path: str = Field(description="the folder: NAME.zdict per dictionary (any .zdict file is found by its id)")
    retry_after: Duration = Field(default=RETRY_AFTER, gt=0, description="a dictionary the folder does not hold is "
                                  "looked for again after this long (its records are dead-lettered meanwhile)")
    copy_of: str | None = Field(default=None, description="the store these files were fetched from (a Beam job's "
                                "copy of it): what messages name in place of the folder")

    def build(self, connection: Any = None) -> FolderDictionaries:
        return FolderDictionaries(self.path, retry_after=self.retry_after, where=self.copy_of)
