"""Registries: a third-party package adds a format, codec, operator, source and sink by entry point.

The package is real packaging metadata: a ``*.dist-info`` folder with ``METADATA`` and
``entry_points.txt`` on a temporary ``sys.path`` entry, which ``importlib.metadata`` finds the
way it finds an installed wheel. It runs in a subprocess so this test process's registries
(already loaded) stay untouched.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli import wirepipe
from wirepipe.core.errors import ConfigError

PLUGIN = '''
"""A third-party wirepipe plugin: everything a package can add, in one module."""

from typing import Literal

from wirepipe.core.batch import Batch
from wirepipe.codecs.compression import Codec
from wirepipe.codecs.formats import Format
from wirepipe.connectors.connector import Sink, Source
from wirepipe.operators.operator import Operator
from wirepipe.core.models import Strict


def _rot13_encoder(_schema):
    import codecs
    return lambda v: codecs.encode(str(v), "rot13").encode()


def _rot13_decoder(_schema):
    import codecs
    return lambda b: codecs.decode(b.decode(), "rot13")


ROT13 = Format("rot13", "", "text/x-rot13", _rot13_encoder, _rot13_decoder, binary=False, note="plugin")

REVERSE = Codec("reverse", "", "x-reverse", 0, 0, 0, 0, 0,
                lambda _level, _d: (lambda b: b[::-1]), lambda _cap, _d: (lambda b: b[::-1]))


class Shout(Operator):
    stage = "shout"

    def __init__(self, suffix):
        self.suffix = suffix
        self.name = "shout"
        self.params = {"suffix": suffix}

    def __call__(self, batch):
        return batch.map_values(lambda v: str(v).upper() + self.suffix, self.stage, self.name)


class ShoutParams(Strict):
    suffix: str = "!"

    def build(self, ctx):
        return [Shout(self.suffix)]


class Words(Source):
    type = "words"

    def __init__(self, words):
        super().__init__()
        self.words = words

    async def batches(self):
        yield Batch(list(self.words), meta={"seq": list(range(len(self.words)))})


class WordsConfig(Strict):
    type: Literal["words"]
    words: list[str]

    def build(self):
        return Words(self.words)


class Tally(Sink):
    type = "tally"

    def __init__(self, path):
        self.path = path
        self.seen = []

    async def write(self, batch):
        self.seen += [v.hex() for v in batch.values]

    async def close(self):
        with open(self.path, "w") as f:
            f.write("\\n".join(self.seen))


class TallyConfig(Strict):
    type: Literal["tally"]
    path: str

    def build(self):
        return Tally(self.path)
'''

ENTRY_POINTS = """\
[wirepipe.formats]
rot13 = wp_plugin:ROT13

[wirepipe.codecs]
reverse = wp_plugin:REVERSE

[wirepipe.operators]
shout = wp_plugin:ShoutParams

[wirepipe.connectors]
source.words = wp_plugin:WordsConfig
sink.tally = wp_plugin:TallyConfig
"""

PIPELINE = """\
name: plugin-pipeline
source: {type: words, words: [hello, nats]}
operators:
  - shout: {suffix: "?"}
  - serialize: {format: rot13}
  - compress: {codec: reverse}
sink: {type: tally, path: out.txt}
"""

CHECK = """\
import json, sys
from wirepipe.pipelines.config import load_pipeline
from wirepipe import api
from wirepipe.codecs import FORMATS, CODECS
from wirepipe.operators import OPERATORS
from wirepipe.connectors import SOURCES, SINKS

stats = load_pipeline("pipeline.yaml").run()
built = api.compress("reverse")
shout = api.operator_entry("shout", suffix="!")[0]
words = api.source("words", words=["a"]).words
try:
    api.serialize("rot14")
    refused = None
except Exception as exc:
    refused = str(exc)
print(json.dumps({"formats": list(FORMATS), "codecs": list(CODECS), "operators": list(OPERATORS),
                  "sources": list(SOURCES), "sinks": list(SINKS), "api": built.name, "shout": shout.params, "words": words,
                  "refused": refused}))
