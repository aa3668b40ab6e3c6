"""What some tests need of the system beyond Python: programs (a real terminal, a headless browser) and the right
to mount a small tmpfs (root). Without one, its test is skipped with the reason (the README names each); `.ci/run`
provides them all and sets ``WIREPIPE_REQUIRE_SYSTEM_TOOLS=1``, with which a missing one fails the test instead."""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest

# Each program a test drives, with the names the Debian package that installs it gives it.
SYSTEM_TOOLS = {"tmux": ("tmux",), "chromium": ("chromium", "chromium-browser")}
REQUIRE_SYSTEM_TOOLS = "WIREPIPE_REQUIRE_SYSTEM_TOOLS"


def unavailable(why: str) -> NoReturn:
    """Skip the test saying ``why``, or fail it when ``WIREPIPE_REQUIRE_SYSTEM_TOOLS=1`` (CI)."""
    if os.environ.get(REQUIRE_SYSTEM_TOOLS) == "1":
        pytest.fail(f"{why}; {REQUIRE_SYSTEM_TOOLS}=1 requires it")
    pytest.skip(why)


def system_tool(package: str) -> str:
    """The path of the program ``package`` installs (one of its names in ``SYSTEM_TOOLS``), or ``unavailable``."""
    for name in SYSTEM_TOOLS[package]:
        found = shutil.which(name)
        if found:
            return found
    unavailable(f"{package} is not installed (apt-get install {package}: the README's test command names it)")
