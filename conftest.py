"""How the suite runs: doctest collection of ``src/wirepipe``, and the whole suite spread over the cores.

Doctests: ``python -m pytest -q`` imports every module of the package to run its docstring examples
(pytest's ``--doctest-modules``, see pyproject). The modules in ``collect_ignore`` import an optional heavy
library at import time: importing them during collection would slow every run and let that library's
import side effects (logging set-up, plugin registration) reach tests that never asked for it. Their own
tests import them on purpose.

The cores: a run that names no path (``python -m pytest``, ``python -m pytest -m "not slow"``) runs on one
pytest-xdist worker per core and one more (the suite's CPU was busy ~1.5 of 2 cores with a worker per core:
many tests wait on a nats-server, a subprocess or a timeout); a run of named files or folders runs in this process, as a developer running
one file expects (``-n N`` spreads it too, ``-n 0`` keeps a whole run in one process). A spread run hands out
the tests marked ``slow`` first and runs the ones marked ``serial`` (tests/conftest.py: they need a quiet
machine) after all the others, one at a time, on one worker, with the other workers stopped: ``SerialLast``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["tests.nats_fixtures"]  # the real nats-server fixtures, for every test module

collect_ignore = [
    # imports apache_beam at import time (the Beam worker's DoFn); tests/test_replay.py covers it
    "src/wirepipe/replay/beam_fn.py",
    # imports faust (and through it mode, aiohttp, ...) at import time; tests/test_faust.py covers it
    "src/wirepipe/integrations/faust.py",
]

# What the scheduler (on the controller, which collects nothing) knows of each test: its group, written by a
# worker from the markers (tests/conftest.py marks tests/chaos/ slow) to the file the controller names.
SERIAL_GROUP = "serial"
SLOW_GROUP = "slow"
_GROUPS = pytest.StashKey[Path]()
_BYTECODE = pytest.StashKey[list[Path]]()  # the package's bytecode the run wrote (``pytest_configure``)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """A whole-suite run spreads over the cores (this runs before xdist reads its options)."""
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    option = config.option
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if (option.numprocesses is None and cores > 1 and config.args_source == pytest.Config.ArgsSource.TESTPATHS
            and not option.collectonly and not option.usepdb):
        option.numprocesses = cores + 1  # a third of the suite waits on servers and processes: one more overlaps it


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Name the file where the workers write the groups of the tests they collected."""
    config = node.config
    if _GROUPS not in config.stash:
        config.stash[_GROUPS] = Path(tempfile.mkdtemp(prefix="wirepipe-test-groups-")) / "groups.json"
    node.workerinput["wirepipe_groups"] = str(config.stash[_GROUPS])


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the commands the tests start as it does from a terminal. A run started with SIGINT ignored
    (a background job of a shell without job control, ``nohup``) would hand that down to every process it starts
    (an ignored signal stays ignored across exec, and Python then installs no handler): the commands that count on
    Python's KeyboardInterrupt (``dict``, a Beam replay) would not stop on the SIGINT a test sends them, and their
    tests fail after a runaway. A handled SIGINT is reset to the default in a child at exec."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        with contextlib.suppress(ValueError):  # not the main thread: nothing to hand down from here
            signal.signal(signal.SIGINT, signal.default_int_handler)
    _compile_the_package_once(config)