"""


def _plugin_dir(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    (site / "wp_plugin-0.1.dist-info").mkdir(parents=True)
    (site / "wp_plugin.py").write_text(PLUGIN, encoding="utf-8")
    (site / "wp_plugin-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: wp-plugin\nVersion: 0.1\n", encoding="utf-8")
    (site / "wp_plugin-0.1.dist-info" / "entry_points.txt").write_text(ENTRY_POINTS, encoding="utf-8")
    return site


@pytest.mark.timeout(120)
def test_a_package_adds_a_format_codec_operator_source_and_sink_by_entry_point(tmp_path: Path) -> None:
    site = _plugin_dir(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / "pipeline.yaml").write_text(PIPELINE, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", CHECK], cwd=work, env=env, capture_output=True, text=True,
                         timeout=100)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    # The YAML pipeline ran through every plugin piece: shout, rot13, reverse, into the tally sink.
    written = (work / "out.txt").read_text(encoding="utf-8").splitlines()
    assert [bytes.fromhex(h) for h in written] == [b"?BYYRU", b"?FGNA"]
    # Plugins come after the built-ins, which keep their order (the "allowed ..." messages).
    assert seen["formats"][:3] == ["json", "orjson", "msgpack"] and seen["formats"][-1] == "rot13"
    assert seen["codecs"][0] == "zstd" and seen["codecs"][-1] == "reverse"
    assert seen["operators"][:2] == ["serialize", "deserialize"] and seen["operators"][-1] == "shout"
    assert seen["sources"][0] == "generate" and seen["sources"][-1] == "words"
    assert seen["sinks"][0] == "null" and seen["sinks"][-1] == "tally"
    assert seen["api"] == "reverse"  # the Python API sees plugins too
    assert seen["shout"] == {"suffix": "!"} and seen["words"] == ["a"]
    assert "allowed" in seen["refused"] and "rot13" in seen["refused"]  # and lists them when refusing


@pytest.mark.timeout(120)
def test_wirepipe_codecs_lists_a_plugin_format(tmp_path: Path) -> None:
    site = _plugin_dir(tmp_path)
    out = wirepipe("codecs", env={"PYTHONPATH": str(site)}, timeout=100)
    assert out.returncode == 0, out.stderr
    assert "rot13" in out.stdout and "reverse" in out.stdout


@contextlib.contextmanager
def _entry_points_on_path(tmp_path: Path, entry_points: str) -> Iterator[None]:
    """The plugin's dist-info declaring ``entry_points``, importable from this process while inside."""
    site = _plugin_dir(tmp_path)
    (site / "wp_plugin-0.1.dist-info" / "entry_points.txt").write_text(entry_points, encoding="utf-8")
    sys.path.insert(0, str(site))
    try:
        yield
    finally:
        sys.path.remove(str(site))


def test_a_broken_plugin_names_itself(tmp_path: Path) -> None:
    from wirepipe.core.errors import WirepipeError
    from wirepipe.core.registry import Registry

    with _entry_points_on_path(tmp_path, "[wirepipe.test-broken]\nghost = wp_plugin_missing:THING\n"):
        reg: Registry[object] = Registry("wirepipe.test-broken", {"builtin": 1})
        assert list(reg) == ["builtin", "ghost"]  # listing imports nothing
        with pytest.raises(WirepipeError, match=r"entry point 'ghost' = 'wp_plugin_missing:THING'.*wirepipe.test-broken"):
            reg["ghost"]


def test_a_builtin_name_wins_over_a_plugin(tmp_path: Path) -> None:
    from wirepipe.core.registry import Registry

    with _entry_points_on_path(tmp_path, "[wirepipe.test-shadow]\nzstd = wp_plugin:REVERSE\n"):
        reg: Registry[object] = Registry("wirepipe.test-shadow", {"zstd": 19})
        assert list(reg) == ["zstd"] and reg["zstd"] == 19


# --- item 3: the Python API validates as YAML does, with the same messages ----------------------------


def _yaml_error(tmp_path: Path, text: str) -> str:
    from wirepipe.pipelines.config import load_pipeline

    path = tmp_path / "p.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    return info.value.detail


def test_generate_with_batch_size_zero_raises_the_yaml_message(tmp_path: Path) -> None:
    from wirepipe import generate_source

    yaml_detail = _yaml_error(tmp_path, """\
        name: x
        source: {type: generate, dataset: point, count: 10, batch_size: 0}
        """)
    with pytest.raises(ConfigError) as info:
        generate_source("point", count=10, batch_size=0)
    assert info.value.path == "source.batch_size"
    assert info.value.detail == yaml_detail
    assert "greater than or equal to 1" in yaml_detail and "got 0" in yaml_detail


