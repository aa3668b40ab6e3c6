"""A case's ``expect:`` checked: every way its outputs and rejections differ from it, one message each.

A message names where (``outputs[2].value.items[0].price``), what was expected and what came: whole records
(``records``, ``outputs``) are compared field by field, to the first difference, and shown whole beside it;
conditions (``where``, ``each``) say which one is false and the value they met; rejections are compared by
stage, operator, seq and a part of the reason.

A case is checked as the pipeline writes (``CheckingSink``): ``each`` on every output as it comes, and only what
a message can show is kept (the outputs ``records`` or ``outputs`` name and the one after them, three ``each``
failures, the rejections ``rejections`` names or three), the rest counted, so a case of a large fixture holds no
more of its outputs than its ``expect`` has.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..core.batch import Batch
from ..core.fields import MISSING, first_difference, plain
from ..core.models import field_path
from ..testing import TestingSink
from .model import Expect

if TYPE_CHECKING:
    from .outputs import Output

SHOWN = 3  # the ``each`` failures and the unexpected rejections a case's failure shows, then "... and N more"


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


def check(expect: Expect, outs: list[Output], rejects: list[Any], *, count: int | None = None,
          rejected: int | None = None, each: tuple[list[str], int] | None = None) -> list[str]:
    """Every way the outputs and rejections differ from ``expect``, one message each (empty: passed). ``outs``
    and ``rejects`` may be the first of more (``CheckingSink``): ``count`` and ``rejected`` say how many there
    were, ``each`` the first ``each`` failures and how many there were."""
    count = len(outs) if count is None else count
    rejected = len(rejects) if rejected is None else rejected
    failures: list[str] = []
    if expect.count is not None and expect.count != count:
        failures.append(f"count: expected {expect.count} outputs, got {count}")
    if expect.records is not None:
        failures += _sequence("records", expect.records, [o.value for o in outs], count)
    if expect.outputs is not None:
        if len(expect.outputs) != count:
            failures.append(f"outputs: expected {len(expect.outputs)}, got {count}")
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
        if each is None:
            bad = [f for i, out in enumerate(outs) for f in _condition_failures(expect.each, out, f"each: outputs[{i}]")]
            each = bad, len(bad)
        shown, failed = each
        failures += shown[:SHOWN] + ([f"each: ... and {failed - SHOWN} more"] if failed > SHOWN else [])
    failures += _rejection_failures(expect, rejects, rejected)
    return failures


def _sequence(name: str, expected: list[Any], actual: list[Any], count: int) -> list[str]:
    """``actual``: the first of ``count`` values (at least one past ``expected`` when there are more)."""
    for i, (e, a) in enumerate(zip(expected, actual, strict=False)):
        diff = _mismatch(f"{name}[{i}]", e, a)
        if diff:
            return [diff]
    if len(expected) != count:
        i = min(len(expected), count)
        extra = (f"first missing {name}[{i}]: {_show(expected[i])}" if len(expected) > count
                 else f"first unexpected {name}[{i}]: {_show(actual[i])}")
        return [f"{name}: expected {len(expected)}, got {count}; {extra}"]
    return []


class CheckingSink(TestingSink):
    """The sink of a case that is checked: each batch is read as the outputs the pipeline's own sink would have
    written (``read``: subjects, headers, payloads decoded) and checked against ``expect`` as it comes; only what a
    failure message shows is kept (``outputs``, ``rejects``, ``each_failures``), the rest counted (``count``,
    ``rejected``, ``each_failed``). ``failures()`` after the run."""

    def __init__(self, expect: Expect, read: Callable[[Batch, int], Awaitable[list[Output]]]) -> None:
        super().__init__(keep=False)
        self.expect = expect
        self.read = read
        exact = expect.records if expect.records is not None else expect.outputs
        # what the exact side compares, and the first output past it (named when there are more)
        self.keep_outputs = len(exact) + 1 if exact is not None else 0
        self.keep_rejects = max(SHOWN, len(expect.rejections or ()))
        self.outputs: list[Output] = []
        self.each_failures: list[str] = []
        self.each_failed = 0
        self.rejected = 0
        self.error: Exception | None = None  # an output that could not be read: the case's error, after the run

    async def open(self) -> None:
        await getattr(self.read, "open", _nothing)()

    async def close(self) -> None:
        await getattr(self.read, "close", _nothing)()

    async def write(self, batch: Batch) -> None:
        first = self.count
        await super().write(batch)  # counted
        if self.error is not None:
            return
        try:  # raised here, the run would retry the write as a failing sink's: kept for ``failures``
            outs = await self.read(batch, first)
        except Exception as exc:
            self.error = exc
            return
        if self.expect.each:
            for i, out in enumerate(outs, first):
                bad = _condition_failures(self.expect.each, out, f"each: outputs[{i}]")
                self.each_failed += len(bad)
                self.each_failures += bad[:SHOWN - len(self.each_failures)]
        self.outputs += outs[:self.keep_outputs - len(self.outputs)]

    async def write_rejected(self, rejected: list[Any]) -> None:
        self.rejected += len(rejected)
        self.rejects += rejected[:self.keep_rejects - len(self.rejects)]

    def failures(self) -> list[str]:
        """Every way the case differs from its ``expect`` (``check``); the error of an output that could not be
        read, raised."""
        if self.error is not None:
            raise self.error
        return check(self.expect, self.outputs, self.rejects, count=self.count, rejected=self.rejected,
                     each=(self.each_failures, self.each_failed))


async def _nothing() -> None:
    return None


def _describe(r: Any) -> str:
    return f"{r.stage} ({r.operator}): {r.error} [seq {r.meta.get('seq')}]"


def _rejection_failures(expect: Expect, rejects: list[Any], rejected: int) -> list[str]:
    """``rejects``: the first of ``rejected`` (every one ``expect.rejections`` names, and ``SHOWN`` at least)."""
    out: list[str] = []
    if expect.rejected is None and expect.rejections is None and rejected:
        shown = "; ".join(_describe(r) for r in rejects[:SHOWN])
        return [f"rejected: expected none, got {rejected}: {shown}"
                + (f" ... and {rejected - SHOWN} more" if rejected > SHOWN else "")]
    if expect.rejected is not None and expect.rejected != rejected:
        shown = "; ".join(_describe(r) for r in rejects[:SHOWN])
        out.append(f"rejected: expected {expect.rejected}, got {rejected}" + (f": {shown}" if shown else ""))
    if expect.rejections is not None:
        if len(expect.rejections) != rejected:
            out.append(f"rejections: expected {len(expect.rejections)}, got {rejected}"
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
