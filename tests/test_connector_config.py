"""Connectors: one module each (found by scanning the package), fields declared once (in the config model).

Issue 10 items 2 and 3 for connectors: a connector module declares ``SOURCES``/``SINKS`` and ``RANK``
and nothing else lists it; its runtime class takes the validated config, and its own keyword
arguments are checked by that model with the messages YAML gives.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import wirepipe
from wirepipe.connectors import SINKS, SOURCES
from wirepipe.connectors.capture_sink import CaptureSink, CaptureWriter
from wirepipe.connectors.capture_source import CaptureSource
from wirepipe.connectors.connector import AtLeastOnce, Bounded, Commits, SharedByWorkers
from wirepipe.connectors.generate import GenerateSource
from wirepipe.connectors.jsonl import JsonlSink, JsonlSource
from wirepipe.connectors.nats import connection as natsconn
from wirepipe.connectors.nats.connection import NatsConnection, NatsConnectionConfig
from wirepipe.connectors.nats.core_sink import NatsSink
from wirepipe.connectors.nats.core_source import NatsSource
from wirepipe.connectors.nats.jetstream_ordered import OrderedJetStreamSource
from wirepipe.connectors.nats.jetstream_sink import JetStreamSink
from wirepipe.connectors.nats.jetstream_source import JetStreamSource, JetStreamSourceConfig
from wirepipe.connectors.null import NullSink
from wirepipe.connectors.parquet import ParquetSink, ParquetSource
from wirepipe.core.errors import CannotShare, ConfigError, Refusal, WirepipeError
from wirepipe.core.registry import declared_in

SRC = Path(wirepipe.__file__).parent

WORDS_MODULE = '''
"""A connector added as one module: nothing else in wirepipe names it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import Field

from ..core.batch import Batch
from ..core.models import SourceLimits
from .connector import Configured, Source


class WordsSource(Configured, Source):
    type = "words"

    def __init__(self, words: list[str], **fields: Any) -> None:
        self._init(WordsConfig, words=words, **fields)

    def _configure(self, config: WordsConfig) -> None:
        super().__init__(count=config.count, duration=config.duration)
        self.config = config
        self.words = config.words

    async def batches(self) -> AsyncIterator[Batch]:
        words = self.words[: self.count] if self.count is not None else self.words
        yield Batch(list(words), meta={"seq": list(range(len(words)))})


class WordsConfig(SourceLimits):
    type: Literal["words"]
    words: list[str] = Field(min_length=1)

    def build(self) -> WordsSource:
        return WordsSource.from_config(self)


SOURCES = {"words": WordsConfig}
RANK = 3.5  # after the file connectors, before NATS
'''

CHECK = '''
import json, sys
import wirepipe
from wirepipe import api
from wirepipe.connectors import SOURCES, SINKS
from wirepipe.connectors.words import WordsSource
from wirepipe.core.errors import ConfigError
from wirepipe.pipelines.config import load_pipeline

assert wirepipe.__file__.startswith(sys.argv[1]), wirepipe.__file__  # the copy, not the checkout
stats = load_pipeline("words.yaml").run()
refused = {}
for name, call in (("yaml", lambda: load_pipeline("typo.yaml")), ("api", lambda: api.source("words", words=[])),
                   ("class", lambda: WordsSource([]))):
    try:
        call()
    except ConfigError as exc:
        refused[name] = [exc.path, exc.detail]
print(json.dumps({"sources": list(SOURCES), "sinks": list(SINKS), "records": stats.records_out,
                  "refused": refused}))
