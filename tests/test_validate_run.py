"""`wirepipe validate` refuses exactly what `wirepipe run` refuses before its first record: the same one line
(file, field path, value, what is allowed), exit 2, no traceback, and nothing written.

The cases are made from the registries: every format behind a source that attaches no schema (the positional
ones need one) and with its schema options, every codec with a level out of range and where its input is
records, every operator and connector with each required field missing and with a field it does not have,
every conflict a connector model refuses (the table must name a case for each validator a model declares),
every part that takes payloads where the source gives records; then every config in configs/ and
tests/bad_configs/. `run` is the real command: it runs the pipeline when it accepts it (local files, three
records), and stops at the start for a pipeline that would connect to NATS."""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

import wirepipe.cli.runs
from tests.cli import invoke
from wirepipe.codecs import CODECS, FORMATS
from wirepipe.connectors import SINKS, SOURCES
from wirepipe.core.batch import PAYLOADS
from wirepipe.operators import OPERATORS

ROOT = Path(__file__).parent.parent
RECORDS_IN = {"type": "jsonl", "path": "in.jsonl"}  # three {x, y} records: a source that attaches no schema
FILE_OUT = {"type": "jsonl", "path": "out.jsonl"}
GENERATE = {"type": "generate", "dataset": "point", "count": 3}  # gives records, with a typed schema
NATS_IN = {"type": "nats", "url": "nats://127.0.0.1:1", "subject": "in"}  # gives payloads, no schema
NETWORK = ("nats", "jetstream")


@dataclass
class Case:
    id: str
    config: dict[str, Any]
    refused: bool | None = None  # what the check must say (None: whatever it says, run says too)


def pipeline(source: dict[str, Any] = RECORDS_IN, operators: list[Any] | None = None,
             sink: dict[str, Any] = FILE_OUT, **more: Any) -> dict[str, Any]:
    return {"name": "p", "source": source, "operators": operators or [], "sink": sink, **more}


# --- the corpus, from the registries ------------------------------------------------------------------------


def format_cases() -> list[Case]:
    out = []
    for name, fmt in FORMATS.items():
        positional = fmt.needs_schema
        out += [
            Case(f"serialize {name}, no schema", pipeline(operators=[{"serialize": {"format": name}}]), positional),
            Case(f"serialize {name}, extra_fields: drop, no schema",
                 pipeline(operators=[{"serialize": {"format": name, "extra_fields": "drop"}}]), True),
            Case(f"serialize {name}, field names only", pipeline(operators=[
                {"serialize": {"format": name, "schema": ["x", "y"]}}]), fmt.typed),
            Case(f"serialize {name} behind a typed source", pipeline(
                GENERATE, [{"serialize": {"format": name}}]), False),
            Case(f"deserialize {name} from NATS, no schema", pipeline(NATS_IN, [{"deserialize": {"format": name}}]),
                 positional or fmt.unsafe),
            Case(f"deserialize {name} behind records", pipeline(GENERATE, [{"deserialize": {"format": name}}]), True),
        ]
    return out


def codec_cases() -> list[Case]:
    out = []
    for name, codec in CODECS.items():
        out += [
            Case(f"compress {name} at level 10**6", pipeline(operators=[
                {"serialize": {"format": "json"}}, {"compress": {"codec": name, "level": 10**6}}]),
                 codec.max_level < 10**6),
            Case(f"compress {name} behind records", pipeline(GENERATE, [{"compress": {"codec": name}}]), True),
            Case(f"decompress {name} behind records", pipeline(GENERATE, [{"decompress": {"codec": name}}]), True),
        ]
    return out


def _model(entry: Any) -> Any:
    return typing.get_args(entry)[0] if typing.get_origin(entry) is typing.Annotated else entry


FILLED = {"path": "in.jsonl", "subject": "s", "dir": "cap", "format": "json", "codec": "zstd",
          "chain": "json|zstd", "function": "json:dumps", "fields": ["x"], "records": 2, "template": "s.{x}"}


def _required(model: Any) -> dict[str, Any]:
    return {f.alias or n: FILLED[f.alias or n] for n, f in model.model_fields.items()
            if f.is_required() and n != "type"}


def operator_cases() -> list[Case]:
    out = []
    for name, entry in OPERATORS.items():
        required = _required(_model(entry))
        for field in required:
            out.append(Case(f"{name} without {field}", pipeline(operators=[
                {name: {k: v for k, v in required.items() if k != field}}]), True))
        out.append(Case(f"{name} with a field it does not have", pipeline(operators=[
            {name: {**required, "colour": "blue"}}]), True))
    return out


