"""``wirepipe test --update``: a case's ``expect:`` rewritten in its test file, the rest of the file kept.

The file is edited as text where the YAML parser says the case's ``expect`` is (its nodes' marks), so
comments and formatting elsewhere stay as they were and the change reads as a diff of that block only.

What a case records is bounded (``unrecordable``): at most ``MAX_OUTPUTS`` outputs and about ``MAX_BYTES``
of them. A case past either fails with the reason instead of writing a file nobody reviews (a fixture of
93 MB would write more than 100 MB of YAML): such a case checks ``count`` and ``each`` conditions, or
records a slice of its input (``count:``). The case's sink keeps no more than that as it runs
(``RecordingSink``, ``too_many``, ``MAX_KEPT``): refusing a large case costs no memory for its
outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from ..core.batch import Batch
from ..testing import TestingSink

MAX_OUTPUTS = 1000
MAX_BYTES = 1024 * 1024  # the outputs as JSON, about: the recorded block stays a reviewable diff
# The values a recording case's sink keeps, as the pipeline wrote them (payload bytes, records as JSON): past it
# their JSON is past MAX_BYTES too (JSON holds no value in less than a quarter of msgpack's, bincode's or
# protobuf's bytes), so it stops keeping them.
MAX_KEPT = 4 * MAX_BYTES
_OR_SMALLER = "check it with `count:` and `each:` conditions, or record a slice of its input (`count:`)"


def too_many(outputs: int, rejects: int) -> str | None:
    """Why ``--update`` does not record a case that made ``outputs`` outputs and ``rejects`` rejections (None:
    not too many)."""
    if outputs + rejects <= MAX_OUTPUTS:
        return None
    return (f"--update records at most {MAX_OUTPUTS:,} outputs and rejections in a test file; this case made "
            f"{outputs:,} and {rejects:,}: {_OR_SMALLER}")


def too_large(outputs: int, kept: int | None = None) -> str:
    """Why ``--update`` does not record a case's ``outputs`` outputs: their JSON passed ``MAX_BYTES``, or (``kept``)
    the first ``kept`` of them passed ``MAX_KEPT`` bytes as the pipeline wrote them."""
    if kept is None:
        return (f"--update records at most {MAX_BYTES // 1024:,} KiB of outputs in a test file; this case's "
                f"{outputs:,} outputs are larger: {_OR_SMALLER}")
    return (f"--update records at most {MAX_BYTES // 1024:,} KiB of outputs in a test file; the first {kept:,} of "
            f"this case's {outputs:,} outputs passed {MAX_KEPT // 1024:,} KiB as the pipeline wrote them: "
            f"{_OR_SMALLER}")


def json_size(value: Any) -> int:
    """A value's size as a test file records it (JSON; bytes in ``$base64``)."""
    import orjson

    from ..core.fields import plain

    return len(orjson.dumps(plain(value), default=repr, option=orjson.OPT_NON_STR_KEYS))


def written_size(value: Any) -> int:
    """A value's size as the pipeline wrote it: a payload's bytes, a record's JSON (what ``MAX_KEPT`` bounds)."""
    return len(value) if isinstance(value, (bytes, bytearray, memoryview)) else json_size(value)


def unrecordable(outputs: Sequence[Any], rejects: Sequence[Any]) -> str | None:
    """Why ``--update`` does not record these outputs and rejections (None: it does): too many, or too large."""
    why = too_many(len(outputs), len(rejects))
    if why is not None:
        return why
    size = 0
    for o in outputs:
        size += json_size(o.value)
        size += len(o.subject or "") + sum(len(k) + len(v) for k, v in (o.headers or {}).items())
        if size > MAX_BYTES:
            return too_large(len(outputs))
    return None


def _end(node: Any) -> int:
    """Where a node's own text ends: a block collection's end mark lies past the comments and blank lines
    after it, so take its last child's end instead."""
    if isinstance(node, yaml.MappingNode) and not node.flow_style and node.value:
        return _end(node.value[-1][1])
    if isinstance(node, yaml.SequenceNode) and not node.flow_style and node.value:
        return _end(node.value[-1])
    return int(node.end_mark.index)


class _Block(dict):  # type: ignore[type-arg]
    """A mapping written in block style whatever it holds (``expect:``'s own keys, one per line)."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Block, lambda d, data: d.represent_mapping("tag:yaml.org,2002:map", data, flow_style=False))


def _render(expect: dict[str, Any], indent: int, flow: bool) -> str:
    if flow:
        return "expect: " + yaml.safe_dump(expect, default_flow_style=True, sort_keys=False, width=1 << 16,
                                           allow_unicode=True).strip()
    body = yaml.dump(_Block(expect), Dumper=_Dumper, default_flow_style=None, sort_keys=False, width=110,
                     allow_unicode=True)
    pad = " " * (indent + 2)
    return "expect:\n" + "".join(pad + line if line.strip() else line for line in body.splitlines(keepends=True)).rstrip("\n")


def rewrite(text: str, updates: dict[int, dict[str, Any]]) -> str:
    """``text`` (a test file) with the ``expect`` of the cases ``updates`` names (by index) replaced or added."""
    root = yaml.compose(text)
    assert root is not None, "a test file that loaded is a mapping"
    tests = next(v for k, v in root.value if k.value == "tests")
    edits: list[tuple[int, int, str]] = []
    for index, expect in updates.items():
        case = tests.value[index]
        flow = bool(case.flow_style)
        pairs = case.value
        indent = pairs[0][0].start_mark.column
        found = [(k, v) for k, v in pairs if k.value == "expect"]
        if found:
            key, value = found[0]
            edits.append((key.start_mark.index, _end(value), _render(expect, indent, flow)))
        else:
            at = _end(pairs[-1][1])
            sep = ", " if flow else "\n" + " " * indent
            edits.append((at, at, sep + _render(expect, indent, flow)))
    for start, stop, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[stop:]
    return text


def write(path: Path, updates: dict[int, dict[str, Any]]) -> None:
    from ..storage.files import write_bytes_atomic

    text = rewrite(path.read_text(encoding="utf-8"), updates)
    write_bytes_atomic(path, text.encode("utf-8"))


class RecordingSink(TestingSink):
    """The sink of a case ``--update`` records: it keeps what a test file can hold (``snapshot.too_many``, and
    ``snapshot.MAX_KEPT`` bytes of values as written) and past it only counts, so a case too large to record is
    refused with its counts without its outputs in memory (``why_not``)."""

    def __init__(self) -> None:
        super().__init__()
        self.rejected = 0
        self.kept_bytes = 0
        self.full_at: int | None = None  # the outputs it had kept when it stopped keeping them

    async def write(self, batch: Batch) -> None:
        if self.full_at is None:
            await super().write(batch)
            self.kept_bytes += sum(written_size(v) for v in batch.values)
            self._check()
        else:
            self.count += len(batch.values)
            self.batches += 1

    async def write_rejected(self, rejected: list[Any]) -> None:
        self.rejected += len(rejected)
        if self.full_at is None:
            await super().write_rejected(rejected)
            self._check()

    def _check(self) -> None:
        if too_many(self.count, self.rejected) is not None or self.kept_bytes > MAX_KEPT:
            self.full_at, self.keep = self.count, False  # what it held is dropped: only counted from here
            self.records, self.subjects, self.headers, self.meta, self.rejects = [], [], [], {}, []

    def why_not(self) -> str | None:
        """Why the case is not recorded, with its final counts; None while it fits."""
        if self.full_at is None:
            return None
        return too_many(self.count, self.rejected) or too_large(self.count, self.full_at)
