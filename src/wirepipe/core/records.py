"""What a record is to wirepipe: a dict, or a typed record that stands for one.

Formats write dicts, and subject templates read a record's fields by name, so a typed record
(a dataclass, a ``faust.Record``, a pydantic model) is taken as the dict of its fields, the one
way every operator does it. A ``faust.Record`` gives the dict Faust itself encodes (with its
``"__faust"`` metadata unless the class says ``include_metadata=False``), so wirepipe and a Faust
app write the same bytes for it.

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
    """True for typed records (dataclasses, ``faust.Record``, pydantic models): what ``as_dict`` turns into a dict."""
    return hasattr(value, "asdict") or hasattr(value, "model_dump") or hasattr(value, "__dataclass_fields__")


def as_dict(value: Any) -> Any:
    """A record as the dict of its fields: a dict as it is, a typed record converted; anything else raises
    ``TypeError`` naming its type (a record that cannot be one is refused, not written as something else)."""
    if type(value) is dict:
        return value
    to_representation = getattr(value, "to_representation", None)  # faust.Record: what Faust itself encodes
    if to_representation is not None:
        return to_representation()
    if hasattr(value, "asdict"):
        return value.asdict()
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if hasattr(value, "__dataclass_fields__") and not isinstance(value, type):
        import dataclasses

        return dataclasses.asdict(value)
    if isinstance(value, dict):
        return value
    raise TypeError(f"expected a record (a dict, a dataclass, a faust.Record or a pydantic model), "
                    f"got {type(value).__name__}")
