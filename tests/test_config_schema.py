"""The JSON Schema of pipeline and test files (``wirepipe schema config``): what editors check while one types.

It is generated from the models that validate the YAML, so the shipped copy must be what they generate now;
every YAML file the repository ships names it in its first line; it passes every shipped config, flags the
structural faults of ``tests/bad_configs/`` (an unknown field, a wrong type, an unknown type or operator)
and agrees with the models on the values they read beyond plain types (durations, sizes, ``${VAR}``,
the shorthand operator entries).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli import ROOT, invoke
from wirepipe.core.errors import ConfigError
from wirepipe.pipelines.config import read_config, validate_config
from wirepipe.pipelines.config_schema import SHIPPED

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the dev extra: pip install -e '.[dev]'")

KINDS = ("pipeline", "test")
MODELINE = re.compile(r"# yaml-language-server: \$schema=(\S+)\n")

# YAML files under configs/ and examples/ that are neither a pipeline nor a test file, so no wirepipe schema
# describes them; their test checks them in its own way.
NOT_CONFIGS = {
    "examples/jetstream-archive/k8s.yaml": "a Kubernetes manifest (its ConfigMap's pipeline is checked by "
                                           "tests/test_examples.py against this schema)",
    "examples/rust-peer/reading.schema.yaml": "a typed schema (parse_schema checks it in tests/test_examples.py)",
}

# tests/bad_configs/: what the schema can see (the file's shape) and what only `wirepipe validate` can (the
# whole pipeline, the installed libraries, the environment). Structural: the field path the schema flags.
STRUCTURAL = {
    "missing_field.yaml": ["sink"],  # a jsonl sink without its path
    "two_keys_operator.yaml": ["operators", 0],
    "unknown_field.yaml": ["source"],  # batchsize for batch_size
    "unknown_operator.yaml": ["operators", 1],  # compresss
    "unknown_source_type.yaml": ["source"],  # kafka
    "wrong_type.yaml": ["source"],  # count: lots
}
SEMANTIC = {
    "bad_level.yaml": "a level out of the codec's range: each codec has its own",
    "bad_schema_type.yaml": "a typed schema's field type (int33): the schema is data the format's library reads",
    "bincode_without_schema.yaml": "a format that needs a typed schema: a rule across two fields",
    "pickle_not_allowed.yaml": "pickle without allow_pickle: a rule across the pipeline",
    "single_parquet_behind_jetstream.yaml": "one Parquet file behind an acknowledged source: a rule across source and sink",
    "undefined_env.yaml": "an environment variable that is not set: known when the file is read",
    "unknown_format.yaml": "a format name: formats come from a registry plugins extend, checked when built",
}
NOT_YAML = {"not_yaml.yaml"}


def _shipped(kind: str) -> Path:
    return SHIPPED / f"{kind}.schema.json"


def _validator(kind: str) -> Any:
    schema = json.loads(_shipped(kind).read_text(encoding="utf-8"))
    validator = jsonschema.validators.validator_for(schema)  # by its $schema, as an editor picks it
    validator.check_schema(schema)
    return validator(schema)


def _errors(data: Any, kind: str = "pipeline") -> list[Any]:
    return list(_validator(kind).iter_errors(data))


def _yaml_files() -> list[Path]:
    return sorted(p for folder in ("configs", "examples") for p in (ROOT / folder).rglob("*.yaml")
                  if ".venv" not in p.parts)


def _kind(data: Any) -> str:
    return "test" if isinstance(data, dict) and "tests" in data and "source" not in data else "pipeline"


@pytest.mark.parametrize("kind", KINDS)
def test_the_shipped_schema_is_what_the_models_generate(kind: str) -> None:
    result = invoke("schema", "config", "--kind", kind)
    assert result.returncode == 0, result.output
    assert result.stdout == _shipped(kind).read_text(encoding="utf-8"), (
        f"{_shipped(kind)} is stale: wirepipe schema config --kind {kind} --out {_shipped(kind).relative_to(ROOT)}")


@pytest.mark.parametrize("kind", KINDS)
def test_the_schema_is_draft_7_as_editors_validate_it(kind: str) -> None:
    """yaml-language-server (VS Code's YAML support) validates draft 7 fully and later drafts partly: the schema
    says draft 7 and keeps to it. Draft 7 ignores keywords beside a `$ref`, so there must be none."""
    schema = json.loads(_shipped(kind).read_text(encoding="utf-8"))
    assert jsonschema.validators.validator_for(schema) is jsonschema.Draft7Validator
    beside_refs: list[Any] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "$ref" in node and set(node) != {"$ref"}:
                beside_refs.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    assert beside_refs == []


def test_schema_config_writes_a_file_and_refuses_an_unknown_kind(tmp_path: Path) -> None:
    out = tmp_path / "editor" / "pipeline.schema.json"
    result = invoke("schema", "config", "--out", str(out))
    assert result.returncode == 0 and result.stdout == f"wrote {out}\n", result.output
    assert out.read_text(encoding="utf-8") == _shipped("pipeline").read_text(encoding="utf-8")
    refused = invoke("schema", "config", "--kind", "stream")
    assert refused.returncode == 2 and "--kind 'stream': allowed pipeline, test" in refused.stderr


def test_every_shipped_yaml_file_names_its_schema_in_its_first_line() -> None:
    files = _yaml_files()
    assert len(files) > 20, files  # configs/ and examples/ both found
    unnamed = set()
    for path in files:
        where = path.relative_to(ROOT).as_posix()
        first = path.read_text(encoding="utf-8").partition("\n")[0] + "\n"
        found = MODELINE.fullmatch(first)
        if found is None:
            unnamed.add(where)
            continue
        kind = _kind(yaml.safe_load(path.read_text(encoding="utf-8")))
        assert (path.parent / found.group(1)).resolve() == _shipped(kind), (where, found.group(1))
    assert unnamed == set(NOT_CONFIGS)


@pytest.mark.parametrize("path", [p for p in _yaml_files() if p.relative_to(ROOT).as_posix() not in NOT_CONFIGS],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_shipped_config_passes_its_schema(path: Path) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    errors = _errors(data, _kind(data))
    assert not errors, [(list(e.absolute_path), e.message[:200]) for e in errors]


def test_every_bad_config_is_classified() -> None:
    names = {p.name for p in (ROOT / "tests" / "bad_configs").glob("*.yaml")}
    assert names == set(STRUCTURAL) | set(SEMANTIC) | NOT_YAML


@pytest.mark.parametrize("name", sorted(STRUCTURAL))
def test_a_structural_fault_fails_the_schema_at_its_field(name: str) -> None:
    data = yaml.safe_load((ROOT / "tests" / "bad_configs" / name).read_text(encoding="utf-8"))
    errors = _errors(data)
    assert [list(e.absolute_path) for e in errors] == [STRUCTURAL[name]], [e.message for e in errors]
    with pytest.raises(ConfigError):  # and the models refuse it too
        validate_config(data)


@pytest.mark.parametrize("name", sorted(SEMANTIC))
def test_a_semantic_fault_passes_the_schema_and_is_refused_by_validate(name: str) -> None:
    path = ROOT / "tests" / "bad_configs" / name
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert _errors(data) == []  # the schema cannot see it: SEMANTIC[name] says why
    result = invoke("validate", str(path), env={"WIREPIPE_TEST_UNDEFINED_DIR": None})
    assert result.returncode == 2 and name in result.stderr, result.output


TYPOS = [
    ("source", {"type": "generate", "dataset": "point", "count": 10, "batchsize": 10}),
    ("sink", {"type": "nats", "subjcet": "points"}),
    ("operators", [{"compress": {"codec": "zstd", "levle": 3}}]),
    ("metrics", {"path": "m.parquet", "flush_intervall": "5s"}),
    ("shutdown_timout", "30s"),
]


@pytest.mark.parametrize(("field", "value"), TYPOS, ids=[t[0] for t in TYPOS])
def test_a_typo_is_flagged_as_the_models_flag_it(field: str, value: Any) -> None:
    good = {"name": "typo", "source": {"type": "generate", "dataset": "point", "count": 10}}
    assert _errors(good) == []
    data = {**good, field: value}
    assert _errors(data), data
    with pytest.raises(ConfigError, match="unknown field"):
        validate_config(data)


# Values the models read beyond plain JSON types, each given to the schema and to the models: they agree.
def _decompress(size: Any) -> dict[str, Any]:
    return {"operators": [{"decompress": {"codec": "zstd", "max_output_size": size}}]}


def _generate(count: Any) -> dict[str, Any]:
    return {"source": {"type": "generate", "dataset": "point", "count": count}}


AGREE: list[dict[str, Any]] = [
    *({"shutdown_timeout": d} for d in ("30s", "500ms", 1.5, "2 h", "5 minutes", "soon", True, -1)),
    {"metrics": {"path": "m.parquet", "flush_interval": "250ms"}},
    *(_decompress(s) for s in ("64MiB", "1MB", "512k", 4096, "64 parsecs", -5)),
    *(_generate(c) for c in ("${COUNT:-100}", "many", -1)),
    {"queue_size": "${QUEUE:-4}"},
    {"allow_pickle": "${PICKLE:-false}"},
    {"sink": {"type": "nats", "subject": "out", "headers": "${HEADERS:-none}"}},
    {"sink": {"type": "nats", "subject": "out", "headers": "some"}},
    {"operators": [{"encode": "msgpack|zstd:3"}, {"decode": "msgpack|zstd:3"}]},
    {"operators": [{"serialize": {"format": "json"}}, {"select": ["x", "y"]}]},
    {"operators": [{"subject": "points.{x}"}]},
    {"operators": [{"encode": {"chain": "msgpack"}}, {"pack": {"records": 10}}, {"unpack": None}]},
    {"operators": [{"encode": 42}]},
]


@pytest.mark.parametrize("fragment", AGREE, ids=lambda f: json.dumps(f)[:60])
def test_the_schema_and_the_models_agree(fragment: dict[str, Any], tmp_path: Path) -> None:
    data = {"name": "agree", "source": {"type": "generate", "dataset": "point", "count": 10}, **fragment}
    schema_ok = not _errors(data)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    try:  # as `wirepipe validate` reads the file: variables from an environment that sets none
        validate_config(read_config(tmp_path / "p.yaml", env={}), file="p.yaml")
        models_ok = True
    except ConfigError:
        models_ok = False
    assert schema_ok == models_ok, (fragment, schema_ok, models_ok)


def test_where_the_schema_and_the_models_differ() -> None:
    """Two known differences: a quoted number the models convert is flagged (the module docstring says so); a
    variable the environment does not set passes the schema (only reading the file knows the environment)."""
    quoted = {"name": "differ", **_generate("100")}
    assert _errors(quoted) and validate_config(quoted).source.count == 100
    unset = {"name": "differ", **_generate("${COUNT}")}
    assert _errors(unset) == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_plugin_s_operator_source_and_sink_are_in_the_schema(tmp_path: Path) -> None:
    from tests.test_registry import _plugin_dir

    site = _plugin_dir(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "wirepipe.cli", "schema", "config"], env=env, capture_output=True,
                         text=True, timeout=100)
    assert out.returncode == 0, out.stderr
    schema = json.loads(out.stdout)
    validator = jsonschema.Draft202012Validator(schema)
    plugin = {"name": "plugin", "source": {"type": "words", "words": ["a"]},
              "operators": [{"shout": {"suffix": "?"}}], "sink": {"type": "tally", "path": "out.txt"}}
    assert list(validator.iter_errors(plugin)) == []
    typo = {**plugin, "operators": [{"shout": {"sufix": "?"}}]}
    assert [list(e.absolute_path) for e in validator.iter_errors(typo)] == [["operators", 0]]
    assert list(_validator("pipeline").iter_errors(plugin))  # the shipped schema holds the built-ins only
