"""The test file format, as pydantic models: a mistake names the file, the field path, the value and what
is allowed, as a pipeline's config errors do.

```yaml
pipeline: decode.yaml            # default: this file's name without .test (decode.test.yaml -> decode.yaml)
env: {STREAM: POINTS}            # ${VAR}s of the pipeline file (over the process environment)
set: ["operators[0].decompress.max_output_size=1MiB"]   # --set overrides for every case
resources:                       # stores standing in for the pipeline's (paths relative to this file)
  dictionaries: {DICTS: {type: folder, path: dicts}}
tests:
  - name: points published as msgpack + zstd come out decoded
    input: {records: [{x: 1, y: 2}], encode: msgpack|zstd}
    expect: {records: [{x: 1, y: 2}]}
```
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic.functional_validators import BeforeValidator

from ..core.errors import ConfigError
from ..core.fields import Condition, compile_pattern
from ..core.models import Strict, config_error, parse_field_path
from ..operators.encode import EncodeParams
from ..operators.schema_options import SchemaParam, with_message
from ..pipelines.resources import ResourcesConfig
from ..wire import subject_regex


def _overrides(value: Any) -> Any:
    """``set:`` as a list of ``PATH=VALUE`` strings; a mapping or a string gets one line saying what to write."""
    import yaml

    def flow(v: Any) -> str:
        return yaml.safe_dump(v, default_flow_style=True, sort_keys=False, width=1 << 16).removesuffix("...\n").strip()

    if isinstance(value, dict):
        shown = ", ".join(f'"{k}={flow(v)}"' for k, v in value.items())
    elif isinstance(value, str):
        shown = f'"{value}"'
    else:
        return value
    raise ValueError(f"`set:` is a list of PATH=VALUE overrides, as --set takes them: write set: [{shown}]")


Overrides = Annotated[list[str], BeforeValidator(_overrides)]


class SizeBounds(Strict):
    min: int | None = Field(default=None, ge=0)
    max: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _some(self) -> SizeBounds:
        if self.min is None and self.max is None:
            raise ValueError("give min, max or both (sizes in bytes for payloads, items for lists, characters for text)")
        return self


class ConditionSpec(Strict):
    """One check on every output (``each``) or on one (``outputs[i].where``): the value at ``field``
    (the whole record without it) or of the header ``header`` equals, matches, exists, is in a list, is
    within ``min``/``max``, or has a ``size`` within bounds (a payload's bytes). Several checks: all must hold."""

    field: str | None = None
    header: str | None = None
    equals: Any = None
    matches: str | None = None
    exists: bool | None = None
    in_: list[Any] | None = Field(default=None, alias="in")
    min: int | float | None = None
    max: int | float | None = None
    size: SizeBounds | None = None

    @field_validator("matches")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                compile_pattern(v)
            except ValueError as exc:
                raise ValueError(f"{v!r}: {exc}") from None
        return v

    @model_validator(mode="after")
    def _one_target_some_check(self) -> ConditionSpec:
        if self.field is not None and self.header is not None:
            raise ValueError("give `field` (in the record) or `header`, not both")
        checks = {"equals", "matches", "exists", "in_", "min", "max", "size"} & self.model_fields_set
        if not checks:
            raise ValueError("nothing to check: give equals, matches, exists, in, min, max or size")
        return self

    def conditions(self) -> list[Condition]:
        """The checks as ``fields.Condition``s, on a record, or on the headers when ``header`` is given."""
        path = (self.header,) if self.header is not None else tuple(parse_field_path(self.field or ""))
        out: list[Condition] = []
        given = self.model_fields_set
        if "equals" in given:
            out.append(Condition(path, "==", self.equals))
        if self.matches is not None:
            out.append(Condition(path, "matches", self.matches))
        if self.exists is not None:
            out.append(Condition(path, "exists" if self.exists else "not exists"))
        if self.in_ is not None:
            out.append(Condition(path, "in", self.in_))
        if self.min is not None:
            out.append(Condition(path, ">=", self.min))
        if self.max is not None:
            out.append(Condition(path, "<=", self.max))
        if self.size is not None:
            if self.size.min is not None:
                out.append(Condition(path, ">=", self.size.min, size=True))
            if self.size.max is not None:
                out.append(Condition(path, "<=", self.size.max, size=True))
        return out


class OutputSpec(Strict):
    """One output, by position: its ``value`` (exact), ``subject``, ``headers`` (exact), and conditions."""

    value: Any = None
    subject: str | None = None
    headers: dict[str, str] | None = None
    where: list[ConditionSpec] = Field(default_factory=list)


class RejectionSpec(Strict):
    """One rejected record, in order: the stage (``decompress``, ``deserialize``, ``map``...), the operator,
    a part of the reason (``error``: a substring), the input record's position (``seq``)."""

    stage: str | None = None
    operator: str | None = None
    error: str | None = None
    seq: int | None = None


class DecodeSpec(Strict):
    """Payload outputs decoded by their headers (Content-Encoding, Content-Type) before their values are
    compared; ``schema`` for the formats that carry none on the wire; the zstd dictionaries the pipeline's own
    ``compress`` and ``decompress`` use unless ``dictionary`` or ``dictionaries`` say others."""

    schema_: SchemaParam = Field(default=None, alias="schema")
    message: str | None = None
    dictionary: str | None = Field(default=None, description="a zstd dictionary file the outputs were compressed "
                                   "with (relative to the test file); default: the pipeline's compress's file")
    dictionaries: str | None = Field(default=None, description="nats://NAME: the dictionary store whose ids the "
                                     "frames carry (the test file's resource, or the pipeline's); default: the one "
                                     "the pipeline's compress or decompress names")

    @field_validator("dictionaries")
    @classmethod
    def _store(cls, v: str | None) -> str | None:
        from ..core.stores import parse_dictionary_ref

        if v is not None:
            parse_dictionary_ref(v, name=False)
        return v

    def spec(self) -> Any:
        return with_message(self.schema_, self.message)


class Expect(Strict):
    """What a case must produce. A case fails on any rejection it does not expect (``rejected`` or
    ``rejections`` say which are expected)."""

    count: int | None = Field(default=None, ge=0, description="outputs written")
    records: list[Any] | None = Field(default=None, description="the output values, exactly, in order")
    outputs: list[OutputSpec] | None = Field(default=None, description="the outputs, in order: value, subject, "
                                             "headers, conditions")
    each: list[ConditionSpec] = Field(default_factory=list, description="conditions every output meets")
    rejected: int | None = Field(default=None, ge=0, description="records rejected")
    rejections: list[RejectionSpec] | None = Field(default=None, description="the rejected records, in order")
    decode: bool | DecodeSpec = False

    @model_validator(mode="after")
    def _one_exact_form(self) -> Expect:
        if self.records is not None and self.outputs is not None:
            raise ValueError("give `records` (values only) or `outputs` (values, subjects, headers), not both")
        return self


_INLINE = ("records", "payloads")
_INPUTS = (*_INLINE, "file", "capture")


class InputSpec(Strict):
    """What replaces the pipeline's source: exactly one of ``records`` (values), ``payloads`` (bytes: text as
    UTF-8, or ``{$base64: ...}``), ``file`` (``.jsonl`` or ``.parquet``, read as the jsonl / parquet sources
    read them) or ``capture`` (files, folders or globs a ``wirepipe capture`` wrote). Paths are relative to
    the test file."""

    records: list[Any] | None = None
    payloads: list[str | dict[str, str]] | None = None
    file: str | None = None
    capture: str | list[str] | None = None
    subjects: str | list[str] | None = Field(default=None, description="records/payloads: one subject for all, or "
                                             "one per record")
    headers: dict[str, str] | list[dict[str, str] | None] | None = Field(
        default=None, description="records/payloads: one header map for all, or one per record")
    encode: EncodeParams | None = Field(default=None, description="records: encode them as a wirepipe publisher "
                                       "does (payload and Content-Type / Content-Encoding), e.g. msgpack|zstd")
    subject: str | None = Field(default=None, description="capture: only the records received on subjects this "
                                "pattern matches (orders.*.eu, orders.>)")
    since: dt.datetime | None = Field(default=None, description="capture: only the records received at or after "
                                      "this time (ISO 8601; no zone: UTC)")
    until: dt.datetime | None = Field(default=None, description="capture: only the records received before this time")
    count: int | None = Field(default=None, ge=0, description="the first N records (after the other filters)")
    batch_size: int = Field(default=1000, ge=1)

    @field_validator("encode", mode="before", json_schema_input_type=EncodeParams | str | None)  # editors: the string too
    @classmethod
    def _chain(cls, v: Any) -> Any:
        return {"chain": v} if isinstance(v, str) else v  # `encode: msgpack|zstd`, as the operator entry takes it

    @field_validator("payloads")
    @classmethod
    def _payloads(cls, v: list[str | dict[str, str]] | None) -> list[str | dict[str, str]] | None:
        for item in v or []:
            if isinstance(item, dict) and set(item) != {"$base64"}:
                raise ValueError(f"a payload is text (UTF-8) or {{$base64: ...}}, got {item!r}")
        return v

    @field_validator("subject")
    @classmethod
    def _pattern(cls, v: str | None) -> str | None:
        if v is not None:
            subject_regex(v)
        return v

    @field_validator("file")
    @classmethod
    def _file_kind(cls, v: str | None) -> str | None:
        if v is not None:
            from ..connectors.files import file_type
            from ..core.errors import ConfigError

            try:
                file_type(v)
            except ConfigError as exc:
                raise ValueError(f"{exc.detail} (a capture folder goes in `capture`)") from None
        return v

    @model_validator(mode="after")
    def _one_input(self) -> InputSpec:
        given = [k for k in _INPUTS if getattr(self, k) is not None]
        if len(given) != 1:
            got = f" (got {' and '.join(given)})" if given else ""
            raise ValueError(f"give one of records, payloads, file, capture{got}")
        kind = given[0]
        if kind != "capture":
            for name in ("subject", "since", "until"):
                if getattr(self, name) is not None:
                    raise ValueError(f"`{name}` slices a capture; inline records take `subjects` "
                                     "(one subject for all, or one per record)" if name == "subject"
                                     else f"`{name}` slices a capture (by the time each record was received)")
        if kind not in _INLINE:
            for name in ("subjects", "headers"):
                if getattr(self, name) is not None:
                    raise ValueError(f"`{name}` is for inline records and payloads; a {kind} has its own")
        if self.encode is not None and kind != "records":
            raise ValueError("`encode` encodes inline `records`")
        n = len(getattr(self, kind))  if kind in _INLINE else None
        for name in ("subjects", "headers"):
            column = getattr(self, name)
            if n is not None and isinstance(column, list) and len(column) != n:
                raise ValueError(f"`{name}`: one for all records, or one per record ({n}), got {len(column)}")
        return self


RESOURCES = ("stores that stand in for the pipeline's of the same name (a folder of .zdict files for nats://DICTS, "
             "a folder registry for registry): a test runs without a server; paths relative to the test file")


class Case(Strict):
    name: str = Field(min_length=1)
    input: InputSpec
    expect: Expect | None = Field(default=None, description="missing: record it with wirepipe test --update")
    set_: Overrides = Field(default_factory=list, alias="set", description="--set overrides for this case")
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig, description=f"this case's {RESOURCES}")


class TestFile(Strict):
    __test__ = False  # not a pytest class

    pipeline: str | None = Field(default=None, description="the pipeline file, relative to this one")
    env: dict[str, str] = Field(default_factory=dict)
    set_: Overrides = Field(default_factory=list, alias="set", description="--set overrides for every case: "
                            'PATH=VALUE strings, ["sink.subject=out"]')
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig, description=RESOURCES)
    tests: list[Case] = Field(min_length=1)


def load_test_file(path: Path) -> TestFile:
    """Read and validate a test file; ``ConfigError`` naming the file, the field path and the value."""
    from ..pipelines.config import read_yaml_mapping

    file = str(path)
    data = read_yaml_mapping(path, "a test file is a YAML mapping with `tests:` (and optionally pipeline, env, set)")
    try:
        spec = TestFile.model_validate(data)
    except ValidationError as exc:
        raise config_error(exc, file) from None
    seen: set[str] = set()
    for i, case in enumerate(spec.tests):
        if case.name in seen:
            raise ConfigError(f"{case.name!r} names an earlier case too: a case's name is its id (in reports, "
                              "in JUnit)", file=file, path=f"tests[{i}].name")
        seen.add(case.name)
    return spec
