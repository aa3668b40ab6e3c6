"""Config: every broken file gives file, field path, bad value and what is allowed; exit 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli import invoke, wirepipe
from wirepipe.core.errors import ConfigError
from wirepipe.pipelines.config import apply_override, interpolate, load_pipeline, read_config

HERE = Path(__file__).parent
BAD = HERE / "bad_configs"

CASES = {
    "unknown_operator.yaml": ("operators[1]", "unknown operator 'compresss'", "allowed serialize, deserialize, compress"),
    "bad_level.yaml": ("operators[1].compress.level", "42", "fastest (1), default (3), best (19) or an integer"),
    "missing_field.yaml": ("sink.path", "required field is missing", ""),
    "wrong_type.yaml": ("source.count", "'lots'", "valid integer"),
    "undefined_env.yaml": ("sink.path", "WIREPIPE_TEST_UNDEFINED_DIR is not set", "${WIREPIPE_TEST_UNDEFINED_DIR:-value}"),
    "bad_schema_type.yaml": ("operators[0].serialize.schema.y.z", "'int33'", "allowed int32, int64"),
    "unknown_format.yaml": ("operators[0].serialize.format", "'capnproto'", "allowed json, orjson, msgpack"),
    "unknown_field.yaml": ("source", "unknown field 'batchsize'", "allowed batch_size, count"),
    "unknown_source_type.yaml": ("source", "unknown type 'kafka'", "allowed generate, jsonl, csv, parquet"),
    "two_keys_operator.yaml": ("operators[0]", "one-key entry", "serialize, compress"),
    "not_yaml.yaml": ("", "not valid YAML", "line "),
    "pickle_not_allowed.yaml": ("operators[0].deserialize", "allow_pickle: true", ""),
    "single_parquet_behind_jetstream.yaml": ("sink.path", "'results/points.parquet'",
                                             "path: 'results/points/part-{part}.parquet'"),
    "bincode_without_schema.yaml": ("operators[0].serialize.schema", "bincode needs a typed schema",
                                    "a dataset name, a schema file"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_broken_config_error_names_file_path_value_and_allowed(name: str) -> None:
    path_part, bad_value, allowed = CASES[name]
    with pytest.raises(ConfigError) as info:
        load_pipeline(BAD / name, env={})
    message = str(info.value)
    assert str(BAD / name) in message
    assert f": {path_part}:" in message if path_part else True
    assert bad_value in message
    assert allowed in message


@pytest.mark.parametrize("name", ["unknown_operator.yaml", "bad_level.yaml", "missing_field.yaml", "wrong_type.yaml",
                                  "undefined_env.yaml", "single_parquet_behind_jetstream.yaml"])
def test_cli_prints_one_clear_error_and_exits_2(name: str) -> None:
    result = invoke("run", BAD / name, env={"WIREPIPE_TEST_UNDEFINED_DIR": None})  # refused before it starts
    assert result.returncode == 2 and isinstance(result.exception, SystemExit)  # an exit, not a crash
    assert result.stderr.startswith("error: ")
    assert str(BAD / name) in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_validate_reports_every_bad_file_and_exits_2() -> None:
    result = invoke("validate", str(BAD / "bad_level.yaml"), str(HERE.parent / "configs" / "quickstart.yaml"))
    assert result.returncode == 2 and isinstance(result.exception, SystemExit)
    assert "ok: " in result.stdout and "quickstart.yaml" in result.stdout
    assert "bad_level.yaml: operators[1].compress.level" in result.stderr


def test_validate_says_a_pipelines_error_once_when_its_test_file_is_checked_too(tmp_path: Path) -> None:
    """The test file is refused for its pipeline's fault: one line for both (before: the same line twice)."""
    configs = HERE.parent / "configs"
    pipeline = tmp_path / "quickstart.yaml"
    pipeline.write_text((configs / "quickstart.yaml").read_text().replace("level: fastest", "level: 99"))
    (tmp_path / "quickstart.test.yaml").write_text((configs / "quickstart.test.yaml").read_text())
    result = invoke("validate", pipeline, tmp_path / "quickstart.test.yaml")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [f"error: {pipeline}: operators[1].compress.level: 99 is out of range for "
                                          "zstd: use fastest (1), default (3), best (19) or an integer -131072..22"]


