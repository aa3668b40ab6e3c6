"""``wirepipe test``: pipelines tested on the records they will see, with no server.

A test file sits beside its pipeline (``orders.yaml`` + ``orders.test.yaml``; the format is in
``model.py``). Each case replaces the pipeline's source by its input (inline records, a JSONL or
Parquet file, a capture or a slice of one) and its sink by a collecting one, runs everything else as
written (``cases.py``), and checks the outputs and the rejections against its ``expect`` (``expect.py``). The
report has pytest's shape (``report.py``); ``--update`` records what a case produced as its
expectation (``snapshot.py``), for review in the diff.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import ConfigError
from . import report
from .cases import CaseResult, LoadedFile, find_test_files, load, recorded_expect, run_case

__all__ = ["Session", "collect", "run_files"]


@dataclass
class Session:
    """What one ``wirepipe test`` did."""

    results: list[CaseResult] = field(default_factory=list)
    elapsed: float = 0.0
    rewritten: list[Path] = field(default_factory=list)
    interrupted: bool = False  # Ctrl-C: the case running then drained, no later case ran


    @property
    def failed(self) -> int:
        return sum(1 for r in self.results if not r.passed)


def collect(paths: list[str]) -> list[LoadedFile]:
    """Every test file and its pipeline, validated before any case runs; one ``ConfigError`` listing
    the problems of all of them (each with its file and field path)."""
    problems: list[str] = []
    loaded = []
    for path in find_test_files(paths):
        try:
            loaded.append(load(path))
        except ConfigError as exc:
            problems.append(str(exc) if exc.file else str(ConfigError(exc.detail, file=str(path), path=exc.path)))
    if problems:
        raise ConfigError("\n".join(problems))
    return loaded


def run_files(files: list[LoadedFile], *, update: bool = False, echo: Callable[[str], None] = print) -> Session:
    """Run the cases of the test files (``collect``), printing a line per case through ``echo``;
    ``update`` rewrites the ``expect`` of each case whose outputs differ from it, or that says nothing of
    its outputs (no ``count``, ``records`` or ``outputs``)."""
    started = time.monotonic()
    session = Session()
    for loaded in files:
        updates = {}
        for i in range(len(loaded.spec.tests)):
            expect = loaded.spec.tests[i].expect
            unconstrained = expect is None or (expect.count is None and expect.records is None and expect.outputs is None)
            # A case with nothing to check is recorded at once; one that fails its check, by a second run. Either
            # recording run keeps no more than a test file holds (``RecordingSink``).
            result = run_case(loaded, i, update=update and unconstrained)
            if update and result.error is None and not result.updated and not result.passed and not unconstrained:
                recorded = run_case(loaded, i, update=True)
                if recorded.updated or recorded.error is not None:
                    result = recorded
                else:  # too large to record: why, after how it failed its check
                    result.failures += recorded.failures
            if result.interrupted:
                session.results.append(result)
                echo(report.case_line(result))
                session.interrupted = True
                break
            if result.updated:
                updates[i] = recorded_expect(result)
            session.results.append(result)
            echo(report.case_line(result))
        if updates:
            from .snapshot import write

            write(loaded.path, updates)
            session.rewritten.append(loaded.path)
        if session.interrupted:
            break
    session.elapsed = time.monotonic() - started
    return session

