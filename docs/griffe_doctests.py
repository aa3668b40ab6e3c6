"""A griffe extension for the API reference: the doctest examples of wirepipe's docstrings as code blocks.

The docstrings are plain text with ``>>>`` examples (pytest runs them as doctests); Markdown would read
``>>>`` as nested quotes, so each run of example lines becomes a fenced ``pycon`` block, and an
indented block after ``::`` a fenced ``text`` block.
"""

from __future__ import annotations

from typing import Any

import griffe


def fence_examples(text: str) -> str:
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        if stripped.startswith(">>>"):
            indent = line[: len(line) - len(stripped)]
            block = []
            while i < len(lines) and lines[i].strip() and lines[i].startswith(indent):
                block.append(lines[i][len(indent):])
                i += 1
            out += [f"{indent}```pycon", *(indent + b for b in block), f"{indent}```"]
            continue
        if stripped.endswith("::") and not stripped.startswith(":") and i + 1 < len(lines):
            out.append(line[:-1] if not line.endswith(" ::") else line[:-3])
            i += 1
            while i < len(lines) and not lines[i].strip():
                i += 1
            block = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" " * 4)):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            margin = min((len(b) - len(b.lstrip()) for b in block if b.strip()), default=0)
            out += ["", "```text", *(b[margin:] for b in block), "```", ""]
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


class DoctestBlocks(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence_examples(obj.docstring.value)
