"""A typed schema: ``Type`` (one field's), ``Field`` and ``RecordSchema`` (a record's fields in order), with
their spellings: the language's (``str``), YAML's (``to_spec``) and Arrow's (``to_arrow``).

The other direction of each spelling is its own module's: ``parsing`` (YAML, files), ``inference`` (Arrow,
records); ``checks`` says why a value does not fit.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from .checks import check_record
from .language import Kind


@dataclass(frozen=True)
class Type:
    """The type of one field: a primitive, ``fixed`` (bytes[N]), ``list`` or ``record``."""

    kind: Kind
    size: int = 0
    item: Type | None = None
    record: RecordSchema | None = None
    optional: bool = False

    def __post_init__(self) -> None:
        if type(self.kind) is not Kind:  # spelled as its name: Type(Kind.INT32)
            object.__setattr__(self, "kind", Kind(self.kind))

    def __str__(self) -> str:
        if self.kind is Kind.FIXED:
            text = f"bytes[{self.size}]"
        elif self.kind is Kind.LIST:
            text = f"list<{self.item}>"
        elif self.kind is Kind.RECORD:
            text = "{" + ", ".join(f"{f.name}: {f.type}" for f in self.record.fields) + "}"  # type: ignore[union-attr]
        else:
            text = self.kind.value
        return text + "?" if self.optional else text

    def contains(self, *kinds: str) -> bool:
        """Whether this type, or any type inside it (list items, nested fields), is one of ``kinds``."""
        if self.kind in kinds:
            return True
        if self.kind == Kind.LIST:
            return self.item.contains(*kinds)  # type: ignore[union-attr]
        if self.kind == Kind.RECORD:
            return any(f.type.contains(*kinds) for f in self.record.fields)  # type: ignore[union-attr]
        return False

    def required(self) -> Type:
        """The same type without ``optional``."""
        return Type(self.kind, self.size, self.item, self.record) if self.optional else self

    @property
    def fixed_width(self) -> int | None:
        """Bytes this type takes in bincode's fixint layout when that never varies, else None."""
        if self.optional:
            return None
        if self.kind in (Kind.INT32, Kind.UINT32, Kind.FLOAT32):
            return 4
        if self.kind in (Kind.INT64, Kind.FLOAT64):
            return 8
        if self.kind == Kind.BOOL:
            return 1
        if self.kind == Kind.FIXED:
            return self.size
        if self.kind == Kind.RECORD:
            return self.record.fixed_width  # type: ignore[union-attr]
        return None

    def to_spec(self) -> Any:
        """The YAML/JSON spelling of this type."""
        if self.kind == Kind.RECORD:
            inner: Any = self.record.to_spec()  # type: ignore[union-attr]
            return inner
        if self.kind == Kind.LIST and self.item is not None and self.item.contains(Kind.RECORD):
            return [self.item.to_spec()]  # a record inside has no string spelling: [T], nested as deep as it goes
        return str(self)


@dataclass(frozen=True)
class Field:
    name: str
    type: Type


@dataclass(frozen=True, eq=True)
class RecordSchema(Sequence[str]):
    """A record: a name and its fields in order. Iterates (and indexes) as its field names."""

    name: str
    fields: tuple[Field, ...] = field(default=())
    # the native schema this one was read from (a protobuf descriptor ...), used by its own format
    source: Any = field(default=None, compare=False, repr=False)

    # --- a sequence of field names ---------------------------------------------------------
    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...
    def __getitem__(self, i: int | slice) -> Any:
        return self.names[i]

    def __len__(self) -> int:
        return len(self.fields)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def fixed_width(self) -> int | None:
        """The record's size in bincode's fixint layout when every field has a fixed width."""
        total = 0
        for f in self.fields:
            w = f.type.fixed_width
            if w is None:
                return None
            total += w
        return total

    def __str__(self) -> str:
        return f"{self.name} " + str(Type(Kind.RECORD, record=self))

    # --- spelling, files, Arrow -----------------------------------------------------------
    def to_spec(self) -> dict[str, Any]:
        """The fields as the YAML/JSON mapping they are written in (optional fields as ``name?``)."""
        out: dict[str, Any] = {}
        for f in self.fields:
            t = f.type
            if t.optional and t.contains(Kind.RECORD):  # no `?` after a mapping or [T]: the field's name says it
                out[f.name + "?"] = t.required().to_spec()
            else:
                out[f.name] = t.to_spec()
        return out

    def to_document(self) -> dict[str, Any]:
        return {"name": self.name, "fields": self.to_spec()}

    def to_arrow(self) -> Any:
        """The equivalent ``pyarrow.Schema`` (optional fields nullable; bytes[N] is fixed_size_binary)."""
        import pyarrow as pa

        return pa.schema([pa.field(f.name, arrow_type(f.type), nullable=f.type.optional) for f in self.fields])

    def check(self, value: Any) -> str | None:
        """Why ``value`` does not fit this schema (naming the field path), or None when it fits."""
        return check_record(self, value, "")


def arrow_type(t: Type) -> Any:
    """The Arrow type of ``t`` (``inference.from_arrow`` reads it back)."""
    import pyarrow as pa

    simple = {"int32": pa.int32(), "int64": pa.int64(), "uint32": pa.uint32(), "float32": pa.float32(),
              "float64": pa.float64(), "bool": pa.bool_(), "string": pa.string(), "bytes": pa.binary()}
    if t.kind in simple:
        return simple[t.kind]
    if t.kind == Kind.FIXED:
        return pa.binary(t.size)
    if t.kind == Kind.LIST:
        item = t.item
        assert item is not None
        return pa.list_(pa.field("item", arrow_type(item), nullable=item.optional))
    rec = t.record
    assert rec is not None
    return pa.struct([pa.field(f.name, arrow_type(f.type), nullable=f.type.optional) for f in rec.fields])
