"""Every example in the README and the docs runs as written (docs/contributing.md says how).

A page's blocks run in order in one fresh folder (a copy of ``configs/`` and ``tests/bad_configs/``), so a later
block can read what an earlier one wrote. Shell blocks run in bash with ``$NATS_URL`` set to an embedded
server that has a ``BLOCKS`` stream; ``bench`` and ``capture`` get small sizes, ``plan`` no calibration
(docs/contributing.md says which).
A YAML block whose first line is ``# NAME.yaml`` is also written to that file, so a later block can run it.
A block marked ``<!-- readme-test: skip (why) -->`` on the line before it is not run; the marks are counted.
A page with shell blocks gets its own server and is in the slow lane; the others run in the fast lane.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.nats_fixtures import fill_points
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.pipelines.config import interpolate, load_pipeline, validate_config

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# Blocks that cannot run in a test, each marked with its reason (docs/contributing.md lists them): the install
# commands (README and docs/install.md; .ci/run runs them), the reference tables at full size, a Beam cluster,
# and five blocks of benchmarks of minutes
SKIPPED = 9
WRITES_FILE = re.compile(r"\A# ([\w./-]+\.ya?ml)\n")  # a YAML block that names its file is written there
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SKIP = re.compile(r"<!-- readme-test: skip \((.+?)\) -->\s*$")

# bench and capture in sizes a test affords, plan uncalibrated (docs/contributing.md documents exactly this; a
# calibration is tests/test_scale_plan.py's): a `wirepipe` script first on PATH that execs the real one, so
# `wirepipe server &` then `kill %1` stops the server itself. On the pages in AS_WRITTEN, only the bench's sizes
# change: the same commands, chains, transports and durations as the page shows.
WRAPPER = r"""#!/usr/bin/env bash
extra=()
case "$1" in
  bench)
    extra=(--repetitions 50 --iterations 1 --yes)
    if [ -z "${AS_WRITTEN:-}" ]; then
      case " $* " in *" --transport "*) ;; *) extra+=(--transport none) ;; esac
      case " $* " in *" --format "*) ;; *) extra+=(--format msgpack,json) ;; esac
    fi ;;
  capture) [ -n "${AS_WRITTEN:-}" ] || extra=(--duration 2s) ;;
  run) [ -n "${AS_WRITTEN:-}" ] || case " $* " in *" --workers "*) extra=(--duration 2s) ;; esac ;;
  plan) case " $* " in *" --calibrate "*|*" --no-calibrate "*) ;; *) extra=(--no-calibrate) ;; esac ;;
esac
exec "$REAL_WIREPIPE" "$@" "${extra[@]}"
"""
AS_WRITTEN = {DOCS / "tutorial.md"}  # pages whose every block runs as the page shows it, sizes aside


MYAPP = '''import faust


class Point(faust.Record, include_metadata=False):
    x: int
    y: int
'''

BLOCKS_PUBLISHER = """name: blocks-publish
source: {type: generate, dataset: block, count: 1200, batch_size: 100}
operators:
  - encode: {chain: "msgpack|zstd"}
sink:
  type: jetstream
  url: "${NATS_URL}"
  subject: blocks.eu.one
  stream: {name: BLOCKS, subjects: ["blocks.>"]}