def test_interpolation_defaults_and_escapes() -> None:
    data = {"a": "${X}", "b": "${Y:-fallback}", "c": ["pre-${X}-post"], "d": "$${X}", "e": 3}
    assert interpolate(data, {"X": "1"}) == {"a": "1", "b": "fallback", "c": ["pre-1-post"], "d": "${X}", "e": 3}
    with pytest.raises(ConfigError) as info:
        interpolate({"sink": {"url": "${NOPE}"}}, {})
    assert info.value.path == "sink.url"


def test_overrides_set_nested_fields_and_list_items() -> None:
    data = {"source": {"count": 1}, "operators": [{"compress": {"codec": "zstd"}}]}
    apply_override(data, "source.count=250")
    apply_override(data, "operators[0].compress.level=best")
    apply_override(data, "sink.type=null")
    assert data == {"source": {"count": 250}, "operators": [{"compress": {"codec": "zstd", "level": "best"}}],
                    "sink": {"type": None}}
    with pytest.raises(ConfigError, match="does not exist"):
        apply_override(data, "operators[3].compress.level=1")


def test_override_is_validated_like_the_file(tmp_path: Path) -> None:
    cfg = HERE.parent / "configs" / "quickstart.yaml"
    with pytest.raises(ConfigError, match=r"operators\[1\]\.compress\.level"):
        load_pipeline(cfg, ["operators[1].compress.level=23"], env={})
    raw = read_config(cfg, ["source.count=7"], env={"RESULTS": str(tmp_path)})
    assert raw["source"]["count"] == 7
    assert raw["metrics"]["path"] == f"{tmp_path}/quickstart.parquet"


def test_pipeline_without_sink_runs_into_the_null_sink(tmp_path: Path) -> None:
    from wirepipe.connectors.null import NullSink

    path = tmp_path / "no_sink.yaml"
    path.write_text("name: no-sink\nsource: {type: generate, dataset: point, count: 10}\n")
    pipeline = load_pipeline(path)
    assert isinstance(pipeline.sink, NullSink)
    assert pipeline.run().records_out == 10


# --- the Python API refuses what YAML refuses, with the same message ------------------------------------


def _yaml_error(data: dict) -> ConfigError:
    from wirepipe.pipelines.config import build_pipeline, validate_config

    with pytest.raises(ConfigError) as info:
        build_pipeline(validate_config(data, file="p.yaml"), file="p.yaml")
    return info.value


def test_a_bare_null_source_type_says_yaml_read_it_as_no_value(tmp_path: Path) -> None:
    """`source: {type: null}` is YAML's null (no source is named null): the error said "unknown type 'None'"."""
    (tmp_path / "p.yaml").write_text("name: p\nsource: {type: null}\n")
    res = invoke("validate", str(tmp_path / "p.yaml"))
    assert res.returncode == 2 and (res.exception is None or isinstance(res.exception, SystemExit))
    assert "source: unknown type None (YAML reads a bare null as no value): allowed generate, " in res.stderr


def test_an_unknown_name_in_python_is_the_yaml_error() -> None:
    import wirepipe as wp

    base = {"name": "p", "source": {"type": "generate"}}
    cases = [
        (lambda: wp.source("bogus"), {**base, "source": {"type": "bogus"}}),
        (lambda: wp.sink("bogus", path="x"), {**base, "sink": {"type": "bogus"}}),
        (lambda: wp.operator_entry("bogus", level=1), {**base, "operators": [{"bogus": {}}]}),
    ]
    for python, data in cases:
        with pytest.raises(ConfigError) as info:
            python()
        yaml_error = _yaml_error(data)
        assert info.value.detail == yaml_error.detail and "allowed" in info.value.detail
        assert not isinstance(info.value, KeyError)
    assert str(_yaml_error(cases[0][1])) == f"p.yaml: {_raises(cases[0][0])}"  # source: unknown type 'bogus': ...
    assert _raises(lambda: wp.sink(["not", "hashable"])).startswith("sink: unknown type ['not', 'hashable']")


def _raises(call: object) -> str:
    with pytest.raises(ConfigError) as info:
        call()  # type: ignore[operator]
    return str(info.value)


