"""Pipelines from YAML: interpolation, overrides, validation with pydantic, clear errors.

The shape::

    name: points-publish
    source:    {type: generate, dataset: point, count: 1000000}
    operators:
      - serialize: {format: msgpack}
      - compress:  {codec: zstd, level: fastest}
    sink:      {type: nats, url: "${NATS_URL:-embedded}", subject: points}
    metrics:   {path: results/points.parquet}

``${VAR}`` and ``${VAR:-default}`` are replaced in every string value (``$${`` writes a
literal ``${``). In the parts a command replaces (``wirepipe test`` its source and sink, a replay
its source, ``--set sink=...`` the sink: ``read_config``'s ``replaced``), a variable that is not set
is left as written instead of refused: those parts are not used. Everything is validated before
anything runs; a problem becomes a ``ConfigError`` that names the file, the field path, the bad
value and what is allowed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import Discriminator, Field, Tag, ValidationError, create_model

from ..core.errors import ConfigError
from ..core.models import (
    Duration,
    Strict,
    config_error,
    field_path,
    parse_field_path,
    problem_message,
    short_repr,
    unknown_message,
    validate,
)
from ..core.workers import Worker
from ..operators import OPERATORS
from ..operators.operator import BuildContext, refused_at

if TYPE_CHECKING:
    from .pipeline import Pipeline  # what a file builds (the run loop is imported where one is built)

# --- operator entries: each operator module declares its params (see operators/__init__.py) ----------


def _operator_key(value: Any) -> str | None:
    """The operator name of a one-key entry (None for any other shape: reported in ``_describe``)."""
    if isinstance(value, Mapping):
        return str(next(iter(value))) if len(value) == 1 else None
    return getattr(value, "kind", None)


@lru_cache(maxsize=1)
def pipeline_model() -> type[Strict]:
    """The pipeline config model, built once from the operator and connector registries."""
    from ..connectors import sink_models, source_models

    # Types built at run time from the registries: values to pydantic, so Any to mypy.
    entries: list[Any] = []
    for name, params in OPERATORS.items():
        field_def: dict[str, Any] = {name: (params, ...)}
        entry = create_model(f"{name.title()}Entry", __base__=Strict, **field_def)
        entry.kind = name  # type: ignore[attr-defined]
        entries.append(Annotated[entry, Tag(name)])
    operator: Any = Annotated[Union[tuple(entries)], Discriminator(_operator_key)]  # noqa: UP007
    source: Any = Annotated[Union[tuple(source_models())], Field(discriminator="type")]  # noqa: UP007
    sink: Any = Annotated[Union[tuple(sink_models())], Field(discriminator="type")]  # noqa: UP007

    from ..metrics.recorder import MetricsConfig
    from ..metrics.tracing import TracingConfig
    from .monitor import MonitorConfig
    from .resources import ResourcesConfig
    from .restarts import RestartPolicy
    from .service import ServiceConfig

    fields: dict[str, Any] = dict(
        name=(str, Field(min_length=1)),
        description=(str | None, None),
        source=(source, ...),
        operators=(list[operator], []),
        sink=(sink, Field(default={"type": "null"}, validate_default=True)),  # validated: a model, not a dict
        dead_letter=(sink | None, None),
        metrics=(MetricsConfig | None, None),
        allow_pickle=(bool, False),
        queue_size=(int, Field(default=8, ge=1)),
        shutdown_timeout=(Duration, 30.0),
        flush_interval=(Duration, 1.0),
        monitor=(MonitorConfig | None, None),
        tracing=(TracingConfig | None, None),
        service=(ServiceConfig, Field(default_factory=ServiceConfig)),
        resources=(ResourcesConfig, Field(default_factory=ResourcesConfig)),
        restart=(RestartPolicy, Field(default_factory=RestartPolicy)),
    )
    return create_model("PipelineConfig", __base__=Strict, **fields)


# --- loading ------------------------------------------------------------------------------------

_VAR = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def interpolate(value: Any, env: Mapping[str, str], path: str = "",
                unused: Callable[[str], bool] | None = None) -> Any:
    """Replace ``${VAR}`` / ``${VAR:-default}`` in every string of a parsed config; a variable that is not set is
    a ``ConfigError``, except at a field path ``unused`` says is not used (a replaced part's): left as written."""
    if isinstance(value, dict):
        return {k: interpolate(v, env, _join(path, k), unused) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env, f"{path}[{i}]", unused) for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$${":
            return "${"
        name, default = m.group(1), m.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        if unused is not None and unused(path):
            return m.group(0)
        raise ConfigError(
            f"environment variable {name} is not set (in {value!r}); set it, or give a default: ${{{name}:-value}}",
            path=path,
        )

    return _VAR.sub(sub, value)


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def replaced_parts(*parts: str, kept: Sequence[str] = ()) -> Callable[[str], bool]:
    """Whether a field path lies in one of ``parts`` (field paths: ``source``, ``resources.dictionaries.DICTS``)
    and in none of ``kept`` (what the command still uses of them: the test's ``sink.subject``)."""

    def within(path: str, prefixes: Sequence[str]) -> bool:
        return any(path == p or path.startswith((f"{p}.", f"{p}[")) for p in prefixes)

    return lambda path: within(path, parts) and not within(path, kept)


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one ``--set a.b[1].c=value`` (value parsed as YAML) to a raw config dict."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {assignment!r}: expected path=value, e.g. source.count=1000")
    shown = f"--set {key.strip()}=..."  # the value is not echoed: it may be a secret
    parts = parse_field_path(key)
    try:
        value = load_yaml(raw) if raw.strip() else ""
    except ConfigError as exc:  # past the bound: said, never taken as text
        raise ConfigError(f"{shown}: the value: {exc.detail}") from None
    except ValueError:  # not YAML: the text itself
        value = raw
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        try:
            if isinstance(part, int):
                node = node[part]
            else:
                node = node.setdefault(part, {} if not isinstance(parts[i + 1], int) else [])
        except (IndexError, KeyError, TypeError, AttributeError):
            raise ConfigError(f"{shown}: {key!r} does not exist in the config") from None
    last = parts[-1]
    try:
        node[last] = value
    except (IndexError, TypeError):
        raise ConfigError(f"{shown}: {key!r} does not exist in the config") from None


# A config or test file is read whole and parsed before anything runs, so what it may hold is bounded: its
# size (``/dev/zero`` is refused after this many bytes, not read until memory runs out), and the values
# its YAML makes with every alias expanded (``&a [x, x]`` then ``&b [*a, *a]`` ... doubles at each step: a
# few lines make gigabytes). A parsed value costs about 10 us and a few hundred bytes: the bounds keep a
# file within seconds and a few hundred MB. Inline records fit well within them; more go in a file
# (a test's ``input.file``).
MAX_CONFIG_BYTES = 2 * 1024 * 1024
MAX_CONFIG_VALUES = 500_000


def read_yaml_mapping(path: str | Path, what: str) -> dict[str, Any]:
    """A YAML file's top-level mapping; ``ConfigError`` naming the file, and the line and column of a syntax
    error, or the bound it passes (``MAX_CONFIG_BYTES``). ``what`` says what the mapping holds when the file
    is something else."""
    file = str(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read the file ({exc.strerror or exc})", file=file) from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"the file is larger than {_mib(MAX_CONFIG_BYTES)}, the most a config or test file may be "
                          "(records to test with go in a file: input.file)", file=file)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start + 1})", file=file) from None
    try:
        data = load_yaml(text)
    except ConfigError as exc:
        raise ConfigError(exc.detail, file=file) from None
    except ValueError as exc:
        raise ConfigError(str(exc), file=file) from None
    if not isinstance(data, dict):
        raise ConfigError(what, file=file)
    return data


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` within ``MAX_CONFIG_VALUES``: ``ValueError`` for text that is not YAML (with its line
    and column); ``ConfigError`` for YAML that nests deeper than Python recurses, or that makes more values
    than the bound, its aliases expanded (counted on the parser's events, before any is built)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when installed: 5-10x faster
    try:
        if _values(yaml.parse(text, Loader=loader)) > MAX_CONFIG_VALUES:
            raise ConfigError(f"the YAML holds more than {MAX_CONFIG_VALUES:,} values (scalars, lists and mappings, "
                              "each alias *name counted as what it repeats), the most a config or test file may "
                              "hold (records to test with go in a file: input.file)")
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ValueError(f"{where}not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    except RecursionError:
        raise ConfigError("the YAML nests deeper than wirepipe reads (lists or mappings within each other)") from None


def _values(events: Iterable[Any]) -> int:
    """The values a YAML stream makes, every alias counted as the values it repeats; the count stops once past
    ``MAX_CONFIG_VALUES`` (a stream of events: nothing is built, whatever the aliases expand to)."""
    from yaml import AliasEvent, CollectionEndEvent, CollectionStartEvent, NodeEvent

    seen = 0
    starts: list[tuple[str | None, int]] = []  # the open lists and mappings: (anchor, values seen before it)
    anchored: dict[str, int] = {}
    for event in events:
        if isinstance(event, AliasEvent):
            seen += anchored.get(event.anchor or "", 1)
        elif isinstance(event, CollectionStartEvent):
            starts.append((event.anchor, seen))
            seen += 1
        elif isinstance(event, CollectionEndEvent):
            anchor, before = starts.pop()
            if anchor is not None:
                anchored[anchor] = seen - before
        elif isinstance(event, NodeEvent):  # a scalar
            seen += 1
            if event.anchor is not None:
                anchored[event.anchor] = 1
        if seen > MAX_CONFIG_VALUES:
            break
    return seen


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):g} MiB"


def read_config(path: str | Path, overrides: Sequence[str] = (), env: Mapping[str, str] | None = None,
                replaced: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """Parse YAML, interpolate variables and apply overrides; ``ConfigError`` on any problem. ``replaced`` says
    which field paths the caller replaces (``replaced_parts``): a variable there that is not set is no error; nor
    is one in what an override replaces (``--set sink={...}``, ``--set sink.url=...``)."""
    file = str(path)
    data = read_yaml_mapping(path, "a pipeline is a YAML mapping with name, source, operators, sink")
    if "tests" in data and "source" not in data:
        raise ConfigError("this is a test file (it has `tests:`), not a pipeline: run it with wirepipe test",
                          file=file)
    overridden = replaced_parts(*_override_paths(overrides))
    unused = overridden if replaced is None else (lambda p: replaced(p) or overridden(p))
    try:
        data = interpolate(data, os.environ if env is None else env, unused=unused)
        for assignment in overrides:
            apply_override(data, assignment)
    except ConfigError as exc:
        raise ConfigError(exc.detail, file=file, path=exc.path) from None
    return data


def _override_paths(overrides: Sequence[str]) -> list[str]:
    """The field paths ``--set`` assignments replace (one that does not parse is refused by ``apply_override``)."""
    keys = (key for key, sep, _ in (a.partition("=") for a in overrides) if sep and key.strip())
    return [field_path(parse_field_path(key)) for key in keys]


def validate_config(data: dict[str, Any], file: str | None = None) -> Any:
    """Validate a raw config dict; ``ConfigError`` listing every problem."""
    try:
        return pipeline_model().model_validate(data)
    except ValidationError as exc:
        raise config_error(exc, file, describe=_describe) from None


def registered(registry: Mapping[str, Any], name: Any, what: str, where: str | None = None) -> Any:
    """The entry ``name`` of an operator or connector registry, or the ``ConfigError`` YAML gives for it
    (``unknown type 'x': allowed ...``; ``what`` is ``type`` or ``operator``): the Python API's lookup."""
    try:
        return registry[name]
    except (KeyError, TypeError):  # TypeError: an unhashable name
        raise ConfigError(unknown_message(what, name, registry), path=where) from None


def validate_entry(model: Any, data: Mapping[str, Any], where: str) -> Any:
    """One operator's params or one connector's config validated alone, with the messages YAML gives
    (``where`` is the field path's head: ``source``, ``sink``, ``serialize`` ...): the Python API's check."""
    return validate(model, data, where, lambda err: _describe_at(list(err["loc"]), err))


def _describe(err: Any) -> tuple[str, str]:
    """(field path, message with the bad value and what is allowed) for one pydantic error of a pipeline."""
    from ..connectors import SINKS, SOURCES

    loc = list(err["loc"])
    # Drop the union tags pydantic puts in the location (source.generate.count -> source.count).
    tags = set(SOURCES) | set(SINKS)
    parts: list[Any] = []
    i = 0
    while i < len(loc):
        part = loc[i]
        parts.append(part)
        nxt = loc[i + 1] if i + 1 < len(loc) else None
        if (part in ("source", "sink", "dead_letter") and len(parts) == 1 and nxt in tags) or (isinstance(part, int) and parts[:1] == ["operators"] and i + 2 < len(loc) and loc[i + 2] == nxt) or _resource_tag(parts, nxt):
            i += 1
        i += 1
    return _describe_at(parts, err)


def _resource_tag(parts: list[Any], nxt: Any) -> bool:
    """``resources.schemas.NAME.<type>``: the union tag pydantic puts after a resource's name."""
    from .resources import STORE_TYPES

    return len(parts) == 3 and parts[0] == "resources" and nxt in STORE_TYPES


def _describe_at(parts: list[Any], err: Any) -> tuple[str, str]:
    """The message of one error at the field path ``parts`` (one entry alone has no union tags to drop:
    ``source.words`` stays that even where ``words`` is also a connector type)."""
    from ..connectors import SINKS, SOURCES
    from .resources import STORE_TYPES

    kind = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    path = field_path(parts)
    if kind == "union_tag_invalid":
        allowed = ctx.get("expected_tags", "").replace("'", "").split(", ")
        what = "operator" if parts[-1:] and isinstance(parts[-1], int) else "type"
        if what == "type" and isinstance(value, Mapping) and value.get("type", "") is None:  # YAML's bare null
            hint = f" (in --set, {path}.type='\"null\"')" if "null" in allowed else ""
            return path, unknown_message(what, None, allowed) + hint
        return path, unknown_message(what, ctx.get("tag"), allowed)
    if kind == "union_tag_not_found" and parts[:1] == ["operators"]:
        got = ", ".join(map(str, value)) if isinstance(value, Mapping) and value else short_repr(value)
        return path, (f"each operator is a one-key entry such as `- compress: {{codec: zstd}}`; got {got} "
                      f"(allowed operators: {', '.join(OPERATORS)})")
    if kind == "union_tag_not_found":
        allowed = ", ".join(STORE_TYPES if parts[:1] == ["resources"] else SOURCES if parts[:1] == ["source"] else SINKS)
        return path, f"`type` is required: allowed {allowed}"
    return path, problem_message(err)


def build_pipeline(cfg: Any, *, file: str | None = None, worker: Worker | None = None) -> Pipeline:
    """A runnable ``Pipeline`` from a validated config, its source, sink and dead letter as ``worker`` runs them
    (``for_worker``: the process that builds it, ``Worker.current()``, by default; one process alone writes its
    files as named, ``{worker}`` in a path as 0); errors while building are config errors."""
    from ..metrics.tracing import check_installed
    from .checks import check_flow
    from .pipeline import Pipeline
    from .resources import Resources

    def check_tracing(tracing: Any) -> None:
        try:
            check_installed(tracing)
        except ValueError as exc:
            raise ConfigError(str(exc), path="tracing") from None

    ctx = BuildContext(allow_pickle=cfg.allow_pickle)
    operators: list[Any] = []
    where: list[str] = []  # each operator's entry (one entry may stand for several: encode)
    for i, entry in enumerate(cfg.operators):
        built = build_operators(getattr(entry, entry.kind), ctx, f"operators[{i}].{entry.kind}", file)
        operators += built
        where += [f"operators[{i}].{entry.kind}"] * len(built)
    worker = worker or Worker.current()
    source = build_connector(cfg.source, "source", file, worker)
    sink = build_connector(cfg.sink, "sink", file, worker)
    dead_letter = build_connector(cfg.dead_letter, "dead_letter", file, worker) if cfg.dead_letter is not None else None
    try:
        check_flow(source, operators, sink, where)  # at the entries' own paths (Pipeline checks by position)
        resources = Resources(cfg.resources)
        resources.bind(operators, (source, sink), where)  # at the entries' own paths, as check_flow
        check_tracing(cfg.tracing)
        # The whole-pipeline rules (``check_parts``, run by ``Pipeline``: e.g. one Parquet file behind a source
        # acknowledged at every flush) are the ones a pipeline built in Python meets; YAML adds the file.
        return Pipeline(
            source,
            operators,
            sink,
            name=cfg.name,
            metrics=_metrics(cfg),
            dead_letter=dead_letter,
            queue_size=cfg.queue_size,
            shutdown_timeout=cfg.shutdown_timeout,
            flush_interval=cfg.flush_interval,
            config=cfg.model_dump(mode="json", by_alias=True),
            monitor=cfg.monitor,
            tracing=cfg.tracing,
            resources=resources,
        )
    except ConfigError as exc:
        raise ConfigError(exc.detail, file=file, path=exc.path) from None


def build_operators(params: Any, ctx: BuildContext, where: str, file: str | None = None) -> list[Any]:
    """The operators one validated entry stands for; a failure (a bad schema, a missing function) is a
    ``ConfigError`` at ``where``, naming the schema field when the schema is wrong."""
    from ..core.errors import WirepipeError

    try:
        return list(params.build(ctx))
    except (ValueError, KeyError, WirepipeError) as exc:
        raise refused_at(exc, where, file) from None


def build_connector(model: Any, where: str, file: str | None = None, worker: Worker | None = None) -> Any:
    """The source or sink a validated connector config stands for, as ``worker`` runs it when given (``own_part``);
    a failure is a ``ConfigError`` at ``where``."""
    from ..core.errors import WirepipeError

    try:
        part = model.build()
    except (ValueError, KeyError, WirepipeError) as exc:
        raise ConfigError(str(exc), file=file, path=where) from None
    return part if worker is None else own_part(part, where, worker, file)


def own_part(part: Any, where: str, worker: Worker, file: str | None = None) -> Any:
    """``part`` (the ``source``, ``sink`` or ``dead_letter``: ``where``) as ``worker`` runs it (``for_worker``); what
    it cannot share with the other workers is a ``ConfigError`` at its field (``sink.path``)."""
    from ..core.errors import CannotShare

    try:
        return part.for_worker(worker.index, worker.workers)
    except CannotShare as exc:
        raise ConfigError(exc.refusal.message, file=file, path=f"{where}.{exc.refusal.field}") from None


def _metrics(cfg: Any) -> Any:
    if cfg.metrics is None:
        return None
    return cfg.metrics.build(cfg.name, cfg.model_dump(mode="json", by_alias=True))


def load_pipeline(path: str | Path, overrides: Sequence[str] = (), env: Mapping[str, str] | None = None) -> Pipeline:
    """Read, validate and build a pipeline from a YAML file."""
    data = read_config(path, overrides, env)
    cfg = validate_config(data, file=str(path))
    return build_pipeline(cfg, file=str(path))


__all__ = ["OPERATORS", "BuildContext", "build_connector", "build_operators", "build_pipeline", "load_pipeline",
           "own_part", "read_config", "registered", "unknown_message", "validate_config", "validate_entry"]