def connector_cases() -> list[Case]:
    out = []
    for role, registry in (("source", SOURCES), ("sink", SINKS)):
        for kind, model in registry.items():
            required = {"type": kind, **_required(model)}
            if kind == "jetstream" and role == "source":
                required["stream"] = "S"  # the model's own rule: stream or subject
            part = {**required, "url": "nats://127.0.0.1:1"} if kind in NETWORK else required
            for field in _required(model):
                out.append(Case(f"{role} {kind} without {field}",
                                pipeline(**{role: {k: v for k, v in part.items() if k != field}}), True))
            out.append(Case(f"{role} {kind} with a field it does not have",
                            pipeline(**{role: {**part, "colour": "blue"}}), True))
            if role == "sink" and _takes(model, part) == PAYLOADS:
                out.append(Case(f"sink {kind} behind records", pipeline(GENERATE, sink=part), True))
    return out


def _takes(model: Any, part: dict[str, Any]) -> str | None:
    from wirepipe.pipelines.config import build_connector

    return build_connector(model.model_validate(part), "sink").takes


# Every validator a connector model declares (besides refusing unknown fields), with a config it refuses.
JS = {"type": "jetstream", "url": "nats://127.0.0.1:1", "stream": "S"}
CONFLICTS: dict[str, list[dict[str, Any]]] = {
    "GenerateConfig._known_dataset": [pipeline({**GENERATE, "dataset": "pointz"})],
    "NatsSourceConfig._embedded_has_no_auth": [pipeline({**NATS_IN, "url": "embedded", "auth": {"token": "t"}})],
    "NatsSourceConfig._url_list": [pipeline({**NATS_IN, "url": "nats://a:1, embedded"})],
    "NatsSourceConfig._gaps_need_every_message": [pipeline({**NATS_IN, "queue": "q", "gaps": True})],
    "AuthConfig._one_method": [pipeline({**NATS_IN, "auth": {"token": "t", "user": "u", "password": "p"}}),
                               pipeline({**NATS_IN, "auth": {"user": "u"}})],
    "AuthConfig._mapping": [pipeline({**NATS_IN, "auth": "TOKEN"})],
    "TLSConfig._pair": [pipeline({**NATS_IN, "tls": {"cert": "c.pem"}})],
    "JetStreamSourceConfig._start": [
        pipeline({**JS, "deliver": "by_start_sequence"}), pipeline({**JS, "deliver": "by_start_time"}),
        pipeline({**JS, "ordered": True, "durable": "d"}), pipeline({**JS, "stream": None}),
        pipeline({**JS, "heartbeat": "30s", "expires": "30s"}), pipeline({**JS, "ordered": True, "ack": "all"})],
    "JetStreamSourceConfig._embedded_has_no_auth": [pipeline({**JS, "url": "embedded", "tls": {"ca": "ca.pem"}})],
    "JetStreamSourceConfig._url_list": [pipeline({**JS, "url": "nats://a:1, embedded"})],
    "NatsSinkConfig._embedded_has_no_auth": [pipeline(sink={"type": "nats", "subject": "s", "auth": {"token": "t"}})],
    "NatsSinkConfig._url_list": [pipeline(sink={"type": "nats", "subject": "s", "url": "nats://a:1, embedded"})],
    "NatsSinkConfig._template": [pipeline(sink={"type": "nats", "subject": "s.{}", "url": "nats://a:1"})],
    "JetStreamSinkConfig._embedded_has_no_auth": [pipeline(sink={"type": "jetstream", "subject": "s",
                                                                 "auth": {"token": "t"}})],
    "JetStreamSinkConfig._url_list": [pipeline(sink={"type": "jetstream", "subject": "s", "url": "nats://a:1, embedded"})],
    "JetStreamSinkConfig._template": [pipeline(sink={"type": "jetstream", "subject": "s {x}", "url": "nats://a:1"})],
    "JetStreamSinkConfig._msg_id": [pipeline(sink={"type": "jetstream", "subject": "s", "url": "nats://a:1",
                                                   "msg_id": "{}"})],
    "CaptureSinkConfig._plain_name": [pipeline(sink={"type": "capture", "dir": "cap", "prefix": ".hidden"})],
    "CsvSourceConfig._schema": [pipeline({"type": "csv", "path": "in.csv", "schema": {"x": "list[int64]"}}),
                                pipeline({"type": "csv", "path": "in.csv", "schema": "fields.txt"})],
    "CsvSourceConfig._encoding": [pipeline({"type": "csv", "path": "in.csv", "encoding": "utf-9"})],
    "CaptureSourceConfig._pattern": [pipeline({"type": "capture", "path": "cap/", "subject": "a.>.b"})],
    "SerializeParams._format": [pipeline(operators=[{"serialize": {"format": "capnproto"}}])],
    "DeserializeParams._format": [pipeline(operators=[{"deserialize": {"format": "capnproto"}}])],
    "CompressParams._codec": [pipeline(operators=[{"compress": {"codec": "zstdd"}}])],
    "CompressParams._level": [pipeline(operators=[{"compress": {"codec": "zstd", "level": "hot"}}])],
    "CompressParams._digest": [pipeline(operators=[{"compress": {"codec": "zstd", "digest": "sha256:" + "0" * 64}}]),
                               pipeline(operators=[{"compress": {"codec": "zstd", "dictionary": "d.zdict",
                                                                 "digest": "md5:00"}}])],
    "DecompressParams._codec": [pipeline(operators=[{"decompress": {"codec": "zstdd"}}])],
    "CompressParams._shared": [pipeline(operators=[{"serialize": {"format": "json"}},
                                                   {"compress": {"codec": "zstd", "dictionary": "nats://"}}])],
    "DecompressParams._bucket": [pipeline(operators=[{"decompress": {"codec": "auto", "dictionaries": "nats://a/b"}}])],
    "NatsConnectionConfig._embedded_has_no_auth": [pipeline(operators=[{"serialize": {"format": "json"}}, {"compress": {
        "codec": "zstd", "dictionary": "nats://B/D", "nats": {"url": "embedded", "auth": {"token": "t"}}}}])],
    "NatsConnectionConfig._url_list": [pipeline(operators=[{"serialize": {"format": "json"}}, {"compress": {
        "codec": "zstd", "dictionary": "nats://B/D", "nats": {"url": "nats://a:1, embedded"}}}])],
    "SubjectParams._publishable": [pipeline(operators=[{"subject": "orders.>.{x}"}]),
                                   pipeline(operators=[{"subject": {"template": "a..{x}"}}])],
    "EncodeParams._parse": [pipeline(operators=[{"encode": {"chain": "json|zstd:99"}}])],
    "DecodeParams._parse": [pipeline(operators=[{"decode": {"chain": "json||zstd"}}])],
}


