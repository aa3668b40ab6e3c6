"""The sources of files: what they share (``FileSource``), and which one reads a file, by its name: a file
source's config declares the names it reads (``suffixes``: ``.jsonl``, ``.parquet``, ``.csv`` ...). Every command
that takes a file of records (``schema infer``, ``bench --input``, ``dict train --from``, a test file's ``file:``)
asks here, so they read the same files and refuse the same others, naming the types that are read.

>>> file_type("weather.csv.gz"), file_type("events.JSONL"), file_stem("weather.csv.gz")
('csv', 'jsonl', 'weather')
>>> file_type("notes.txt", "--input")
Traceback (most recent call last):
...
wirepipe.core.errors.ConfigError: --input: notes.txt: not a file of records wirepipe reads (by its name): jsonl (.jsonl, .ndjson), csv (.csv, .tsv, and either compressed: .gz, .bz2, .zst, .lz4), parquet (.parquet)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from ..core.stages import Stage
from ..storage.files import input_files
from .connector import Bounded, Configured, ReadsFiles, Source


class FileSource(Configured, Source, Bounded, ReadsFiles):
    """What the sources of files share: ``path`` (a file, a glob, a folder or a list of them) and ``batch_size`` in
    their config, read whole by every reader (``Bounded``), and the files found before anything opens
    (``check_input``)."""

    stage = Stage.READ

    def _configure(self, config: Any) -> None:
        super().__init__(count=config.count, duration=config.duration)
        self.config = config

    @property
    def params(self) -> dict[str, Any]:
        return {"path": self.config.path, "batch_size": self.config.batch_size, "count": self.count}

    def check_input(self) -> None:
        input_files(self.config.path)


def file_types() -> dict[str, tuple[str, ...]]:
    """The file sources and the names they read (suffixes, lower case), in the registry's order."""
    from . import SOURCES  # here: a module that holds SOURCES is taken for a connector's

    return {name: tuple(model.suffixes) for name, model in SOURCES.items() if getattr(model, "suffixes", None)}


def file_type(path: str | Path, where: str | None = None) -> str:
    """The source type that reads ``path``, by its name (the longest suffix that matches); ``ConfigError`` at
    ``where`` naming the types that are read when none does."""
    name = Path(path).name.lower()
    found = [(len(s), kind) for kind, suffixes in file_types().items() for s in suffixes if name.endswith(s)]
    if not found:
        raise ConfigError(f"{path}: not a file of records wirepipe reads (by its name): {describe_file_types()}",
                          path=where)
    return max(found)[1]


def file_stem(path: str | Path) -> str:
    """``path``'s name without the suffix ``file_type`` reads it by (``weather.csv.gz`` -> ``weather``): what its
    records and the study's dataset are named after; without its last suffix for a file no source reads."""
    name = Path(path).name
    matched = [len(s) for suffixes in file_types().values() for s in suffixes if name.lower().endswith(s)]
    return name[:len(name) - max(matched)] if matched else Path(path).stem


def describe_file_types() -> str:
    """``jsonl (.jsonl, .ndjson), csv (.csv, .tsv, ...), parquet (.parquet)``: what ``file_type`` knows."""
    return ", ".join(f"{kind} ({_spelled(suffixes)})" for kind, suffixes in file_types().items())


def _spelled(suffixes: tuple[str, ...]) -> str:
    """Suffixes with their compressed forms folded: ``.csv, .tsv, and either compressed: .gz, .bz2``."""
    plain = [s for s in suffixes if not any(s != p and s.startswith(p) for p in suffixes)]
    packed = list(dict.fromkeys(s[len(p):] for s in suffixes for p in plain if s != p and s.startswith(p)))
    if not packed:
        return ", ".join(plain)
    return f"{', '.join(plain)}, and {'either' if len(plain) == 2 else 'each'} compressed: {', '.join(packed)}"


def file_source(paths: str | Path | list[str], where: str | None = None, **fields: Any) -> Any:
    """The source that reads ``paths`` (a file, or several of one type) by their names, with ``fields``
    (``count``, ``batch_size`` ...): what a pipeline with ``source: {type: <their type>, path: ...}`` reads."""
    from ..core.models import validate
    from . import SOURCES

    items = [str(paths)] if isinstance(paths, (str, Path)) else [str(p) for p in paths]
    kinds = sorted({file_type(p, where) for p in items})
    if len(kinds) > 1:
        raise ConfigError(f"{', '.join(items)}: files of {len(kinds)} types ({', '.join(kinds)}): a source reads "
                          "one type", path=where)
    config = validate(SOURCES[kinds[0]], {"type": kinds[0], "path": items, **fields}, "source")
    return config.build()
