"""The local files a Beam job's operators read (schema files, zstd dictionaries), shipped inside the job.

A Beam worker may be another machine, and its working folder is not the one the replay was started in:
the paths a pipeline file names (``schema: schemas/order.avsc``, ``dictionary: dicts/orders.zdict``)
are not there. The runner reads each such file once, when it builds the job; the DoFn carries the bytes
(with its other plain data, the way every Beam runner ships a DoFn); on the worker, ``setup()`` writes
them to a private folder and validates a copy of the config that names those copies. A ``.proto``
schema travels as the descriptor set protoc compiles from it, its imports included, so workers need
neither protoc nor the imported files. The built operators then record the paths as the pipeline file
wrote them (a metrics row of a Beam replay names ``schemas/order.avsc``, as a local one does).

>>> files = read_job_files({"operators": [{"deserialize": {"format": "msgpack", "schema": "point"}}]})
>>> files  # a dataset name is not a file
{}
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The operator options whose value may name a local file. A plugin's operator that reads files of its own
# needs them on the workers (in its wheel, or the workers' image).
SCHEMA, DICTIONARY = "schema", "dictionary"


@dataclass(frozen=True)
class JobFile:
    """One file as a worker writes it: its name in the worker's folder and its bytes; ``message`` is a
    protobuf message name that travels after ``#`` (a ``.proto`` shipped as its descriptor set)."""

    name: str
    data: bytes
    message: str = ""


def _options(config: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str]]:
    """Each operator's params mapping and each file option it sets, in the config's order."""
    for entry in config.get("operators") or ():
        for params in entry.values():
            if isinstance(params, dict):
                for option in (SCHEMA, DICTIONARY):
                    if isinstance(params.get(option), str):
                        yield params, option


def read_job_files(config: dict[str, Any]) -> dict[str, JobFile]:
    """``{an option's value: the file a worker writes for it}`` for every operator option of ``config`` (a
    validated config, as data) that names a local file; relative paths from this process's folder, as the
    local runner reads them."""
    files: dict[str, JobFile] = {}
    for params, option in _options(config):
        value = params[option]
        if value not in files:
            found = _schema_file(value, params.get("message")) if option == SCHEMA else _dictionary_file(value)
            if found is not None:
                files[value] = JobFile(f"{len(files)}-{found.name}", found.data, found.message)
    return files


def _dictionary_file(value: str) -> JobFile | None:
    from ..connectors.dictionary_bucket import is_shared

    if is_shared(value) or "://" in value:  # a dictionary shared through NATS is fetched, not read
        return None
    return JobFile(Path(value).name, Path(value).read_bytes())


def _schema_file(value: str, message: str | None) -> JobFile | None:
    from ..operators.schema_options import SCHEMA_FILE_SUFFIXES

    path, _, named = value.partition("#")
    if Path(path).suffix.lower() not in SCHEMA_FILE_SUFFIXES:  # a dataset name, module:Class
        return None
    if Path(path).suffix.lower() != ".proto":
        return JobFile(Path(path).name, Path(path).read_bytes(), named)
    from ..codecs.protoc import descriptor_set, load_message

    full_name = load_message(path, named or message or None).DESCRIPTOR.full_name  # the one the local run picks
    return JobFile(Path(path).stem + ".desc", descriptor_set(path), full_name)


def place_job_files(config: dict[str, Any], files: dict[str, JobFile],
                    folder: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """A copy of ``config`` whose file options name the files written under ``folder``, and ``{the schema
    spelling a built operator records: the one the pipeline file gave}`` (see ``restore_names``)."""
    from ..operators.schema_options import with_message

    for job_file in files.values():
        (folder / job_file.name).write_bytes(job_file.data)
    placed = copy.deepcopy(config)
    originals: dict[str, str] = {}
    for params, option in _options(placed):
        shipped = files.get(params[option])
        if shipped is None:
            continue
        original = params[option]
        params[option] = str(folder / shipped.name) + (f"#{shipped.message}" if shipped.message else "")
        if option == SCHEMA:
            recorded = with_message(original, params.get("message"))
            if shipped.message:
                params["message"] = None  # named after the '#'
            originals[str(with_message(params[option], params.get("message")))] = str(recorded)
    return placed, originals


def restore_names(operators: list[Any], originals: dict[str, str]) -> None:
    """Built operators' ``params`` name a schema file as the pipeline file did, not as the worker's copy."""
    for op in operators:
        params = getattr(op, "params", None)
        if isinstance(params, dict) and params.get(SCHEMA) in originals:
            op.params = {**params, SCHEMA: originals[params[SCHEMA]]}
