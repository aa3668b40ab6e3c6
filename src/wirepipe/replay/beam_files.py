"""What a Beam job's operators read (schema files, zstd dictionaries, the stores they name), shipped inside the job.

A Beam worker may be another machine, and its working folder is not the one the replay was started in:
the paths a pipeline file names (``schema: schemas/order.avsc``, ``dictionary: dicts/orders.zdict``)
are not there, nor, maybe, a route to the NATS server. The runner reads each such file once, when it builds
the job; the DoFn carries the bytes (with its other plain data, the way every Beam runner ships a DoFn); on the
worker, ``setup()`` writes them to a private folder and validates a copy of the config that names those copies.
A ``.proto`` schema travels as the descriptor set protoc compiles from it, its imports included, so workers need
neither protoc nor the imported files. The built operators then record the paths as the pipeline file
wrote them (a metrics row of a Beam replay names ``schemas/order.avsc``, as a local one does).

The stores the operators name (``pipelines/resources.py``: a NATS bucket of zstd dictionaries, a schema registry,
or folders standing in for them) are fetched once too (``read_job_stores``): every dictionary of a dictionary
store (by id, and by name for a publisher's), every version of every name of a registry, written as the
folder stores read them (``NAME.zdict``, ``<id>.zdict``; ``NAME/1.yaml``) under ``stores/<kind>/<name>/``; the
job's config declares those folders in place of the stores, so the workers read what the job builder fetched
and reach no server.

>>> files = read_job_files({"operators": [{"deserialize": {"format": "msgpack", "schema": "point"}}]})
>>> files  # a dataset name is not a file
{}
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.stores import DICTIONARIES, DictionaryUnusable

log = logging.getLogger("wirepipe.replay.beam")

# The operator options whose value may name a local file. A plugin's operator that reads files of its own
# needs them on the workers (in its wheel, or the workers' image).
SCHEMA, DICTIONARY = "schema", "dictionary"
STORES = "stores"  # the job folder's sub-folder of the stores fetched when the job was built


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
                files[value] = JobFile(f"{len(files)}/{found.name}", found.data, found.message)  # the stem names the schema
    return files


def _dictionary_file(value: str) -> JobFile | None:
    from ..core.stores import is_nats_ref

    if is_nats_ref(value) or "://" in value:  # a dictionary shared through NATS is fetched, not read
        return None
    return JobFile(Path(value).name, Path(value).read_bytes())


def _schema_file(value: str, message: str | None) -> JobFile | None:
    from ..core.stores import SCHEMA_FILE_SUFFIXES

    path, _, named = value.partition("#")
    if Path(path).suffix.lower() not in SCHEMA_FILE_SUFFIXES:  # a dataset name, module:Class
        return None
    if Path(path).suffix.lower() != ".proto":
        return JobFile(Path(path).name, Path(path).read_bytes(), named)
    from ..codecs.protoc import descriptor_set, load_message

    full_name = load_message(path, named or message or None).DESCRIPTOR.full_name  # the one the local run picks
    return JobFile(Path(path).stem + ".desc", descriptor_set(path), full_name)


def read_job_stores(config: dict[str, Any], pipe: Any) -> tuple[dict[str, Any], dict[str, JobFile]]:
    """A copy of ``config`` whose ``resources`` declare a folder (``stores/<kind>/<name>``, relative: placed on the
    worker) for every store ``pipe`` (the pipeline built from ``config`` where the job is built) hands an operator,
    and the files of those folders, fetched from the stores now; ``WirepipeError`` (``ConfigError``: a
    registered schema the store does not hold) for what a run would not start without."""
    import asyncio

    resources = pipe.resources
    bound = resources.bound()
    files: dict[str, JobFile] = {}
    job = copy.deepcopy(config)
    if not bound:
        return job, files

    async def fetch() -> None:
        # The operators open as at a run's start, here: a registered schema they name (registry/points@3) that the
        # store does not hold stops the replay now, named as the store is, not on a worker in a copy of it.
        await resources.open_operators(pipe.operators, (pipe.source, pipe.sink))
        try:
            for b in bound:
                folder = f"{STORES}/{b.use.kind}/{b.use.resource}"
                found = await (_dictionaries(b, _names(pipe.operators, b.use.resource)) if b.use.kind == DICTIONARIES
                               else _schemas(b.store))
                for name, data in found.items():
                    files[f"{folder}/{name}"] = JobFile(f"{folder}/{name}", data)
                job.setdefault("resources", {}).setdefault(b.use.kind, {})[b.use.resource] = {
                    "type": "folder", "path": folder, "retry_after": getattr(b.store, "retry_after", 30.0),
                    "copy_of": b.store.where}  # a worker's reasons name the store, not its copy's temporary folder
                log.info("beam: the job carries %d file(s) of %s (%s)", len(found), b.store.where, folder)
        finally:
            await resources.close_operators()

    asyncio.run(fetch())
    return job, files


async def _dictionaries(bound: Any, names: list[str]) -> dict[str, bytes]:
    """Every dictionary of a dictionary store by id (``<id>.zdict``), and under its name (``NAME.zdict``) each one
    a publisher names; one the store cannot give by id is left out, said once (its records are dead-lettered on
    the workers, as in a local run)."""
    from ..codecs.compression import DEFAULT_MAX_OUTPUT
    from ..core.errors import WirepipeError

    store, out = bound.store, {}
    for name in names:
        try:
            out[f"{name}.zdict"] = await store.by_name(name, DEFAULT_MAX_OUTPUT)
        except DictionaryUnusable as exc:
            raise WirepipeError(f"compress: dictionary nats://{bound.use.resource}/{name}: {exc}") from None
    for dict_id in await store.ids():
        try:
            out[f"{dict_id}.zdict"] = await store.by_id(dict_id, DEFAULT_MAX_OUTPUT)
        except DictionaryUnusable as exc:
            log.warning("beam: zstd dictionary %d of %s is not shipped: %s", dict_id, store.where, exc)
    return out


def _names(operators: list[Any], resource: str) -> list[str]:
    """The dictionary names the operators ask the store ``resource`` for (a publisher's ``nats://STORE/NAME``)."""
    refs = [op.shared.ref for op in operators if getattr(op, "shared", None) is not None]
    return sorted({ref.name for ref in refs if ref.bucket == resource and ref.name})


async def _schemas(registry: Any) -> dict[str, bytes]:
    """Every version of every name of a schema registry, as a folder registry holds them (``NAME/1.yaml`` ...)."""
    import tempfile

    from ..connectors.schema_folder import FolderBackend
    from ..connectors.schema_registry import DEFAULT_RULE, stored_schema

    with tempfile.TemporaryDirectory(prefix="wirepipe-beam-registry-") as tmp:
        folder = FolderBackend(tmp)
        for name in await registry.names():
            entry = await registry.entry(name)
            if entry is None:
                continue
            for version in entry.versions:
                schema = await registry.by_fingerprint(version.fingerprint)
                if schema is not None:
                    await folder.write_schema(version.fingerprint, stored_schema(schema))
            await folder.write_entry(entry, ((), DEFAULT_RULE))
        return {str(f.relative_to(tmp)): f.read_bytes() for f in sorted(Path(tmp).rglob("*")) if f.is_file()}


def place_job_files(config: dict[str, Any], files: dict[str, JobFile],
                    folder: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """A copy of ``config`` whose file options name the files written under ``folder``, and ``{the schema
    spelling a built operator records: the one the pipeline file gave}`` (see ``restore_names``); the stores the
    job carries (``read_job_stores``) are folders under ``folder`` too."""
    from ..operators.schema_options import with_message

    for job_file in files.values():
        target = folder / job_file.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(job_file.data)
    placed = copy.deepcopy(config)
    for named in (placed.get("resources") or {}).values():
        for store in named.values():
            if store.get("type") == "folder" and str(store.get("path", "")).startswith(f"{STORES}/"):
                store["path"] = str(folder / store["path"])
                Path(store["path"]).mkdir(parents=True, exist_ok=True)  # a store that held nothing is still a store
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
