"""Finding test files, running their cases through the pipeline as written into a sink that checks what came out
as it comes (``expect.CheckingSink``) or records it (``snapshot.RecordingSink``, ``--update``).

A case runs in this process with no server: ``testing.between`` puts the pipeline (its operators,
batching, dead-letter routing) between the case's input and that sink. The outputs are what the pipeline's
own sink would have written (``outputs.py``).

What the test replaces needs no variable: the source, the sink (all but its ``subject``, which names the
outputs' subjects), the dead letter, metrics and monitor, and the pipeline's stores the test file declares
under ``resources:`` (a folder of ``.zdict`` files for ``nats://DICTS``, a folder registry for ``registry``).
A store the pipeline reaches through NATS and the test file does not replace is refused when the file is
loaded (``wirepipe validate`` says so too): a test runs without a server.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.batch import Batch
from ..core.errors import ConfigError, WirepipeError
from ..core.fields import plain
from ..testing import TestingSink
from .expect import CheckingSink
from .model import Case, DecodeSpec, Expect, InputSpec, TestFile, load_test_file
from .outputs import BatchOutputs, Decoder, Output, outputs, redecode
from .snapshot import RecordingSink, unrecordable

SUFFIXES = (".test.yaml", ".test.yml")


def find_test_files(paths: list[str]) -> list[Path]:
    """Test files named by paths: a test file, a folder (its ``*.test.yaml`` files, recursively, in name
    order), or a pipeline file (the test file beside it). ``ConfigError`` for a path that has none."""
    from ..storage.files import folder_files

    out: list[Path] = []
    for item in paths or ["."]:
        p = Path(item)
        if p.is_dir():
            found = [f for f in folder_files(p, recursive=True) if f.name.endswith(SUFFIXES)]
            if not found:
                raise ConfigError(f"{p}: no test files (*.test.yaml) in this folder")
            out += found
        elif p.name.endswith(SUFFIXES):
            if not p.exists():
                raise ConfigError(f"{p}: no such file")
            out.append(p)
        elif p.suffix in (".yaml", ".yml"):
            sibling = [p.with_name(p.name[: -len(p.suffix)] + s) for s in SUFFIXES]
            found = [s for s in sibling if s.exists()]
            if not found:
                raise ConfigError(f"{p}: no test file beside it (write {sibling[0].name})")
            out.append(found[0])
        else:
            raise ConfigError(f"{p}: not a test file (*.test.yaml), a pipeline file or a folder")
    return list(dict.fromkeys(out))


def pipeline_path(test_file: Path, spec: TestFile) -> Path:
    """The pipeline a test file tests: its ``pipeline`` (relative to it), or its own name without ``.test``."""
    if spec.pipeline is not None:
        return test_file.parent / spec.pipeline
    for suffix in SUFFIXES:
        if test_file.name.endswith(suffix):
            return test_file.with_name(test_file.name[: -len(suffix)] + suffix[len(".test"):])
    raise ConfigError("name the pipeline: `pipeline: FILE`", file=str(test_file))


@dataclass
class CaseResult:
    file: Path
    case: Case
    outputs: list[Output] = field(default_factory=list)
    rejects: list[Any] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    error: str | None = None  # the case could not run (an exception, not a mismatch)
    elapsed: float = 0.0
    updated: bool = False
    interrupted: bool = False  # Ctrl-C during the case: it drained and stopped, and so does the session
    redecoded: list[Output] | None = None  # --update: the payload outputs decoded by their headers, if they decode

    @property
    def id(self) -> str:
        return f"{self.file}::{self.case.name}"

    @property
    def passed(self) -> bool:
        return not self.failures and self.error is None


@dataclass
class LoadedFile:
    """A test file, validated, with its pipeline's config (validated once: each case builds its own)."""

    path: Path
    spec: TestFile
    pipeline: Path


def load(path: Path) -> LoadedFile:
    """The test file and its pipeline, every problem a ``ConfigError`` (exit 2 before anything runs)."""
    spec = load_test_file(path)
    pipeline = pipeline_path(path, spec)
    if not pipeline.exists():
        where = "pipeline" if spec.pipeline is not None else None
        raise ConfigError(f"the pipeline {pipeline} does not exist", file=str(path), path=where)
    loaded = LoadedFile(path, spec, pipeline)
    for i, case in enumerate(spec.tests):
        pipe = build(loaded, case)  # the pipeline (and the case's --set) validate
        _pipeline_opens(loaded, pipe)
        _check_input_files(loaded, case.input, f"tests[{i}].input")
        if case.input.encode is not None:  # its stores: declared, none through NATS
            _opens(loaded, pipe, _encoders(loaded, pipe, case.input, f"tests[{i}].input"), f"tests[{i}].input.encode")
        decode = _decode_spec(case.expect)
        if decode is not None:
            try:
                decoder = _decoder(loaded, pipe, decode)
            except (ConfigError, ValueError, OSError) as exc:
                detail = exc.detail if isinstance(exc, ConfigError) else str(exc)
                raise ConfigError(detail, file=str(path), path=f"tests[{i}].expect.decode") from None
            _opens(loaded, pipe, [decoder.decoder], f"tests[{i}].expect.decode")
    return loaded


