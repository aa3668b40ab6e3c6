"""faust.Record classes that the Faust tests use as wirepipe schemas (``schema: tests.faust_records:Point``).

Faust is imported here, so only tests that want Faust import this module.
"""

from __future__ import annotations

import faust
from faust.models.fields import FloatField


class Planar(faust.Record, include_metadata=False):
    """The ``point`` dataset as a Record."""

    x: int
    y: int


class Point(Planar, serializer="msgpack|zstd"):
    """Its own serializer is a wirepipe chain (Faust's Record.loads prefers it to any argument)."""


class Point3(Planar):
    """Inherited fields come first: x, y, z."""

    z: int = 0


class Transaction(faust.Record, include_metadata=False):
    """The ``transaction`` dataset (bytes fields, nested lists of dicts), fields in the dataset's order."""

    version: int
    inputs: list
    outputs: list
    lock_time: int
    subnetwork_id: bytes
    gas: int
    payload: bytes


class Reading(faust.Record, serializer="msgpack|zstd"):
    """Default Faust options: its payloads carry Faust's ``"__faust": {"ns": ...}`` key."""

    sensor: str
    value: float
    raw: bytes = b""


class Renamed(faust.Record, include_metadata=False):
    """A field whose wire name differs from its attribute name."""

    temperature: float = FloatField(input_name="T", output_name="T")
    sensor: str = ""
