"""A case's ``expect:`` checked: every way its outputs and rejections differ from it, one message each.

A message names where (``outputs[2].value.items[0].price``), what was expected and what came: whole records
(``records``, ``outputs``) are compared field by field, to the first difference, and shown whole beside it;
conditions (``where``, ``each``) say which one is false and the value they met; rejections are compared by
stage, operator, seq and a part of the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.fields import MISSING, first_difference, plain
from ..core.models import field_path
from .model import Expect

if TYPE_CHECKING:
    from .cases import Output


def _show(value: Any) -> str:
    import json

    if value is MISSING:
        return "(missing)"
    try:
        text = json.dumps(plain(value), ensure_ascii=False, sort_keys=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def _mismatch(where: str, expected: Any, actual: Any) -> str | None:
    """``where.path: expected X, got Y`` and both records, or None when they are equal."""
    found = first_difference(plain(expected), plain(actual))
    if found is None:
        return None
    path, e, a = found
    at = where + ("." if path and not isinstance(path[0], int) else "") + field_path(path)
    lines = [f"{at}: expected {_show(e)}, got {_show(a)}"]
    if path:
        lines += [f"  expected {where}: {_show(expected)}", f"  got      {where}: {_show(actual)}"]
    return "\n".join(lines)


def _target(output: Output, header: bool) -> Any:
    return (output.headers or {}) if header else output.value


def _condition_failures(specs: list[Any], output: Output, where: str) -> list[str]:
    from ..core.fields import value_at

    out = []
    for spec in specs:
        for cond in spec.conditions():
            record = _target(output, spec.header is not None)
            if cond.size and not cond.path and output.payload_size is not None:
                record = b"\0" * output.payload_size  # a decoded output's size is its payload's
            if not cond(record):
                got = value_at(record, cond.path)
                shown = _show(got) if not cond.size or got is MISSING else f"{_show(cond.value(record))}"
                name = f"header {spec.header!r}" if spec.header is not None else (field_path(cond.path) or "value")
                out.append(f"{where}: {cond} is false ({name}{' size' if cond.size else ''} is {shown})")
    return out


def check(expect: Expect, outs: list[Output], rejects: list[Any]) -> list[str]:
    """Every way the outputs and rejections differ from ``expect``, one message each (empty: passed)."""
    failures: list[str] = []
    if expect.count is not None and expect.count != len(outs):
        failures.append(f"count: expected {expect.count} outputs, got {len(outs)}")
    if expect.records is not None:
        failures += _sequence("records", expect.records, [o.value for o in outs])
    if expect.outputs is not None:
        if len(expect.outputs) != len(outs):
            failures.append(f"outputs: expected {len(expect.outputs)}, got {len(outs)}")
        for i, (spec, out) in enumerate(zip(expect.outputs, outs, strict=False)):
            given = spec.model_fields_set
            where = f"outputs[{i}]"
            if "value" in given:
                diff = _mismatch(f"{where}.value", spec.value, out.value)
                if diff:
                    failures.append(diff)
            if "subject" in given and spec.subject != out.subject:
                failures.append(f"{where}.subject: expected {_show(spec.subject)}, got {_show(out.subject)}")
            if "headers" in given:
                diff = _mismatch(f"{where}.headers", spec.headers or {}, out.headers or {})
                if diff:
                    failures.append(diff)
            failures += _condition_failures(spec.where, out, where)
    if expect.each:
        bad = [f for i, out in enumerate(outs) for f in _condition_failures(expect.each, out, f"each: outputs[{i}]")]
        failures += bad[:3] + ([f"each: ... and {len(bad) - 3} more"] if len(bad) > 3 else [])
    failures += _rejection_failures(expect, rejects)
    return failures


def _sequence(name: str, expected: list[Any], actual: list[Any]) -> list[str]:
    for i, (e, a) in enumerate(zip(expected, actual, strict=False)):
        diff = _mismatch(f"{name}[{i}]", e, a)
        if diff:
            return [diff]
    if len(expected) != len(actual):
        i = min(len(expected), len(actual))
        extra = (f"first missing {name}[{i}]: {_show(expected[i])}" if len(expected) > len(actual)
                 else f"first unexpected {name}[{i}]: {_show(actual[i])}")
        return [f"{name}: expected {len(expected)}, got {len(actual)}; {extra}"]
    return []


def _describe(r: Any) -> str:
    return f"{r.stage} ({r.operator}): {r.error} [seq {r.meta.get('seq')}]"


def _rejection_failures(expect: Expect, rejects: list[Any]) -> list[str]:
    out: list[str] = []
    if expect.rejected is None and expect.rejections is None and rejects:
        shown = "; ".join(_describe(r) for r in rejects[:3])
        return [f"rejected: expected none, got {len(rejects)}: {shown}"
                + (f" ... and {len(rejects) - 3} more" if len(rejects) > 3 else "")]
    if expect.rejected is not None and expect.rejected != len(rejects):
        shown = "; ".join(_describe(r) for r in rejects[:3])
        out.append(f"rejected: expected {expect.rejected}, got {len(rejects)}" + (f": {shown}" if shown else ""))
    if expect.rejections is not None:
        if len(expect.rejections) != len(rejects):
            out.append(f"rejections: expected {len(expect.rejections)}, got {len(rejects)}"
                       + (f"; first: {_describe(rejects[0])}" if rejects else ""))
        for i, (spec, r) in enumerate(zip(expect.rejections, rejects, strict=False)):
            where = f"rejections[{i}]"
            for name in ("stage", "operator", "seq"):
                want = getattr(spec, name)
                got = r.meta.get("seq") if name == "seq" else getattr(r, name)
                if want is not None and want != got:
                    out.append(f"{where}.{name}: expected {_show(want)}, got {_show(got)} ({_describe(r)})")
            if spec.error is not None and spec.error not in r.error:
                out.append(f"{where}.error: expected a reason containing {_show(spec.error)}, got {_show(r.error)}")
    return out
