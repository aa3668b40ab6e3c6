"""The JSON Schema of a pipeline file, for editors: generated from the models that validate the YAML.

``wirepipe schema config`` prints it; a copy ships in the package (``wirepipe/schemas/pipeline.schema.json``)
for the ``# yaml-language-server: $schema=...`` line at the top of a pipeline file, so an editor completes
field names and flags a typo, a wrong type or an unknown ``type`` while one types. One source of truth:
the schema is ``pipeline_model()``'s (every registered operator, source and sink, plugins included), with
what the loader accepts beyond the models' plain types written in:

- a duration (``30s``, ``500ms``) or a size (``64MiB``) where the models parse one, by the patterns of
  ``core/units.py``;
- ``${VAR}`` / ``${VAR:-default}`` in a number, a boolean or a field of fixed choices: the loader replaces it
  from the environment before validation (a connector's ``type`` stays literal: an editor picks the
  connector's fields by it).

The schema checks structure (field names, types, allowed choices); what needs the whole pipeline or the
installed libraries (a format that needs a schema, a codec's level range, a missing environment variable)
is ``wirepipe validate``'s. It is stricter in one place: a number written as a quoted string (``count: "100"``),
which the models convert, is flagged; write the number.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from ..core.models import Duration, Size
from ..core.units import _DURATION, _SIZE

# the copies shipped in the package: pipeline.schema.json, test.schema.json (wirepipe test files)
SHIPPED = Path(__file__).resolve().parents[1] / "schemas"
# Draft 7: what editors' YAML support (yaml-language-server, VS Code) validates fully; the schema uses only its
# keywords, and `$defs` is reached by JSON pointer (tests/test_config_schema.py checks both)
DIALECT = "http://json-schema.org/draft-07/schema#"
# A ${VAR} string: written out where it is allowed while pydantic generates (its generator resolves every $ref
# it meets itself), then referred to as one definition
VARIABLE_REF = {"$ref": "#/$defs/EnvironmentVariable"}
VARIABLE = {"type": "string", "pattern": r"\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}",
            "description": "${VAR} or ${VAR:-default}: replaced from the environment before validation"}

_PARSERS = {get_args(Duration)[1].func: ("a duration: seconds, or e.g. 30s, 500ms, 5m, 2h", _DURATION.pattern),
            get_args(Size)[1].func: ("a size: bytes, or e.g. 64MiB, 1MB, 512KiB", _SIZE.pattern)}


class _ConfigJsonSchema(GenerateJsonSchema):
    """pydantic's JSON Schema generator, taught the units and the ``${VAR}`` strings the loader reads."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False  # "Batch Size" over batch_size says nothing the name does not

    def function_before_schema(self, schema: core_schema.BeforeValidatorFunctionSchema) -> JsonSchemaValue:
        parser = _PARSERS.get(schema["function"]["function"])
        if parser is None:
            return super().function_before_schema(schema)
        description, pattern = parser
        number = self.generate_inner(schema["schema"])
        alternatives = number.get("anyOf", [number])
        for alternative in alternatives:
            if alternative.get("type") in ("number", "integer"):
                alternative.setdefault("minimum", 0)  # the parsers refuse a negative number
        return {"anyOf": [*alternatives, {"type": "string", "pattern": pattern}], "description": description}

    def int_schema(self, schema: core_schema.IntSchema) -> JsonSchemaValue:
        return _or_variable(super().int_schema(schema))

    def float_schema(self, schema: core_schema.FloatSchema) -> JsonSchemaValue:
        return _or_variable(super().float_schema(schema))

    def bool_schema(self, schema: core_schema.BoolSchema) -> JsonSchemaValue:
        return _or_variable(super().bool_schema(schema))

    def literal_schema(self, schema: core_schema.LiteralSchema) -> JsonSchemaValue:
        generated = super().literal_schema(schema)
        return generated if "const" in generated else _or_variable(generated)  # a `type: nats` stays literal


def _or_variable(schema: JsonSchemaValue) -> JsonSchemaValue:
    return {"anyOf": [schema, VARIABLE]}


def pipeline_json_schema() -> dict[str, Any]:
    """The JSON Schema of a pipeline file: every operator, source and sink registered now, plugins included."""
    from .config import pipeline_model

    return json_schema(pipeline_model(), "wirepipe pipeline",
                       "A wirepipe pipeline file (wirepipe run, wirepipe validate)")


def json_schema(model: type[BaseModel], title: str, what: str) -> dict[str, Any]:
    """The JSON Schema of the YAML files ``model`` validates (``what`` they are), for editors."""
    generated = _refer_to_variable(model.model_json_schema(schema_generator=_ConfigJsonSchema))
    generated.setdefault("$defs", {})["EnvironmentVariable"] = VARIABLE
    return {"$schema": DIALECT, "title": title,
            "description": f"{what}; generated by `wirepipe schema config` from the models that validate it.",
            **{k: v for k, v in generated.items() if k != "title"}}


def _refer_to_variable(node: Any) -> Any:
    """``${VAR}`` written out once (a reference); a ``$ref`` with keywords beside it (a described field of a model
    type) wrapped in ``allOf``, since draft 7 ignores whatever stands beside a ``$ref``."""
    if node == VARIABLE:
        return VARIABLE_REF
    if isinstance(node, dict):
        if "$ref" in node and len(node) > 1:
            node = {"allOf": [{"$ref": node["$ref"]}], **{k: v for k, v in node.items() if k != "$ref"}}
        return {k: _refer_to_variable(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_refer_to_variable(v) for v in node]
    return node


def schema_text(schema: dict[str, Any]) -> str:
    """The schema as written to a file: indented, keys in the models' order, a final newline."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
