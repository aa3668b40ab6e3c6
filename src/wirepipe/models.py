"""The pydantic building blocks every config model shares.

``Strict`` rejects unknown fields with a message that lists the allowed ones (a typo
in ``subjcet`` should say which names exist); ``Duration`` and ``Size`` accept human
units (``30s``, ``64MiB``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from .units import parse_duration, parse_size


class Strict(BaseModel):
    """A config model that names the allowed fields when it meets an unknown one."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            allowed = set(cls.model_fields) | {f.alias for f in cls.model_fields.values() if f.alias}
            unknown = [k for k in data if k not in allowed]
            if unknown:
                raise PydanticCustomError(
                    "unknown_field",
                    "unknown field {unknown}: allowed {allowed}",
                    {"unknown": ", ".join(map(repr, unknown)),
                     "allowed": ", ".join(sorted(f.alias or n for n, f in cls.model_fields.items()))},
                )
        return data


def _duration(value: Any) -> Any:
    return None if value is None else parse_duration(value)


def _size(value: Any) -> Any:
    return None if value is None else parse_size(value)


Duration = Annotated[float, BeforeValidator(_duration)]
Size = Annotated[int, BeforeValidator(_size)]
