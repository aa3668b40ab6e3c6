"""The operator shape: a named, parameterised callable over a ``Batch``.

CPU operators (codecs, transforms) are plain callables ``op(batch) -> batch`` so the
run loop calls them without awaiting anything; I/O lives in sources and sinks.
Every operator knows its stage (``serialize``, ``compress`` ...), its name, its
parameters and its canonical string, which is what metrics rows and chains record.

What an operator needs from upstream it declares, so a pipeline is refused when it is built
(``wirepipe validate`` as ``wirepipe run``), not at its first batch: ``takes`` the kind of value it
works on (``RECORDS``, decoded values, or ``PAYLOADS``, bytes), ``gives`` the kind it leaves, and
``refuse_schema`` the schema its source attaches (a positional format given none of its own); ``follows`` is told
the stages before it (a deserialize with no decompress before it refuses records still compressed), ``precedes``
the stages after it (a decompress whose bytes go on to the sink as they are takes their ``Content-Encoding`` away).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypeAlias, TypeVar, Union

from ..core.batch import PAYLOADS, RECORDS, SAME, Batch, header_values
from ..core.errors import ConfigError, WirepipeError

if TYPE_CHECKING:
    from ..core.errors import Refusal

__all__ = ["PAYLOADS", "RECORDS", "SAME", "BuildContext", "Configured", "Operator", "OperatorChain",
           "Operators", "failing", "flatten", "given", "refused_at", "with_shorthand"]

_O = TypeVar("_O", bound="Configured")


class Operator:
    """Base class of CPU operators. Subclasses set ``stage`` and implement ``__call__``."""

    stage: ClassVar[str] = "operator"
    # True: running it over consecutive slices of a batch and joining the results equals running it
    # over the batch (the run loop slices long passes so a core NATS consumer keeps reading).
    per_record: ClassVar[bool] = True
    # The wire headers it sets on every record (``wire.set_header``, keeping the ones records came
    # with): what a header-aware sink or dead letter can expect a record to carry past this stage.
    adds_headers: ClassVar[tuple[str, ...]] = ()
    # The kind of values it works on (RECORDS: decoded values, PAYLOADS: bytes; None: either) and the kind it
    # leaves (SAME as it took; None: it cannot tell, as a user's function).
    takes: ClassVar[str | None] = None
    gives: ClassVar[str | None] = SAME
    name: str = ""
    params: dict[str, Any]
    # True: the run loop awaits ``prepare(batch)`` before each pass (I/O the pass needs, on the event loop).
    prepares: bool = False
    # True: it does I/O around its passes (``open``/``prepare``/``close`` below), which whatever runs it awaits
    # around ``process_batch`` (the run loop; the Beam replay's DoFn, on the stores it ships).
    io: bool = False

    def refuse_schema(self, schema: Any) -> Refusal | None:
        """Why this operator cannot run on batches whose source attaches ``schema`` (field names or a typed
        schema; None when it attaches none), or None: checked when a pipeline is built."""
        return None

    def follows(self, stages: Sequence[str]) -> None:
        """The stages of the operators before this one in its pipeline, told when the pipeline is built
        (``pipelines/checks.check_flow``): for an operator whose input depends on them; nothing by default."""

    def precedes(self, stages: Sequence[str]) -> None:
        """The stages of the operators after this one, told as ``follows`` is: for an operator whose output
        headers depend on what becomes of its bytes; nothing by default."""

    def __call__(self, batch: Batch) -> Batch:  # pragma: no cover - abstract
        raise NotImplementedError

    # I/O around the passes (a zstd dictionary or a schema read from a store the pipeline handed it), awaited by
    # the run loop on its event loop: the passes themselves stay plain CPU work. ``parts`` are the pipeline's
    # source and sink.
    async def open(self, parts: Sequence[Any]) -> None:
        """Called once when the pipeline starts, after its source and sink opened."""

    async def prepare(self, batch: Batch) -> None:
        """Called before each pass over ``batch`` when ``prepares`` is set; ``NotConnected`` asks the loop
        to hold the batch and call again later."""

    async def close(self) -> None:
        """Called once when the pipeline ends, also after errors."""

    def canonical(self) -> str:
        """The operator as one chain step (``zstd:3``) or ``stage(name)`` when it is not a codec."""
        return self.name

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"

    def __or__(self, other: Operator | Operators) -> OperatorChain:
        """``op | op`` builds an operator chain for a pipeline."""
        return OperatorChain([self]) | other


class OperatorChain(list[Operator]):
    """Operators in order, built together: ``op | op``, an ``encode`` or ``decode`` chain, an entry by name
    (``wirepipe.operator_entry``). A pipeline takes one wherever it takes an operator (``Pipeline(source,
    [decode("msgpack|zstd"), map_values(fn)], sink)``, ``source | chain``) and runs each of its operators as
    a stage of its own: its own metrics rows, its own dead letters.

    >>> from wirepipe import compress, encode, serialize
    >>> [op.canonical() for op in serialize("msgpack") | compress("zstd") | encode("json|lz4")]
    ['msgpack', 'zstd', 'json', 'lz4']
    """

    def __or__(self, other: Operator | Operators) -> OperatorChain:
        if not isinstance(other, (Operator, Iterable)):
            return NotImplemented
        return OperatorChain([*self, *([other] if isinstance(other, Operator) else flatten(other))])


# What a pipeline takes where it takes operators: operators and chains of them, in order.
Operators: TypeAlias = "Iterable[Operator | Iterable[Operator]]"


def flatten(operators: Operators) -> list[Operator]:
    """The operators in order, each chain among them (``encode``'s, ``op | op``) opened in place; anything
    else is a ``TypeError`` that names it (a string is not an operator, nor is a sink)."""
    out: list[Operator] = []
    for part in operators:
        if isinstance(part, Operator):
            out.append(part)
        elif isinstance(part, Iterable) and not isinstance(part, (str, bytes)):
            out += flatten(part)
        else:
            raise TypeError(f"{part!r} is not an operator: build one with a wirepipe factory "
                            f"(wirepipe.serialize(...), wirepipe.encode(...) ...)")
    return out


def failing(error: Exception) -> Callable[[Any], Any]:
    """A per-record function that always raises ``error`` (a codec that cannot be built for a header)."""

    def fail(_value: Any) -> Any:
        raise error

    return fail


def refuse_by_header(batch: Batch, header: str, plain: set[str | None],
                     refusal: Callable[[str | None], Callable[[Any], Any] | None], stage: str, name: str) -> None:
    """Dead-letter the records whose ``header`` says their bytes are not this operator's to read: another format's
    (``Content-Type``), another codec's or still compressed (``Content-Encoding``): such bytes read anyway may give
    other values without an error. ``refusal`` gives the function that refuses records of a value, None for a
    value no format or codec has (another client's: read as before); ``plain``, the values that need no look
    (one set lookup a batch in the common case)."""
    values = header_values(batch.headers, header)
    if values <= plain:
        return
    refusals = {value: refusal(value) for value in values}
    if any(refusals.values()):
        batch.map_by_header(header, lambda value: refusals.get(value) or _as_is, stage, name)


def _as_is(value: Any) -> Any:
    return value


def with_shorthand(params: type, field: str, kind: type | tuple[type, ...]) -> Any:
    """``params`` as a YAML entry that may give its one field alone: with ``("fields", list)``,
    ``- select: [id, x]`` is ``- select: {fields: [id, x]}``."""
    from pydantic import BeforeValidator

    given: Any = Union[(params, *(kind if isinstance(kind, tuple) else (kind,)))]
    # json_schema_input_type: the JSON Schema of the entry (editors) takes the shorthand too
    return Annotated[params, BeforeValidator(lambda v: {field: v} if isinstance(v, kind) else v,
                                             json_schema_input_type=given)]


class BuildContext:
    """Pipeline-wide settings operators need when they are built from their params."""

    def __init__(self, allow_pickle: bool = False) -> None:
        self.allow_pickle = allow_pickle


class Configured(Operator):
    """An operator whose arguments are declared once, in its params model (the YAML entry's fields), as a
    connector's are (``connectors.connector.Configured``). An ``Operator`` itself, so a type checker's join of
    two of them (``[serialize(...), map_values(...)]``) is still an operator.

    ``from_params`` takes a validated model (what the entry's ``build`` and so YAML and the factories of
    ``wirepipe.api`` use); ``__init__`` takes the same fields as arguments and checks them with the model
    through ``_init``. Either way ``_configure`` sets the operator up, and a bad value or a refusal while
    it is set up (a schema a format cannot take) raises the ``ConfigError`` the YAML entry gets, at the
    entry's field path (``entry`` is its YAML name):

    >>> from wirepipe.operators.compress import Compress
    >>> Compress("gzip", 42)
    Traceback (most recent call last):
    ...
    wirepipe.core.errors.ConfigError: compress.level: 42 is out of range for gzip: use fastest (1), default (6), best (9) or an integer 0..9
    """

    entry: ClassVar[str]

    def _configure(self, params: Any, ctx: BuildContext) -> None:  # pragma: no cover - each operator has one
        raise NotImplementedError

    def _init(self, model: Any, ctx: BuildContext | None = None, **fields: Any) -> None:
        """Set up from ``fields`` checked by ``model`` as the operator's YAML entry is."""
        from ..core.models import validate  # pydantic: not imported until an operator is built

        params = validate(model, fields, self.entry)
        try:
            self._configure(params, ctx or BuildContext())
        except (ValueError, KeyError, WirepipeError) as exc:
            raise refused_at(exc, self.entry) from None

    @classmethod
    def from_params(cls: type[_O], params: Any, ctx: BuildContext) -> _O:
        """The operator a validated params model describes (no second validation)."""
        op = cls.__new__(cls)
        op._configure(params, ctx)
        return op


def given(**fields: Any) -> dict[str, Any]:
    """The arguments a caller gave: one left at None stays out, so the params model's default applies."""
    return {k: v for k, v in fields.items() if v is not None}


def refused_at(exc: Exception, where: str, file: str | None = None) -> ConfigError:
    """The ``ConfigError`` for what building an operator refused (a bad schema, a missing function), at the
    entry ``where``; a schema's own error names the schema field that is wrong."""
    from ..schema import SchemaError

    if isinstance(exc, ConfigError):  # an operator another one built (encode's serialize): its field, at this entry
        field = (exc.path or "").partition(".")[2]
        return ConfigError(exc.detail, file=file, path=f"{where}.{field}" if field else where)
    detail = exc.args[0] if isinstance(exc, KeyError) else str(exc)
    if isinstance(exc, SchemaError):
        where += ".schema" + (f".{exc.path}" if exc.path else "")
        detail = exc.message
    return ConfigError(detail, file=file, path=where)
