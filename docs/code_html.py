"""An mkdocs hook: code on the site reads whole at 1280 pixels, and as the Markdown source means it.

- Code blocks wrap rather than scroll sideways (``docs/assets/extra.css``). Each line is a span of its own
  (``pymdownx.highlight``'s ``line_spans``); this gives the span its leading indentation as ``--indent``,
  and the stylesheet hangs the wrapped part two columns deeper than that, where it cannot be mistaken
  for a line of its own.
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
from typing import Any

CODE = re.compile(r"<code\b[^>]*>.*?</code>", re.S)
TABLE = re.compile(r"<table\b.*?</table>", re.S)
# A line's span, the highlighter's token spans that open it, then the line's indentation.
LINE = re.compile(r'(<span id="__span-[\d-]+")>((?:<span class="[^"]*">)*)( +)')
TEXT = re.compile(r">([^<>]+)<")
HYPHENATED = re.compile(r"-*\w+(?:-\w+)+|--\w+")
BREAK_IN_NAME = re.compile(r"(?<=[/.,])(?=[A-Za-z])")
CELL = re.compile(r"<td>(.*?)</td>", re.S)
TAG = re.compile(r"<[^>]+>")
PROSE = 80  # characters of text in a table cell
LONGEST_WHOLE = 60  # characters: a longer word may break (better than a block that scrolls)


def _keep_whole(word: re.Match[str]) -> str:
    text = word[0]
    return f'<span class="wp-word">{text}</span>' if len(text) <= LONGEST_WHOLE else text


def code_html(code: str) -> str:
    """One ``<code>`` element: its hyphenated words kept whole, the lines of a block told their indentation."""
    code = TEXT.sub(lambda m: f">{HYPHENATED.sub(_keep_whole, m[1])}<", code)
    return LINE.sub(lambda m: f'{m[1]} style="--indent:{len(m[3])}ch">{m[2]}{m[3]}', code)


def table_code_html(code: str) -> str:
    """One inline ``<code>`` of a table: ``\\|`` is the pipe GitHub shows; a name may break at ``/``, ``.`` and ``,``."""
    return TEXT.sub(lambda m: f">{BREAK_IN_NAME.sub('<wbr>', m[1])}<", code.replace("\\|", "|"))


def _cell(cell: re.Match[str]) -> str:
    return f'<td class="wp-prose">{cell[1]}</td>' if len(TAG.sub("", cell[1])) > PROSE else cell[0]


def table_html(table: str) -> str:
    return CELL.sub(_cell, CODE.sub(lambda m: table_code_html(m[0]), table))


def on_page_content(html: str, **_: Any) -> str:
    return CODE.sub(lambda m: code_html(m[0]), TABLE.sub(lambda m: table_html(m[0]), html))