"""


def pages() -> list[Path]:
    """The README and every page of the docs, in a stable order."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def blocks(page: Path) -> list[dict[str, Any]]:
    """Each fenced block of a page: language, code, the line it starts on, and why it is skipped (or None)."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = SKIP.search(before)
        out.append({"lang": m.group(1), "code": m.group(2), "line": text[: m.start()].count("\n") + 1,
                    "skip": skip.group(1) if skip else None})
    return out


def needs_server(page: Path) -> bool:
    """A page with shell blocks runs them against an embedded server: a process-level test (slow lane)."""
    return any(b["lang"] in ("bash", "console") and not b["skip"] for b in blocks(page))


def page_params() -> list[Any]:
    return [pytest.param(page, id=str(page.relative_to(ROOT)),
                         marks=[pytest.mark.slow, pytest.mark.timeout(900)] if needs_server(page) else [])
            for page in pages() if any(not b["skip"] and b["lang"] != "text" for b in blocks(page))]


def _validate_yaml(code: str, where: str) -> None:
    data = interpolate(yaml.safe_load(code), {"NATS_PASSWORD": "secret", "NKEY_SEED": "unused",
                                              "NATS_URL": "nats://127.0.0.1:4222"})
    assert isinstance(data, dict), where
    if "tests" in data:  # a test file (wirepipe test)
        from wirepipe.pipetest.model import TestFile

        TestFile.model_validate(data)
        return
    if "fields" in data and not {"source", "sink", "operators"} & set(data):  # a typed schema file
        from wirepipe.schema import parse_schema

        parse_schema(data)
        return
    if "name" not in data:  # a fragment: inside a minimal pipeline
        data = {"name": "fragment", "source": {"type": "generate", "dataset": "point", "count": 10},
                "sink": {"type": "null"}, **data}
    validate_config(data, file=where)


def _run_shell(code: str, cwd: Path, env: dict[str, str], where: str) -> None:
    script = "set -euo pipefail\n" + code
    out = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{where}\n{code}\nstdout:\n{out.stdout[-3000:]}\nstderr:\n{out.stderr[-3000:]}"
    assert "Traceback" not in out.stderr, (where, out.stderr[-3000:])


def _run_console(code: str, cwd: Path, env: dict[str, str], where: str) -> None:
    """``$ command`` lines followed by the output they print (stdout and stderr)."""
    for command, expected in re.findall(r"^\$ (.+)\n((?:(?!\$ ).*\n?)*)", code, re.M):
        out = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
        assert (out.stdout + out.stderr).strip() == expected.strip(), (where, command)


def test_every_skip_states_its_reason_and_every_block_its_language() -> None:
    found = {page: blocks(page) for page in pages()}
    skipped = [(page.name, b["line"], b["skip"]) for page, bs in found.items() for b in bs if b["skip"]]
    assert len(skipped) == SKIPPED, skipped
    unmarked = [(page.name, b["line"]) for page, bs in found.items() for b in bs if not b["lang"]]
    assert not unmarked, unmarked  # a layout tree is `text`


def test_the_readme_install_commands_are_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    [first] = [b for b in blocks(README) if b["skip"]]
    test_command = next(line for line in first["code"].splitlines() if "pytest" in line)
    assert f"({test_command}) || exit 1" in ci


@pytest.mark.parametrize("page", page_params())
def test_every_example_runs_as_written(page: Path, tmp_path: Path) -> None:
    found = [b for b in blocks(page) if not b["skip"]]
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(ROOT / "configs", work / "configs")
    shutil.copytree(ROOT / "tests" / "bad_configs", work / "tests" / "bad_configs")
    (work / "myapp").mkdir()
    (work / "myapp" / "__init__.py").write_text("")
    (work / "myapp" / "models.py").write_text(MYAPP)
    (work / "my-records.jsonl").write_text("".join(f'{{"id": {i}, "name": "n{i}", "tags": ["a", "b"]}}\n'
                                                   for i in range(200)))
    scripts = sysconfig.get_path("scripts")
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "wirepipe").write_text(WRAPPER)
    (shim / "wirepipe").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("RESULTS", "COUNT", "COLUMNS", "NATS_URL")}
    env.update(COUNT="2000", PATH=os.pathsep.join([str(shim), scripts, env.get("PATH", "")]),
               REAL_WIREPIPE=str(Path(scripts) / "wirepipe"), COLUMNS="100",
               # the docs' `PYTHONPATH=.` for myapp.models, before the caller's (a worktree's src)
               PYTHONPATH=os.pathsep.join(p for p in (str(work), os.environ.get("PYTHONPATH")) if p))
    if page in AS_WRITTEN:
        env["AS_WRITTEN"] = "1"
    with contextlib.ExitStack() as stack:
        if needs_server(page):
            server = stack.enter_context(EmbeddedServer(store_dir=tmp_path / "js"))
            env["NATS_URL"] = server.url
            text = page.read_text(encoding="utf-8")
            if "POINTS" in text or "configs/" in text:
                asyncio.run(fill_points(server.url, 2000))  # the POINTS stream the example configs read
            if "BLOCKS" in text:  # the BLOCKS stream the page's captures read, published from this process
                (work / "blocks.yaml").write_text(BLOCKS_PUBLISHER)
                asyncio.run(load_pipeline(work / "blocks.yaml", env={"NATS_URL": server.url}).run_async())
        _run_blocks(page, found, work, env)


FIXED_PORT = re.compile(r"--(?:port|service_port) ([1-9]\d*)\b")  # 0: the system picks one already


def free_ports(codes: list[str]) -> dict[str, str]:
    """A free port for each port a page's shell blocks listen on (``wirepipe server --port 4222``, Beam's
    ``--service_port 50000``): a contributor's own nats-server on 4222 neither fails the page nor gets its
    records. Each is replaced wherever the page's blocks name it, as a whole number; ``--port 0`` is left alone."""
    import socket

    ports = {}
    for port in dict.fromkeys(m.group(1) for code in codes for m in FIXED_PORT.finditer(code)):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports[port] = str(s.getsockname()[1])
    return ports