def _opens(loaded: LoadedFile, pipe: Any, ops: list[Any], where: str) -> None:
    """Open and close ``ops`` (a case's encoders, its decoder) with the test file's stores, as a case will: a
    registered schema or a dictionary those stores do not hold is the test file's config error at ``where``'s
    field (exit 2 before any case runs), not an error of each case that names it."""
    import asyncio

    async def open_and_close() -> None:
        try:
            await pipe.resources.open_operators(ops, (pipe.source, pipe.sink))
        finally:
            await pipe.resources.close_operators()

    if not ops:
        return
    try:
        asyncio.run(open_and_close())
    except ConfigError as exc:  # at the operator's own field (``deserialize.schema``): the test file's
        field = exc.path.rpartition(".")[2] if exc.path else ""
        raise ConfigError(exc.detail, file=str(loaded.path), path=f"{where}.{field}" if field else where) from None
    except WirepipeError as exc:  # a dictionary or a schema the test's folders (no server: local) lack or spoil
        raise ConfigError(str(exc), file=str(loaded.path), path=where) from None


def _pipeline_opens(loaded: LoadedFile, pipe: Any) -> None:
    """The pipeline's own operators fetch what they name from the test file's stores, as each case will (and as
    ``wirepipe validate`` fetches it for the pipeline): a registered schema or a dictionary those stores do not
    hold is a config error at the pipeline's field when the file is read (exit 2), not an error of every case."""
    from ..pipelines.parts import check_stored

    check_stored(pipe, str(loaded.pipeline))  # the test's stores are folders (``_refuse_servers``): all checked


REPLACED = ("source", "sink", "dead_letter", "metrics", "monitor")  # the parts a case runs without
KEPT = ("sink.subject",)  # what the outputs still take from them: the subjects a NATS sink would publish to


def build(loaded: LoadedFile, case: Case) -> Any:
    """A fresh ``Pipeline`` from the pipeline file for one case (operators keep state: none is shared), with the
    test file's stores in place of the pipeline's; ``ConfigError`` for a store it would reach through NATS."""
    from ..pipelines.config import build_pipeline, read_config, replaced_parts, validate_config

    env = {**os.environ, **loaded.spec.env}
    stores = _test_stores(loaded, case)
    replaced = replaced_parts(*REPLACED, *(f"resources.{kind}.{name}" for kind, name in stores), kept=KEPT)
    data = read_config(loaded.pipeline, [*loaded.spec.set_, *case.set_], env, replaced=replaced)
    data.pop("metrics", None)  # a test writes no results
    data.pop("monitor", None)
    declared = data.setdefault("resources", {})
    if isinstance(declared, dict):  # anything else: the pipeline's validation says what it should be
        for (kind, name), config in stores.items():
            if not isinstance(declared.get(kind), dict):
                declared[kind] = {}
            declared[kind][name] = config
    cfg = validate_config(data, file=str(loaded.pipeline))
    pipe = build_pipeline(cfg, file=str(loaded.pipeline))
    _refuse_servers(loaded, pipe.resources)
    return pipe