'''


@pytest.mark.timeout(120)
def test_a_connector_added_as_one_module_is_found_without_touching_another_file(tmp_path: Path) -> None:
    """A copy of the package plus one new file in ``connectors/``: YAML, the API and the allowed lists see it."""
    copy = tmp_path / "src"
    shutil.copytree(SRC, copy / "wirepipe", ignore=shutil.ignore_patterns("__pycache__"))
    before = {p.relative_to(copy).as_posix(): p.read_bytes() for p in copy.rglob("*.py")}
    (copy / "wirepipe" / "connectors" / "words.py").write_text(WORDS_MODULE, encoding="utf-8")
    after = {p.relative_to(copy).as_posix(): p.read_bytes() for p in copy.rglob("*.py")}
    assert set(after) - set(before) == {"wirepipe/connectors/words.py"}
    assert all(after[name] == data for name, data in before.items())  # no other file changed
    work = tmp_path / "work"
    work.mkdir()
    (work / "words.yaml").write_text(textwrap.dedent("""\
        name: words
        source: {type: words, words: [hello, nats, again]}
        sink: {type: jsonl, path: out.jsonl}
        """), encoding="utf-8")
    (work / "typo.yaml").write_text("name: typo\nsource: {type: wordz, words: [a]}\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(copy)}
    out = subprocess.run([sys.executable, "-c", CHECK, str(copy)], cwd=work, env=env, capture_output=True,
                         text=True, timeout=100)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["sources"] == ["generate", "jsonl", "csv", "parquet", "words", "nats", "jetstream", "capture"]  # by RANK
    assert seen["sinks"] == list(SINKS)
    assert seen["records"] == 3
    assert (work / "out.jsonl").read_text(encoding="utf-8").splitlines() == ['"hello"', '"nats"', '"again"']
    path, detail = seen["refused"]["yaml"]
    assert (path, detail) == ("source", "unknown type 'wordz': allowed generate, jsonl, csv, parquet, words, nats, jetstream, "
                              "capture; did you mean `words`?")
    # The module's own class and the generic factory check its fields as YAML would, with the same message.
    assert seen["refused"]["api"] == seen["refused"]["class"]
    assert seen["refused"]["api"][0] == "source.words" and "at least 1 item" in seen["refused"]["api"][1]


def test_the_scan_orders_by_rank_and_refuses_a_name_declared_twice(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "wp_scan_probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "late.py").write_text("SINKS = {'z': 'late'}\nRANK = 2\n")
    (package / "early.py").write_text("SINKS = {'b': 'early', 'a': 'early'}\nRANK = 1\n")
    (package / "silent.py").write_text("HELPER = 1\n")  # declares nothing: imported, not listed
    monkeypatch.syspath_prepend(str(tmp_path))
    assert list(declared_in("wp_scan_probe", "SINKS").items()) == [("b", "early"), ("a", "early"), ("z", "late")]
    assert declared_in("wp_scan_probe", "SOURCES") == {}
    (package / "again.py").write_text("SINKS = {'z': 'again'}\nRANK = 3\n")
    with pytest.raises(WirepipeError, match=r"SINKS 'z' is declared twice: in wp_scan_probe.late and "
                                            r"wp_scan_probe.again"):
        declared_in("wp_scan_probe", "SINKS")


def test_the_builtin_connectors_keep_their_types_and_order() -> None:
    assert list(SOURCES) == ["generate", "jsonl", "csv", "parquet", "nats", "jetstream", "capture"]
    assert list(SINKS) == ["null", "jsonl", "parquet", "nats", "jetstream", "capture"]
    # the names stay importable where they were (user code, entry points written against them)
    from wirepipe.connectors.nats.core_source import NatsSourceConfig
    from wirepipe.connectors.nats.jetstream_sink import JetStreamSinkConfig

    assert SINKS["jetstream"] is JetStreamSinkConfig and SOURCES["nats"] is NatsSourceConfig


def test_scanning_the_connectors_imports_nothing_heavy() -> None:
    """Validating a config imports every connector module: the clients and Arrow stay deferred."""
    code = ("import sys\nfrom wirepipe.connectors import SOURCES, SINKS\n"
            "models = [SOURCES[t] for t in SOURCES] + [SINKS[t] for t in SINKS]\n"
            "heavy = [m for m in ('pyarrow', 'nats', 'numpy', 'orjson', 'zstandard', 'msgpack', 'apache_beam')"
            " if m in sys.modules]\nprint(len(models), ','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["13"]


# --- item 3: fields declared once; the runtime classes validate as YAML does ---------------------------

def _yaml_error(tmp_path: Path, text: str) -> ConfigError:
    from wirepipe.pipelines.config import load_pipeline

    path = tmp_path / "p.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    return info.value


SOURCE_ONLY = "source: {type: generate}\n"

# (the runtime class called from Python, the same entry in YAML)
BAD: list[tuple[Callable[[], Any], str]] = [
    (lambda: GenerateSource("point", count=10, batch_size=0),
     "source: {type: generate, dataset: point, count: 10, batch_size: 0}"),
    (lambda: GenerateSource("nope"), "source: {type: generate, dataset: nope}"),
    (lambda: JsonlSource("in.jsonl", batch_size=0), "source: {type: jsonl, path: in.jsonl, batch_size: 0}"),
    (lambda: JsonlSink("out.jsonl", envelope="sometimes"),
     SOURCE_ONLY + "sink: {type: jsonl, path: out.jsonl, envelope: sometimes}"),
    (lambda: ParquetSource("in.parquet", count=-1), "source: {type: parquet, path: in.parquet, count: -1}"),
    (lambda: ParquetSink("out.parquet", compression="zip"),
     SOURCE_ONLY + "sink: {type: parquet, path: out.parquet, compression: zip}"),
    (lambda: CaptureSource("cap/", speed=0), "source: {type: capture, path: cap/, speed: 0}"),
    (lambda: CaptureSink("cap/", max_file_size="huge"),
     SOURCE_ONLY + "sink: {type: capture, dir: cap/, max_file_size: huge}"),
    (lambda: CaptureWriter("cap/", row_group_rows=0), SOURCE_ONLY + "sink: {type: capture, dir: cap/, row_group_rows: 0}"),
    (lambda: CaptureWriter("cap/", prefix=".hidden"), SOURCE_ONLY + "sink: {type: capture, dir: cap/, prefix: .hidden}"),
    (lambda: CaptureWriter("cap/", prefix="_hidden"), SOURCE_ONLY + "sink: {type: capture, dir: cap/, prefix: _hidden}"),
    (lambda: NatsSource("points", duration="soon"), "source: {type: nats, subject: points, duration: soon}"),
    (lambda: NatsSink("points", url="embedded", auth={"token": "t"}),
     SOURCE_ONLY + "sink: {type: nats, subject: points, url: embedded, auth: {token: t}}"),
    (lambda: JetStreamSource(ordered=True, durable="d"), "source: {type: jetstream, ordered: true, durable: d}"),
    (lambda: JetStreamSink("points", window=0), SOURCE_ONLY + "sink: {type: jetstream, subject: points, window: 0}"),
    (lambda: JetStreamSink("points", subjcet="x"), SOURCE_ONLY + "sink: {type: jetstream, subject: points, subjcet: x}"),
]


@pytest.mark.parametrize(("build", "yaml_part"), BAD, ids=[y.splitlines()[-1][:60] for _, y in BAD])
def test_a_runtime_class_refuses_a_bad_field_with_the_yaml_message(tmp_path: Path, build: Callable[[], Any],
                                                                   yaml_part: str) -> None:
    from_yaml = _yaml_error(tmp_path, f"name: x\n{yaml_part}\n")
    with pytest.raises(ConfigError) as info:
        build()
    assert (info.value.path, info.value.detail) == (from_yaml.path, from_yaml.detail)


def test_the_jetstream_source_has_no_nak_delay(tmp_path: Path) -> None:
    """Nothing naks a record for a sink failure (in-progress acks hold it), so there is no delay to configure: a
    config that sets one is told the field is unknown, with the fields there are."""
    error = _yaml_error(tmp_path, "name: x\nsource: {type: jetstream, url: 'nats://h:1', stream: S, nak_delay: 1s}\n")
    assert (error.path, error.detail.split(":")[0]) == ("source", "unknown field 'nak_delay'")
    assert "max_deliver" in error.detail and "nak" not in error.detail.split(":", 1)[1]
    assert not hasattr(JetStreamSource(stream="S", url="nats://h:1"), "nacked")


def test_generate_with_batch_size_zero_no_longer_loops() -> None:
    """The issue's example: refused when built, instead of a run that never ends."""
    with pytest.raises(ConfigError, match=r"^source\.batch_size: Input should be greater than or equal to 1 \(got 0\)$"):
        GenerateSource("point", count=10, batch_size=0)


@pytest.mark.parametrize(("yaml_entry", "python"), [
    ({"type": "generate", "dataset": "feed", "count": 7, "batch_size": 3, "seed": 5, "duration": "2s"},
     lambda: GenerateSource("feed", count=7, batch_size=3, seed=5, duration="2s")),
    ({"type": "jsonl", "path": ["a.jsonl", "b/"], "batch_size": 10, "envelope": True},
     lambda: JsonlSource([Path("a.jsonl"), "b/"], batch_size=10, envelope=True)),
    ({"type": "parquet", "path": "in/*.parquet", "count": 5}, lambda: ParquetSource("in/*.parquet", count=5)),
    ({"type": "capture", "path": "cap", "pace": "original", "speed": 2, "max_gap": "1s"},
     lambda: CaptureSource(Path("cap"), pace="original", speed=2, max_gap="1s")),
    ({"type": "nats", "subject": "pts.>", "queue": "w", "url": "nats://a:1, nats://b:2"},
     lambda: NatsSource("pts.>", queue="w", url=["nats://a:1", "nats://b:2"])),
    ({"type": "jetstream", "stream": "S", "durable": "d", "ack_wait": "10s", "ack": "all"},
     lambda: JetStreamSource(stream="S", durable="d", ack_wait=10, ack="all")),
])
def test_a_source_from_python_equals_the_yaml_one(yaml_entry: dict[str, Any], python: Callable[[], Any]) -> None:
    """Same fields in, same config and parameters out: the runtime class and YAML share the model."""
    yaml_built = SOURCES[yaml_entry["type"]].model_validate(yaml_entry).build()
    built = python()
    assert type(built) is type(yaml_built)
    assert built.config == yaml_built.config
    assert (built.params, built.count, built.duration) == (yaml_built.params, yaml_built.count, yaml_built.duration)


@pytest.mark.parametrize(("yaml_entry", "python"), [
    ({"type": "null"}, NullSink),
    ({"type": "jsonl", "path": "out.jsonl", "append": True}, lambda: JsonlSink(Path("out.jsonl"), append=True)),
    ({"type": "parquet", "path": "out/part-{part}.parquet", "row_group_rows": 100},
     lambda: ParquetSink("out/part-{part}.parquet", row_group_rows=100)),
    ({"type": "capture", "dir": "cap", "max_file_size": "1MiB", "metadata": {"env": "t"}},
     lambda: CaptureSink(Path("cap"), max_file_size=1 << 20, metadata={"env": "t"})),
    ({"type": "nats", "subject": "out.{seq}", "flush_timeout": "2s"}, lambda: NatsSink("out.{seq}", flush_timeout=2)),
    ({"type": "jetstream", "subject": "o", "stream": {"name": "O"}, "retry": {"wait": "1s"}},
     lambda: JetStreamSink("o", stream={"name": "O"}, retry={"wait": 1})),
])
def test_a_sink_from_python_equals_the_yaml_one(yaml_entry: dict[str, Any], python: Callable[[], Any]) -> None:
    yaml_built = SINKS[yaml_entry["type"]].model_validate(yaml_entry).build()
    built = python()
    assert type(built) is type(yaml_built)
    assert built.config == yaml_built.config and built.params == yaml_built.params


def test_build_hands_the_validated_config_to_the_runtime_class() -> None:
    """No second copy of the fields: the runtime object keeps the very model YAML validated."""
    for entry in ({"type": "generate", "count": 3}, {"type": "jsonl", "path": "x"}, {"type": "capture", "path": "c"},
                  {"type": "nats", "subject": "s"}, {"type": "jetstream", "stream": "S"}):
        model = SOURCES[entry["type"]].model_validate(entry)
        assert model.build().config is model
    capture = SINKS["capture"].model_validate({"type": "capture", "dir": "c", "row_group_rows": 10})
    sink = capture.build()
    assert sink.config is capture and sink.writer.config is capture and sink.writer.config.row_group_rows == 10


def test_the_nats_connection_takes_the_connector_config() -> None:
    """``ConnectionOptions`` is gone: the connection reads the validated fields of the connector's config."""
    sink = JetStreamSink("s", url="nats://u:pw@h:1, nats://h:2", reconnect={"wait": "50ms"}, connect_timeout="3s")
    assert isinstance(sink.conn, NatsConnection) and sink.conn.config is sink.config
    assert sink.config.url == ["nats://u:pw@h:1", "nats://h:2"] and sink.config.reconnect.wait == 0.05
    assert sink.params["url"] == "nats://***@h:1,nats://h:2"  # the public form: no credentials
    alone = NatsConnection(NatsConnectionConfig(url="embedded"))
    assert alone.config.embedded and alone.config.public_params() == {"url": "embedded"}
    assert not hasattr(natsconn, "ConnectionOptions")


# --- what the pipelines layer needs, each connector declares ------------------------------------------

_OLD_NOT_IDENTITY = {"count", "duration", "batch_size", "batch_timeout", "rate", "url", "auth", "tls", "durable",
                     "ordered", "queue"}  # the one list connectors/base.py kept for every connector before they declared


@pytest.mark.parametrize("build", [
    lambda: GenerateSource("feed", count=7, batch_size=3, seed=5, rate=100.0),
    lambda: JsonlSource("a.jsonl", batch_size=10, count=4),
    lambda: ParquetSource("in/*.parquet", count=5),
    lambda: CaptureSource("cap", pace="original", speed=2),
    lambda: NatsSource("pts.>", queue="w", url="nats://u:pw@a:1", batch_size=7),
    lambda: JetStreamSource(stream="S", durable="d", url="nats://a:1", batch_size=9),
    lambda: JetStreamSourceConfig(type="jetstream", stream="S", ordered=True).build(),
])
def test_a_source_identity_is_what_it_was(build: Callable[[], Any]) -> None:
    """The default JetStream ``Nats-Msg-Id`` hashes the identity: a new release must not change it, or a re-run
    after an upgrade would not be deduplicated against the run before."""
    source = build()
    params = {k: v for k, v in source.params.items() if k not in _OLD_NOT_IDENTITY}
    assert source.identity == f"{source.type}:{json.dumps(params, sort_keys=True, default=str)}"
    other = build()
    other.count = 123  # how much is read is not what is read
    assert other.identity == source.identity


def test_the_builtin_connectors_declare_how_they_are_shared() -> None:
    bounded = {name for name in SOURCES if issubclass(_source_class(name), Bounded)}
    assert bounded == {"generate", "jsonl", "csv", "parquet", "capture"}
    assert (NatsSource.shared_by, JetStreamSource.shared_by) == ("queue", "durable")
    assert not issubclass(GenerateSource, SharedByWorkers) and not issubclass(OrderedJetStreamSource, SharedByWorkers)
    ordered = JetStreamSourceConfig(type="jetstream", stream="S", ordered=True, url="nats://h:1").build()
    assert ordered.for_worker(0, 1) is ordered
    refused = _cannot_share(lambda: ordered.for_worker(0, 3))
    assert refused.field == "ordered" and "3 times" in refused.message
    durable = JetStreamSource(stream="S", url="nats://h:1", max_ack_pending=900)
    third = durable.for_worker(1, 3)  # its part of the durable's max_ack_pending
    assert third is not durable and third.config is durable.config and (third.ack_share, durable.ack_share) == (300, 900)
    assert _cannot_share(lambda: NatsSink("s").for_worker(0, 2)).field == "url"  # the embedded server
    assert _cannot_share(lambda: JetStreamSink("s").for_worker(1, 2)).field == "url"
    assert ParquetSink("out/part-{part}.parquet").for_worker(2, 3).config.path == "out/part-w2-{part}.parquet"
    assert ParquetSink("out.parquet").for_worker(11, 12).config.path == "out.w11.parquet"  # a copy of its own
    assert JsonlSink("out/x-{worker}.jsonl").for_worker(0, 1).config.path == "out/x-0.jsonl"
    assert JsonlSink("out.jsonl").for_worker(1, 12).config.path == "out.w01.jsonl"
    assert CaptureSink("cap", prefix="blocks").for_worker(1, 2).config.prefix == "blocks-w1"
    shared, null = NatsSink("s", url="nats://h:1"), NullSink()
    assert shared.for_worker(1, 2) is shared and null.for_worker(4, 5) is null  # a subject shared on purpose
    assert _cannot_share(lambda: JsonlSink("-").for_worker(0, 2)).field == "path"  # stdout is one
    sink = JsonlSink("out.jsonl")
    assert sink.for_worker(1, 2).config.path == "out.w1.jsonl" and sink.config.path == "out.jsonl"  # a new copy
    assert (NullSink.batch_results, JsonlSink.batch_results, ParquetSink.batch_results,
            NatsSink.batch_results, CaptureSink.batch_results) == ("nothing", "files", "files", None, None)


def test_a_connector_declares_the_capability_whose_members_it_writes() -> None:
    """A hook the pipelines layer would never call is refused when the class is defined: a capability's member
    outside the capability, or a flag that capabilities replaced (a plugin written for an earlier wirepipe)."""
    from wirepipe.connectors.connector import CountsLoss, Sink, Source, WritesFiles

    with pytest.raises(TypeError, match=r"Lossy.losses belongs to the CountsLoss capability, which Lossy does not"):
        type("Lossy", (Source,), {"losses": lambda self: {"lost": 0}})
    with pytest.raises(TypeError, match=r"Export.bounded is not read any more: declare Bounded"):
        type("Export", (Source,), {"bounded": True})
    with pytest.raises(TypeError, match=r"Blob.worker_fields is not read any more: declare for_worker"):
        type("Blob", (Sink,), {"worker_fields": lambda self, worker: {}})
    with pytest.raises(TypeError, match=r"Files.files belongs to the WritesFiles capability"):
        type("Files", (Sink,), {"files": property(lambda self: [])})
    declared = type("Lossy", (Source, CountsLoss), {"losses": lambda self: {"lost": 0}})
    assert issubclass(declared, CountsLoss) and issubclass(type("Files", (Sink, WritesFiles), {}), WritesFiles)


def test_the_jetstream_config_builds_one_class_per_kind_of_consumer() -> None:
    """A pull consumer (durable or ephemeral) and an ordered one are two classes; the config picks, and the
    durable class refuses an ordered config by the field, naming the way to the other."""
    pull = JetStreamSourceConfig(type="jetstream", stream="S", durable="d").build()
    ordered = JetStreamSourceConfig(type="jetstream", stream="S", ordered=True).build()
    assert (type(pull), type(ordered)) == (JetStreamSource, OrderedJetStreamSource)
    assert isinstance(pull, AtLeastOnce) and not isinstance(ordered, AtLeastOnce) and isinstance(ordered, Commits)
    assert (pull.params["ordered"], ordered.params["ordered"], ordered.params["durable"]) == (False, True, None)
    assert not hasattr(ordered, "pulls")
    assert ordered.ack_pressure == pull.ack_pressure == 10000  # the run loop commits as often for both
    with pytest.raises(ConfigError) as info:
        JetStreamSource(stream="S", ordered=True)
    assert info.value.path == "source.ordered"
    assert info.value.detail.startswith("true: JetStreamSource reads a pull consumer (durable or ephemeral); "
                                        "JetStreamSourceConfig.build()")


def _cannot_share(for_worker: Callable[[], Any]) -> Refusal:
    with pytest.raises(CannotShare) as info:
        for_worker()
    return info.value.refusal


def _source_class(name: str) -> Any:
    import typing

    return typing.get_type_hints(SOURCES[name].build)["return"]


def test_a_jsonl_line_past_the_bound_is_rejected_and_the_rest_of_its_file_is_not_read(tmp_path: Path) -> None:
    """A file without newlines (/dev/zero as input.file) was read as one line until the process was killed for
    memory (24 GB). Past ``MAX_LINE`` the line is a rejected record with the reason; the next file is read."""
    import asyncio

    from wirepipe.connectors import jsonl

    (tmp_path / "a.jsonl").write_bytes(b'{"x": 1}\n' + b"7" * 100 + b'\n{"x": 2}\n')
    (tmp_path / "b.jsonl").symlink_to("/dev/zero")
    (tmp_path / "c.jsonl").write_bytes(b'{"x": 3}\n')

    async def read() -> list[Any]:
        return [b async for b in JsonlSource([str(tmp_path / n) for n in ("a.jsonl", "b.jsonl", "c.jsonl")]).batches()]

    original = jsonl.MAX_LINE
    jsonl.MAX_LINE = 64
    try:
        batches = asyncio.run(read())
    finally:
        jsonl.MAX_LINE = original
    assert [v for b in batches for v in b.values] == [{"x": 1}, {"x": 3}]
    assert [(r.stage, r.error) for b in batches for r in b.rejected] == [
        ("read", f"{tmp_path / 'a.jsonl'}:2: a line longer than 64 bytes, the most a JSON line may be (NATS carries at "
                 "most 64 MB a message): it and the rest of the file are not read"),
        ("read", f"{tmp_path / 'b.jsonl'}:1: a line longer than 64 bytes, the most a JSON line may be (NATS carries at "
                 "most 64 MB a message): it and the rest of the file are not read")]