def _validators() -> set[str]:
    """``Model._validator`` for every validator of every model the registries reach (nested ones too)."""
    found: set[str] = set()

    def walk(model: Any) -> None:
        decorators = model.__pydantic_decorators__
        for name in [*decorators.model_validators, *decorators.field_validators]:
            if name != "_known_fields":  # every model's: refused unknown fields, generated above
                found.add(f"{model.__name__}.{name}")
        for f in model.model_fields.values():
            for t in typing.get_args(f.annotation) or (f.annotation,):
                if isinstance(t, type) and hasattr(t, "model_fields"):
                    walk(t)

    for model in [*SOURCES.values(), *SINKS.values(), *(_model(e) for e in OPERATORS.values())]:
        walk(model)
    return found


def test_every_validator_of_every_model_has_a_conflict_case() -> None:
    assert _validators() <= set(CONFLICTS), sorted(_validators() - set(CONFLICTS))


# Every name the server restricts, in every connector that takes it (connectors/nats/names.py, wire/subjects.py): refused
# by the model, never met by `run` as the server's error. And numbers that are not finite.
JS_SINK = {"type": "jetstream", "url": "nats://127.0.0.1:1", "subject": "s"}
NATS_SINK = {"type": "nats", "url": "nats://127.0.0.1:1", "subject": "s"}
BAD_NAMES: dict[str, dict[str, Any]] = {
    "jetstream source stream A.B": pipeline({**JS, "stream": "A.B"}),
    "jetstream source stream with a slash": pipeline({**JS, "stream": "a/b"}),
    "jetstream source stream of 256 characters": pipeline({**JS, "stream": "S" * 256}),
    "jetstream source stream empty": pipeline({**JS, "stream": ""}),
    "jetstream source durable a.b": pipeline({**JS, "durable": "a.b"}),
    "jetstream source durable with a space": pipeline({**JS, "durable": "a b"}),
    "jetstream source durable a*": pipeline({**JS, "durable": "a*"}),
    "jetstream source subject a..b": pipeline({**JS, "subject": "a..b"}),
    "jetstream source subject >.a": pipeline({**JS, "subject": ">.a"}),
    "nats source subject with a space": pipeline({**NATS_IN, "subject": "in put"}),
    "nats source subject empty": pipeline({**NATS_IN, "subject": ""}),
    "nats source subject with a tab": pipeline({**NATS_IN, "subject": "in\tx"}),
    "nats source queue with a space": pipeline({**NATS_IN, "queue": "a b"}),
    "nats source queue empty": pipeline({**NATS_IN, "queue": ""}),
    "jetstream sink stream a.b": pipeline(sink={**JS_SINK, "stream": {"name": "a.b"}}),
    "jetstream sink stream a>": pipeline(sink={**JS_SINK, "stream": {"name": "a>"}}),
    "nats sink subject empty": pipeline(sink={**NATS_SINK, "subject": ""}),
    "nats sink subject wildcard": pipeline(sink={**NATS_SINK, "subject": "points.>"}),
    "nats sink subject template wildcard": pipeline(sink={**NATS_SINK, "subject": "{subject}.*"}),
    "nats sink subject double dot": pipeline(sink={**NATS_SINK, "subject": "a..{subject}"}),
    "jetstream sink subject empty": pipeline(sink={**JS_SINK, "subject": ""}),
    "jetstream sink subject wildcard": pipeline(sink={**JS_SINK, "subject": "points.*"}),
    "dead_letter subject wildcard": pipeline(dead_letter={**NATS_SINK, "subject": "points.>"}),
    "dead_letter jetstream subject empty": pipeline(dead_letter={**JS_SINK, "subject": ""}),
    "capture source subject a..b": pipeline({"type": "capture", "path": "cap/", "subject": "a..b"}),
    # numbers the server keeps in an int64 (durations in nanoseconds), an int32 (max_msg_size), a uint64 (start_seq)
    "jetstream source start_seq past uint64": pipeline({**JS, "deliver": "by_start_sequence", "start_seq": 1 << 64}),
    "jetstream source max_ack_pending past int64": pipeline({**JS, "max_ack_pending": 1 << 63}),
    "jetstream source max_deliver past int64": pipeline({**JS, "max_deliver": 1 << 63}),
    "jetstream source batch_size past int64": pipeline({**JS, "batch_size": 1 << 63}),
    "jetstream source ack_wait past int64 ns": pipeline({**JS, "ack_wait": "99999999999h"}),
    "jetstream source expires past int64 ns": pipeline({**JS, "expires": "99999999999h"}),
    "jetstream sink stream max_age past int64 ns": pipeline(sink={**JS_SINK, "stream": {"name": "S", "max_age": "99999999999h"}}),
    "jetstream sink stream duplicate_window past int64 ns": pipeline(sink={
        **JS_SINK, "stream": {"name": "S", "duplicate_window": "99999999999h"}}),
    "jetstream sink stream max_bytes past int64": pipeline(sink={**JS_SINK, "stream": {"name": "S", "max_bytes": "99999999999TB"}}),
    "jetstream sink stream max_msgs past int64": pipeline(sink={**JS_SINK, "stream": {"name": "S", "max_msgs": 1 << 63}}),
    "jetstream sink stream max_msg_size past int32": pipeline(sink={**JS_SINK, "stream": {"name": "S", "max_msg_size": "3GB"}}),
    "compress dictionary bucket a.b": pipeline(operators=[{"serialize": {"format": "json"}}, {"compress": {
        "codec": "zstd", "dictionary": "nats://a.b/D"}}]),
    "decompress dictionaries bucket a.b": pipeline(NATS_IN, [{"decompress": {"codec": "auto",
                                                                             "dictionaries": "nats://a.b"}}]),
    "nats source url http": pipeline({**NATS_IN, "url": "http://127.0.0.1:4222"}),
    "jetstream sink url list with an https server": pipeline(sink={**JS_SINK, "url": "nats://a:1, https://b:2"}),
    "nats sink url list mixing websocket": pipeline(sink={**NATS_SINK, "url": "nats://a:1, ws://b:2"}),
    "generate rate inf": pipeline({**GENERATE, "rate": "inf"}),
    "generate rate nan": pipeline({**GENERATE, "rate": float("nan")}),
    "shutdown_timeout inf": pipeline(shutdown_timeout=float("inf")),
    "jetstream source ack_wait inf": pipeline({**JS, "ack_wait": float("inf")}),
}


