"""What ``map`` and ``filter`` share: a function given as a Python callable or, in config, as ``module:function``.

>>> import_callable("math:sqrt")(9.0), ref_name("math:sqrt")
(3.0, 'math:sqrt')
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field, WrapValidator

from ..core.models import Strict
from ..core.registry import load_ref
from .operator import BuildContext, Configured, Operator


def import_callable(ref: str | Callable[..., Any]) -> Callable[..., Any]:
    """A callable given directly or as ``module:attr``."""
    if callable(ref):
        return ref
    fn = load_ref(ref)
    if not callable(fn):
        raise ValueError(f"{ref!r} is not callable")
    return fn


def ref_name(ref: str | Callable[..., Any]) -> str:
    """The function as its ``params`` record it: the import path (a callable's module and qualified name)."""
    return ref if isinstance(ref, str) else f"{ref.__module__}:{getattr(ref, '__qualname__', repr(ref))}"


class FunctionOperator(Configured, Operator):
    """An operator built on one function: ``map`` and ``filter`` (its name and params are the import path)."""

    def _configure(self, params: FunctionParams, ctx: BuildContext) -> None:
        function = params.function
        self._fn = import_callable(function)
        self.name = ref_name(function)
        self.params = {"function": self.name}


def _callable_or(value: Any, as_yaml: Callable[[Any], Any]) -> Any:
    """A Python callable as given (YAML cannot spell one); anything else validated as YAML's string."""
    return value if callable(value) and not isinstance(value, str) else as_yaml(value)


class FunctionParams(Strict):
    function: Annotated[str, WrapValidator(_callable_or)] = Field(
        description="import path module:function (a callable in Python)")
