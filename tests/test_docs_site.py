"""The built documentation site: pages only (the scripts beside them are not shipped), and code that reads
whole at 1280 pixels (docs/code_html.py, the mkdocs hook behind docs/assets/extra.css)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
FENCE = re.compile(r"^\s*```.*?^\s*```", re.S | re.M)


def _hook():
    spec = importlib.util.spec_from_file_location("code_html", ROOT / "docs" / "code_html.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _text(html: str) -> str:
    return re.sub(r"<[^>]+>", "", html)


def test_the_scripts_beside_the_pages_are_not_shipped() -> None:
    """mkdocs copies every file under docs/; exclude_docs keeps the generator, the griffe extension and the hook out."""
    from mkdocs.config import load_config
    from mkdocs.structure.files import get_files

    files = get_files(load_config(str(ROOT / "mkdocs.yml")))
    scripts = sorted(f.src_uri for f in files if f.src_uri.endswith(".py"))
    assert scripts == ["code_html.py", "gen_reference.py", "griffe_doctests.py"]
    assert [f.src_uri for f in files if f.src_uri.endswith(".py") and f.inclusion.is_included()] == []


def _lines(spans: list[str]) -> str:
    return "<pre><span></span><code>" + "".join(f'<span id="__span-0-{n}">{s}\n</span>' for n, s in enumerate(spans, 1)) + "</code></pre>"


def test_a_wrapped_line_hangs_past_its_indentation_or_under_its_second_column() -> None:
    block = _lines(['<span class="k">if</span> x:', '        y(<span class="s2">"a-b"</span>)  # why',
                    '<span class="w">  </span><span class="nt">key</span>: 1', "core/     errors.py, units.py",
                    "B: points version 2 in nats://WIREPIPE_SCHEMAS: Point {y: int32}  (fingerprint b920ce4b5785ae33)"])
    out = _hook().on_page_content(block)
    assert re.findall(r'<span id="__span-0-(\d)"(?: style="--hang:(\d+)ch")?>', out) == [
        ("1", ""), ("2", "10"), ("3", "4"), ("4", "10"), ("5", "")]  # "" is the stylesheet's 2ch
    assert _text(out) == _text(block)


def test_a_docstring_example_wraps_as_a_page_block_does() -> None:
    """mkdocstrings prefixes the line spans' ids with the object's path."""
    block = _lines(["&gt;&gt;&gt; f(1,", "...     2)"]).replace('id="__span', 'id="wirepipe.api--__span')
    out = _hook().on_page_content(block)
    assert re.findall(r'<span id="wirepipe.api--__span-0-(\d)"(?: style="--hang:(\d+)ch")?>', out) == [("1", ""), ("2", "8")]


def test_a_table_a_command_printed_keeps_its_rows() -> None:
    block = _lines(["wirepipe ps", "pipeline  worker  state", "-" * 24, "audit.eu  -       running",
                    "points    w0      running", "2 processes answered $SRV.STATS within 1s"])
    out = _hook().on_page_content(block)
    assert re.findall(r'<span id="__span-0-(\d)" class="wp-row">', out) == ["2", "3", "4", "5"]
    assert _text(out) == _text(block)


def test_a_hyphenated_word_is_kept_whole_and_a_very_long_one_may_break() -> None:
    code = "<code>wirepipe run p.yaml --no-status --count 5 -w in-flight 0-1 a - b " + "x-" * 40 + "y</code>"
    out = _hook().on_page_content(code)
    assert re.findall(r'<span class="wp-word">([^<]*)</span>', out) == ["--no-status", "--count", "in-flight", "0-1"]
    assert _text(out) == _text(code)


def test_a_table_shows_an_escaped_pipe_in_code_as_a_pipe_and_keeps_prose_readable() -> None:
    """GitHub needs ``\\|`` inside code in a table; Python-Markdown keeps the backslash: the site drops it."""
    table = ("<table><tbody><tr><td><code>wirepipe bench [--dataset ... \\| --input FILE]</code></td>"
             "<td>" + "words " * 20 + "</td><td>short, with a \\| outside code</td>"
             "<td><code>application/vnd.wirepipe.msgpack-array</code></td></tr></tbody></table>")
    out = _hook().on_page_content(table)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", out)
    assert [_text(cell) for cell in cells[::2]] == ["wirepipe bench [--dataset ... | --input FILE]",
                                                    "short, with a \\| outside code"]
    assert out.count('<td class="wp-prose">') == 1
    assert "application/<wbr>vnd.<wbr>wirepipe.<wbr>" in out


def test_no_line_of_prose_starts_a_quote_by_accident() -> None:
    """A wrapped line that starts with ``>=`` or ``>5`` becomes a blockquote and loses its ``>``."""
    found = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
            if re.match(r">[^\s>]", line):
                found.append(f"{page.relative_to(ROOT)}: {line[:60]}")
    assert found == []


@pytest.mark.slow  # a build of the whole site: seconds
def test_the_built_site_has_pages_and_no_python_file(tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
                   cwd=ROOT, check=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert sorted(p.name for p in site.rglob("*.py")) == []
    tutorial = (site / "tutorial" / "index.html").read_text(encoding="utf-8")
    assert 'style="--hang:10ch"' in tutorial  # make_events.py's loop body
    codes = re.findall(r"<code>(.*?)</code>", (site / "tour" / "index.html").read_text(encoding="utf-8"), re.S)
    assert [c for c in codes if "\\|" in c] == []
    assert sum(1 for c in codes if _text(c).startswith("wirepipe bench [--dataset ... | --input FILE]")) == 1