def input_cases() -> list[Case]:
    return [Case(f"{kind} source, no input", pipeline({"type": kind, "path": "missing/"}), True)
            for kind in ("jsonl", "parquet", "capture")]


CASES = [*format_cases(), *codec_cases(), *operator_cases(), *connector_cases(), *input_cases(),
         *(Case(f"name {key}", cfg, True) for key, cfg in BAD_NAMES.items()),
         *(Case(f"conflict {key} #{i}", cfg, True) for key, cfgs in CONFLICTS.items() for i, cfg in enumerate(cfgs))]


# --- the two commands ---------------------------------------------------------------------------------------


class Started(Exception):
    """``run`` got past every check and would now connect to NATS: the test stops it there."""


def _network(config: Any) -> bool:
    return isinstance(config, dict) and any(isinstance(config.get(k), dict) and config[k].get("type") in NETWORK
                                            for k in ("source", "sink"))


def check_same(arg: str, cwd: Path, monkeypatch: pytest.MonkeyPatch, stop_at_start: bool) -> bool:
    """``validate ARG`` and ``run ARG`` in ``cwd`` agree; returns whether they refused. ``stop_at_start``: run stops
    where it would start reading (a pipeline that connects to NATS), else it runs."""
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("NATS_URL", raising=False)
    monkeypatch.setattr(wirepipe.cli.runs, "setup_logging", lambda verbose=False: None)  # pytest keeps the log
    if stop_at_start:
        def started(pipe: Any, file: str | None = None) -> Any:
            raise Started
        monkeypatch.setattr(wirepipe.cli.runs, "run_as_worker", started)
    before = sorted(p.name for p in cwd.iterdir())
    v = invoke("validate", arg, columns=200)
    r = invoke("run", arg, "--no-status", columns=200)
    for result, allowed in ((v, SystemExit), (r, (SystemExit, Started))):
        assert result.exception is None or isinstance(result.exception, allowed), result.exception  # no traceback
    if v.returncode == 2:
        line = v.stderr.strip()
        assert r.returncode == 2 and r.stderr.strip() == line, (line, r.returncode, r.stderr)
        assert line.startswith(f"error: {arg}: ") and "\n" not in line, line
        assert sorted(p.name for p in cwd.iterdir()) == before  # nothing written: no empty output, no metrics
        return True
    assert v.returncode == 0 and v.stdout.startswith(f"ok: {arg}: "), v.stderr
    # it started (stopped there), or ran: 3 when every record was rejected, which the summary says why
    assert isinstance(r.exception, Started) or r.returncode in (0, 3), (r.returncode, r.stderr)
    return False


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_validate_refuses_what_run_refuses(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "in.jsonl").write_text('{"x": 1, "y": 2}\n{"x": 3, "y": 4}\n{"x": 5, "y": 6}\n')
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(case.config), encoding="utf-8")
    refused = check_same("p.yaml", tmp_path, monkeypatch, _network(case.config))
    if case.refused is not None:
        assert refused == case.refused, case.id


