"""What a record is to wirepipe: a dict, or a typed record that stands for one.

Formats write dicts, and subject templates read a record's fields by name, so a typed record
(a dataclass, a ``msgspec.Struct``, a ``faust.Record``, a pydantic model) is taken as the dict of
its fields, the one way every part of wirepipe does it: operators, the JSON format's fallback, and
what ``wirepipe test`` and ``tap`` compare and show (``core.fields.plain``). Each kind gives the dict
its own library encodes: a ``faust.Record`` with its ``"__faust"`` metadata (unless the class says
``include_metadata=False``), so wirepipe and a Faust app write the same bytes for it; a Struct under
its encoded names (``rename=``), as msgspec writes it; a pydantic model by its field names
(``model_dump()``).

>>> from dataclasses import dataclass
>>> @dataclass
... class Point:
...     x: int
...     y: int
>>> as_dict(Point(1, 2)), as_dict({"x": 1}), is_typed_record(Point(1, 2)), is_typed_record({"x": 1})
({'x': 1, 'y': 2}, {'x': 1}, True, False)
"""

from __future__ import annotations

from typing import Any


def is_typed_record(value: Any) -> bool:
    """True for typed records (dataclasses, msgspec Structs, ``faust.Record``, pydantic models): what ``as_dict``
    turns into a dict. A class is not a record."""
    if isinstance(value, type):
        return False
    return (hasattr(value, "asdict") or hasattr(value, "model_dump") or hasattr(value, "__dataclass_fields__")
            or hasattr(value, "__struct_fields__"))


def as_dict(value: Any) -> Any:
    """A record as the dict of its fields: a dict as it is, a typed record converted (nested ones too); anything
    else raises ``TypeError`` naming its type (a record that cannot be one is refused, not written as something
    else)."""
    if type(value) is dict:
        return value
    if not isinstance(value, type):
        to_representation = getattr(value, "to_representation", None)  # faust.Record: what Faust itself encodes
        if to_representation is not None:
            return to_representation()
        if hasattr(value, "asdict"):
            return value.asdict()
        if hasattr(value, "model_dump"):
            return value.model_dump()
        if hasattr(value, "__dataclass_fields__"):
            import dataclasses

            return dataclasses.asdict(value)
        if hasattr(value, "__struct_fields__"):
            return _struct_dict(value)
    if isinstance(value, dict):
        return value
    raise TypeError(f"expected a record (a dict, a dataclass, a msgspec Struct, a faust.Record or a pydantic "
                    f"model), got {type(value).__name__}")


def _struct_dict(value: Any) -> dict[str, Any]:
    """A ``msgspec.Struct`` as msgspec encodes it: its fields under their encoded names, nested Structs (in lists,
    tuples and dicts too) as dicts, as ``dataclasses.asdict`` does for dataclasses."""
    names = getattr(value, "__struct_encode_fields__", None) or value.__struct_fields__
    return {name: _struct_values(getattr(value, field))
            for name, field in zip(names, value.__struct_fields__, strict=True)}


def _struct_values(value: Any) -> Any:
    if hasattr(value, "__struct_fields__") and not isinstance(value, type):
        return _struct_dict(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_struct_values(v) for v in value)
    if isinstance(value, dict):
        return {k: _struct_values(v) for k, v in value.items()}
    return value