def with_ports(code: str, ports: dict[str, str]) -> str:
    return re.sub(r"(?<!\d)(\d+)(?!\d)", lambda m: ports.get(m.group(1), m.group(1)), code) if ports else code


def test_a_pages_fixed_ports_become_free_ones_wherever_it_names_them() -> None:
    codes = ["wirepipe server --port 4222 &\nexport NATS_URL=nats://127.0.0.1:4222\n",
             "python -m pool --service_port 50000 & x --url nats://h:4222 --count 14222 42220",
             "python -m job --port 0 --port_file job.port; sleep 0.2"]
    ports = free_ports(codes)
    assert sorted(ports) == ["4222", "50000"] and "4222" not in ports.values() and len(set(ports.values())) == 2
    nats = ports["4222"]
    assert [with_ports(c, ports) for c in codes] == [
        f"wirepipe server --port {nats} &\nexport NATS_URL=nats://127.0.0.1:{nats}\n",
        f"python -m pool --service_port {ports['50000']} & x --url nats://h:{nats} --count 14222 42220",
        "python -m job --port 0 --port_file job.port; sleep 0.2"]


def _run_blocks(page: Path, found: list[dict[str, Any]], work: Path, env: dict[str, str]) -> None:
    ports = free_ports([b["code"] for b in found if b["lang"] in ("bash", "console")])
    for b in found:
        where = f"{page.relative_to(ROOT)}:{b['line']}"
        lang, code = b["lang"], b["code"]
        if lang in ("bash", "console"):
            code = with_ports(code, ports)
        if lang == "bash":
            _run_shell(code, work, env, where)
        elif lang == "console":
            _run_console(code, work, env, where)
        elif lang == "yaml":
            _validate_yaml(code, where)
            if named := WRITES_FILE.match(code):
                (work / named.group(1)).parent.mkdir(parents=True, exist_ok=True)
                (work / named.group(1)).write_text(code, encoding="utf-8")
        elif lang == "python":
            result = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True,
                                    text=True, timeout=300)
            assert result.returncode == 0, f"{where}\n{code}\n{result.stderr[-3000:]}"
        elif lang == "sql":
            import duckdb

            con = duckdb.connect()
            for statement in code.split(";"):
                lines = [x for x in statement.splitlines() if not x.strip().startswith("--")]
                if not "".join(lines).strip():  # comments only
                    continue
                os.chdir(work)  # DuckDB resolves the docs' relative paths from the working folder
                try:
                    assert con.execute("\n".join(lines)).fetchall(), (where, statement)
                finally:
                    os.chdir(ROOT)
        elif lang == "text":
            continue
        else:
            raise AssertionError(f"{where}: a ```{lang} block: run it, validate it or mark it")


# --- install lines: every one works from a clone as written ------------------------------------------------------
# wirepipe is not on PyPI: a page installs it from the clone (`pip install '.[beam]'` at its root, `'../..[avro]'` from an
# example's folder) or from a wheel built there. Each `pip install` / `pip wheel` line of the README, the docs and the
# examples' READMEs is found here and checked: the extras it names exist, its path is the clone's root from where the
# page's commands run, and the page says it runs in a clone.

INSTALL = re.compile(r"pip3? (?:install|wheel)\b([^`\n;&#|]*)")
NAMED_EXTRAS = re.compile(r"wirepipe\[([^\]]*)\]")
PATH_FORM = re.compile(r"(\.\.?(?:/\.\.)*)/?(?:\[([^\]]*)\])?")
WHEEL_FORM = re.compile(r"[^\[]*\.whl(?:\[([^\]]*)\])?")
OPTIONS_WITH_VALUES = {"-w", "--wheel-dir", "-r", "--requirement", "-c", "--constraint", "-t", "--target"}


def install_pages() -> list[Path]:
    return [*pages(), *sorted((ROOT / "examples").glob("*/README.md"))]


def commands_folder(page: Path) -> Path:
    """Where a page's commands run: an example's README in its folder (tests/test_examples.py runs them there),
    the README and the docs at the root of the clone."""
    return page.parent if page.parent.parent == ROOT / "examples" else ROOT


def pyproject_extras() -> set[str]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the toml extra's tomli
        import tomli as tomllib

    return set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"])


def _context(text: str, at: int) -> str:
    """The paragraph around ``at``; for a line in a fenced block, the block and the paragraph before it."""
    fence = next((m for m in FENCE.finditer(text) if m.start() <= at < m.end()), None)
    start, end = (fence.start(), fence.end()) if fence else (at, at)
    before = text.rfind("\n\n", 0, start - 2 if fence else start)
    after = text.find("\n\n", end)
    return text[before + 1 if before >= 0 else 0: after if after >= 0 else len(text)]


