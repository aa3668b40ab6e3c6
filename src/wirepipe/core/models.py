"""The pydantic building blocks every config model shares, and the messages a bad value gets.

``Strict`` rejects unknown fields with a message that lists the allowed ones (a typo
in ``subjcet`` should say which names exist); ``Duration`` and ``Size`` accept human
units (``30s``, ``64MiB``). ``validate`` checks one entry (a connector's fields given in
Python) and raises the ``ConfigError`` the same entry gets in YAML: the pipeline loader
(``pipelines/config.py``) adds only what belongs to a whole pipeline (which ``type`` or
operator names are allowed).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache
from typing import Annotated, Any, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from .errors import ConfigError
from .redact import redact_tree
from .units import parse_duration, parse_size

M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """A config model that names the allowed fields when it meets an unknown one."""

    # No infinity or NaN in any number of a config: `rate: .inf` would be accepted here and overflow there.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            allowed = set(cls.model_fields) | {f.alias for f in cls.model_fields.values() if f.alias}
            unknown = [k for k in data if k not in allowed]
            if unknown:
                names = sorted(f.alias or n for n, f in cls.model_fields.items())
                raise PydanticCustomError(
                    "unknown_field",
                    "unknown field {unknown}: allowed {allowed}{hint}",
                    {"unknown": ", ".join(map(repr, unknown)), "allowed": ", ".join(names),
                     "hint": did_you_mean(unknown, names)},
                )
        return data


def did_you_mean(given: Any, allowed: Iterable[str]) -> str:
    """``; did you mean `batch_size`?`` for a name (or names) close to an allowed one, else ``""``: what every
    message about an unknown name ends with (a field, a type, an operator, a format, a codec, a dataset).

    >>> did_you_mean("batchsize", ["batch_size", "count"]), did_you_mean(["Zstd", "x"], ["zstd", "gzip"])
    ('; did you mean `batch_size`?', '; did you mean `zstd`?')
    >>> did_you_mean(["subjcet", "levle"], ["subject", "level"]), did_you_mean("kafka", ["nats", "jsonl"])
    ("; did you mean `subject` (for 'subjcet'), `level` (for 'levle')?", '')
    """
    import difflib

    candidates = [str(a) for a in allowed]
    lower = {c.lower(): c for c in candidates}
    names = [given] if isinstance(given, str) else [g for g in given if isinstance(g, str)]
    found: list[tuple[str, str]] = []
    for name in names:
        close = lower.get(name.lower()) or next(iter(difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)),
                                                None)
        if close is not None and close != name:
            found.append((name, close))
    if not found:
        return ""
    if len(found) == 1:
        return f"; did you mean `{found[0][1]}`?"
    return "; did you mean " + ", ".join(f"`{close}` (for {name!r})" for name, close in found) + "?"


def unknown_message(what: str, name: Any, allowed: Iterable[str]) -> str:
    """The one message for a name no registry holds (``unknown codec 'zstdd': allowed ...; did you mean
    `zstd`?``), in YAML, in ``--set`` and in Python."""
    allowed = list(allowed)
    if name is None and "null" in allowed:  # `type: null` unquoted: YAML's null, not the null connector's name
        return f"{what}: null is YAML's empty value, not the null sink: quote it, {what}: \"null\""
    if name is None:
        return f"unknown {what} None (YAML reads a bare null as no value): allowed {', '.join(map(str, allowed))}"
    return f"unknown {what} {name!r}: allowed {', '.join(map(str, allowed))}{did_you_mean(name, allowed)}"


def _duration(value: Any) -> Any:
    return None if value is None else parse_duration(value)


def _size(value: Any) -> Any:
    return None if value is None else parse_size(value)


Duration = Annotated[float, BeforeValidator(_duration)]
Size = Annotated[int, BeforeValidator(_size)]

# Errors whose input is never shown: a secret's (``Secret``, ``refuse_unshown``), and messages that already
# say what is wrong in words.
SECRET_ERROR = "secret"
_UNSHOWN = frozenset({"unknown_field", "value_error", SECRET_ERROR})


def refuse_unshown(what: str, value: Any) -> PydanticCustomError:
    """The error for a value that may be a secret: what was expected and the kind of value, never the value."""
    kinds = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list", dict: "a mapping"}
    kind = kinds.get(type(value), f"a value of type {type(value).__name__}")
    return PydanticCustomError(SECRET_ERROR, "{what}; got {kind} (not shown: it may be a secret)",
                               {"what": what, "kind": kind})


def _secret(value: Any) -> Any:
    if value is None or isinstance(value, (str, SecretStr)):
        return value
    # A number is refused, not converted: YAML reads 0123 as 83 and 1e5 as 100000.0, a wrong password.
    raise refuse_unshown('a secret is a string: quote it ("...") or give it from the environment, '
                         '"${NATS_PASSWORD}"', value)


# A password, token or seed (``redact.SECRET_FIELDS`` names them): a ``SecretStr`` (shown as ``**********``,
# dumped masked) whose bad values no error echoes.
Secret = Annotated[SecretStr, BeforeValidator(_secret)]


class SourceLimits(Strict):
    """The fields of every source config: where a source stops on its own (``Source(count, duration)``)."""

    count: int | None = Field(default=None, ge=0, description="stop after this many records")
    duration: Duration | None = Field(default=None, description="stop after this long")


# --- the messages of a bad value ---------------------------------------------------------------------

Describe = Callable[[Any], tuple[str, str]]


def validate(model: type[M], data: Mapping[str, Any], where: str, describe: Describe | None = None) -> M:
    """``data`` checked by ``model`` as the YAML entry at ``where`` (``source``, ``sink``, ...) is: a bad
    value raises that entry's ``ConfigError`` (field path, bad value, what is allowed).

    >>> class Limits(Strict):
    ...     batch_size: int = 1
    >>> validate(Limits, {"batch_size": "many"}, "source")
    Traceback (most recent call last):
    ...
    wirepipe.core.errors.ConfigError: source.batch_size: Input should be a valid integer, unable to parse string as an integer (got 'many')
    """
    try:
        value: M = _adapter(model).validate_python(dict(data))
    except ValidationError as exc:
        raise config_error(exc, None, (where,), describe) from None
    return value


@cache
def _adapter(model: Any) -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(model)


def config_error(exc: ValidationError, file: str | None, head: tuple[str, ...] = (),
                 describe: Describe | None = None) -> ConfigError:
    """One ``ConfigError`` for every problem pydantic found (``head`` is prepended to each field path)."""
    describe = describe or describe_problem
    problems = [describe({**err, "loc": (*head, *err["loc"])}) for err in exc.errors(include_url=False)]
    if len(problems) == 1:
        return ConfigError(problems[0][1], file=file, path=problems[0][0])
    lines = "\n".join(f"  {p}: {m}" if p else f"  {m}" for p, m in problems)
    return ConfigError(f"{len(problems)} problems:\n{lines}", file=file)


def field_path(parts: Sequence[Any]) -> str:
    """``("operators", 0, "compress", "level")`` -> ``operators[0].compress.level``."""
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if n else str(p)) for n, p in enumerate(parts))


_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def parse_field_path(text: str) -> list[str | int]:
    """``operators[1].compress.level`` -> ``["operators", 1, "compress", "level"]``: ``field_path`` read back
    (a part of digits alone, ``items.0``, is an index too). What ``--set`` and the conditions on records take.

    >>> parse_field_path("items[2].price"), parse_field_path("a.0.b")
    (['items', 2, 'price'], ['a', 0, 'b'])
    """
    return [int(i) if i else (int(n) if n.isdigit() else n) for n, i in _PATH_PART.findall(text.strip())]


def describe_problem(err: Any) -> tuple[str, str]:
    """(field path, message with the bad value) for one pydantic error of one entry."""
    return field_path(err["loc"]), problem_message(err)


def problem_message(err: Any) -> str:
    """What is wrong with the value: pydantic's message without its prefixes, with the value shown."""
    kind = err["type"]
    if kind == "missing":
        return "required field is missing"
    msg = err["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    if kind in _UNSHOWN:
        return str(msg)
    value = err.get("input")
    shown = repr(redact_tree(value)) if not isinstance(value, (dict, list)) else short_repr(value)
    return f"{msg} (got {shown})"


def short_repr(value: Any, limit: int = 80) -> str:
    """A value as a message shows it: secrets masked (``redact.redact_tree``), cut at ``limit`` characters."""
    text = repr(redact_tree(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."