@pytest.mark.parametrize(("call", "yaml_entry", "field"), [
    (lambda wp: wp.serialize("capnproto"), "- serialize: {format: capnproto}", "format"),
    (lambda wp: wp.compress("zstd", 42), "- compress: {codec: zstd, level: 42}", "level"),
    (lambda wp: wp.compress("zstdd"), "- compress: {codec: zstdd}", "codec"),
    (lambda wp: wp.decompress("auto", max_output_size="lots"), "- decompress: {max_output_size: lots}",
     "max_output_size"),
    (lambda wp: wp.deserialize("msgpack", typed=3), "- deserialize: {format: msgpack, typed: 3}", "typed"),
    (lambda wp: wp.pack(0), "- pack: {records: 0}", "records"),
    (lambda wp: wp.select_fields(), "- select: []", "fields"),
    (lambda wp: wp.encode("msgpack|zstd:99"), "- encode: msgpack|zstd:99", "chain"),
    (lambda wp: wp.subject("a b"), "- subject: a b", "template"),
    (lambda wp: wp.map_values("os:no_such_function"), "- map: {function: os:no_such_function}", None),
])
def test_operator_factories_raise_the_yaml_message(tmp_path: Path, call, yaml_entry: str, field: str | None) -> None:
    import wirepipe

    yaml_detail = _yaml_error(tmp_path, f"name: x\nsource: {{type: generate}}\noperators:\n  {yaml_entry}\n")
    with pytest.raises(ConfigError) as info:
        call(wirepipe)
    assert info.value.detail == yaml_detail
    kind = yaml_entry[2:].split(":")[0]
    assert info.value.path == (f"{kind}.{field}" if field else kind)


def _classes() -> Any:
    from wirepipe.operators import compress, decompress, deserialize, map, pack, route, select, serialize

    return {"Compress": compress.Compress, "Decompress": decompress.Decompress, "Deserialize": deserialize.Deserialize,
            "Map": map.Map, "Pack": pack.Pack, "Subject": route.Subject, "Select": select.Select,
            "Serialize": serialize.Serialize}


@pytest.mark.parametrize(("call", "yaml_entry", "path"), [
    (lambda c: c["Compress"]("gzip", 42), "- compress: {codec: gzip, level: 42}", "compress.level"),
    (lambda c: c["Select"](fields=123), "- select: {fields: 123}", "select.fields"),
    (lambda c: c["Select"]([]), "- select: []", "select.fields"),
    (lambda c: c["Serialize"]("capnproto"), "- serialize: {format: capnproto}", "serialize.format"),
    (lambda c: c["Serialize"]("protobuf", schema={"a_b": "int32", "aB": "int32"}),
     "- serialize: {format: protobuf, schema: {a_b: int32, aB: int32}}", "serialize.schema.aB"),
    (lambda c: c["Serialize"]("json", extra_fields="drop"), "- serialize: {format: json, extra_fields: drop}",
     "serialize"),
    (lambda c: c["Deserialize"]("msgpack", typed=3), "- deserialize: {format: msgpack, typed: 3}", "deserialize.typed"),
    (lambda c: c["Decompress"]("auto", max_output_size="lots"), "- decompress: {max_output_size: lots}",
     "decompress.max_output_size"),
    (lambda c: c["Pack"](0), "- pack: {records: 0}", "pack.records"),
    (lambda c: c["Subject"]("a b"), "- subject: a b", "subject.template"),
    (lambda c: c["Map"]("os:no_such_function"), "- map: {function: os:no_such_function}", "map"),
])
def test_operator_classes_raise_the_yaml_message(tmp_path: Path, call, yaml_entry: str, path: str) -> None:
    """An operator built from its class validates through its params model, as a connector does: the
    ``ConfigError`` the YAML entry gets, at the entry's field, not a ``ValueError`` or ``TypeError``."""
    yaml_detail = _yaml_error(tmp_path, f"name: x\nsource: {{type: generate}}\noperators:\n  {yaml_entry}\n")
    with pytest.raises(ConfigError) as info:
        call(_classes())
    assert (info.value.path, info.value.detail) == (path, yaml_detail)