def test_a_whole_pipeline_rule_holds_for_a_pipeline_built_in_python(tmp_path: Path) -> None:
    """One Parquet file behind a JetStream durable: refused in YAML (with the file) and in Python (at ``|``, at
    construction, and at the start of a run whose sink was swapped in afterwards), with the same message."""
    import wirepipe as wp

    yaml_error = _yaml_error({"name": "p", "source": {"type": "jetstream", "stream": "S", "durable": "d"},
                              "sink": {"type": "parquet", "path": "out.parquet"}})
    assert str(yaml_error).startswith("p.yaml: sink.path: 'out.parquet' is one Parquet file, readable only once")
    source = wp.jetstream_source("S", durable="d")
    for build in (lambda: source | wp.parquet_sink("out.parquet"),
                  lambda: wp.Pipeline(source, [], wp.parquet_sink("out.parquet"))):
        with pytest.raises(ConfigError) as info:
            build()
        assert (info.value.path, info.value.detail) == (yaml_error.path, yaml_error.detail)
    with pytest.raises(ConfigError, match=r"^dead_letter\.path: 'dead\.parquet' is one Parquet file"):
        wp.Pipeline(source, [], wp.null_sink(), dead_letter=wp.parquet_sink("dead.parquet"))
    pipe = wp.Pipeline(source, [], wp.null_sink())
    pipe.sink = wp.parquet_sink(tmp_path / "late.parquet")
    with pytest.raises(ConfigError, match="is one Parquet file"):
        pipe.run()
    assert not (tmp_path / "late.parquet").exists()  # refused before anything opened
    # what stays allowed: part files behind the durable, one file behind an ordered consumer or a file source
    wp.jetstream_source("S", durable="d") | wp.parquet_sink("out/part-{part}.parquet")
    wp.jetstream_source("S", ordered=True) | wp.parquet_sink("out.parquet")
    wp.generate_source("point", count=1) | wp.parquet_sink("out.parquet")


# --- bounded inputs: a config or test file is read within MAX_CONFIG_BYTES and MAX_CONFIG_VALUES --------------