def _test_stores(loaded: LoadedFile, case: Case) -> dict[tuple[str, str], dict[str, Any]]:
    """The stores the test file (then the case) declares, by kind and name, as config data; a folder's path from
    the test file's folder."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    at = f"tests[{loaded.spec.tests.index(case)}].resources"
    for where, declared in (("resources", loaded.spec.resources), (at, case.resources)):
        for kind, named in declared.named().items():
            for name, config in named.items():
                data = config.model_dump(mode="json", exclude_unset=True)
                if isinstance(data.get("path"), str):
                    data["path"] = str(loaded.path.parent / data["path"])
                    if not Path(data["path"]).is_dir():
                        raise ConfigError(f"{data['path']}: no such folder", file=str(loaded.path),
                                          path=f"{where}.{kind}.{name}.path")
                out[(kind, name)] = data
    return out


def _bind(loaded: LoadedFile, pipe: Any, ops: list[Any], where: str) -> None:
    """Hand ``ops`` (a case's encoders, its decoder) ``pipe``'s stores, the test file's in place of its own; a store
    they would reach through NATS is refused naming the folder to declare instead, even in a pipeline without a NATS
    part (the store is built on a connection it never opens, to be named)."""
    from ..connectors.nats.connection import NatsConnectionConfig

    pipe.resources.nats = pipe.resources.nats or NatsConnectionConfig()
    try:
        pipe.resources.bind(ops, (pipe.source, pipe.sink), [where] * len(ops))
    except ConfigError as exc:
        raise ConfigError(exc.detail, file=str(loaded.path), path=exc.path) from None
    _refuse_servers(loaded, pipe.resources)


def _refuse_servers(loaded: LoadedFile, resources: Any) -> None:
    """``ConfigError`` naming the fix for a store the pipeline would reach through NATS: a test has no server."""
    for bound in resources.bound():
        if not bound.reached_through_nats:
            continue
        kind, name = bound.use.kind, bound.use.resource
        fill = (f"wirepipe dict show nats://{name}/NAME --out FOLDER/NAME.zdict" if kind == "dictionaries"
                else "wirepipe schema push FILE --name NAME --registry FOLDER")
        raise ConfigError(f"{loaded.pipeline.name} {bound.at} reads {kind} from {bound.store.where}, a NATS bucket, "
                          f"and a test runs without a server: declare `resources: {{{kind}: {{{name}: {{type: folder, "
                          f"path: FOLDER}}}}}}` in the test file (fill it: {fill})", file=str(loaded.path),
                          path="resources")


def _input_paths(loaded: LoadedFile, spec: InputSpec) -> list[str]:
    given = spec.file if spec.file is not None else spec.capture
    items = [given] if isinstance(given, str) else list(given or [])
    base = loaded.path.parent
    if spec.capture is not None:
        for item in items:
            _inside(base, item)
    return [str(base / p) if not Path(p).is_absolute() else p for p in items]


_GLOB = frozenset("*?[")


def _inside(base: Path, item: str) -> None:
    """A capture's files, folders and globs stay inside the test file's folder (a glob such as ``/**`` or
    ``../../**`` would walk the whole disk): relative, no ``..``, and its fixed part (up to the first
    wildcard), links resolved, within the folder. ``ConfigError`` otherwise."""
    p = Path(item)
    fixed = Path(*_until_glob(p.parts))
    outside = p.is_absolute() or ".." in p.parts or not (base / fixed).resolve().is_relative_to(base.resolve())
    if outside:
        raise ConfigError(f"{item!r}: a capture of a test file stays inside its folder ({base}): give a file, "
                          "folder or glob relative to it, without '..'")


def _until_glob(parts: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for part in parts:
        if _GLOB & set(part):
            break
        out.append(part)
    return out


def _check_input_files(loaded: LoadedFile, spec: InputSpec, where: str) -> None:
    from ..storage.files import find_files

    if spec.file is None and spec.capture is None:
        return
    try:
        _input_paths(loaded, spec)
    except ConfigError as exc:
        raise ConfigError(exc.detail, file=str(loaded.path), path=f"{where}.capture") from None
    try:
        find_files(_input_paths(loaded, spec), recursive=spec.capture is not None,
                   suffix=".parquet" if spec.capture is not None else None,
                   on_empty=lambda folder: f"{folder}: no capture files (*.parquet) in this folder")
    except WirepipeError as exc:
        raise ConfigError(str(exc), file=str(loaded.path), path=f"{where}.{'file' if spec.file else 'capture'}") from None


def source_for(loaded: LoadedFile, spec: InputSpec, where: str, pipe: Any) -> Any:
    """The source that replaces ``pipe``'s: a ``TestingSource`` for inline records (with the schema ``pipe``'s own
    source attaches to its batches: a generate dataset's, which positional formats read; encoded, if asked, with
    ``pipe``'s stores), else the connector that reads the file or the capture as a pipeline would."""
    from ..codecs.formats import restore_bytes
    from ..testing import TestingSource

    if spec.file is not None or spec.capture is not None:
        paths = _input_paths(loaded, spec)
        fields: dict[str, Any] = {"batch_size": spec.batch_size, "count": spec.count}
        if spec.capture is not None:
            from ..connectors.capture_source import CaptureSource

            return CaptureSource(paths, subject=spec.subject, since=spec.since, until=spec.until, **fields)
        from ..connectors.files import file_source

        return file_source(paths, **fields)
    if spec.records is not None:
        values = restore_bytes(spec.records)
    else:
        values = [p.encode() if isinstance(p, str) else restore_bytes(p) for p in spec.payloads or []]
    subjects, headers = spec.subjects, spec.headers
    if spec.encode is not None:
        values, subjects, headers = _encoded(pipe, _encoders(loaded, pipe, spec, where), spec, values, where)
    if spec.count is not None:
        n = spec.count
        values = values[:n]
        subjects = subjects[:n] if isinstance(subjects, list) else subjects
        headers = headers[:n] if isinstance(headers, list) else headers
    return TestingSource(values, spec.batch_size, subjects=subjects, headers=headers,
                         schema=getattr(pipe.source, "schema", None))


def from_test_file(loaded: LoadedFile, schema: Any) -> Any:
    """A schema file a test file names, relative to the test file as its other paths are; any other schema (a
    registered one, a dataset, module:Class, a mapping) as it is."""
    from ..core.stores import SCHEMA_FILE_SUFFIXES, is_nats_ref

    if not isinstance(schema, str) or is_nats_ref(schema):
        return schema
    path, sep, message = schema.partition("#")
    if Path(path).suffix.lower() not in SCHEMA_FILE_SUFFIXES or Path(path).is_absolute():
        return schema
    return f"{loaded.path.parent / path}{sep}{message}"


def _encoders(loaded: LoadedFile, pipe: Any, spec: InputSpec, where: str) -> list[Any]:
    """The operators of ``input.encode``, handed ``pipe``'s stores (the test file's in place of its own) as the
    pipeline's operators are: ``schema: registry/points@1`` reads the test's registry."""
    from ..operators.operator import BuildContext

    assert spec.encode is not None
    params = spec.encode.model_copy(update={"schema_": from_test_file(loaded, spec.encode.schema_)})
    ops = params.build(BuildContext())
    _bind(loaded, pipe, ops, f"{where}.encode")
    return ops


def _encoded(pipe: Any, ops: list[Any], spec: InputSpec, values: list[Any], where: str) -> tuple[list[Any], Any, Any]:
    """The records as a wirepipe publisher sends them (``ops``: ``_encoders``, opened with ``pipe``'s stores):
    payloads and Content-Type / Content-Encoding."""
    import asyncio

    from ..pipelines.pipeline import run_operators

    assert spec.encode is not None

    async def encode(batch: Batch) -> Batch:
        await pipe.resources.open_operators(ops, (pipe.source, pipe.sink))
        try:
            for op in ops:  # the stores each operator names are fetched before the batch runs through them all
                if op.prepares:
                    await op.prepare(batch)
            return run_operators(ops, batch)[0]
        finally:
            await pipe.resources.close_operators()

    batch = asyncio.run(encode(Batch(values, subjects=spec.subjects, headers=spec.headers,
                                     meta={"seq": range(len(values))})))
    if batch.rejected:
        r = batch.rejected[0]
        raise ConfigError(f"cannot be encoded as {spec.encode.chain}: {r.error}",
                          path=f"{where}.records[{r.meta.get('seq')}]")
    return batch.values, batch.subjects, batch.headers


# --- running -----------------------------------------------------------------------------------------


def run_case(loaded: LoadedFile, index: int, *, update: bool = False) -> CaseResult:
    """Run one case and check it as the pipeline writes (``CheckingSink``: it keeps what the check names, not every
    output); ``update``: record its outputs as the expectation instead, through a sink that keeps no more than a test
    file holds: a case past it fails with the reason."""
    from ..testing import between

    case = loaded.spec.tests[index]
    result = CaseResult(loaded.path, case)
    started = time.monotonic()
    why_not: str | None = None
    try:
        pipe = build(loaded, case)
        source = source_for(loaded, case.input, f"tests[{index}].input", pipe)
        decode = _decode_spec(case.expect)
        sink: TestingSink
        if update:
            sink = RecordingSink()
        elif case.expect is not None:
            # its own stores (a pipeline built again): the decoder opens them beside the running pipeline's
            decoder = _decoder(loaded, build(loaded, case), decode) if decode is not None else None
            sink = CheckingSink(case.expect, BatchOutputs(pipe, decoder))
        else:
            sink = TestingSink(keep=False)
        _run(between(pipe, source, sink))
        if isinstance(sink, CheckingSink):
            result.failures = sink.failures()
            result.outputs, result.rejects = sink.outputs, sink.rejects
        elif isinstance(sink, RecordingSink):
            why_not = sink.why_not()
            if why_not is None:
                result.outputs = outputs(pipe, sink, _decoder(loaded, pipe, decode) if decode is not None else None)
                result.rejects = list(sink.rejects)
                why_not = unrecordable(result.outputs, result.rejects)
            if decode is None and why_not is None:
                result.redecoded = redecode(result.outputs, _decoder(loaded, pipe, DecodeSpec()))
    except KeyboardInterrupt:
        result.error = "interrupted (Ctrl-C): the case drained and stopped"
        result.interrupted = True
    except ConfigError as exc:
        result.error = str(exc) if exc.file else str(ConfigError(exc.detail, file=str(loaded.path), path=exc.path))
    except WirepipeError as exc:
        result.error = str(exc)
    except Exception as exc:  # a map function that raises outside a record, a broken plugin: the case errors
        result.error = f"{type(exc).__name__}: {exc}"
    result.elapsed = time.monotonic() - started
    if result.error is None:
        if update and why_not is not None:
            result.failures.append(why_not)
        elif update:
            result.updated = True
        elif case.expect is None:
            result.failures.append("no `expect:` (record what the case produces with: wirepipe test --update)")
    return result


def _run(pipe: Any) -> None:
    """Run a case's pipeline as ``wirepipe run`` runs one (``pipelines.worker``): SIGINT drains it within its
    ``shutdown_timeout`` (stop reading, finish what was read), then ``KeyboardInterrupt``."""
    import asyncio

    from ..pipelines.worker import run_worker_async

    async def main() -> None:
        stop = asyncio.Event()
        await run_worker_async(pipe, stop)
        if stop.is_set():
            raise KeyboardInterrupt

    asyncio.run(main())


def _decode_spec(expect: Expect | None) -> DecodeSpec | None:
    if expect is None or expect.decode is False:
        return None
    return expect.decode if isinstance(expect.decode, DecodeSpec) else DecodeSpec()


def _decoder(loaded: LoadedFile, pipe: Any, decode: DecodeSpec) -> Decoder:
    """The decoder of ``decode``: its schema, and the dictionaries it names or the pipeline's own (a compress's
    file, the store a compress or decompress names)."""
    from ..operators.by_headers import HeaderDecoder
    from ..operators.codec_options import load_dictionary

    named = [op.shared.ref.bucket for op in pipe.operators if getattr(op, "shared", None) is not None]
    files = [op.local_dictionary for op in pipe.operators if getattr(op, "local_dictionary", None) is not None]
    store = decode.dictionaries or (f"nats://{named[-1]}" if named else None)
    if decode.dictionary is not None:
        try:
            dictionary: bytes | None = load_dictionary(loaded.path.parent / decode.dictionary)  # read bounded
        except ValueError as exc:
            raise ConfigError(str(exc), path="expect.decode.dictionary") from None
    else:
        dictionary = files[-1] if files else None
    decoder = HeaderDecoder(from_test_file(loaded, decode.spec()), no_schema="give `decode: {schema: ...}`", dictionaries=store,
                            dictionary=dictionary)
    _bind(loaded, pipe, [decoder], "expect.decode")
    return Decoder(decoder, pipe.resources)


# --- snapshots ---------------------------------------------------------------------------------------


def recorded_expect(result: CaseResult) -> dict[str, Any]:
    """What ``--update`` records as the case's ``expect``: the outputs exactly and the rejections,
    keeping the case's own ``decode`` and ``each``."""
    old = result.case.expect
    expect: dict[str, Any] = {}
    if old is not None and old.decode is not False:
        expect["decode"] = old.decode if isinstance(old.decode, bool) else old.decode.model_dump(
            by_alias=True, exclude_unset=True)
    elif result.redecoded is not None:  # payloads recorded as what they decode to: readable, stable across libraries
        expect["decode"] = True
        result.outputs = result.redecoded
    expect["count"] = len(result.outputs)
    if all(o.subject is None and not o.headers for o in result.outputs):
        expect["records"] = [plain(o.value) for o in result.outputs]
    else:
        expect["outputs"] = [{"value": plain(o.value), **({"subject": o.subject} if o.subject is not None else {}),
                              **({"headers": dict(o.headers)} if o.headers else {})} for o in result.outputs]
    if old is not None and old.each:
        expect["each"] = [c.model_dump(by_alias=True, exclude_unset=True) for c in old.each]
    if result.rejects:
        expect["rejections"] = [{"stage": r.stage, "operator": r.operator, "error": r.error, "seq": r.meta.get("seq")}
                                for r in result.rejects]
    else:
        expect["rejected"] = 0
    return expect
