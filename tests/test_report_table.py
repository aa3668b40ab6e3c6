"""``report.table``: one table model, drawn as text that fits any width (never a cut or split cell), as Markdown
and as HTML; and every table wirepipe prints is drawn by it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wirepipe.core.table import Table

SRC = Path(__file__).parent.parent / "src" / "wirepipe"
BENCHMARKS = Path(__file__).parent.parent / "benchmarks"

NAMES = ["msgpack|zstd:fastest x100/msg", "orjson|brotli:best +dict", "json"]


def _table(notes: list[str] | None = None) -> Table:
    rows = [[name, f"{i * 1234.5:,.1f}", f"{i}.25 [1.00 - 9.00]", "12 [+50%]"] for i, name in enumerate(NAMES)]
    return Table("Chains", ["Chain", "Publish-side sum (ms)", "Consume-side sum (ms)", "Size (b)"], rows,
                 caption="times in ms, median [min-max]", priority=[0, 0, 1, 2], notes=notes)


@pytest.mark.parametrize("width", [40, 52, 60, 72, 80, 100, 160])
@pytest.mark.parametrize("with_notes", [False, True])
def test_text_fits_every_width_and_never_cuts_a_cell(width: int, with_notes: bool) -> None:
    notes = ["a note long enough that it cannot sit beside the cells of a narrow table", "", "short"]
    t = _table(notes if with_notes else None)
    text = t.text(width)
    lines = text.splitlines()
    assert max(map(len, lines)) <= width, text
    for row in t.rows:  # every cell whole on one line, unless the table said it left its column out
        for header, cell in zip(t.headers, row, strict=True):
            assert any(cell in line for line in lines) or header in " ".join(lines).split("not shown")[-1], (cell, text)
    if with_notes:  # a note is never cut either: its words, in order, beside or beneath its row
        assert " ".join(notes[0].split()) in " ".join(" ".join(lines).split())


def test_text_layouts_from_a_grid_to_cards() -> None:
    t = _table()
    wide = t.text(160).splitlines()
    assert wide[1].split() == ["Chain", "Publish-side", "sum", "(ms)", "Consume-side", "sum", "(ms)", "Size", "(b)"]
    assert wide[3].startswith(NAMES[0]) and wide[3].endswith("12 [+50%]")  # a grid, one row a line
    assert wide[2] == "-" * max(map(len, wide[1:-1]))
    narrow = t.text(40).splitlines()
    assert narrow[:4] == ["Chains", "Chain", "  Publish-side    Consume-side sum", "      sum (ms)                (ms)"]
    assert narrow[5:7] == [NAMES[0], "           0.0  0.25 [1.00 - 9.00]"]  # the name on its own line, cells beneath
    assert "not shown at 40 columns: Size (b); see the Markdown report" in " ".join(narrow)  # the lowest rank
    cards = Table("t", ["name", "a long header", "another long header"], [["x" * 30, "y" * 20, "z" * 30]])
    assert cards.text(40).splitlines() == ["t", "x" * 30, "  a long header: " + "y" * 20,
                                           "  another long header: " + "z" * 30]


def test_notes_sit_beside_the_cells_when_they_fit_else_beneath_their_row() -> None:
    t = Table("formats", ["format", "installed"], [["json", "yes"], ["cbor", "no"]], [False, False],
              notes=["stdlib", "the cbor extra"], notes_header="notes")
    assert t.text(80).splitlines()[1:] == ["format  installed  notes", "-" * 33,
                                          "json    yes        stdlib", "cbor    no         the cbor extra"]
    t.notes = ["stdlib; bytes as {\"$base64\": ...}; msgspec with a typed schema (same bytes)", ""]
    lines = t.text(50).splitlines()
    assert lines[3] == "json    yes" and lines[4].startswith("    stdlib;") and lines[-1] == "cbor    no"
    assert max(map(len, lines)) <= 50


def test_one_column_and_empty_tables() -> None:
    assert Table("t", ["name"], [["x" * 60]]).text(40).splitlines() == ["t", "x" * 60]  # a name longer than the line
    assert Table("t", ["a", "b"], []).text(80) == "t\n  (none)\n"


def test_markdown_escapes_pipes_aligns_numbers_and_adds_the_notes_column() -> None:
    t = _table(["n1", "n|2", ""])
    md = t.markdown().splitlines()
    assert md[:2] == ["### Chains", ""]
    assert md[2] == "| Chain | Publish-side sum (ms) | Consume-side sum (ms) | Size (b) | note |"
    assert md[3] == "|---|---:|---:|---:|---|"
    assert md[4] == r"| msgpack\|zstd:fastest x100/msg | 0.0 | 0.25 [1.00 - 9.00] | 12 [+50%] | n1 |"
    assert md[5].endswith(r"| n\|2 |") and md[-1] == "_times in ms, median [min-max]_"
    assert Table("", ["a"], [["x"]]).markdown(level=2).splitlines()[0] == "| a |"  # no title: no heading


def test_html_escapes_and_marks_numeric_cells() -> None:
    page = Table("<b>", ["name", "n"], [["a<b", "1"]], notes=["&"]).html()
    assert page == ("<h2>&lt;b&gt;</h2><table><thead><tr><th>name</th><th>n</th><th>note</th></tr></thead><tbody>"
                    '<tr><td class="t">a&lt;b</td><td class="n">1</td><td class="t">&amp;</td></tr></tbody></table>')


def test_every_table_is_drawn_by_the_one_model() -> None:
    """No table is laid out by hand or by rich.Table elsewhere in what the study, the report and the benchmarks
    print (the tap's live table is a rich renderable, redrawn each second)."""
    hand_made = re.compile(r"rich\.table|\"\|---|'\|---|---\|\" \*|:<\d+\} \{")
    offenders = [str(p) for p in [*(SRC / "report").glob("*.py"), *(SRC / "bench").glob("*.py"),
                                  SRC / "cli" / "study.py", *BENCHMARKS.glob("*.py")]
                 if p.name != "table.py" and hand_made.search(p.read_text())]
    assert not offenders