def _bomb(levels: int = 9) -> str:
    """The billion laughs: each anchor a list of nine of the one before (9**9 values from 11 lines)."""
    lines = ["name: bomb", 'a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join([*lines, "source: {type: generate, dataset: point, count: 1}", ""])


def test_dev_zero_and_an_alias_bomb_are_read_within_the_bounds(tmp_path: Path) -> None:
    from wirepipe.pipelines.config import read_yaml_mapping

    (tmp_path / "bomb.yaml").write_text(_bomb())
    with pytest.raises(ConfigError, match=r"bomb.yaml: the YAML holds more than 500,000 values"):
        read_yaml_mapping(tmp_path / "bomb.yaml", "a pipeline")
    with pytest.raises(ConfigError, match=r"/dev/zero: the file is larger than 2 MiB"):
        read_yaml_mapping("/dev/zero", "a pipeline")


@pytest.mark.slow
def test_unbounded_inputs_are_refused_with_the_bound(tmp_path: Path) -> None:
    """Each case: exit 2, one line naming the file and the bound, no traceback, no MemoryError."""
    from wirepipe.pipelines.config import MAX_CONFIG_VALUES

    (tmp_path / "bomb.yaml").write_text(_bomb())
    (tmp_path / "zero.test.yaml").write_text("pipeline: /dev/zero\ntests: [{name: a, input: {records: [1]}}]\n")
    (tmp_path / "big.yaml").write_text("name: big\ndescription: " + "x" * (2 * 1024 * 1024) + "\n")
    (tmp_path / "bomb.test.yaml").write_text(_bomb().replace("name: bomb", "tests: [{name: a, input: {records: "
                                                                           "*a9}}]"))
    many = f"name: many\ndescription: [{', '.join(['1'] * (MAX_CONFIG_VALUES + 1))}]\n"
    (tmp_path / "many.yaml").write_text(many)
    values = f"the YAML holds more than {MAX_CONFIG_VALUES:,} values"
    size = "the file is larger than 2 MiB, the most a config or test file may be"
    for args, message in ((["validate", "/dev/zero"], f"/dev/zero: {size}"),
                          (["validate", tmp_path / "big.yaml"], f"big.yaml: {size}"),
                          (["validate", tmp_path / "bomb.yaml"], f"bomb.yaml: {values}"),
                          (["validate", tmp_path / "many.yaml"], f"many.yaml: {values}"),
                          (["run", tmp_path / "bomb.yaml"], f"bomb.yaml: {values}"),
                          (["test", tmp_path / "zero.test.yaml"], f"/dev/zero: {size}"),
                          (["test", tmp_path / "bomb.test.yaml"], f"bomb.test.yaml: {values}")):
        done = wirepipe(*args)
        assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr, done.stderr
        assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1, (args, done.stderr)


def test_a_set_value_with_aliases_is_bounded_too() -> None:
    data: dict[str, object] = {"name": "x"}
    flow = "[" + ", ".join(f"&a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" if i else "&a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"
                           for i in range(8)) + "]"
    with pytest.raises(ConfigError, match=r"--set description=\.\.\.: the value: the YAML holds more than 500,000"):
        apply_override(data, f"description={flow}")
    assert data == {"name": "x"}


# --- a misspelled name: "did you mean `batch_size`?", in YAML and in --set ---------------------------------------

TYPOS = [
    ("source.batchsize=10", "source: unknown field 'batchsize': allowed batch_size, count, dataset, duration, rate, "
                            "seed, type; did you mean `batch_size`?"),
    ("source.type=generat", "source: unknown type 'generat': allowed generate, jsonl, csv, parquet, nats, jetstream, capture; "
                            "did you mean `generate`?"),
    ("source.dataset=pont", "source.dataset: unknown dataset 'pont': allowed point, "),
    ("operators[0]={serialise: {format: json}}", "operators[0]: unknown operator 'serialise': allowed serialize, "),
    ("operators[0].serialize.format=msgpak", "operators[0].serialize.format: unknown format 'msgpak': allowed json, "),
    ("operators[1].compress.codec=Zstd", "operators[1].compress.codec: unknown codec 'Zstd': allowed zstd, "),
    ("operators[1].compress.levle=3", "operators[1].compress: unknown field 'levle': allowed codec, dictionary, digest, level, "
                                      "nats; did you mean `level`?"),
    ("operators[1]={encode: msgpak|zstd}", "operators[1].encode.chain: unknown step 'msgpak' in chain 'msgpak|zstd'"),
    ("sink.subjcet=x", "sink: unknown field 'subjcet': allowed "),
    ("shutdown_timout=3s", "unknown field 'shutdown_timout': allowed allow_pickle, "),
]
SUGGESTED = ["batch_size", "generate", "point", "serialize", "msgpack", "zstd", "level", "msgpack", "subject",
             "shutdown_timeout"]


@pytest.mark.parametrize(("assignment", "message", "suggested"), [(*t, s) for t, s in zip(TYPOS, SUGGESTED, strict=True)],
                         ids=[t[0] for t in TYPOS])
def test_a_misspelled_name_gets_did_you_mean_in_set_and_in_yaml(assignment: str, message: str, suggested: str,
                                                                 tmp_path: Path) -> None:
    import yaml

    from wirepipe.pipelines.config import validate_config

    base = {"name": "t", "source": {"type": "generate", "dataset": "point", "count": 1},
            "operators": [{"serialize": {"format": "json"}}, {"compress": {"codec": "zstd"}}],
            "sink": {"type": "nats", "url": "nats://127.0.0.1:1", "subject": "out"}}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(base))
    with pytest.raises(ConfigError) as by_set:
        validate_config(read_config(tmp_path / "p.yaml", [assignment]), file="p.yaml")
    data = read_config(tmp_path / "p.yaml", [assignment])  # the same change written in the file
    (tmp_path / "q.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as by_yaml:
        load_pipeline(tmp_path / "q.yaml", env={})
    for text in (str(by_set.value), str(by_yaml.value)):
        assert message in text and f"did you mean `{suggested}`?" in text, text


def test_the_null_sink_written_as_yamls_null_is_told_to_quote_it(tmp_path: Path) -> None:
    """``sink: {type: null}`` reads as no type at all (YAML's null), in a file and in ``--set sink.type=null``: the
    message says to quote it, where it said ``unknown type 'None': allowed null, ...``."""
    (tmp_path / "p.yaml").write_text("name: t\nsource: {type: generate, dataset: point, count: 1}\nsink: {type: null}\n")
    quote = "sink: type: null is YAML's empty value, not the null sink: quote it, type: \"null\" (in --set, sink.type="
    with pytest.raises(ConfigError) as in_yaml:
        load_pipeline(tmp_path / "p.yaml", env={})
    assert quote in str(in_yaml.value) and "'None'" not in str(in_yaml.value), str(in_yaml.value)
    with pytest.raises(ConfigError) as by_set:
        load_pipeline(tmp_path / "p.yaml", overrides=["sink.type=null"], env={})
    assert quote in str(by_set.value)
    assert load_pipeline(tmp_path / "p.yaml", overrides=['sink.type="null"'], env={}).sink.name == "null"


def test_no_suggestion_for_a_name_close_to_nothing() -> None:
    from wirepipe.pipelines.config import validate_config

    with pytest.raises(ConfigError) as info:
        validate_config({"name": "t", "source": {"type": "kafka"}})
    assert "unknown type 'kafka'" in str(info.value) and "did you mean" not in str(info.value)