# The pipelines (test files beside them are not: `wirepipe test` runs those, and `run` refuses them as such).
EXAMPLES = sorted(p for p in [*(ROOT / "configs").glob("*.yaml"), *(ROOT / "tests" / "bad_configs").glob("*.yaml")]
                  if not p.name.endswith(".test.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[f"{p.parent.name}/{p.name}" for p in EXAMPLES])
def test_every_example_and_bad_config_is_judged_alike(path: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The configs as they are, from the clone's root (NATS_URL unset: the embedded server; results in this
    test's folder); run stops where it would start reading."""
    monkeypatch.setenv("RESULTS", str(tmp_path / "results"))
    monkeypatch.delenv("WIREPIPE_TEST_UNDEFINED_DIR", raising=False)
    refused = check_same(str(path.relative_to(ROOT)), ROOT, monkeypatch, stop_at_start=True)
    assert refused == (path.parent.name == "bad_configs"), path


# The commands that make their pipeline from flags: a bad name is refused naming the flag, before any connect.
FLAGS = [
    (["tap", "--stream", "A.B"], "--stream: stream name 'A.B' contains '.' (at character 2)"),
    (["tap", "a..b"], "SUBJECT: subject pattern 'a..b': tokens are separated by single dots"),
    (["capture", "-o", "cap", "--stream", "A.B"], "--stream: stream name 'A.B' contains '.' (at character 2)"),
    (["capture", "-o", "cap", "--stream", "S", "--durable", "a.b"], "--durable: consumer name 'a.b' contains '.'"),
    (["capture", "-o", "cap", "--subject", "a b"], "--subject: subject pattern 'a b' contains a space"),
    (["capture", "-o", "cap", "--subject", "a", "--queue", "q q"], "--queue: queue group 'q q' contains a space"),
]


@pytest.mark.parametrize(("args", "message"), FLAGS, ids=[" ".join(a) for a, _ in FLAGS])
def test_a_command_refuses_a_bad_name_in_a_flag(args: list[str], message: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    done = invoke(*args, env={"NATS_URL": "nats://127.0.0.1:1"})
    assert isinstance(done.exception, SystemExit) and done.returncode == 2, done.output
    assert done.stderr.startswith(f"error: {message}") and done.stderr.count("\n") == 1, done.stderr
    assert list(tmp_path.iterdir()) == []  # no capture folder made


@pytest.mark.parametrize("args", [["tap", "points.>"], ["capture", "-o", "cap", "--subject", "points.>"],
                                  ["dict", "list", "nats://DICTS"]], ids=lambda a: a[0])
def test_a_url_whose_scheme_is_not_nats_is_a_config_error_at_once(args: list[str], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    done = invoke(*args, env={"NATS_URL": "http://127.0.0.1:4222"})
    assert done.returncode == 2 and isinstance(done.exception, SystemExit), done.output
    assert "'http://127.0.0.1:4222': a NATS url's scheme is nats, tls, ws, wss (or none: host:port), not http" \
        in done.stderr and done.stderr.count("\n") == 1, done.stderr


@pytest.mark.parametrize(("url", "problem"), [
    ("nats:/127.0.0.1:4222", "not a NATS url: give nats://host:port (two slashes)"),
    ("nats://", "no host: give nats://host:port"),
    ("nats://:4222", "no host: give nats://host:port"),
    ("nats://127.0.0.1:99999", "the port is a number 1-65535"),
    ("nats://127.0.0.1:0", "the port is a number 1-65535"),
    ("nats://127.0.0.1:", "the port is a number 1-65535"),
    ("nats://a:4222,b:42x", "the port is a number 1-65535"),
])
def test_a_url_that_names_no_server_is_a_config_error_at_once(url: str, problem: str) -> None:
    """What nats-py would try for the whole connect timeout and then call ``Name or service not known``."""
    from wirepipe.connectors.nats.connection import split_urls

    bad = url.rpartition(",")[2]
    with pytest.raises(ValueError, match="^" + re.escape(f"{bad!r}: {problem}")):
        split_urls(url)


def test_every_url_shape_a_server_takes_stays_valid() -> None:
    from wirepipe.connectors.nats.connection import split_urls

    for url in ("127.0.0.1:4222", "localhost", "nats://u:p@h:4222", "nats://u:p:x,y@h:4222", "nats://[::1]:4222",
                "ws://h:8080/nats", "wss://h", "tls://h:4443", "embedded", "nats://h1:4222, nats://h2:4222"):
        assert split_urls(url), url


# A file a config names, linked to /dev/zero: read within a bound (each of these took 13-21 GB before the error).
ENDLESS = [
    ("z.avsc", {"serialize": {"format": "avro", "schema": "z.avsc"}}, "larger than 16 MiB, the most a schema file may be"),
    ("z.json", {"serialize": {"format": "msgpack-array", "schema": "z.json"}}, "larger than 16 MiB, the most a schema file"),
    ("z.desc", {"serialize": {"format": "protobuf", "schema": "z.desc#M"}}, "larger than 16 MiB, the most a descriptor set"),
    ("z.proto", {"serialize": {"format": "protobuf", "schema": "z.proto"}}, "not a regular file (a device or a pipe"),
    ("z.zdict", {"compress": {"codec": "zstd", "dictionary": "z.zdict"}}, "larger than 64 MiB, the most a zstd dictionary"),
]


@pytest.mark.parametrize(("name", "entry", "message"), ENDLESS, ids=[e[0] for e in ENDLESS])
def test_a_file_a_config_names_is_read_within_a_bound(name: str, entry: dict[str, Any], message: str,
                                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / name).symlink_to("/dev/zero")
    operators = [entry] if "serialize" in entry else [{"serialize": {"format": "json"}}, entry]
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(pipeline(operators=operators)), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    done = invoke("validate", "p.yaml", columns=200)
    assert done.returncode == 2 and isinstance(done.exception, SystemExit), done.output
    assert message in done.stderr and name in done.stderr and done.stderr.count("\n") == 1, done.stderr
