"""Tables laid out for a terminal of any width, as plain text (no boxes, so piped output stays clean).

A cell is never split and never cut: a chain name, a figure with its range and a
config snippet are read whole or not at all. So a table takes the first of these
layouts that fits the width:

1. a grid, one row per line (headers may wrap at spaces, onto several lines);
2. the first column (a long name) on its own line, the other cells in a grid below it
   (consecutive rows of the same name, a pipeline's stages, share one name line);
3. the same with the least important columns left out (a table may rank its columns;
   the table says which it left out and where they are);
4. cards: the name on its own line, then ``header: value`` cells side by side,
   as many as fit, in aligned columns.

The width is the terminal's (``COLUMNS`` wins, as for every POSIX tool), 80 when
the output is not a terminal.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Sequence

GAP = 2
INDENT = 2


def terminal_width(default: int = 80) -> int:
    return max(40, shutil.get_terminal_size((default, 24)).columns)


def wrap(text: str, width: int, indent: str = "") -> list[str]:
    """Words to lines of at most ``width``; a word longer than the line stays whole."""
    return textwrap.wrap(text, width=max(width, 10), initial_indent=indent, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False) or [indent.rstrip()]


def _header_lines(header: str, width: int) -> list[str]:
    return textwrap.wrap(header, width=width, break_long_words=False, break_on_hyphens=False) or [""]


def _widths(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    """Each column's width: its widest cell, or its longest header word (headers wrap at spaces)."""
    out = []
    for i, h in enumerate(headers):
        words = max((len(w) for w in h.split()), default=0)
        out.append(max([words, *(len(r[i]) for r in rows)]))
    return out


def _grid(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool], widths: list[int],
          indent: int = 0) -> tuple[list[str], list[str]]:
    """(header lines, one line per row)."""
    pad = " " * indent
    cells = [_header_lines(h, w) for h, w in zip(headers, widths, strict=True)]
    depth = max(len(c) for c in cells)
    head = []
    for line in range(depth):
        parts = []
        for c, w, n in zip(cells, widths, numeric, strict=True):
            text = c[line - (depth - len(c))] if line >= depth - len(c) else ""  # bottom-aligned
            parts.append(text.rjust(w) if n else text.ljust(w))
        head.append((pad + (" " * GAP).join(parts)).rstrip())
    body = [(pad + (" " * GAP).join(cell.rjust(w) if n else cell.ljust(w)
                                    for cell, w, n in zip(row, widths, numeric, strict=True))).rstrip()
            for row in rows]
    return head, body


def _fits(widths: Sequence[int], width: int, indent: int = 0) -> bool:
    return sum(widths) + GAP * (len(widths) - 1) + indent <= width


def layout(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool] | None = None,
           width: int | None = None, priority: Sequence[int] | None = None) -> tuple[list[str], list[str]]:
    """The table's lines in the first layout that fits ``width`` (see the module doc), and the headers left out.

    ``priority``: a rank per column, 0 = always shown; higher ranks are left out first.
    """
    width = width or terminal_width()
    numeric = list(numeric) if numeric is not None else [False] + [True] * (len(headers) - 1)
    if not rows:
        return ["  (none)"], []
    widths = _widths(headers, rows)
    if _fits(widths, width):
        head, body = _grid(headers, rows, numeric, widths)
        return [*head, "-" * min(width, max(len(line) for line in head + body)), *body], []
    keep = list(range(1, len(headers)))
    ranks = list(priority) if priority is not None else [0] * len(headers)
    while keep and not _fits([widths[i] for i in keep], width, INDENT):
        worst = max(ranks[i] for i in keep)
        if worst == 0:
            break
        keep.remove(max(i for i in keep if ranks[i] == worst))  # the last column of the lowest rank goes first
    if keep and _fits([widths[i] for i in keep], width, INDENT):
        head, body = _grid([headers[i] for i in keep], [[r[i] for i in keep] for r in rows],
                           [numeric[i] for i in keep], [widths[i] for i in keep], INDENT)
        lines = [headers[0], *head, "-" * min(width, max(len(line) for line in head + body))]
        previous = None
        for row, line in zip(rows, body, strict=True):
            if row[0] != previous:  # rows of one name (a pipeline's stages) share its line
                lines.append(row[0])
                previous = row[0]
            lines.append(line)
        return lines, [headers[i] for i in range(1, len(headers)) if i not in keep]
    return _cards(headers, rows, width), []


def _cards(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> list[str]:
    """Name on its own line, then ``header: value`` cells: as many per line as fit, aligned by position."""
    cells = [[f"{h}: {c}" for h, c in zip(headers[1:], row[1:], strict=True)] for row in rows]
    count = len(cells[0])
    for per_line in range(count, 0, -1):
        col_w = [max(len(row[i]) for row in cells for i in range(j, count, per_line)) for j in range(per_line)]
        if per_line == 1 or _fits(col_w, width, INDENT):
            break
    lines: list[str] = []
    for row, mine in zip(rows, cells, strict=True):
        lines.append(row[0])
        for i in range(0, count, per_line):
            chunk = mine[i:i + per_line]
            lines.append((" " * INDENT + (" " * GAP).join(c.ljust(w) for c, w in zip(chunk, col_w, strict=False)))
                         .rstrip())
    return lines


def block(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool] | None = None,
          caption: str = "", width: int | None = None, priority: Sequence[int] | None = None,
          elsewhere: str = "the Markdown report") -> str:
    """Title, table and caption (wrapped at words) as one string."""
    width = width or terminal_width()
    lines, left_out = layout(headers, rows, numeric, width, priority)
    lines = [*wrap(title, width), *lines]
    if left_out:
        lines += wrap(f"(not shown at {width} columns: {', '.join(left_out)}; see {elsewhere} or widen the "
                      "terminal)", width)
    if caption:
        lines += wrap(caption, width)
    return "\n".join(lines) + "\n"


def noted(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], notes: Sequence[str],
          width: int | None = None) -> str:
    """A listing whose last column is free text (``wirepipe codecs``): the notes beside the cells when every
    row fits the width, else each row's note wrapped on the lines beneath it, indented. No cell is cut."""
    width = width or terminal_width()
    full = [[*row, note] for row, note in zip(rows, notes, strict=True)]
    widths = _widths([*headers, "notes"], full)
    numeric = [False] * (len(headers) + 1)
    if _fits(widths, width):
        head, body = _grid([*headers, "notes"], full, numeric, widths)
        lines = [*head, "-" * min(width, max(len(line) for line in head + body)), *body]
    else:
        head, body = _grid(headers, rows, numeric[:-1], widths[:-1])
        lines = [*head, "-" * min(width, max(len(line) for line in head + body))]
        for line, note in zip(body, notes, strict=True):
            lines += [line, *(wrap(note, width, " " * (INDENT * 2)) if note else [])]
    return "\n".join([*wrap(title, width), *lines]) + "\n"
