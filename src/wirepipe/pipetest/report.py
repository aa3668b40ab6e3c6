"""How ``wirepipe test`` reports: one line per case, the failures after, a closing count (pytest's shape),
and JUnit XML for CI."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from .cases import CaseResult


def status(result: CaseResult) -> str:
    if result.error is not None:
        return "ERROR"
    if result.updated:
        return "UPDATED"
    return "PASSED" if result.passed else "FAILED"


def case_line(result: CaseResult) -> str:
    return f"{result.id} {status(result)}"


def failure_blocks(results: list[CaseResult]) -> list[str]:
    """One block per case that failed or could not run: its id, then every failure."""
    out = []
    for r in results:
        if r.passed:
            continue
        body = r.error if r.error is not None else "\n".join(r.failures)
        out.append(f"{'_' * 8} {r.id} {'_' * 8}\n{body}")
    return out


def summary_line(results: list[CaseResult], elapsed: float) -> str:
    counts = Counter(status(r).lower() for r in results)
    parts = [f"{counts[k]} {k}" for k in ("failed", "error", "passed", "updated") if counts[k]]
    return f"{'=' * 8} {', '.join(parts) or 'no cases'} in {elapsed:.2f}s {'=' * 8}"


def write_junit(results: list[CaseResult], path: Path, elapsed: float) -> None:
    """JUnit XML: a test suite per test file, a test case per case (``failure`` or ``error`` with the text)."""
    import xml.etree.ElementTree as ET

    from ..storage.files import write_bytes_atomic

    suites = ET.Element("testsuites", name="wirepipe test", tests=str(len(results)), time=f"{elapsed:.3f}",
                        failures=str(sum(1 for r in results if r.failures)),
                        errors=str(sum(1 for r in results if r.error is not None)))
    by_file: dict[Path, list[CaseResult]] = {}
    for r in results:
        by_file.setdefault(r.file, []).append(r)
    for file, cases in by_file.items():
        suite = ET.SubElement(suites, "testsuite", name=str(file), tests=str(len(cases)),
                              failures=str(sum(1 for r in cases if r.failures)),
                              errors=str(sum(1 for r in cases if r.error is not None)),
                              time=f"{sum(r.elapsed for r in cases):.3f}")
        for r in cases:
            case = ET.SubElement(suite, "testcase", classname=str(file), name=r.case.name, time=f"{r.elapsed:.3f}")
            if r.error is not None:
                ET.SubElement(case, "error", message=r.error.splitlines()[0]).text = r.error
            elif r.failures:
                ET.SubElement(case, "failure", message=r.failures[0].splitlines()[0]).text = "\n".join(r.failures)
    ET.indent(suites)
    write_bytes_atomic(path, ET.tostring(suites, encoding="utf-8", xml_declaration=True) + b"\n")
