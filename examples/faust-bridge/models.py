"""The record both sides share: a Faust Record, which wirepipe also takes as a schema ("models:Order")."""

from __future__ import annotations

import faust


class Order(faust.Record, include_metadata=False):  # no "__faust" key: NATS consumers see the fields only
    order_id: int
    customer: str
    amount: float
    currency: str
    items: list[str]