def _compile_the_package_once(config: pytest.Config) -> None:
    """Where the environment says not to write bytecode (``PYTHONDONTWRITEBYTECODE``, as many container images
    set), each of the hundreds of ``wirepipe`` processes the tests start would compile the package again (~0.2 s
    of CPU each): the run compiles it once, before any test, and removes that bytecode at its end, so the source
    tree is left as clean as asked. Every process reads it (the setting stops writing, not reading)."""
    if hasattr(config, "workerinput") or not os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return
    import compileall

    import wirepipe

    package = Path(wirepipe.__file__).parent
    before = set(package.rglob("*.pyc"))
    compileall.compile_dir(package, quiet=1)  # writes whatever the setting says
    config.stash[_BYTECODE] = sorted(set(package.rglob("*.pyc")) - before)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _GROUPS in config.stash:
        shutil.rmtree(config.stash[_GROUPS].parent, ignore_errors=True)
    for compiled in config.stash.get(_BYTECODE, []):
        compiled.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # its __pycache__, once empty
            compiled.parent.rmdir()


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reports its collection to the controller
def pytest_collection_finish(session: pytest.Session) -> None:
    path = getattr(session.config, "workerinput", {}).get("wirepipe_groups")
    if path is None:
        return
    groups = {item.nodeid: SERIAL_GROUP if item.get_closest_marker("serial") else SLOW_GROUP
              for item in session.items if item.get_closest_marker("serial") or item.get_closest_marker("slow")}
    partial = Path(f"{path}.{os.getpid()}")
    partial.write_text(json.dumps(groups), encoding="utf-8")
    partial.replace(path)  # every worker collects the same tests: the last one written is as good


def _groups(config: pytest.Config) -> dict[str, str]:
    path = config.stash.get(_GROUPS, None)
    return json.loads(path.read_text(encoding="utf-8")) if path is not None and path.exists() else {}


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "load":  # a --dist the run asked for is left to xdist
        return None
    from xdist.scheduler import LoadScheduling

    class SerialLast(LoadScheduling):  # type: ignore[misc]  # xdist's own class, untyped here
        """xdist's load scheduling with the slow tests handed out first (a long test started last would leave
        the other workers idle at the end), then the serial tests: once every worker is idle, all but one
        are stopped and the serial tests go to that one, in collection order."""

        serial: list[int] | None = None

        def schedule(self) -> None:
            if self.serial is None:
                assert self.collection_is_completed
                if not self._check_nodes_have_same_collection():
                    self.log("**Different tests collected, aborting run**")
                    return
                self.collection = collection = next(iter(self.node2collection.values()))
                known = _groups(config)
                groups = [known.get(nodeid, "") for nodeid in collection]
                self.serial = [i for i, g in enumerate(groups) if g == SERIAL_GROUP]
                self.pending[:] = ([i for i, g in enumerate(groups) if g == SLOW_GROUP]
                                   + [i for i, g in enumerate(groups) if g not in (SLOW_GROUP, SERIAL_GROUP)])
                if self.maxschedchunk is None:  # two at a time: a worker busy with slow tests is not handed more
                    self.maxschedchunk = 2
            if not self.pending:
                self._start_serial()
                return
            for node in self.nodes:
                self.check_schedule(node)

        def check_schedule(self, node: Any, duration: float = 0) -> None:
            if self.pending or not self.serial:
                super().check_schedule(node, duration)
            else:
                self._start_serial()

        def remove_node(self, node: Any) -> str | None:
            crashed = super().remove_node(node)
            if self.serial and not self.pending:
                self._start_serial()
            return crashed

        def _start_serial(self) -> None:
            """When every worker is idle (a worker keeps its last test until it gets the next one or stops):
            stop all but the first; when it is the only one left, hand it the serial tests."""
            if not self.serial or any(len(pending) > 1 for pending in self.node2pending.values()):
                return
            keep, *others = self.nodes
            for node in others:
                if not node.shutting_down:
                    node.shutdown()
            if not others and not keep.shutting_down:  # (a run stopped early, -x, shuts every worker down)
                serial, self.serial = self.serial, []
                self.node2pending[keep].extend(serial)
                keep.send_runtest_some(serial)
                keep.shutdown()

        @property
        def tests_finished(self) -> bool:
            return not self.serial and bool(super().tests_finished)

        @property
        def has_pending(self) -> bool:
            return bool(self.serial) or bool(super().has_pending)

    return SerialLast(config, log)