def _shown(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name


def install_lines(page: Path) -> list[dict[str, Any]]:
    """Each install line of ``page``: where it is, its requirements, and the text around it."""
    import shlex

    text = page.read_text(encoding="utf-8")
    found = []
    for m in INSTALL.finditer(text):
        tokens, requirements = shlex.split(m.group(1)), []
        while tokens:
            token = tokens.pop(0)
            if token in OPTIONS_WITH_VALUES:
                tokens = tokens[1:]
            elif not token.startswith("-"):
                requirements.append(token)
        if requirements:
            found.append({"where": f"{_shown(page)}:{text[: m.start()].count(chr(10)) + 1}",
                          "line": m.group(0).strip(), "requirements": requirements, "context": _context(text, m.start())})
    return found


def install_problems(page: Path, extras: set[str]) -> list[str]:
    """What is wrong with the page's install lines and extras (nothing, for a page that installs as written)."""
    problems = []
    text = page.read_text(encoding="utf-8")
    for m in NAMED_EXTRAS.finditer(text):
        problems += [f"{_shown(page)}: wirepipe[{m.group(1)}]: no extra {e!r}"
                     for e in m.group(1).split(",") if e not in extras]
    for line in install_lines(page):
        for req in line["requirements"]:
            path, wheel = PATH_FORM.fullmatch(req), WHEEL_FORM.fullmatch(req)
            named = (path.group(2) if path else wheel.group(1) if wheel else None) or ""
            problems += [f"{line['where']}: {line['line']}: no extra {e!r}" for e in named.split(",") if e and e not in extras]
            if req == "wirepipe" or req.startswith("wirepipe["):
                problems.append(f"{line['where']}: {line['line']}: wirepipe is not on PyPI: install it from the clone")
            elif path:
                root = (commands_folder(page) / path.group(1)).resolve()
                if root != ROOT:
                    problems.append(f"{line['where']}: {line['line']}: {path.group(1)} is {root}, not the clone's root, "
                                    f"from {commands_folder(page).relative_to(ROOT.parent)}")
                if "clone" not in line["context"]:
                    problems.append(f"{line['where']}: {line['line']}: the page does not say it runs in a clone")
    return problems


def test_every_install_line_works_from_a_clone_as_written() -> None:
    extras = pyproject_extras()
    lines = [line for page in install_pages() for line in install_lines(page)]
    assert len(lines) >= 15, [line["line"] for line in lines]  # the finder finds them (README, docs, examples)
    assert [p for page in install_pages() for p in install_problems(page, extras)] == []


def test_the_install_line_checks_catch_each_mistake(tmp_path: Path) -> None:
    page = tmp_path / "README.md"
    page.write_text("From a clone: `pip install '.[study,beams]'`.\n\n`pip install 'wirepipe[avro]'`, "
                    "`pip install ../[otel]`, `wirepipe[plot]`.\n\n```bash\npip install -e '.[docs]' && mkdocs serve\n```\n")
    assert [p.split(": ", 1)[1] for p in install_problems(page, pyproject_extras())] == [
        "wirepipe[plot]: no extra 'plot'",
        "pip install '.[study,beams]': no extra 'beams'",
        "pip install 'wirepipe[avro]': wirepipe is not on PyPI: install it from the clone",
        f"pip install ../[otel]: .. is {ROOT.parent}, not the clone's root, from {ROOT.name}",
        "pip install ../[otel]: the page does not say it runs in a clone",
        "pip install -e '.[docs]': the page does not say it runs in a clone",
    ]


@pytest.mark.slow
def test_an_example_install_line_installs_from_the_example_folder(tmp_path: Path) -> None:
    """The own-logs example's line, run as written from that folder of a copy of the clone: pip finds wirepipe at
    ``../..`` with the extra. Offline and without installing (``--dry-run --no-index``: the extra's library is
    installed here already; the build backend is this environment's, ``--no-build-isolation``)."""
    import json

    [line, *_] = install_lines(ROOT / "examples" / "own-logs" / "README.md")
    assert line["requirements"] == ["../..[avro]"]
    clone = tmp_path / "clone"
    clone.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, clone / name)
    shutil.copytree(ROOT / "src", clone / "src", ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info"))
    folder = clone / "examples" / "own-logs"
    folder.mkdir(parents=True)
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--no-build-isolation",
                           "--disable-pip-version-check", "--report", str(report), *line["requirements"]],
                          cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "does not provide the extra" not in done.stderr, done.stderr
    [wirepipe] = [i for i in json.loads(report.read_text())["install"] if i["metadata"]["name"] == "wirepipe"]
    assert wirepipe["requested_extras"] == ["avro"]
    assert wirepipe["download_info"]["url"] == clone.as_uri()
