"""The config building blocks now live in ``wirepipe.models`` (a lower layer, shared by connectors)."""

from ..models import Duration, Size, Strict

__all__ = ["Duration", "Size", "Strict"]