@pytest.mark.parametrize(("call", "yaml_part"), [
    (lambda wp: wp.jsonl_source("in.jsonl", batch_size=-1), "source: {type: jsonl, path: in.jsonl, batch_size: -1}"),
    (lambda wp: wp.parquet_sink("out.parquet", compression="zip"),
     "source: {type: generate}\nsink: {type: parquet, path: out.parquet, compression: zip}"),
    (lambda wp: wp.nats_source("points", batch_size=0), "source: {type: nats, subject: points, batch_size: 0}"),
    (lambda wp: wp.jetstream_source(ordered=True, durable="d"),
     "source: {type: jetstream, ordered: true, durable: d}"),
    (lambda wp: wp.jetstream_sink("points", window=0), "source: {type: generate}\nsink: {type: jetstream, subject: points, window: 0}"),
    (lambda wp: wp.capture_source("cap/", speed=0), "source: {type: capture, path: cap/, speed: 0}"),
    (lambda wp: wp.capture_sink("cap/", max_file_size="huge"),
     "source: {type: generate}\nsink: {type: capture, dir: cap/, max_file_size: huge}"),
    (lambda wp: wp.generate_source("nope"), "source: {type: generate, dataset: nope}"),
])
def test_connector_factories_raise_the_yaml_message(tmp_path: Path, call, yaml_part: str) -> None:
    import wirepipe

    yaml_detail = _yaml_error(tmp_path, f"name: x\n{yaml_part}\n")
    with pytest.raises(ConfigError) as info:
        call(wirepipe)
    assert info.value.detail == yaml_detail


def test_factories_build_what_yaml_builds(tmp_path: Path) -> None:
    """Same fields in, same runtime objects out: the factory and the YAML entry share the model."""
    import wirepipe
    from wirepipe.pipelines.config import load_pipeline

    (tmp_path / "p.yaml").write_text(textwrap.dedent("""\
        name: same
        source: {type: generate, dataset: feed, count: 7, batch_size: 3, seed: 5}
        operators:
          - select: [id]
          - serialize: {format: msgpack}
          - compress: {codec: br, level: best}
        sink: {type: jsonl, path: out.jsonl, envelope: true}
        """), encoding="utf-8")
    from_yaml = load_pipeline(tmp_path / "p.yaml")
    ops = [wirepipe.select_fields("id"), wirepipe.serialize("msgpack"), wirepipe.compress("br", "best")]
    assert [repr(op) for op in ops] == [repr(op) for op in from_yaml.operators]
    source = wirepipe.generate_source("feed", count=7, batch_size=3, seed=5)
    assert source.params == from_yaml.source.params
    sink = wirepipe.jsonl_sink(tmp_path / "out.jsonl", envelope=True)  # a pathlib.Path is accepted
    assert (sink.config.envelope, Path(sink.config.path).name) == (True, "out.jsonl")


def test_python_only_values_pass_where_yaml_has_strings() -> None:
    """A callable for ``function`` and bytes for ``dictionary``: YAML cannot spell them, Python may."""
    import wirepipe
    from wirepipe.core.batch import Batch

    dictionary = b"sensor reading from the plant floor " * 40
    packed = wirepipe.compress("zstd", 3, dictionary=dictionary)(Batch([b"sensor reading from the plant, again"]))
    assert wirepipe.decompress("zstd", dictionary=dictionary)(packed).values == [b"sensor reading from the plant, again"]
    assert wirepipe.map_values(len)(Batch([b"abc"])).values == [3]
    with pytest.raises(ConfigError, match=r"map\.function: Input should be a valid string \(got 5\)"):
        wirepipe.map_values(5)  # type: ignore[arg-type]


def test_a_python_pipeline_from_the_factories_runs(tmp_path: Path) -> None:
    import wirepipe

    out = tmp_path / "out.jsonl"
    records = wirepipe.generate_source("point", count=25, batch_size=10) | wirepipe.encode("msgpack|zstd:3")
    stats = (records | wirepipe.decode("msgpack|zstd") | wirepipe.jsonl_sink(out)).run()
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 25
    assert stats is not None
