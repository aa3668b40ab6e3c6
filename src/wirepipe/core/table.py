"""A table and its three drawings: plain text that fits a terminal, Markdown, HTML.

Every table wirepipe shows (the report's, the study's, the reference tables, ``wirepipe codecs``
and ``datasets``, the benchmarks' summaries) is a ``Table`` of formatted text cells drawn here,
so a terminal, a Markdown file and an HTML page show the same cells. rich draws tables too, but
fits them to a width by wrapping or cutting cells; a chain name, a figure with its range, a
content type or a config snippet is what a reader copies, so here a cell is never split and
never cut. The text drawing (no boxes, so piped output stays clean) takes the first of these
layouts that fits the width:

1. a grid, one row per line (headers may wrap at spaces, onto several lines);
2. the first column (a long name) on its own line, the other cells in a grid below it
   (consecutive rows of the same name, a pipeline's stages, share one name line);
3. the same with the least important columns left out (a table may rank its columns,
   ``priority``; the text says which it left out and where they are);
4. cards: the name on its own line, then ``header: value`` cells side by side,
   as many as fit, in aligned columns.

A row may carry a note (free text, ``notes``): beside the cells when every row fits the
width with it, else wrapped beneath its row, indented. Markdown and HTML show it as a last
column.

The width is the terminal's (``COLUMNS`` wins, as for every POSIX tool), 80 when the
output is not a terminal.
"""

from __future__ import annotations

import html
import shutil
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

GAP = 2
INDENT = 2


@dataclass
class Table:
    """Formatted cells and how to show them anywhere.

    ``numeric`` says, per column, which are right-aligned (default: all but the first);
    ``priority`` ranks the columns for a narrow terminal (0 always shown, higher left out
    first; default: none is left out); ``notes`` is one free-text note per row.
    """

    title: str
    headers: list[str]
    rows: list[list[str]]
    numeric: list[bool] | None = None
    caption: str = ""
    priority: list[int] | None = None
    notes: list[str] | None = None
    notes_header: str = "note"

    @property
    def alignment(self) -> list[bool]:
        return list(self.numeric) if self.numeric is not None else [False] + [True] * (len(self.headers) - 1)

    def text(self, width: int | None = None, elsewhere: str | None = "the Markdown report") -> str:
        """Title, table and caption (each of its lines wrapped at words) in ``width`` columns, as one string;
        columns left out are named, with ``elsewhere``, where they are."""
        width = width or terminal_width()
        lines, left_out = _layout(self, width)
        lines = [*(wrap(self.title, width) if self.title else []), *lines]
        if left_out:
            where = f"see {elsewhere} or widen the terminal" if elsewhere else "widen the terminal to see them"
            lines += wrap(f"(not shown at {width} columns: {', '.join(left_out)}; {where})", width)
        for paragraph in self.caption.splitlines() if self.caption else ():  # each of its lines a paragraph
            lines += wrap(paragraph, width)
        return "\n".join(lines) + "\n"

    def markdown(self, level: int = 3) -> str:
        """A Markdown table under a heading of ``level`` (none without a title); ``|`` in a cell is escaped."""
        headers, rows, numeric = self._with_notes()
        lines = [f"{'#' * level} {self.title}", ""] if self.title else []
        lines += ["| " + " | ".join(map(md_cell, headers)) + " |",
                  "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
        lines += ["| " + " | ".join(map(md_cell, row)) + " |" for row in rows]
        if self.caption:
            lines += ["", f"_{self.caption}_"]
        return "\n".join(lines) + "\n"

    def html(self) -> str:
        """An HTML table under an ``h2`` title, its caption beneath (class ``n`` for the numeric cells)."""
        esc = html.escape
        headers, rows, numeric = self._with_notes()
        head = "".join(f"<th>{esc(h)}</th>" for h in headers)
        body = "".join("<tr>" + "".join(f'<td class="{"n" if n else "t"}">{esc(c)}</td>'
                                        for c, n in zip(row, numeric, strict=True)) + "</tr>" for row in rows)
        caption = f"<p class=\"caption\">{esc(self.caption)}</p>" if self.caption else ""
        title = f"<h2>{esc(self.title)}</h2>" if self.title else ""
        return f"{title}<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{caption}"

    def _with_notes(self) -> tuple[list[str], list[list[str]], list[bool]]:
        """Headers, rows and alignment with the notes as a last column (for Markdown and HTML)."""
        if self.notes is None:
            return self.headers, self.rows, self.alignment
        return ([*self.headers, self.notes_header], [[*r, n] for r, n in zip(self.rows, self.notes, strict=True)],
                [*self.alignment, False])


def num(x: float | int | None, unit_scale: float = 1.0) -> str:
    """A figure with as many digits as it deserves: 1,234 / 12.3 / 1.23 / 0.0123; ``-`` when unknown (ASCII, one
    column in every terminal and one byte: an en dash is three, and two columns where East Asian widths apply).
    Every table and recommendation writes its figures with it, so one figure reads the same everywhere."""
    if x is None:
        return "-"
    if isinstance(x, int) and unit_scale == 1.0:
        return f"{x:,}"
    v = x / unit_scale
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def terminal_width(default: int = 80) -> int:
    return max(40, shutil.get_terminal_size((default, 24)).columns)


def wrap(text: str, width: int, indent: str = "") -> list[str]:
    """Words to lines of at most ``width``; a word longer than the line stays whole."""
    return textwrap.wrap(text, width=max(width, 10), initial_indent=indent, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False) or [indent.rstrip()]


# --- the text layouts ------------------------------------------------------------------------------


def _layout(t: Table, width: int) -> tuple[list[str], list[str]]:
    """The table's lines in the first layout that fits ``width`` (see the module doc), and the headers left out."""
    if not t.rows:
        return ["  (none)"], []
    numeric = t.alignment
    if t.notes is not None:  # beside the cells when every row fits with its note
        headers, rows, numeric_all = t._with_notes()
        widths = _widths(headers, rows, width)
        if _fits(widths, width):
            head, body = _grid(headers, rows, numeric_all, widths)
            return [*_ruled(head, body, width), *body], []
    blocks, head, left_out = _rows_laid_out(t.headers, t.rows, numeric, width, t.priority)
    if t.notes is not None:
        blocks = [[*lines, *(wrap(note, width, " " * (INDENT * 2)) if note else [])]
                  for lines, note in zip(blocks, t.notes, strict=True)]
    return [*head, *(line for lines in blocks for line in lines)], left_out


def _rows_laid_out(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool], width: int,
                   priority: Sequence[int] | None) -> tuple[list[list[str]], list[str], list[str]]:
    """(each row's lines, the lines above the rows, the headers left out) in the first layout that fits."""
    widths = _widths(headers, rows, width)
    if _fits(widths, width):
        head, body = _grid(headers, rows, numeric, widths)
        return [[line] for line in body], _ruled(head, body, width), []
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
        blocks, previous = [], None
        for row, line in zip(rows, body, strict=True):
            shared = row[0] == previous  # rows of one name (a pipeline's stages) share its line
            blocks.append([line] if shared else [row[0], line])
            previous = row[0]
        return blocks, [headers[0], *_ruled(head, body, width)], [headers[i] for i in range(1, len(headers))
                                                                   if i not in keep]
    return _cards(headers, rows, width), [], []


