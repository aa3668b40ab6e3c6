"""What some tests need of the system (tests/system_tools.py): without it they skip with the reason the README gives,
and fail where CI asks for it (``.ci/run`` installs the programs, runs as root and sets the flag)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.chaos.tmpfs import tmpfs
from tests.system_tools import REQUIRE_SYSTEM_TOOLS, SYSTEM_TOOLS, system_tool

ROOT = Path(__file__).parent.parent


def test_a_missing_system_tool_skips_its_test_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/chromium-browser" if name == "chromium-browser" else None)
    monkeypatch.delenv(REQUIRE_SYSTEM_TOOLS, raising=False)
    assert system_tool("chromium") == "/usr/bin/chromium-browser"  # the name some distributions give it
    with pytest.raises(pytest.skip.Exception) as skipped:
        system_tool("tmux")
    assert str(skipped.value) == "tmux is not installed (apt-get install tmux: the README's test command names it)"
    monkeypatch.setenv(REQUIRE_SYSTEM_TOOLS, "1")
    with pytest.raises(pytest.fail.Exception) as failed:
        system_tool("tmux")
    assert str(failed.value) == ("tmux is not installed (apt-get install tmux: the README's test command names it); "
                                 "WIREPIPE_REQUIRE_SYSTEM_TOOLS=1 requires it")


def test_a_tmpfs_that_cannot_be_mounted_skips_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a user who is not root (or in a container without the right): here, an option mount refuses even root."""
    monkeypatch.delenv(REQUIRE_SYSTEM_TOOLS, raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped, tmpfs(tmp_path / "disk", "size=nonsense"):
        pass
    assert str(skipped.value).startswith("cannot mount a tmpfs (-o size=nonsense): this test needs root, as the "
                                         "README says (mount: ")
    monkeypatch.setenv(REQUIRE_SYSTEM_TOOLS, "1")
    with pytest.raises(pytest.fail.Exception) as failed, tmpfs(tmp_path / "disk", "size=nonsense"):
        pass
    assert str(failed.value).endswith(f"; {REQUIRE_SYSTEM_TOOLS}=1 requires it")


def test_the_readme_names_what_the_tests_need_and_ci_requires_it() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for package in SYSTEM_TOOLS:
        assert f"`{package}`" in readme, package
    assert f"apt-get install {' '.join(SYSTEM_TOOLS)}" in readme
    assert "mount a small tmpfs, which needs root" in readme
    assert f"install -y -qq {' '.join(SYSTEM_TOOLS)}" in ci
    assert f"export {REQUIRE_SYSTEM_TOOLS}=1" in ci
    assert ci.index(f"export {REQUIRE_SYSTEM_TOOLS}=1") < ci.index("python -m pytest")
