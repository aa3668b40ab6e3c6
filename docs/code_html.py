"""An mkdocs hook: code on the site reads whole at 1280 pixels, and as the Markdown source means it.

- Code blocks wrap rather than scroll sideways (``docs/assets/extra.css``). Each line is a span of its own
  (``pymdownx.highlight``'s ``line_spans``); this gives the span the column its wrapped part hangs at,
  ``--hang``: two columns deeper than the line's indentation, where it cannot be mistaken for a line of
  its own, or, for a line of two columns (``core/    errors.py, ...``), under its second column.
- A table printed by a command (a header, a rule line ``-----``, rows of columns) keeps its lines:
  wrapping would tear its rows apart, so a table wider than the page scrolls (the lines around it wrap).
- A browser may break a line after any hyphen (``--no-`` / ``status``); a word with a hyphen inside (an
  option, a file name, a range) is kept whole, in code blocks and inline code alike.
- In a table, inline code may break after a slash, a dot or a comma before a letter (``application/`` /
  ``vnd.wirepipe.msgpack-array``), so a column of long names stays narrow, and never elsewhere.
- In a table, a cell of prose (longer than ``PROSE`` characters) keeps a readable width when the table
  is too wide for the page: the table scrolls rather than squeeze its descriptions to a word a line.
- In a table, GitHub reads ``\\|`` inside inline code as a pipe (a bare one would end the cell there);
  Python-Markdown keeps the backslash. The site shows the pipe, so the same source reads right in both.

The text is otherwise untouched: the copy button and a selection copy what the page's source holds.
"""

from __future__ import annotations

import re
from html import unescape
from typing import Any

CODE = re.compile(r"<code\b[^>]*>.*?</code>", re.S)
TABLE = re.compile(r"<table\b.*?</table>", re.S)
# A line's span: __span-BLOCK-LINE, after a prefix in a docstring mkdocstrings renders (wirepipe.api--__span-0-1).
LINE_START = re.compile(r'(?=<span id="(?:[^"<>]*--)?__span-[\d-]+">)')
TEXT = re.compile(r">([^<>]+)<")
TAG = re.compile(r"<[^>]+>")
RULE = re.compile(r"\s*[-=─━]{12,}\s*")
COLUMNS = re.compile(r"\S {2,}\S")
# A gap of two spaces or more inside a line, before a second column (a comment after code is not one).
SECOND_COLUMN = re.compile(r"\S {2,}(?=[^\s#])")
WIDEST_FIRST_COLUMN = 32  # characters: past it, a wrapped part would hang in a column too narrow to read
HYPHENATED = re.compile(r"-*\w+(?:-\w+)+|--\w+")
BREAK_IN_NAME = re.compile(r"(?<=[/.,])(?=[A-Za-z])")
CELL = re.compile(r"<td>(.*?)</td>", re.S)
PROSE = 80  # characters of text in a table cell
LONGEST_WHOLE = 60  # characters: a longer word may break (better than a block that scrolls)


def _keep_whole(word: re.Match[str]) -> str:
    text = word[0]
    return f'<span class="wp-word">{text}</span>' if len(text) <= LONGEST_WHOLE else text


def hang(line: str) -> int:
    """The column a line's wrapped part starts at: under its second column, else past its indentation."""
    second = SECOND_COLUMN.search(line)
    if second and second.end() <= WIDEST_FIRST_COLUMN:
        return second.end()
    return len(line) - len(line.lstrip(" ")) + 2


def table_rows(lines: list[str]) -> set[int]:
    """The lines of the tables a command printed: a header, its rule, and the rows of columns under it."""
    rows = set()
    for at, line in enumerate(lines):
        if RULE.fullmatch(line):
            rows |= {at - 1, at} if at and lines[at - 1].strip() else {at}
            below = at + 1
            while below < len(lines) and COLUMNS.search(lines[below]):
                rows.add(below)
                below += 1
    return rows


def code_html(code: str) -> str:
    """One ``<code>`` element: its hyphenated words kept whole; a block's lines told where they hang."""
    code = TEXT.sub(lambda m: f">{HYPHENATED.sub(_keep_whole, m[1])}<", code)
    parts = LINE_START.split(code)  # the first is <code> and what comes before the first line
    lines = [unescape(TAG.sub("", part)).rstrip("\n") for part in parts]
    rows = table_rows(lines)
    out = [parts[0]]
    for at in range(1, len(parts)):
        if at in rows:
            out.append(parts[at].replace(">", ' class="wp-row">', 1))
        elif hang(lines[at]) != 2:
            out.append(parts[at].replace(">", f' style="--hang:{hang(lines[at])}ch">', 1))
        else:
            out.append(parts[at])
    return "".join(out)


def table_code_html(code: str) -> str:
    """One inline ``<code>`` of a table: ``\\|`` is the pipe GitHub shows; a name may break at ``/``, ``.`` and ``,``."""
    return TEXT.sub(lambda m: f">{BREAK_IN_NAME.sub('<wbr>', m[1])}<", code.replace("\\|", "|"))


def _cell(cell: re.Match[str]) -> str:
    return f'<td class="wp-prose">{cell[1]}</td>' if len(TAG.sub("", cell[1])) > PROSE else cell[0]


def table_html(table: str) -> str:
    return CELL.sub(_cell, CODE.sub(lambda m: table_code_html(m[0]), table))


def on_page_content(html: str, **_: Any) -> str:
    return CODE.sub(lambda m: code_html(m[0]), TABLE.sub(lambda m: table_html(m[0]), html))