def _ruled(head: list[str], body: list[str], width: int) -> list[str]:
    """Header lines and the rule beneath them (as wide as the widest line, at most ``width``)."""
    return [*head, "-" * min(width, max(len(line) for line in head + body))]


def _header_lines(header: str, width: int) -> list[str]:
    return textwrap.wrap(header, width=width, break_long_words=False, break_on_hyphens=False) or [""]


def _widths(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int | None = None) -> list[int]:
    """Each column's width: its widest cell or its whole header, when that fits ``width``; else its widest cell
    or its longest header word (headers wrap at spaces)."""
    cells = [max((len(r[i]) for r in rows), default=0) for i in range(len(headers))]
    whole = [max(c, len(h)) for c, h in zip(cells, headers, strict=True)]
    if width is not None and _fits(whole, width):
        return whole
    return [max(c, *(len(w) for w in h.split()), 0) for c, h in zip(cells, headers, strict=True)]


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


def _cards(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> list[list[str]]:
    """Per row: the name on its own line, then ``header: value`` cells, as many per line as fit, aligned by
    position."""
    cells = [[f"{h}: {c}" for h, c in zip(headers[1:], row[1:], strict=True)] for row in rows]
    count = len(cells[0])
    if not count:  # a one-column table: its names, one a line
        return [[row[0]] for row in rows]
    for per_line in range(count, 0, -1):
        col_w = [max(len(row[i]) for row in cells for i in range(j, count, per_line)) for j in range(per_line)]
        if per_line == 1 or _fits(col_w, width, INDENT):
            break
    out = []
    for row, mine in zip(rows, cells, strict=True):
        lines = [row[0]]
        for i in range(0, count, per_line):
            chunk = mine[i:i + per_line]
            lines.append((" " * INDENT + (" " * GAP).join(c.ljust(w) for c, w in zip(chunk, col_w, strict=False)))
                         .rstrip())
        out.append(lines)
    return out
